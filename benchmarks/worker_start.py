"""Forked against spawned workers: how long a worker takes to start, and whether it measures the same.

    .venv/bin/python benchmarks/worker_start.py --model resnet18 --frameworks tvm,pytorch --pairs 4

tvmbench's workers fork from a server that has imported torch and TVM (``measure/isolation.py``,
``context``) instead of each spawning a new interpreter that imports them. This runs the same
``tvmbench run`` measurement in pairs, one with spawned workers and one with forked ones, the
order alternating from pair to pair (the machine drifts over minutes), and prints per framework
and start method: the median of each pair's wall time of the whole run (worker starts, model
build, compile from the cache, timing) and the median of the measured latency medians, with
forked/spawned ratios. Compiled libraries come from the cache after the first pair, so the wall
time is mostly start-up and measurement.
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import statistics
import time


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="resnet18")
    parser.add_argument("--frameworks", default="tvm,pytorch")
    parser.add_argument("--pairs", type=int, default=4)
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()

    import tvmbench
    from tvmbench.measure import isolation

    forked = isolation.context

    def spawned(preloaded: bool = True) -> object:
        return mp.get_context("spawn")

    frameworks = args.frameworks.split(",")
    tvmbench.run(args.model, frameworks, "llvm", threads=args.threads, runs=5, history=False)  # fill the caches
    wall: dict[str, list[float]] = {"spawned": [], "forked": []}
    latency: dict[str, dict[str, list[float]]] = {m: {f: [] for f in frameworks} for m in wall}
    for pair in range(args.pairs):
        order = ["spawned", "forked"] if pair % 2 == 0 else ["forked", "spawned"]
        for method in order:
            isolation.context = spawned if method == "spawned" else forked  # type: ignore[assignment]
            t0 = time.monotonic()
            result = tvmbench.run(args.model, frameworks, "llvm", threads=args.threads, history=False)
            wall[method].append(time.monotonic() - t0)
            for fw in frameworks:
                latency[method][fw].append(result.results[fw].statistics["median_ms"])
            print(f"pair {pair + 1}, {method}: {wall[method][-1]:.1f} s, "
                  + ", ".join(f"{fw} {latency[method][fw][-1]:.3f} ms" for fw in frameworks), flush=True)
    isolation.context = forked  # type: ignore[assignment]
    w = {m: statistics.median(v) for m, v in wall.items()}
    print(f"\nwhole run (median of {args.pairs}): spawned {w['spawned']:.1f} s, forked {w['forked']:.1f} s, "
          f"forked/spawned {w['forked'] / w['spawned']:.2f}")
    for fw in frameworks:
        s, f = (statistics.median(latency[m][fw]) for m in ("spawned", "forked"))
        print(f"{fw}: latency median spawned {s:.3f} ms, forked {f:.3f} ms, forked/spawned {f / s:.3f}")


if __name__ == "__main__":
    main()
