"""Does `tvmbench diff` cry wolf? An A/A test of the history and its verdicts (issue 22).

    .venv/bin/python benchmarks/regression_aa.py [--model resnet18] [--builds 10] [--rounds 4]

1. The same TVM build of the model (compiled once, from the cache afterwards) is measured
   ``--builds`` times, each a fresh `tvmbench run --rounds N` (N processes per run), into a
   temporary history. Every pair of runs is diffed at the default ±3 % band: any "slower" or
   "faster" verdict is a false alarm.
2. The same number of runs with 10 % of the first run's median added to TVM's timed call
   (``benchmarks/aa_inject/sitecustomize.py``, on PYTHONPATH for those runs only); each is diffed
   against the A/A run of the same index: every one should be flagged "slower".

The plain and slowed runs alternate (a0, b0, a1, b1, ...), so each injected pair is measured
minutes apart, not a quarter of an hour: run one after the other, a host that sped up between the
phases hid part of the injected slowdown (+7.9 % measured for +10 % spun, session 18).
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent


def run(model: str, rounds: int, history: Path, out: Path, env: dict[str, str]) -> dict:
    cmd = [sys.executable, "-m", "tvmbench.cli", "run", "--model", model, "--frameworks", "tvm", "--target", "llvm",
           "--rounds", str(rounds), "--history", str(history), "-o", str(out), "-q"]
    subprocess.run(cmd, check=True, env=env, stdout=subprocess.DEVNULL)
    return json.loads(out.read_text())


def diff(a: Path, b: Path) -> str:
    out = subprocess.run([sys.executable, "-m", "tvmbench.cli", "diff", str(a), str(b), "--json"],
                         capture_output=True, text=True)
    return json.loads(out.stdout)["changes"][0]["verdict"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="resnet18")
    parser.add_argument("--builds", type=int, default=10)
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--slowdown", type=float, default=0.10)
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="aa-"))
    history = work / "history.sqlite"
    started = time.monotonic()
    base = {**os.environ}
    plain = [work / f"a{i}.json" for i in range(args.builds)]
    slowed = [work / f"b{i}.json" for i in range(args.builds)]
    medians: list[float] = []
    slow_medians: list[float] = []
    delay = 0.0
    for i in range(args.builds):
        medians.append(run(args.model, args.rounds, history, plain[i], base)["tvm_relax"]["median_ms"])
        delay = delay or args.slowdown * medians[0] / 1e3
        slowed_env = {**base, "PYTHONPATH": os.pathsep.join([str(HERE / "aa_inject"), base.get("PYTHONPATH", "")]),
                      "TVMBENCH_AA_SLEEP_S": f"{delay:.6f}"}
        slow_medians.append(run(args.model, args.rounds, history, slowed[i], slowed_env)["tvm_relax"]["median_ms"])
        print(f"  pair {i}: {medians[-1]:.3f} ms plain, {slow_medians[-1]:.3f} ms slowed", flush=True)
    print(f"{args.builds} A/A runs of {args.model} (--rounds {args.rounds}): TVM medians "
          f"{min(medians):.3f}-{max(medians):.3f} ms (spread {(max(medians) - min(medians)) / min(medians):.1%})")
    pairs = list(itertools.combinations(plain, 2))
    verdicts = [diff(a, b) for a, b in pairs]
    false = sum(v != "no change" for v in verdicts)
    print(f"A/A: {false} of {len(pairs)} pairs flagged ({', '.join(f'{v} {verdicts.count(v)}' for v in set(verdicts))})")
    caught = [diff(a, b) for a, b in zip(plain, slowed, strict=True)]
    ratio = statistics.median(s / m for s, m in zip(slow_medians, medians, strict=True))
    print(f"injected: +{delay * 1e3:.3f} ms per call ({args.slowdown:.0%} of the first median), measured "
          f"{ratio - 1:+.1%}; flagged slower in {caught.count('slower')} of {len(caught)}")
    print(f"total {time.monotonic() - started:.0f} s, files in {work}")


if __name__ == "__main__":
    main()
