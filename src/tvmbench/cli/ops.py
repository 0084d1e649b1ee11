"""``tvmbench ops``: the operator lab's store — collect operators into it, query it."""

from __future__ import annotations

import argparse
import csv
import json
import sys
from typing import Any

from tvmbench.cli.args import add_history_args, history_arg, positive_float, positive_int
from tvmbench.cli.common import EXIT_OK, make_console
from tvmbench.errors import UserError


def add_ops_parser(sub: Any) -> None:
    ops = sub.add_parser("ops", help="the operator lab: every operator of every model, measured, stored, queried")
    ops_sub = ops.add_subparsers(dest="ops_command", required=True)
    collect = ops_sub.add_parser("collect", help="measure every operator of some models into the store")
    collect.add_argument("--models", required=True, help="comma-separated zoo names or files")
    collect.add_argument("--threads", default=None, metavar="1,2", help="thread counts (default: physical cores)")
    collect.add_argument("--schedules", default="default", metavar="default,tuned,sampled:N",
                         help="schedule sources: default (tvmbench's rules), tuned (tuning records where a "
                              "database has one), sampled:N (N schedules drawn from MetaSchedule's design "
                              "space per operator, timed alone)")
    collect.add_argument("--runs", type=positive_int, default=20, help="instrumented runs of the model")
    collect.add_argument("--no-alone", action="store_true", help="skip timing each kernel built alone")
    collect.add_argument("--target", default="auto")
    collect.add_argument("--db", default=None, help="tuning database for --schedules tuned (and the shipped ones)")
    collect.add_argument("--batch-size", type=positive_int, default=1)
    collect.add_argument("--seq-length", type=positive_int, default=None)
    collect.add_argument("--image-size", type=positive_int, default=None)
    collect.add_argument("--timeout", type=positive_float, default=3600.0, help="seconds per model and thread count")
    collect.add_argument("--quiet", "-q", action="store_true")
    add_history_args(collect)
    imp = ops_sub.add_parser("import-db", help="import tuning databases: every record a row of the store's "
                             "tuning_records table, joinable with the operators by workload")
    imp.add_argument("databases", nargs="+", metavar="DIR", help="MetaSchedule database folders")
    for p in (collect, imp, *_reading_parsers(ops_sub)):
        p.add_argument("--store", default=None, help="the store file (default: ops.sqlite in the cache folder)")
    ops.set_defaults(handler=cmd_ops)


def _reading_parsers(ops_sub: Any) -> list[argparse.ArgumentParser]:
    query = ops_sub.add_parser("query", help="run one read-only SQL statement against the store")
    query.add_argument("sql")
    top = ops_sub.add_parser("top", help="a model's operators by share of its time")
    top.add_argument("--model", required=True)
    top.add_argument("--threads", type=positive_int, default=None)
    top.add_argument("--schedule", default="default", choices=["default", "tuned"])
    roof = ops_sub.add_parser("roofline", help="a model's operators against this machine's roofline: achieved "
                              "GFLOP/s, the attainable bound min(peak, intensity x bandwidth), %% of it")
    roof.add_argument("--model", required=True)
    roof.add_argument("--threads", type=positive_int, default=None)
    roof.add_argument("--schedule", default="default", choices=["default", "tuned"])
    roof.add_argument("--plot", default=None, metavar="FILE.png", help="draw it (matplotlib)")
    show = ops_sub.add_parser("show", help="one operator's features and measurements")
    show.add_argument("workload")
    ops_sub.add_parser("fit", help="train the latency predictor on the store; report its error on each model "
                       "held out of training")
    predict = ops_sub.add_parser("predict", help="a model's per-operator and total time on this machine, "
                                 "predicted from the store without running it")
    predict.add_argument("--model", required=True)
    predict.add_argument("--threads", type=positive_int, default=None)
    predict.add_argument("--batch-size", type=positive_int, default=1)
    predict.add_argument("--seq-length", type=positive_int, default=None)
    predict.add_argument("--image-size", type=positive_int, default=None)
    for p in (query, top, roof, predict):
        p.add_argument("--csv", default=None, metavar="FILE", help="write the rows as CSV ('-': stdout)")
        p.add_argument("--json", default=None, metavar="FILE", help="write the rows as JSON ('-': stdout)")
        p.add_argument("--parquet", default=None, metavar="FILE",
                       help="write the rows as Parquet (needs DuckDB: pip install 'tvmbench[parquet]')")
    return [query, top, roof, show, *[ops_sub.choices[n] for n in ("fit", "predict")]]


