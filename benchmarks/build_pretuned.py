"""Build the tuning database shipped with tvmbench for this machine class.

    .venv/bin/python benchmarks/build_pretuned.py --models resnet18,resnet50,mobilenet_v2,bert-base-uncased \\
        --time-budget 15m --work .cache/pretuned-work

Tunes each model with `tvmbench tune` (target llvm as resolved on this machine, default settings)
into one work database, so that tasks shared between models are tuned once and a rerun resumes;
then writes src/tvmbench/tuning/pretuned/<target>/ with, per workload, only the fastest record and
only where it beats tvmbench's default schedule by more than 2 % (see database.improvements), and
the machine, budget and date in its meta file. tvmbench applies it wherever the target matches.

MetaSchedule's runner times each kernel alone with hot caches, and a record that wins there can
lose inside the model. So each model is then built with and without the candidate database in one
worker and its tuned kernels timed in alternating blocks (the selection every `tvmbench tune`
makes: api.in_model_gains), and every workload whose kernels are not surely faster in the models
(profiling.kernels.select_in_model: the 95 % interval of the paired gain above 1, and at least
1.02x; a workload in two models is judged on both) is dropped, and so is every workload no model
ran (it would apply to nothing); the in-model gains and their intervals go in the meta file.
Last, each model is timed end to end with the records kept against none (api.in_model_end_to_end,
three processes); a model measured slower drops its records too (kernel gains in the model need not
add up to the model's).

The meta file names the compile pipeline the records were judged against; tvmbench applies a
shipped database only while its pipeline is the same (the default schedules change, and a record
that beat the old ones can lose to the new). After such a change:

    .venv/bin/python benchmarks/build_pretuned.py --rejudge [--target T]

judges the shipped database for the target again (a copy of it is the work database; nothing is
tuned), over the models it was built for.
"""

from __future__ import annotations

import argparse
import json
import platform
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from tvmbench.api import in_model_end_to_end, in_model_gains, model_options
from tvmbench.measure.environment import cpu_model
from tvmbench.profiling.kernels import select_in_model
from tvmbench.targets import physical_cores, resolve_target
from tvmbench.tuning.database import (
    META,
    PRETUNED_ROOT,
    RECORDS,
    WORKLOADS,
    TuningDatabase,
    drop_workloads,
    improvements,
    merge_databases,
    pipeline_version,
    target_slug,
)

DEFAULT_MODELS = "resnet18,resnet50,mobilenet_v2,bert-base-uncased"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default=None,
                        help=f"models to tune and judge on (default {DEFAULT_MODELS}; with --rejudge, the shipped "
                             "database's own)")
    parser.add_argument("--time-budget", default="15m", help="search time per model")
    parser.add_argument("--trials", default="20000", help="trial budget per model")
    parser.add_argument("--work", default=None,
                        help="work database, kept (reruns resume; default .cache/pretuned-work); several, "
                             "comma-separated, with --skip-tuning or --rejudge")
    parser.add_argument("--skip-tuning", action="store_true", help="only rebuild the shipped database from --work")
    parser.add_argument("--rejudge", action="store_true",
                        help="judge the shipped database for --target again against this pipeline's default "
                             "schedules (a copy of it joins the work databases; nothing is tuned)")
    parser.add_argument("--strategy", default="evolutionary", help="tuning strategy (see 'tvmbench tune --help')")
    parser.add_argument("--target", default="llvm",
                        help="TVM target to tune for (default: this CPU); e.g. '{\"kind\": \"llvm\", \"mcpu\": "
                             "\"haswell\"}' builds the AVX2 database on an AVX-512 machine")
    args = parser.parse_args()
    target = resolve_target(args.target)
    dest = PRETUNED_ROOT / target_slug(target)
    with tempfile.TemporaryDirectory(prefix="pretuned-") as scratch:
        build(args, target, dest, Path(scratch))


def work_databases(args: argparse.Namespace, dest: Path, scratch: Path) -> tuple[list[Path], dict, list[str]]:
    """The work databases (with --rejudge, a copy of the shipped one first), what the shipped
    database's meta said of how it was made, and the models to tune and judge on."""
    work = args.work or ("" if args.rejudge else ".cache/pretuned-work")
    works = [Path(w) for w in work.split(",") if w]
    made_before: dict = {}
    if args.rejudge:
        shutil.copytree(dest, scratch / "shipped")
        works.insert(0, scratch / "shipped")
        made_before = TuningDatabase.open(dest).meta().get("pretuned", {})
    models = [m for m in (args.models or (",".join(made_before.get("models", [])) if args.rejudge else "")
                          or DEFAULT_MODELS).split(",") if m]
    return works, made_before, models


