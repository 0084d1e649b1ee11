"""Issue 4's benchmark: the four reference models across every CPU framework, in one command.

    .venv/bin/python benchmarks/frameworks_cpu.py [--output results/frameworks_cpu.json] [tvmbench compare flags]

resnet18, resnet50, mobilenet_v2 and bert-base-uncased (seq 128) at batch 1, fp32, with TVM,
PyTorch eager, torch.compile, ONNX Runtime and OpenVINO, each framework in its own worker, same
inputs and threads. It is `tvmbench compare` with these settings, so it prints the same tables:
latency per framework, TVM's speedup over each with its 95 % CI, the geometric mean, and the
per-model-type ranges. Extra flags (e.g. --max-time 10, --rounds 2) are passed through.
"""

import sys

from tvmbench.cli import main

MODELS = "resnet18,resnet50,mobilenet_v2,bert-base-uncased"
FRAMEWORKS = "tvm,pytorch,torch_compile,onnxruntime,openvino"

if __name__ == "__main__":
    extra = sys.argv[1:]
    output = [] if "--output" in extra or "-o" in extra else ["--output", "results/frameworks_cpu.json"]
    sys.exit(main(["compare", "--models", MODELS, "--frameworks", FRAMEWORKS, "--batch-size", "1",
                   "--seq-length", "128", "--target", "llvm", *output, *extra]))