def cmd_ops(args: argparse.Namespace) -> int:
    from tvmbench.profiling import queries
    from tvmbench.profiling.store import OpStore

    if args.ops_command == "collect":
        return _collect(args)
    if args.ops_command == "import-db":
        from tvmbench import api

        for r in api.import_tuning_db(args.databases, args.store):
            make_console(stderr=True).print(f"{r['database']}: {r['records']} records of {r['workloads']} "
                                            f"workloads, {r['new']} new in the store")
        return EXIT_OK
    store = OpStore.open(args.store, readonly=True)
    if args.ops_command in ("fit", "predict"):
        return _predictor(args, store)
    if args.ops_command == "query":
        _emit(args, *store.query(args.sql), title=args.sql)
    elif args.ops_command == "top":
        _emit(args, *queries.top(store, args.model, args.threads, args.schedule), title=f"{args.model}: operators")
    elif args.ops_command == "roofline":
        _roofline(args, store)
    else:
        features, (columns, rows) = queries.show(store, args.workload)
        console = make_console()
        for k, v in features.items():
            console.print(f"[bold]{k}[/bold]: {v}")
        _table(columns, rows, f"measurements of {args.workload}")
    return EXIT_OK


def _predictor(args: argparse.Namespace, store: Any) -> int:
    from tvmbench.profiling import predictor

    path = store.path.with_suffix(".predictor.json")
    if args.ops_command == "fit":
        fitted = predictor.fit(store)
        fitted.save(path)
        columns = ["held-out model", "operators", "R² (log)", "median rel. error", "total µs", "predicted µs",
                   "total rel. error"]
        _table(columns, [(r["model"], r["operators"], r["r2_log"], r["median_relative_error"], r["total_us"],
                          r["total_predicted_us"], r["total_relative_error"]) for r in fitted.report],
               f"predictor on {fitted.rows} operator times, leave one model out")
        make_console(stderr=True).print(f"predictor written to {path}")
        return EXIT_OK
    from tvmbench import api
    from tvmbench.targets import physical_cores

    options = api.model_options(args.model, args.batch_size, args.seq_length, args.image_size)
    threads = args.threads or physical_cores()
    ops = predictor.predict_ops(predictor.load(path), predictor.model_operators(args.model, options,
                                                                               api.target("llvm")), threads)
    columns = ["kernel", "kind", "count", "predicted_us", "predicted_us_per_inference"]
    _emit(args, columns, [tuple(op[c] for c in columns) for op in sorted(ops, key=lambda o: -o[columns[-1]])],
          title=f"{args.model}: predicted, {threads} threads")
    total = sum(op["predicted_us_per_inference"] for op in ops) / 1e3
    make_console(stderr=True).print(f"predicted kernel time: {total:.3f} ms per inference ({len(ops)} operators)")
    return EXIT_OK


