"""Tuning curve: how fast does TVM get on a model as MetaSchedule spends trials and minutes?

    .venv/bin/python benchmarks/tuning_curve.py --model resnet18 --time-budget 30m [--trials 5000] [--db DIR]

Measures the model untuned, tunes it with `tvmbench tune` into a fresh database (or --db) within
the budget, measures it again with the database applied (same process layout as `tvmbench run`),
and prints the curve: after each measured batch, trials, minutes, and the estimated time of the
tuned kernels per inference (sum over tasks of weight x best latency, once every task has a
measurement). `tvmbench tune` writes the curve as CSV and PNG in the database's curves/ folder.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path


def tvmbench(*args: str) -> None:
    subprocess.run([sys.executable, "-m", "tvmbench.cli", *args], check=True)


def measured(model: str, out: Path, extra: list[str]) -> dict:
    tvmbench("run", "--model", model, "--target", "llvm", "--output", str(out), "--quiet", "--max-time", "30",
             *extra)
    return json.loads(out.read_text())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="resnet18")
    parser.add_argument("--time-budget", default="30m")
    parser.add_argument("--trials", default="20000")
    parser.add_argument("--db", default=None, help="database directory (default: a new temporary one)")
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="tuning_curve_"))
    db = Path(args.db) if args.db else work / "db"
    before = measured(args.model, work / "before.json", ["--untuned"])
    report_path = work / "report.json"
    tvmbench("tune", "--model", args.model, "--target", "llvm", "--trials", args.trials, "--time-budget",
             args.time_budget, "--db", str(db), "--output", str(report_path), "--quiet")
    report = json.loads(report_path.read_text())
    after = measured(args.model, work / "after.json", ["--db", str(db), "--no-pretuned"])
    print(f"model {args.model}, budget {args.time_budget} / {args.trials} trials, database {db}")
    print(f"{'trials':>7} {'minutes':>8} {'tuned kernels ms (estimate)':>28}")
    step = max(1, len(report["curve"]) // 40)
    for point in report["curve"][::step] + report["curve"][-1:]:
        est = f"{point['estimate_ms']:.2f}" if point.get("estimate_ms") is not None else "-"
        print(f"{point['trials']:>7} {point['seconds'] / 60:>8.1f} {est:>28}")
    better = [t for t in report["tasks"] if (t.get("speedup") or 1.0) > 1.02]
    print(f"tasks where search beat tvmbench's default schedule by >2 %: {len(better)} of {len(report['tasks'])}"
          + "".join(f"\n  {t['name'][:50]:<50} x{t['weight']}: {t['default_us']:.1f} -> {t['best_us']:.1f} us "
                    f"({t['speedup']:.2f}x)" for t in sorted(better, key=lambda t: -t['speedup'])))
    tb, ta = before["tvm_relax"], after["tvm_relax"]
    print(f"end to end, measured: untuned {tb['median_ms']:.1f} ms -> tuned {ta['median_ms']:.1f} ms "
          f"({tb['median_ms'] / ta['median_ms']:.1f}x); PyTorch eager {after['pytorch']['median_ms']:.1f} ms; "
          f"{report['trials_after']} trials in {report['wall_s'] / 60:.1f} min; accuracy "
          f"{'ok' if ta['accuracy']['passed'] else 'FAILED'}")


if __name__ == "__main__":
    main()
