"""Forked against spawned workers: how long a worker takes, and whether it measures the same.

    .venv/bin/python benchmarks/worker_start.py --model resnet18 --pairs 8

tvmbench's workers fork from a server that has imported torch and TVM (``measure/isolation.py``,
``context``) instead of each spawning a new interpreter that imports them. This runs one TVM
measurement worker (the model from the compile cache, 10 warm-up and 60 timed inferences) in
pairs, one spawned and one forked, the order alternating from pair to pair (the machine drifts
over minutes), and prints per worker its wall time, when its first message arrived, and its
median latency; then the medians per start method and the forked/spawned latency ratio per pair.
The first forked worker also pays for starting the server.
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import statistics
import time
from typing import Any


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="resnet18")
    parser.add_argument("--pairs", type=int, default=8)
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()

    from tvmbench.backends import BackendConfig
    from tvmbench.measure import isolation
    from tvmbench.measure.runner import FrameworkJob, measure_framework, thread_env
    from tvmbench.measure.timer import TimerConfig
    from tvmbench.models import ModelOptions
    from tvmbench.targets import resolve_target

    target = resolve_target("llvm", gpu_query=lambda: None)
    job = FrameworkJob("tvm", args.model, ModelOptions(), BackendConfig(target=target, threads=args.threads),
                       TimerConfig(fixed_warmup_runs=10, fixed_runs=60))
    forked = isolation.context

    def spawned(preloaded: bool = True) -> Any:
        return mp.get_context("spawn")

    latency: dict[str, list[float]] = {"spawned": [], "forked": []}
    wall: dict[str, list[float]] = {"spawned": [], "forked": []}
    for pair in range(args.pairs):
        for method in ["spawned", "forked"] if pair % 2 == 0 else ["forked", "spawned"]:
            isolation.context = spawned if method == "spawned" else forked  # type: ignore[assignment]
            t0 = time.monotonic()
            first: list[float] = []
            out = isolation.run_isolated(measure_framework, job, timeout_s=1800, memory_limit_bytes=16 * 2**30,
                                         env=thread_env(args.threads),
                                         on_progress=lambda m, t0=t0, first=first: first or first.append(
                                             time.monotonic() - t0))
            if not out.ok:
                raise SystemExit(f"{method} worker failed: {out.error.get('message')}")
            median = statistics.median(out.value.measurement.samples_s) * 1e3
            latency[method].append(median)
            wall[method].append(out.wall_s)
            print(f"pair {pair + 1} {method:8s} wall {out.wall_s:5.1f} s, first message after {first[0]:4.2f} s, "
                  f"median {median:.3f} ms", flush=True)
    isolation.context = forked  # type: ignore[assignment]
    for method in latency:
        print(f"{method}: worker wall time median {statistics.median(wall[method]):.1f} s, "
              f"latency median of medians {statistics.median(latency[method]):.3f} ms")
    ratios = [f / s for f, s in zip(latency["forked"], latency["spawned"], strict=True)]
    print("forked/spawned latency per pair:", " ".join(f"{r:.3f}" for r in ratios),
          f"median {statistics.median(ratios):.3f}")


if __name__ == "__main__":
    main()