def build(args: argparse.Namespace, target: Any, dest: Path, scratch: Path) -> None:
    works, made_before, models = work_databases(args, dest, scratch)
    if not args.skip_tuning and not args.rejudge:
        for model in models:
            subprocess.run([sys.executable, "-m", "tvmbench.cli", "tune", "--model", model, "--target", args.target,
                            "--trials", args.trials, "--time-budget", args.time_budget, "--strategy",
                            args.strategy, "--db", str(works[0]), "--no-history"], check=True)
    dbs = [TuningDatabase.open(w) for w in works]
    made = {"machine": f"{cpu_model()}, {platform.machine()}", "target": target.config,
            "models": models, "time_budget_per_model": args.time_budget,
            "trials_in_work_database": sum(db.count_records() for db in dbs), "date": time.strftime("%Y-%m-%d"),
            "command": " ".join(sys.argv), "runs": [r for db in dbs for r in db.meta().get("runs", [])],
            "pipeline": pipeline_version()}  # the defaults judged against (view_for skips it after a change)
    if args.rejudge:
        made = {**made_before, **{k: made[k] for k in ("models", "date", "command", "pipeline")},
                "runs": made_before.get("runs", []) + [r for db in dbs[1:] for r in db.meta().get("runs", [])],
                "rejudged_on": made["machine"], "built": made_before.get("date")}
    counts = shipped_subset(dbs, dest, scratch, {"pretuned": made})
    print(f"{dest}: {counts['kept']} records (of {counts['workloads']} workloads) beat the default schedules "
          "in MetaSchedule's runner")
    threads = physical_cores()
    rows = {m: in_model_gains(m, dest, target, threads, model_options(m)).rows for m in models}
    verdict = select_in_model(list(rows.values()))
    losers, per_workload = verdict.losing, verdict.gains
    # A workload no model ran is not judged, and would apply to nothing (the pipeline has since
    # changed that kernel): dropped too.
    candidates = {str(json.loads(line)[0]) for line in TuningDatabase.open(dest)._lines(WORKLOADS)}
    unseen = candidates - set(per_workload)
    dropped = drop_workloads(TuningDatabase.open(dest), losers | unseen)
    end_to_end, slower = end_to_end_check(models, rows, losers, dest, target, threads)
    if slower:
        dropped += drop_workloads(TuningDatabase.open(dest), slower)
        losers |= slower
    shipped = TuningDatabase.open(dest)
    meta = shipped.meta()
    meta["pretuned"]["in_model_gain"] = {wl: round(g, 3) for wl, g in per_workload.items() if wl not in losers}
    meta["pretuned"]["in_model_interval"] = {wl: [round(x, 3) for x in ci] for wl, ci in verdict.intervals.items()}
    meta["pretuned"]["dropped_in_model"] = {wl: round(per_workload.get(wl, 0.0), 3) for wl in sorted(losers)}
    meta["pretuned"]["dropped_not_in_models"] = sorted(unseen)
    meta["pretuned"]["end_to_end"] = end_to_end
    shipped.write_meta(meta)
    print(f"{dest}: dropped {dropped} workloads not surely faster inside the models; "
          f"{shipped.count_records()} records shipped")


def end_to_end_check(models: list[str], rows: dict[str, list[dict]], losers: set[str], dest: Path, target: Any,
                     threads: int) -> tuple[dict[str, list[float]], set[str]]:
    """The kernels' gains inside the model need not add up to the model's (session 33): each
    model with the records ``dest`` keeps, end to end against none. Returns each model's gain
    [low, high] and the workloads of the models measured slower (to drop: a model keeps none)."""
    end_to_end, slower = {}, set()
    for model in models:
        if not TuningDatabase.open(dest).count_records():
            break
        e2e = in_model_end_to_end(model, dest, target, threads, model_options(model))
        if e2e is None or not e2e.surely_faster():  # (as `tune`'s check: applied only when surely faster)
            slower |= {r["workload"] for r in rows[model] if r.get("workload")} - losers
        if e2e is not None:
            end_to_end[model] = [round(e2e.gain, 4), round(e2e.low, 4), round(e2e.high, 4)]
            print(f"{model}: {e2e.gain:.3f}x [{e2e.low:.3f}-{e2e.high:.3f}] end to end with the shipped records "
                  f"({e2e.processes} processes)")
    return end_to_end, slower


def shipped_subset(dbs: list[TuningDatabase], dest: Path, scratch: Path, meta_extra: dict) -> dict[str, int]:
    """``database.improvements`` of each work database, merged into ``dest`` (emptied first),
    with their default-schedule times."""
    parts, counts = [], {"workloads": 0, "kept": 0}
    for i, db in enumerate(dbs):
        part = scratch / f"part-{i}"
        for k, v in improvements(db, part).items():
            counts[k] += v
        parts.append(TuningDatabase.open(part))
    for name in (WORKLOADS, RECORDS, META):
        (dest / name).unlink(missing_ok=True)
    shipped = TuningDatabase.open(dest, create=True)
    merge_databases(parts, shipped)
    meta = {k: v for k, v in parts[0].meta().items() if k in ("target", "tvm_version")}
    meta["default_us"] = {wl: us for part in parts for wl, us in part.meta().get("default_us", {}).items()}
    shipped.write_meta({**meta, **meta_extra})
    return counts


if __name__ == "__main__":
    main()
