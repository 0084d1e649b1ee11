"""Issue 21's benchmark: which search strategy makes tuning pay, end to end, against tuning minutes.

    .venv/bin/python benchmarks/tuning_strategies.py [--models resnet18,mobilenet_v2,bert-base-uncased]
        [--strategies evolutionary,droplet,dpmeta] [--budget 15] [--checkpoint 5] [--rounds 4]
        [--out-dir results/tuning_strategies] [--reselect] [--precision bf16]

For each model and strategy: ``tvmbench tune`` into a fresh database with a ``--checkpoint``-minute
search budget, a copy of the database as it stands then (``STRATEGY@5m``), then the same database
tuned on to ``--budget`` minutes in all (``STRATEGY@15m``); every ``tune`` ends with tvmbench's
in-model check, as a user's would. Then the model is measured with each database against the
untuned build (tvmbench's default schedules, no database at all), in ``--rounds`` fresh
processes: each builds every variant and times them in blocks, one variant after the other in a
fixed cycle (build and cycle order reversed every other round), so a burst of noise hits all
variants alike and no variant times two blocks in a row; a variant's speedup per
round is the untuned median over its median, and the interval is over the rounds (processes are
the units). A second untuned build is measured beside them as an A/A control: its row is what the
harness reads into identical code.
It prints, per model, the curve of end-to-end speedup against tuning minutes for each strategy,
the schedule ceiling (``tvmbench profile``: the most any schedule of the model's kernels could
gain, every kernel at the FMA peak), and the per-layer table of each strategy's final database against evolutionary's
(``tvmbench tune report``). Resumes: a database already tuned to a budget is not tuned again.
Text models run at seq 128. ``--reselect`` runs every database's in-model check again with the
current selection before measuring (into a copy of the results: it rewrites the verdicts).
``--precision bf16``: every build, tuned and untuned, is the bf16 build (``tvmbench tune --precision``).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

FILES = ("database_workload.json", "database_tuning_record.json", "tvmbench_db.json")
# A second untuned build beside the others: its "speedup" over the first is the harness's own
# bias and noise, the yardstick for every strategy's row.
CONTROL = "untuned (again)"


def tvmbench(*args: str) -> None:
    subprocess.run([sys.executable, "-m", "tvmbench.cli", *args], check=True)


def options(model: str) -> list[str]:
    from tvmbench.models import ZOO

    return ["--seq-length", "128"] if model in ZOO and ZOO[model].family == "text" else []


def tune(model: str, strategy: str, db: Path, minutes: float, threads: int, precision: str) -> None:
    """Tune ``db`` for ``minutes`` more of search (a ``done-N`` marker makes a rerun skip it)."""
    marker = db / f".done-{minutes:g}"
    if marker.exists():
        return
    print(f"== {model}: {strategy}, {minutes:g} more minutes into {db}", flush=True)
    tvmbench("tune", "--model", model, *options(model), "--target", "llvm", "--strategy", strategy,
             "--trials", "100000", "--time-budget", f"{minutes * 60:g}s", "--threads", str(threads),
             "--db", str(db), "--precision", precision, "--quiet", "--no-history")
    marker.touch()


def snapshot(src: Path, dest: Path) -> None:
    if (dest / FILES[0]).is_file():
        return
    dest.mkdir(parents=True, exist_ok=True)
    for name in FILES:
        if (src / name).is_file():
            shutil.copy2(src / name, dest / name)


def reselect(model: str, db: Path, threads: int, precision: str) -> None:
    """Judge every record of ``db`` inside the model again with the current selection (the last
    check's verdict forgotten first): to measure a change of the selection on databases already
    tuned, without tuning them again."""
    from tvmbench.api import check_in_model, model_options, target
    from tvmbench.tuning.database import TuningDatabase, forget_in_model

    database = TuningDatabase.open(db)
    with database.writing():
        forget_in_model(database)
    report = type("Report", (), {"tasks": []})()
    check_in_model(report, database, model, target("llvm"), threads,
                   model_options(model, seq_length=128 if options(model) else None), precision=precision)
    print(f"   {db.name}: in-model check done", flush=True)


def measure_round(model: str, variants: dict[str, str | None], threads: int, blocks: int, block: int,
                  reverse: bool, precision: str = "fp32") -> dict[str, float]:
    """One process: build every variant, time them in alternating blocks; median ms per variant."""
    os.environ["TVM_NUM_THREADS"] = str(threads)
    from tvmbench.backends import BackendConfig
    from tvmbench.backends.tvm import TVMBackend
    from tvmbench.models import ModelOptions, load_model
    from tvmbench.targets import resolve_target

    target = resolve_target("llvm")
    seq = 128 if options(model) else None
    loaded = load_model(model, ModelOptions(seq_length=seq))
    builds = {}
    # Build order (and so the cycle below) is reversed every other process, so no variant keeps
    # one position.
    for label, db in (reversed(variants.items()) if reverse else variants.items()):
        backend = TVMBackend(BackendConfig(target=target, threads=threads, options={"precision": precision},
                                           databases=((("--db", db),) if db else ())))
        backend.prepare(loaded)
        for _ in range(5):
            backend.run()
        builds[label] = backend
    order = list(builds)
    times: dict[str, list[float]] = {k: [] for k in builds}
    for _ in range(blocks):
        # One fixed cycle, never "a b c | c b a": reversing each block gave the builds at the two
        # ends two blocks in a row, warm from their own previous block, and the first build
        # (untuned) measured 2-4 % faster than an identical build in the middle.
        for label in order:
            builds[label].run()  # brings this build's data back into the caches, untimed
            for _ in range(block):
                t0 = time.perf_counter()
                builds[label].run()
                times[label].append(time.perf_counter() - t0)
    return {k: statistics.median(v) * 1e3 for k, v in times.items()}


def measure(model: str, variants: dict[str, str | None], args: argparse.Namespace) -> dict[str, list[float]]:
    """``--rounds`` fresh processes; per variant its speedup over the untuned build, per round."""
    out_file = Path(args.out_dir) / model.replace("/", "_") / "rounds.json"
    rounds: list[dict[str, float]] = json.loads(out_file.read_text()) if out_file.is_file() else []
    while len(rounds) < args.rounds:
        proc = subprocess.run([sys.executable, __file__, "--measure-round", json.dumps(
            {"model": model, "variants": variants, "threads": args.threads, "blocks": args.blocks,
             "block": args.block, "reverse": len(rounds) % 2 == 1, "precision": args.precision})],
            capture_output=True, text=True, check=True)
        rounds.append(json.loads(proc.stdout.strip().splitlines()[-1]))
        out_file.write_text(json.dumps(rounds, indent=1))
        print(f"   round {len(rounds)}/{args.rounds}: " + ", ".join(f"{k} {v:.2f} ms" for k, v in rounds[-1].items()),
              flush=True)
    return {k: [r["untuned"] / r[k] for r in rounds] for k in variants}


def interval(ratios: list[float]) -> str:
    from tvmbench.measure.stats import rounds_median_ci

    lo, hi = rounds_median_ci(ratios) if len(ratios) > 1 else (ratios[0], ratios[0])
    return f"{statistics.median(ratios):.3f}x [{lo:.3f}-{hi:.3f}]"


def print_ceiling(model: str, args: argparse.Namespace) -> None:
    """The most any tuning could gain on this model here: ``tvmbench profile``'s schedule ceiling
    of the untuned build (every kernel at the measured FMA peak, copies free)."""
    from tvmbench import api
    from tvmbench.results.report import make_console, print_ceiling

    profile = api.profile(model, "llvm", untuned=True, runs=30, threads=args.threads, precision=args.precision,
                          seq_length=128 if options(model) else None)["tvm_untuned"]
    print(f"  the untuned build, profiled: {profile.end_to_end_ms:.2f} ms end to end, peak "
          f"{profile.peak_gflops:.0f} GFLOP/s", flush=True)
    print_ceiling(profile, make_console())


def run_model(model: str, args: argparse.Namespace) -> None:
    root = Path(args.out_dir) / model.replace("/", "_")
    strategies = args.strategies.split(",")
    for strategy in strategies:
        db = root / strategy
        tune(model, strategy, db, args.checkpoint, args.threads, args.precision)
        snapshot(db, root / f"{strategy}@{args.checkpoint:g}m")
        tune(model, strategy, db, args.budget - args.checkpoint, args.threads, args.precision)
    if args.reselect:
        for strategy in strategies:
            for db in (root / f"{strategy}@{args.checkpoint:g}m", root / strategy):
                reselect(model, db, args.threads, args.precision)
    variants: dict[str, str | None] = {"untuned": None, CONTROL: None}
    for strategy in strategies:
        variants[f"{strategy}@{args.checkpoint:g}m"] = str(root / f"{strategy}@{args.checkpoint:g}m")
        variants[f"{strategy}@{args.budget:g}m"] = str(root / strategy)
    speedups = measure(model, variants, args)
    print(f"\n{model}: end-to-end speedup over the untuned build (median over {args.rounds} processes, "
          "95 % interval over them)")
    print(f"  {'strategy':14} {'0 min':>8} " + " ".join(f"{m:>26}" for m in (f"{args.checkpoint:g} min",
                                                                                 f"{args.budget:g} min")))
    for strategy in strategies:
        print(f"  {strategy:14} {'1.000x':>8} {interval(speedups[f'{strategy}@{args.checkpoint:g}m']):>26} "
              f"{interval(speedups[f'{strategy}@{args.budget:g}m']):>26}")
    print(f"  A/A control: the untuned build built and timed again in the same processes, "
          f"{interval(speedups[CONTROL])}")
    print_ceiling(model, args)
    for strategy in strategies[1:]:
        print(f"\nper layer, {strategies[0]} against {strategy} ({args.budget:g} min each):", flush=True)
        tvmbench("tune", "report", str(root / strategies[0]), str(root / strategy), "--labels",
                 f"{strategies[0]},{strategy}", "--csv", str(root / f"layers-{strategies[0]}-vs-{strategy}.csv"))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default="resnet18,mobilenet_v2,bert-base-uncased")
    parser.add_argument("--strategies", default="evolutionary,droplet,dpmeta")
    parser.add_argument("--budget", type=float, default=15.0, help="search minutes per strategy in all")
    parser.add_argument("--checkpoint", type=float, default=5.0, help="the minute at which a copy is kept")
    parser.add_argument("--rounds", type=int, default=4, help="measurement processes per model")
    parser.add_argument("--blocks", type=int, default=16, help="alternating blocks per variant and round")
    parser.add_argument("--block", type=int, default=5, help="timed inferences per block")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--out-dir", default="results/tuning_strategies")
    parser.add_argument("--reselect", action="store_true",
                        help="judge the databases' records in the model again before measuring (delete "
                             "rounds.json to measure again)")
    parser.add_argument("--precision", default="fp32", choices=("fp32", "bf16"),
                        help="the build every variant is (bf16: tuned with 'tvmbench tune --precision bf16')")
    parser.add_argument("--measure-round", default=None, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.measure_round:
        job = json.loads(args.measure_round)
        print(json.dumps(measure_round(job["model"], job["variants"], job["threads"], job["blocks"], job["block"],
                                       job["reverse"], job.get("precision", "fp32"))))
        return 0
    if not 0 < args.checkpoint < args.budget:
        parser.error("--checkpoint must be between 0 and --budget")
    t0 = time.monotonic()
    for model in args.models.split(","):
        run_model(model, args)
    print(f"\ntook {(time.monotonic() - t0) / 60:.0f} min")
    return 0


if __name__ == "__main__":
    sys.exit(main())
