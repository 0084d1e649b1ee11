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
"""

from __future__ import annotations

import argparse
import json
import platform
import subprocess
import sys
import time
from pathlib import Path

from tvmbench.api import in_model_gains, model_options
from tvmbench.measure.environment import cpu_model
from tvmbench.profiling.kernels import select_in_model
from tvmbench.targets import physical_cores, resolve_target
from tvmbench.tuning.database import (
    PRETUNED_ROOT,
    WORKLOADS,
    TuningDatabase,
    drop_workloads,
    improvements,
    target_slug,
)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default="resnet18,resnet50,mobilenet_v2,bert-base-uncased")
    parser.add_argument("--time-budget", default="15m", help="search time per model")
    parser.add_argument("--trials", default="20000", help="trial budget per model")
    parser.add_argument("--work", default=".cache/pretuned-work", help="work database (kept; reruns resume)")
    parser.add_argument("--skip-tuning", action="store_true", help="only rebuild the shipped database from --work")
    parser.add_argument("--target", default="llvm",
                        help="TVM target to tune for (default: this CPU); e.g. '{\"kind\": \"llvm\", \"mcpu\": "
                             "\"haswell\"}' builds the AVX2 database on an AVX-512 machine")
    args = parser.parse_args()
    target = resolve_target(args.target)
    work = Path(args.work)
    models = [m for m in args.models.split(",") if m]
    if not args.skip_tuning:
        for model in models:
            subprocess.run([sys.executable, "-m", "tvmbench.cli", "tune", "--model", model, "--target", args.target,
                            "--trials", args.trials, "--time-budget", args.time_budget, "--db", str(work)],
                           check=True)
    db = TuningDatabase.open(work)
    dest = PRETUNED_ROOT / target_slug(target)
    made = {"machine": f"{cpu_model()}, {platform.machine()}", "target": target.config,
            "models": models, "time_budget_per_model": args.time_budget,
            "trials_in_work_database": db.count_records(), "date": time.strftime("%Y-%m-%d"),
            "command": " ".join(sys.argv), "runs": db.meta().get("runs", [])}
    counts = improvements(db, dest, meta_extra={"pretuned": made})
    print(f"{dest}: {counts['kept']} records (of {counts['workloads']} workloads) beat the default schedules "
          "in MetaSchedule's runner")
    threads = physical_cores()
    verdict = select_in_model([in_model_gains(m, dest, target, threads, model_options(m)).rows for m in models])
    losers, per_workload = verdict.losing, verdict.gains
    # A workload no model ran is not judged, and would apply to nothing (the pipeline has since
    # changed that kernel): dropped too.
    candidates = {str(json.loads(line)[0]) for line in TuningDatabase.open(dest)._lines(WORKLOADS)}
    unseen = candidates - set(per_workload)
    dropped = drop_workloads(TuningDatabase.open(dest), losers | unseen)
    shipped = TuningDatabase.open(dest)
    meta = shipped.meta()
    meta["pretuned"]["in_model_gain"] = {wl: round(g, 3) for wl, g in per_workload.items() if wl not in losers}
    meta["pretuned"]["in_model_interval"] = {wl: [round(x, 3) for x in ci] for wl, ci in verdict.intervals.items()}
    meta["pretuned"]["dropped_in_model"] = {wl: round(per_workload[wl], 3) for wl in sorted(losers)}
    meta["pretuned"]["dropped_not_in_models"] = sorted(unseen)
    shipped.write_meta(meta)
    print(f"{dest}: dropped {dropped} workloads not surely faster inside the models; "
          f"{shipped.count_records()} records shipped")


if __name__ == "__main__":
    main()