def _roofline(args: argparse.Namespace, store: Any) -> None:
    from tvmbench.profiling import queries

    columns, rows = queries.roofline(store, args.model, args.threads, args.schedule)
    if not rows:
        raise UserError(f"no roofline for {args.model} in the store: collect it again with this tvmbench "
                        "('tvmbench ops collect' measures the machine's peak and bandwidth)")
    _emit(args, columns, rows, title=f"{args.model}: operators against the roofline")
    if args.plot:
        from tvmbench.plots import available, roofline_png

        if not available():
            raise UserError("--plot needs matplotlib (pip install 'tvmbench[plot]')")
        points = [dict(zip(columns, r, strict=True)) for r in rows]
        png = roofline_png(points, points[0]["peak_gflops"], points[0]["bandwidth_gbs"], args.plot,
                           f"{args.model}: {len(points)} operators")
        make_console(stderr=True).print(f"plot written to {png}")
    below = [r for r in rows if r[columns.index("percent_of_bound")] is not None
             and r[columns.index("percent_of_bound")] < 50]
    share = sum(r[columns.index("share_percent")] for r in below)
    make_console(stderr=True).print(f"{len(below)} of {len(rows)} operators below 50 % of their bound, "
                                    f"{share:.0f} % of the model's kernel time")


def _collect(args: argparse.Namespace) -> int:
    from rich.progress import (
        BarColumn,
        MofNCompleteColumn,
        Progress,
        TextColumn,
        TimeElapsedColumn,
        TimeRemainingColumn,
    )

    from tvmbench import api
    from tvmbench.comparison import parse_int_list

    console = make_console(stderr=True, quiet=args.quiet)
    threads = parse_int_list(args.threads, "--threads") if args.threads else None
    schedules = args.schedules
    columns = [TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
               TextColumn("ETA"), TimeRemainingColumn(), TextColumn("{task.fields[step]}")]
    with Progress(*columns, console=console, transient=True) as progress:
        bar = progress.add_task("collecting", total=None, step="")

        def on_job(i: int, n: int, model: str, nthreads: int) -> None:
            progress.update(bar, total=n, completed=i - 1, description=f"{model}, {nthreads} threads")

        counts = api.collect_ops(args.models, args.target, threads=threads, schedules=schedules, store=args.store,
                                 runs=args.runs, alone=not args.no_alone, db=args.db, batch_size=args.batch_size,
                                 seq_length=args.seq_length, image_size=args.image_size, timeout=args.timeout,
                                 on_job=on_job, on_event=lambda msg: progress.update(bar, step=msg),
                                 history=history_arg(args))
    for c in counts:
        failed = f"; {c['failed']} schedules failed to build or run (not stored)" if c.get("failed") else ""
        console.print(f"{c['model']} ({c['threads']} threads): {c['operators']} operators, {c['measured']} "
                      f"measurements stored, {c['skipped']} already in the store{failed}")
    return EXIT_OK


def _emit(args: argparse.Namespace, columns: list[str], rows: list[tuple[Any, ...]], title: str) -> None:
    """A table, or CSV / JSON (to a file, written atomically, or to stdout with '-') / Parquet."""
    from tvmbench.files import parquet_available, write_csv_atomic, write_json_atomic, write_parquet_atomic

    docs = [dict(zip(columns, r, strict=True)) for r in rows]
    if args.csv == "-":
        writer = csv.writer(sys.stdout)
        writer.writerow(columns)
        writer.writerows(rows)
    elif args.csv:
        write_csv_atomic(args.csv, docs, columns)
    if args.json == "-":
        print(json.dumps(docs, indent=2))
    elif args.json:
        write_json_atomic(args.json, docs)
    if args.parquet:
        if not parquet_available():
            raise UserError("--parquet needs DuckDB: pip install 'tvmbench[parquet]' (or use --csv / --json)")
        write_parquet_atomic(args.parquet, columns, rows)
    if not args.csv and not args.json and not args.parquet:
        _table(columns, rows, title)


def _table(columns: list[str], rows: list[tuple[Any, ...]], title: str) -> None:
    from rich.table import Table

    if not columns:
        raise UserError("the statement returned no columns; ops query is for SELECT statements")
    table = Table(title=title)
    for c in columns:
        table.add_column(c)
    for r in rows:
        table.add_row(*[f"{v:.4g}" if isinstance(v, float) else str(v) for v in r])
    make_console().print(table)
