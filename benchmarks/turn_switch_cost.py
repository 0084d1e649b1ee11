"""What the first call after another framework's lockstep turn costs (``measure/timer.py``).

    .venv/bin/python benchmarks/turn_switch_cost.py [--switches 12]

In lockstep each framework measures in short turns; a turn of fast calls starts with an untimed
call, a turn of calls of ``pause_turn_call_s`` or more with a short pause instead, so every call
of it is a sample. This measures what that rule accepts: ONNX Runtime on the run's two threads,
one session per model; before each switch a quarter second of VGG-11 (the other framework, its
weights and activations through the caches), then the 50 ms pause, then three calls of the model
timed one by one. Printed per model: the median of each of the three calls over the switches, and
first / third (how much slower the first call after a switch is).
"""

from __future__ import annotations

import argparse
import io
import statistics
import time
from collections.abc import Callable

import onnxruntime as ort
import torch
import torchvision

POINTS = [("resnet50", 224, 1), ("resnet50", 224, 4), ("densenet121", 224, 2), ("mobilenet_v2", 320, 2)]


def session(name: str, size: int, batch: int) -> Callable[[], object]:
    """One inference of a seeded torchvision model through ONNX Runtime, 2 threads."""
    torch.manual_seed(0)
    model = torchvision.models.get_model(name, weights=None).eval()
    x = torch.randn(batch, 3, size, size)
    f = io.BytesIO()
    torch.onnx.export(model, (x,), f, dynamo=False, opset_version=17)
    options = ort.SessionOptions()
    options.intra_op_num_threads = 2
    s = ort.InferenceSession(f.getvalue(), options, providers=["CPUExecutionProvider"])
    feed = {s.get_inputs()[0].name: x.numpy()}
    return lambda: s.run(None, feed)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--switches", type=int, default=12)
    args = parser.parse_args()
    other = session("vgg11", 224, 1)
    for name, size, batch in POINTS:
        model = session(name, size, batch)
        for _ in range(5):
            model()
        calls: list[list[float]] = [[], [], []]
        for _ in range(args.switches):
            t = time.perf_counter()
            while time.perf_counter() - t < 0.25:
                other()
            time.sleep(0.05)
            for times in calls:
                t0 = time.perf_counter()
                model()
                times.append(time.perf_counter() - t0)
        first, second, third = (statistics.median(c) * 1e3 for c in calls)
        print(f"{name} b{batch} {size} px: first call after a switch {first:.1f} ms, second {second:.1f}, "
              f"third {third:.1f}; first / third {first / third:.3f}", flush=True)


if __name__ == "__main__":
    main()
