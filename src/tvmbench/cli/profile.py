"""``tvmbench profile``: where TVM's time goes, kernel by kernel."""

from __future__ import annotations

import argparse
from typing import Any

from tvmbench.cli.args import (
    PRECISIONS,
    add_database_args,
    add_model_args,
    model_kwargs,
    positive_float,
    positive_int,
)
from tvmbench.cli.common import EXIT_OK, check_output, make_console, write_json


def add_profile_parser(sub: Any) -> None:
    prof = sub.add_parser("profile", help="where TVM's time goes: per-kernel times inside the model, FLOPs, "
                          "GFLOP/s, %% of peak, tuned or default schedule")
    add_model_args(prof)
    prof.add_argument("--db", default=None, help="MetaSchedule database to apply (as `run --db`)")
    prof.add_argument("--vs-untuned", action="store_true",
                      help="profile again without any database and show each kernel's gain from tuning")
    prof.add_argument("--precision", default="fp32", choices=PRECISIONS,
                      help="as `run --precision` (bf16: dense layers and convolutions on AVX-512 BF16)")
    prof.add_argument("--runs", type=positive_int, default=20, help="instrumented runs (median per kernel)")
    prof.add_argument("--top", type=positive_int, default=25, help="kernels shown (all are in --output)")
    prof.add_argument("--output", "-o", default=None, help="write the profile JSON here")
    prof.add_argument("--timeout", type=positive_float, default=3600.0)
    prof.add_argument("--quiet", "-q", action="store_true")
    add_database_args(prof)
    prof.set_defaults(handler=cmd_profile)


def cmd_profile(args: argparse.Namespace) -> int:
    from tvmbench import api
    from tvmbench.profiling import compare_profiles
    from tvmbench.results.report import print_profile

    console = make_console(stderr=True, quiet=args.quiet)
    check_output(args.output)
    with console.status(f"profiling {args.model}") as status:
        profiles = api.profile(args.model, args.target, db=args.db, untuned=args.untuned,
                               pretuned=not args.no_pretuned, vs_untuned=args.vs_untuned, runs=args.runs,
                               threads=args.threads, layout=args.layout, timeout=args.timeout, precision=args.precision,
                               on_event=lambda variant, msg: status.update(f"{variant}: {msg}"),
                               **model_kwargs(args))
    main = next(iter(profiles.values()))
    gains, drift = compare_profiles(profiles["tvm"], profiles["tvm_untuned"]) if args.vs_untuned else (None, None)
    print_profile(main, make_console(), top=args.top, gains=gains, drift=drift,
                  untuned=profiles.get("tvm_untuned") if args.vs_untuned else None)
    if args.output:
        doc = {variant: p.to_json() for variant, p in profiles.items()}
        if gains is not None:
            doc["gains"] = gains
            doc["process_drift"] = drift
        console.print(f"profile written to {write_json(args.output, doc)}")
    return EXIT_OK
