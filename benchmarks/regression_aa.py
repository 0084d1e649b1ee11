"""Does `tvmbench diff` cry wolf? An A/A test of the history and its verdicts (issue 22).

    .venv/bin/python benchmarks/regression_aa.py [--model resnet18] [--builds 10] [--rounds 4] [--min-time S]
    .venv/bin/python benchmarks/regression_aa.py --reference onnxruntime   # and judge TVM over a peer's turns
    .venv/bin/python benchmarks/regression_aa.py --rescore /tmp/aa-XXXX   # judge an earlier run's files again

1. The same TVM build of the model (compiled once, from the cache afterwards) is measured
   ``--builds`` times, each a fresh `tvmbench run --rounds N` (N processes per run), into a
   temporary history. Every pair of runs is diffed at the default ±3 % band: any "slower" or
   "faster" verdict is a false alarm.
2. The same number of runs with TVM's timed call made 10 % slower
   (``benchmarks/aa_inject/sitecustomize.py``, on PYTHONPATH for those runs only); each is diffed
   against the A/A run of the same index: every one should be flagged "slower". Each call spins
   for a tenth of the time its own untouched part took (``--inject share``, since session 117):
   code 10 % slower in whatever state the host is in, as a real regression is. ``--inject fixed``
   adds a fixed 10 % of the first run's 5th percentile to every call instead (sessions 38-116):
   the 5th percentile is the code's time where the host leaves it alone, but a fixed delay is a
   smaller share of a call the host slowed (+16 % in the Ice Lake VM's fast level, +5 % in its
   slow level, session 116).

The plain and slowed runs alternate (a0, b0, a1, b1, ...), so each injected pair is measured
minutes apart, not a quarter of an hour: run one after the other, a host that sped up between the
phases hid part of the injected slowdown (+7.9 % measured for +10 % spun, session 18).

Every run times the host-state probe between its blocks (``measure/probe.py``, ``--probe``),
and ``tvmbench diff`` compares each round's 5th percentile state with state; where two runs were
timed in no common host state, it judges them through the history's other runs of the model
(``--bridges``: here the other 18 runs of this benchmark, plain and slowed, all in its
temporary history). The same files are also judged four other ways, so the methods are scored
on the same runs: without the bridges (before session 75), the round medians within host states
(before session 37), the 5th percentiles with the probe left out, and raw round medians (before
the probe). An "inconclusive" verdict (the two runs timed in no common host state, and nothing
to bridge them) is no false alarm, and no catch either.

With ``--reference FRAMEWORK`` every run also times that framework in lockstep turns with TVM. The
first method is then ``tvmbench diff --confirm-with FRAMEWORK`` (session 122): a verdict only where
the plain judgement and the one over the reference agree. The second is ``--relative-to
FRAMEWORK``: TVM's time over the reference's in the turns next to it, round by round. On the Intel Xeon VM whole runs minutes apart move by 10 %
with nothing the probe sees (a neighbour on the memory): the reference, running the same model on
the same cores in the same seconds, moves with them (session 92). The pairs of turns are compared
within host states, as the single framework's rounds are: on the Zen 1 VM the host's far state
slowed TVM's resnet18 about 5 % more than ONNX Runtime's (session 115). Each side's spread
between rounds is moderated by the other runs' in the history (session 118): with four rounds a
side, Welch's t has 3-6 degrees of freedom, and the Ice Lake VM's misses were pairs whose runs
read 1.11-1.16 with intervals 0.3 wide (session 117).
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

import numpy as np

HERE = Path(__file__).resolve().parent


def run(model: str, rounds: int, history: Path, out: Path, env: dict[str, str], min_time: float | None = None,
        reference: str | None = None) -> dict:
    frameworks = ",".join(["tvm", *([reference] if reference else [])])
    cmd = [sys.executable, "-m", "tvmbench.cli", "run", "--model", model, "--frameworks", frameworks, "--target", "llvm",
           "--rounds", str(rounds), "--probe", "--history", str(history), "-o", str(out), "-q",
           *(["--min-time", f"{min_time:g}"] if min_time else [])]
    subprocess.run(cmd, check=True, env=env, stdout=subprocess.DEVNULL)
    return json.loads(out.read_text())


def verdict_of(a: Path, b: Path, probe: bool = True, quantile: float | None = None,
               relative_to: str | None = None) -> str:
    """The verdict on the same two files in this process: with the probe's turns or without them
    (``probe=False``), with each round's level at another percentile (50: the medians, the
    method before session 37) instead of ``diff.ROUND_QUANTILE``, over ``relative_to``."""
    from tvmbench.results import diff as diff_module

    docs = []
    for path in (a, b):
        doc = json.loads(path.read_text())
        if not probe:
            (doc["tvm_relax"].get("rounds") or {}).pop("probe_turns", None)
        docs.append(doc)
    kept = diff_module.ROUND_QUANTILE
    diff_module.ROUND_QUANTILE = kept if quantile is None else quantile
    try:
        return diff_module.compare_runs([docs[0]], [docs[1]], relative_to=relative_to)[0].verdict
    finally:
        diff_module.ROUND_QUANTILE = kept


def _turn_range(path: Path) -> str:
    turns = [t for r in json.loads(path.read_text())["tvm_relax"]["rounds"].get("probe_turns") or [] for t in r]
    if not turns:
        return "-"
    ranges = [f"{min(t[d] for t in turns):.2f}-{max(t[d] for t in turns):.2f}"
              for d in range(1, min(len(t) for t in turns))]
    return "/".join(ranges)


def _relative_level(path: Path, reference: str) -> str:
    """A run's TVM over ``reference`` (the median over its pairs of neighbouring turns) at the
    probe's median fork-join: where the runs sit when the host's level moves between runs but
    the probe finds one state in each (the Ice Lake VM, session 116)."""
    from tvmbench.measure.stats import pair_turns, turn_medians

    doc = json.loads(path.read_text())
    timed = [turn_medians(r["samples_ms"], r.get("lockstep_turns") or [], (r.get("rounds") or {}).get("sizes"))
             for r in (doc["tvm_relax"], doc[reference])]
    probe = [t[1] for r in doc["tvm_relax"]["rounds"].get("probe_turns") or [] for t in r]
    if not (timed[0] and timed[1] and probe):
        return f"{path.stem} -"
    ratios = [timed[0][i][1] / timed[1][j][1] for i, j in pair_turns(*timed)]
    return f"{path.stem} {statistics.median(ratios):.3f} ({statistics.median(probe):.2f} us)"


def diff(a: Path, b: Path, history: Path, relative_to: str | None = None, how: str = "--relative-to") -> dict:
    """`tvmbench diff --json`'s change for the model: its verdict, ratio and interval (``how``:
    the option that names ``relative_to``, --relative-to or --confirm-with)."""
    out = subprocess.run([sys.executable, "-m", "tvmbench.cli", "diff", str(a), str(b), "--json", "--history",
                          str(history), *([how, relative_to] if relative_to else [])],
                         capture_output=True, text=True)
    return json.loads(out.stdout)["changes"][0]


def _missed(changes: list[dict]) -> str:
    """The injected pairs not flagged, with what they read."""
    return "; ".join(f"pair {i} {_reading(c)}" for i, c in enumerate(changes) if c["verdict"] != "slower" and c.get("ci95"))


def _false_alarms(pairs: list[tuple[Path, Path]], changes: list[dict]) -> str:
    """The A/A pairs flagged, with what they read (and, for --confirm-with, over the reference)."""
    return "; ".join(f"{a.stem}-{b.stem} {_reading(c)}" + (f" (over the reference {_reading(c['confirm'])})"
                                                           if c.get("confirm") and c["confirm"].get("ci95") else "")
                     for (a, b), c in zip(pairs, changes, strict=True) if c["verdict"] in ("slower", "faster"))


def _reading(change: dict) -> str:
    low, high = change["ci95"]
    return f"{change['verdict']} {change['ratio']:.3f} [{low:.3f}-{high:.3f}]"


def measure(args: argparse.Namespace, history: Path, plain: list[Path], slowed: list[Path]) -> float:
    """The runs, plain and slowed in turn, into ``history``; the fixed delay injected (s per call,
    0 when each call is slowed by its share)."""
    base = {**os.environ}
    delay = 0.0
    for i in range(args.builds):
        first = run(args.model, args.rounds, history, plain[i], base, args.min_time, args.reference)["tvm_relax"]
        if args.inject == "fixed":
            delay = delay or args.slowdown * float(np.percentile(first["samples_ms"], 5)) / 1e3
        slowed_env = {**base, "PYTHONPATH": os.pathsep.join([str(HERE / "aa_inject"), base.get("PYTHONPATH", "")]),
                      **({"TVMBENCH_AA_SLEEP_S": f"{delay:.6f}"} if delay else
                         {"TVMBENCH_AA_SLOWDOWN": f"{args.slowdown:g}"})}
        slow = run(args.model, args.rounds, history, slowed[i], slowed_env, args.min_time, args.reference)["tvm_relax"]
        print(f"  pair {i}: {first['median_ms']:.3f} ms plain, {slow['median_ms']:.3f} ms slowed", flush=True)
    return delay


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="resnet18")
    parser.add_argument("--builds", type=int, default=10)
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--slowdown", type=float, default=0.10)
    parser.add_argument("--inject", choices=("share", "fixed"), default="share",
                        help="slow each TVM call by --slowdown of its own time (share) or by a fixed "
                             "--slowdown of the first run's 5th percentile (fixed, before session 117)")
    parser.add_argument("--min-time", type=float, default=None,
                        help="each round's minimum timed seconds (tvmbench run --min-time; default its own, 3 s): "
                             "longer rounds see more of the host's states, so fewer pairs share none")
    parser.add_argument("--reference", default=None, metavar="FRAMEWORK",
                        help="also time this framework in each run, in lockstep turns with TVM")
    parser.add_argument("--rescore", type=Path, default=None, metavar="DIR",
                        help="measure nothing: judge again the files and history an earlier run left in DIR")
    args = parser.parse_args()
    work = args.rescore or Path(tempfile.mkdtemp(prefix="aa-"))
    history = work / "history.sqlite"
    started = time.monotonic()
    plain = [work / f"a{i}.json" for i in range(args.builds)]
    slowed = [work / f"b{i}.json" for i in range(args.builds)]
    delay = 0.0
    if args.rescore is None:
        delay = measure(args, history, plain, slowed)
    medians, slow_medians = ([json.loads(f.read_text())["tvm_relax"]["median_ms"] for f in files]
                             for files in (plain, slowed))
    print(f"{args.builds} A/A runs of {args.model} (--rounds {args.rounds}): TVM medians "
          f"{min(medians):.3f}-{max(medians):.3f} ms (spread {(max(medians) - min(medians)) / min(medians):.1%})")
    print("  host states seen (probe turns' microseconds per fork-join / per paired-work call, min-max per run): "
          + ", ".join(_turn_range(f) for f in plain))
    busy = [json.loads(f.read_text())["environment"].get("cpu_busy_percent_before") for f in [*plain, *slowed]]
    print("  other work at each run's start (% of the CPU; over 25 % the run warned): "
          + ", ".join("-" if b is None else f"{b:.0f}" for b in busy))
    if args.reference:
        for files in (plain, slowed):
            print(f"  TVM over {args.reference} per run (median of its paired turns; the probe's median fork-join): "
                  + ", ".join(_relative_level(f, args.reference) for f in files))
    pairs = list(itertools.combinations(plain, 2))
    aa_changes = {"": [diff(a, b, history) for a, b in pairs]}
    verdicts = [c["verdict"] for c in aa_changes[""]]
    injected = {"": [diff(a, b, history) for a, b in zip(plain, slowed, strict=True)]}
    ratio = statistics.median(s / m for s, m in zip(slow_medians, medians, strict=True))
    how = (f"+{delay * 1e3:.3f} ms per call ({args.slowdown:.0%} of the first run's 5th percentile), " if delay else
           "" if args.rescore else f"+{args.slowdown:.0%} of each call's own time, ")
    print(f"injected: {how}medians {ratio - 1:+.1%}")
    methods = [("tvmbench diff (rounds' 5th percentiles within host states, bridged through the history)",
                verdicts, [c["verdict"] for c in injected[""]])]
    if args.reference:
        for how in ("--relative-to", "--confirm-with"):
            injected[f"{how} {args.reference}"] = [diff(a, b, history, args.reference, how)
                                                   for a, b in zip(plain, slowed, strict=True)]
            aa_changes[f"{how} {args.reference}"] = [diff(a, b, history, args.reference, how) for a, b in pairs]
        methods[:0] = [(f"tvmbench diff --confirm-with {args.reference} (a verdict where the plain judgement and "
                        f"the one over {args.reference} agree, since session 122)",
                        [c["verdict"] for c in aa_changes[f"--confirm-with {args.reference}"]],
                        [c["verdict"] for c in injected[f"--confirm-with {args.reference}"]]),
                       (f"tvmbench diff --relative-to {args.reference} (TVM over {args.reference} in the same "
                        "lockstep turns, within host states, bridged and the spread moderated through the history)",
                        [c["verdict"] for c in aa_changes[f"--relative-to {args.reference}"]],
                        [c["verdict"] for c in injected[f"--relative-to {args.reference}"]]),
                       ("the same without the history's other runs (their rounds' spread moderates each "
                        "side's since session 118; no bridges)",
                        [verdict_of(a, b, True, None, args.reference) for a, b in pairs],
                        [verdict_of(a, b, True, None, args.reference) for a, b in zip(plain, slowed, strict=True)]),
                       ("the same without host states or other runs (before session 115)",
                        [verdict_of(a, b, False, None, args.reference) for a, b in pairs],
                        [verdict_of(a, b, False, None, args.reference) for a, b in zip(plain, slowed, strict=True)])]
    for name, probe, quantile in (("the same without bridges (before session 75)", True, None),
                                  ("round medians within host states (before session 37)", True, 50),
                                  ("rounds' 5th percentiles without the probe", False, None),
                                  ("raw round medians", False, 50)):
        methods.append((name, [verdict_of(a, b, probe, quantile) for a, b in pairs],
                        [verdict_of(a, b, probe, quantile) for a, b in zip(plain, slowed, strict=True)]))
    for name, aa, caught in methods:
        counts = ", ".join(f"{v} {aa.count(v)}" for v in sorted(set(aa)))
        print(f"{name}: A/A {sum(v in ('slower', 'faster') for v in aa)} of {len(pairs)} pairs flagged ({counts}); "
              f"injected flagged slower in {caught.count('slower')} of {len(caught)}")
    for how, changes in injected.items():
        if _missed(changes):
            print(f"  injected pairs `tvmbench diff{' ' if how else ''}{how}` missed: {_missed(changes)}")
        if _false_alarms(pairs, aa_changes[how]):
            print(f"  A/A pairs `tvmbench diff{' ' if how else ''}{how}` flagged: {_false_alarms(pairs, aa_changes[how])}")
    print(f"total {time.monotonic() - started:.0f} s, files in {work}")


if __name__ == "__main__":
    main()
