"""Does tvmbench's timer agree with torch.utils.benchmark on the same callable?

For a ~0.1 ms op and a ~20 ms model, alternates tvmbench's ``measure`` and torch.utils.benchmark's
``Timer.adaptive_autorange`` on the very same callable, in the same process and thread setting,
and prints both medians and their ratio. The method is right if the ratio stays within 0.98-1.02.

On a small VM a callable's speed itself shifts from second to second (thread placement, the
neighbours' load), so the two methods are interleaved in many short rounds (``--seconds`` each) and
the ratio is the median of the per-round ratios: both see the same machine states. The order
alternates between rounds (tvmbench first in odd rounds, torch.utils first in even ones), so a
steady drift of the machine's speed within a round favours neither method.

    .venv/bin/python benchmarks/harness_accuracy.py [--rounds 20] [--seconds 1]
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch
import torch.utils.benchmark as tb

from tvmbench.measure.timer import TimerConfig, measure
from tvmbench.models import ModelOptions, load_model
from tvmbench.targets import physical_cores


def _per_call(fn: callable, calls: int = 200) -> float:
    for _ in range(calls // 4):  # thread pool start-up and caches out of the estimate
        fn()
    blocks = []
    for _ in range(5):
        t0 = time.perf_counter()
        for _ in range(calls // 5):
            fn()
        blocks.append((time.perf_counter() - t0) / (calls // 5))
    return statistics.median(blocks)


def sized_matmul(target_s: float) -> tuple[str, callable]:
    """A square matmul sized so that one call takes about target_s (time ~ n^3)."""
    n = 128
    for _ in range(4):
        a, b = torch.randn(n, n), torch.randn(n, n)
        per_call = _per_call(lambda a=a, b=b: torch.mm(a, b))
        n = max(16, min(2048, round(n * (target_s / per_call) ** (1 / 3))))
    a, b = torch.randn(n, n), torch.randn(n, n)
    return f"torch.mm {n}x{n}", (lambda a=a, b=b: torch.mm(a, b))


def sized_model(target_s: float) -> tuple[str, callable]:
    """resnet18 in eager PyTorch at the image size closest to target_s per call."""
    best = None
    for size in (96, 128, 160, 192, 224):
        model = load_model("resnet18", ModelOptions(image_size=size))
        x = model.torch_inputs()
        module = model.module

        def fn(module=module, x=x):
            with torch.inference_mode():
                module(*x)

        for _ in range(3):
            fn()
        t0 = time.perf_counter()
        for _ in range(5):
            fn()
        per_call = (time.perf_counter() - t0) / 5
        if best is None or abs(per_call - target_s) < abs(best[2] - target_s):
            best = (f"resnet18 eager {size}x{size}", fn, per_call)
    return best[0], best[1]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=20)
    parser.add_argument("--seconds", type=float, default=1.0, help="timed seconds per method per round")
    args = parser.parse_args()
    torch.set_num_threads(physical_cores())
    cfg = TimerConfig(min_warmup_runs=3, min_warmup_s=0.1, max_warmup_s=1.0, min_runs=10,
                      min_time_s=args.seconds, max_time_s=args.seconds)
    print(f"threads {torch.get_num_threads()}, {args.rounds} interleaved rounds per callable")
    print(f"{'callable':32} {'round':>5} {'tvmbench ms':>12} {'torch.utils ms':>15} {'ratio':>7}")
    for name, fn in (sized_matmul(1e-4), sized_model(2e-2)):
        ratios = []
        for r in range(args.rounds):
            def ours_fn(fn=fn) -> float:
                return statistics.median(measure(fn, cfg).samples_s)

            def theirs_fn(fn=fn) -> float:
                timer = tb.Timer(stmt="fn()", globals={"fn": fn}, num_threads=torch.get_num_threads())
                return timer.adaptive_autorange(threshold=0.02, min_run_time=args.seconds,
                                                max_run_time=args.seconds).median

            if r % 2 == 0:
                ours, theirs = ours_fn(), theirs_fn()
            else:
                theirs, ours = theirs_fn(), ours_fn()
            ratios.append(ours / theirs)
            print(f"{name:32} {r + 1:>5} {ours * 1e3:>12.4f} {theirs * 1e3:>15.4f} {ours / theirs:>7.3f}")
        med = statistics.median(ratios)
        verdict = "within 0.98-1.02" if 0.98 <= med <= 1.02 else "OUTSIDE 0.98-1.02"
        print(f"{name:32} median ratio {med:.3f} ({verdict}); range {min(ratios):.3f}-{max(ratios):.3f}")


if __name__ == "__main__":
    main()
