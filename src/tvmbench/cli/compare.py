"""``tvmbench compare``: several models, shapes and frameworks in one run, with summaries."""

from __future__ import annotations

import argparse
import json
import os
import time
from typing import Any

from tvmbench.cli.args import (
    PRECISIONS,
    add_database_args,
    add_framework_args,
    add_history_args,
    add_probe_arg,
    add_timer_args,
    add_tune_args,
    history_arg,
    positive_float,
    positive_int,
    run_settings,
)
from tvmbench.cli.common import (
    EXIT_FAILED,
    EXIT_OK,
    add_verbose_arg,
    check_output,
    make_console,
    status_events,
)
from tvmbench.errors import UserError


def add_compare_parser(sub: Any) -> None:
    compare = sub.add_parser("compare", help="several models, shapes and frameworks in one run, with summaries")
    add_history_args(compare)
    compare.add_argument("--models", default=None, help="comma-separated zoo names or files, e.g. resnet50,gpt2")
    compare.add_argument("--config", default=None, help="a JSON comparison config (see configs/); flags override it")
    compare.add_argument("--frameworks", default=None, help="comma-separated frameworks (default tvm,pytorch)")
    compare.add_argument("--all-frameworks", action="store_true",
                         help="every framework tvmbench knows; missing or unavailable ones are reported, not fatal")
    compare.add_argument("--batch-size", default=None, metavar="1,2,4", help="batch size(s): a list is a sweep")
    compare.add_argument("--seq-length", default=None, metavar="128,512", help="sequence length(s), text models")
    compare.add_argument("--image-size", type=positive_int, default=None)
    compare.add_argument("--target", default=None, help="as for run (default: the config's, else auto)")
    compare.add_argument("--threads", type=positive_int, default=None)
    compare.add_argument("--precision", default=None, choices=PRECISIONS,
                         help="as for run: TVM, OpenVINO and TensorRT in it, the others fp32 (default fp32)")
    compare.add_argument("--seed", type=int, default=0)
    add_timer_args(compare)
    compare.add_argument("--rounds", type=positive_int, default=None,
                         help="as for run: N alternating rounds, each in lockstep turns")
    compare.add_argument("--no-lockstep", dest="lockstep", action="store_false", default=None,
                         help="with --rounds: one framework after the other within a round")
    add_probe_arg(compare)
    add_framework_args(compare)
    compare.add_argument("--db", default=None, help="MetaSchedule database to apply (with --tune: to tune into)")
    add_database_args(compare)
    compare.add_argument("--tune", action="store_true", help="tune every model first (else: as the config says)")
    add_tune_args(compare, trials_default=None)
    compare.add_argument("--timeout", type=positive_float, default=3600.0, help="seconds per framework")
    compare.add_argument("--output", "-o", default=None,
                         help="result JSON (default results/compare-DATE.json), rewritten after every model")
    compare.add_argument("--json", action="store_true",
                         help="print the comparison document to stdout instead of the tables (messages to stderr)")
    compare.add_argument("--plots", default=None, metavar="DIR", help="write throughput-vs-batch PNGs here")
    compare.add_argument("--resume", action="store_true",
                         help="keep the points an interrupted run with the same options wrote to --output, "
                              "measure the rest")
    compare.add_argument("--quiet", "-q", action="store_true")
    add_verbose_arg(compare, "each worker's steps and the compile log")
    compare.set_defaults(handler=cmd_compare)


def cmd_compare(args: argparse.Namespace) -> int:
    from tvmbench import api
    from tvmbench.backends import FRAMEWORKS, result_key
    from tvmbench.comparison import parse_int_list
    from tvmbench.results.report import print_run
    from tvmbench.results.summary import print_summary

    console = make_console(stderr=True, quiet=args.quiet)
    if args.resume and not args.output:
        raise UserError("--resume continues the document of --output FILE: give the file of the interrupted run")
    output = args.output or time.strftime("results/compare-%Y%m%d-%H%M%S.json")
    check_output(output)
    started = time.monotonic()
    status_box: dict[str, Any] = {}

    def on_point(i: int, n: int, point: Any) -> None:
        done = len(measured)
        spent = time.monotonic() - started
        eta = f", about {spent / done * (n - i + 1) / 60:.0f} min left" if done else ""
        console.print(f"[bold]{i}/{n}[/bold] {point.model} batch {point.batch_size}"
                      + (f" seq {point.seq_length}" if point.seq_length else "") + f"  [dim]({spent / 60:.0f} min"
                      + f"{eta})[/dim]")

    def on_event(fw: str, msg: str) -> None:
        if "status" not in status_box:
            status_box["status"] = console.status("starting")
            status_box["status"].start()
        status_box.setdefault("events", status_events(status_box["status"], started,
                                                      console if args.verbose else None))(fw, msg)

    def on_result(doc: dict[str, Any]) -> None:
        measured.append(doc["model"])
        if "status" in status_box:
            status_box.pop("status").stop()
            status_box.pop("events", None)
        if not args.quiet and not args.json:
            print_run(doc, console=console, errors=console)

    def tuner(point: Any, options: Any, target: Any) -> Any:
        from tvmbench.cli.tune import tune_with_progress

        tune_args = argparse.Namespace(**{**vars(args), "trials": point.trials or 1000, "layout": "auto"})
        return tune_with_progress(tune_args, point.model, console, target)[1]

    measured = []
    try:
        doc = api.compare(args.models, FRAMEWORKS if args.all_frameworks else args.frameworks, args.target,
                          config=args.config,
                          batch_sizes=parse_int_list(args.batch_size, "--batch-size") if args.batch_size else None,
                          seq_lengths=parse_int_list(args.seq_length, "--seq-length") if args.seq_length else None,
                          image_size=args.image_size, seed=args.seed,
                          tune_first=True if (args.tune or args.trials) else None, trials=args.trials,
                          output=output, on_point=on_point, on_result=on_result, on_event=on_event, tuner=tuner,
                          resume=args.resume, history=history_arg(args), db=args.db, **run_settings(args))
    except KeyboardInterrupt:
        if measured:
            console.print(f"interrupted: the {len(measured)} point(s) measured are in {output}")
        raise
    finally:
        if "status" in status_box:
            status_box.pop("status").stop()
    if doc.get("resumed_points"):
        console.print(f"resumed: {doc['resumed_points']} point(s) were already in {output}")
    _plots(args.plots, doc, console)
    if args.json:
        print(json.dumps(doc, indent=2, default=str))
    else:
        print_summary(doc["summary"], make_console())
    console.print(f"results written to {output}")
    failed = [p[result_key(fw)] for p in doc["points"] for fw in doc["frameworks"]
              if p[result_key(fw)]["status"] == "failed" and p[result_key(fw)].get("error_kind") != "missing"]
    return EXIT_FAILED if failed else EXIT_OK


def _plots(folder: str | None, doc: dict[str, Any], console: Any) -> None:
    if not folder:
        return
    from tvmbench.plots import available, throughput_png

    if not available():
        console.print("[yellow]--plots: matplotlib is not installed (pip install 'tvmbench[plot]')[/yellow]")
        return
    for sweep in doc["summary"]["sweeps"]:
        name = os.path.basename(sweep["model"]) + (f"-seq{sweep['seq_length']}" if sweep["seq_length"] else "")
        png = throughput_png(sweep["throughput"], os.path.join(folder, f"{name}-throughput.png"),
                             f"{sweep['model']}: throughput vs batch size")
        console.print(f"plot written to {png}")
