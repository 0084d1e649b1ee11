"""How repeatable is `tvmbench run`? Five invocations on resnet18; the spread of the medians.

    .venv/bin/python benchmarks/repeatability.py [--invocations 5] [--model resnet18] [-- extra run flags]
    .venv/bin/python benchmarks/repeatability.py --aa --rounds 4 --model mobilenet_v2

Each invocation is a separate `tvmbench run` process (fresh workers, cached TVM library after the
first), as a user would repeat it. Prints each invocation's medians and, per framework, the spread
(max - min) / median across invocations.

``--aa``: an A/A test of the speedup intervals. Each invocation compares TVM with itself (`tvm`
without any database against `tvm_untuned`: the same library, in different worker processes) over
``--rounds`` rounds; the true speedup is 1.0. For each it prints the reported interval (from the
round medians) and the interval the pooled samples alone would give, and counts how often each
excludes 1.0, i.e. claims a difference that is not there.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--invocations", type=int, default=5)
    parser.add_argument("--model", default="resnet18")
    parser.add_argument("--aa", action="store_true", help="A/A test of the speedup intervals (see above)")
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("extra", nargs="*", help="more flags for tvmbench run (after --)")
    args = parser.parse_args()
    medians: dict[str, list[float]] = {}
    misses = {"rounds": 0, "pooled": 0}
    with tempfile.TemporaryDirectory() as tmp:
        env = {**os.environ, "TVMBENCH_CACHE": str(Path(tmp) / "cache")} if args.aa else None  # no tuning database
        for i in range(args.invocations):
            out = Path(tmp) / f"{i}.json"
            cmd = [sys.executable, "-m", "tvmbench.cli", "run", "--model", args.model, "--target", "llvm",
                   "--output", str(out), "--quiet", "--rounds", str(args.rounds), *args.extra]
            if args.aa:
                cmd += ["--frameworks", "tvm,tvm_untuned", "--no-pretuned"]
            subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL, env=env)
            result = json.loads(out.read_text())
            if args.aa:
                print(f"invocation {i + 1}: {_aa_line(result, misses)}", flush=True)
            row = []
            for fw in result["frameworks"]:
                entry = result["tvm_relax" if fw == "tvm" else fw]
                medians.setdefault(fw, []).append(entry["median_ms"])
                row.append(f"{fw} {entry['median_ms']:.2f} ms ({entry['total_runs']} runs)")
            print(f"invocation {i + 1}: " + ", ".join(row), flush=True)
    if args.aa:
        print(f"intervals excluding 1.0 (a false difference) in {args.invocations} A/A invocations: "
              f"from round medians {misses['rounds']}, pooled samples {misses['pooled']}")
    for fw, values in medians.items():
        mid = statistics.median(values)
        print(f"{fw}: medians {', '.join(f'{v:.2f}' for v in values)} ms; spread (max-min)/median "
              f"{(max(values) - min(values)) / mid:.1%}")


def _aa_line(result: dict, misses: dict[str, int]) -> str:
    from tvmbench.measure import stats

    a, b = result["tvm_untuned"], result["tvm_relax"]
    sp = result["tvm_speedups"]["tvm_untuned"]
    pooled = stats.speedup_ci(a["samples_ms"], b["samples_ms"])
    for name, (lo, hi) in (("rounds", sp["ci95"]), ("pooled", pooled)):
        misses[name] += not lo <= 1.0 <= hi
    rounds = "; ".join(f"{fw} " + "/".join(f"{m:.2f}" for m in e["rounds"]["medians_ms"])
                       for fw, e in (("tvm", b), ("tvm_untuned", a)) if e.get("rounds"))
    return (f"speedup {sp['speedup']:.3f}, reported {sp['ci95'][0]:.3f}-{sp['ci95'][1]:.3f}, "
            f"pooled {pooled[0]:.3f}-{pooled[1]:.3f} (round medians ms: {rounds})")


if __name__ == "__main__":
    main()
