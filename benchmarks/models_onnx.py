"""Bennu's `benchmarks/models_onnx.py` (lac-dcc/bennu), same flags, as a thin wrapper over tvmbench.

    .venv/bin/python benchmarks/models_onnx.py -m meta -a x86 -t 1000 -l results/meta_x86_resnet18 -b resnet18
    .venv/bin/python benchmarks/models_onnx.py -m dpmeta -a x86 -t 100 -k 10 -l results/meta_x86_resnet18 -b resnet18
    .venv/bin/python benchmarks/models_onnx.py -m run -a x86 -l results/meta_x86_resnet18 -b resnet18

`-b` is an .onnx file or a zoo name. See src/tvmbench/seed_scripts.py (`bennu_steps`) for the
tvmbench commands each method runs; their output is kept in LOGDIR/output.txt.
"""

import sys

from tvmbench.seed_scripts import bennu_main

if __name__ == "__main__":
    sys.exit(bennu_main())
