"""The seed project's `resnet_benchmark.py`, same flags, now a thin wrapper over tvmbench.

    .venv/bin/python benchmarks/resnet_benchmark.py --help

See src/tvmbench/seed_scripts.py for how each flag maps onto `tvmbench run` / `tvmbench compare`.
"""

import sys

from tvmbench.seed_scripts import main

if __name__ == "__main__":
    sys.exit(main("resnet"))
