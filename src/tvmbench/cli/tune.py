"""``tvmbench tune``, ``db`` and ``rpc``: tuning databases, filling them, and the devices that measure."""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
from typing import Any

from tvmbench.cli.args import (
    PRECISIONS,
    add_history_args,
    add_model_args,
    add_tune_args,
    history_arg,
    model_kwargs,
    port,
    positive_int,
    tune_config,
)
from tvmbench.cli.common import EXIT_OK, add_verbose_arg, check_output, make_console, write_json


def add_tune_parser(sub: Any) -> None:
    tune = sub.add_parser("tune", help="tune a model's kernels with MetaSchedule into a persistent database")
    add_model_args(tune)
    add_tune_args(tune, trials_default=1000)
    _add_precision_arg(tune)
    tune.add_argument("--db", default=None, help="database directory (default: one per target in the cache)")
    tune.add_argument("--output", "-o", default=None, help="write the tuning report JSON here")
    tune.add_argument("--quiet", "-q", action="store_true", help="no progress bar")
    tune.add_argument("--compare-strategies", default=None, metavar="A,B[,...]",
                      help="tune with each strategy into its own database (DB/STRATEGY, --db or a new cache "
                           "folder) with the same budget, then print and write the per-layer table of the first "
                           "against each other (as 'tvmbench tune report')")
    add_verbose_arg(tune, "a line per batch of trials and MetaSchedule's per-task tables (on stderr)")
    add_history_args(tune)
    tune.set_defaults(handler=cmd_tune)


def _add_precision_arg(p: argparse.ArgumentParser) -> None:
    p.add_argument("--precision", default="fp32", choices=PRECISIONS,
                   help="the build tuned: its kernels are the tasks (bf16: as 'run --precision bf16' builds it; a "
                        "database tuned in fp32 has no records for a bf16 build's kernels)")


def cmd_tune(args: argparse.Namespace) -> int:
    console = make_console(stderr=True, quiet=args.quiet)
    check_output(args.output)
    if args.compare_strategies:
        return compare_strategies(args, console)
    report, _ = tune_with_progress(args, args.model, console)
    print_tune_report(report, make_console())
    if args.output:
        console.print(f"report written to {write_json(args.output, report.to_json())}")
    return EXIT_OK


def compare_strategies(args: argparse.Namespace, console: Any) -> int:
    """``tune --compare-strategies A,B``: one database per strategy, the same budget for each,
    then Bennu's per-layer table of A against each other strategy."""
    import copy
    import time
    from pathlib import Path

    from tvmbench.errors import UserError
    from tvmbench.paths import cache_dir
    from tvmbench.tuning.config import STRATEGIES

    names = [n.strip() for n in args.compare_strategies.split(",") if n.strip()]
    bad = [n for n in names if n not in STRATEGIES]
    if len(names) < 2 or bad or len(set(names)) < len(names):
        raise UserError(f"--compare-strategies takes two or more different strategies of {', '.join(STRATEGIES)}; "
                        f"got {args.compare_strategies!r}")
    base = Path(args.db) if args.db else cache_dir("tuning", f"compare-{time.strftime('%Y%m%d-%H%M%S')}")
    for name in names:
        one = copy.copy(args)
        one.strategy, one.db = name, str(base / name)
        report, _ = tune_with_progress(one, args.model, console)
        console.print(f"[bold]{name}[/bold]: {report.trials_after} trials in {report.wall_s / 60:.1f} min, "
                      f"{report.stop_reason}")
    for other in names[1:]:
        print_layer_table(base / names[0], base / other, names[0], other, args.model,
                          base / f"layers-{names[0]}-vs-{other}.csv")
    return EXIT_OK


LAYER_COLUMNS = ("time(s)", "std(s)", "trials", "tuning(min)")


def print_layer_table(a: Any, b: Any, label_a: str, label_b: str, model: str | None, csv: Any) -> None:
    """Print the per-layer table of databases ``a`` and ``b`` and write it as CSV (Bennu's columns)."""
    from rich.table import Table

    from tvmbench.files import write_csv_atomic
    from tvmbench.tuning import database as dbm

    rows = dbm.layer_table(dbm.TuningDatabase.open(a), dbm.TuningDatabase.open(b), model)
    heads = ["Layer", *(f"{label} {c}" for label in (label_a, label_b) for c in LAYER_COLUMNS), "speedup"]
    keys = ["layer", *(f"{side}_{k}" for side in "ab" for k in ("time", "std", "trials", "minutes")), "speedup"]
    table = Table(title=f"per layer: {label_a} ({a}) against {label_b} ({b}); speedup = {label_a} time / "
                        f"{label_b} time")
    width = max((len(str(r["layer"])) for r in rows), default=5)
    for h in heads:
        table.add_column(h, justify="left" if h == "Layer" else "right",
                         min_width=min(width, 60) if h == "Layer" else None)
    for r in rows:
        table.add_row(*(_cell(k, r[k]) for k in keys))
    make_console().print(table)
    out = write_csv_atomic(csv, [dict(zip(heads, (r[k] for k in keys), strict=True)) for r in rows], heads)
    make_console(stderr=True).print(f"per-layer table written to {out}")


def _cell(key: str, value: Any) -> str:
    if value is None:
        return "-"
    if key.endswith(("_time", "_std")):
        return f"{value:.3e}"
    if key.endswith("_minutes"):
        return f"{value:.2f}"
    if key == "speedup":
        return f"{value:.3f}"
    return str(value)[:60]


def tune_with_progress(args: argparse.Namespace, model: str, console: Any, target: Any = None) -> Any:
    """Tune into --db or the target's default database with a progress bar; (report, db path)."""
    from rich.progress import (
        BarColumn,
        MofNCompleteColumn,
        Progress,
        TextColumn,
        TimeElapsedColumn,
        TimeRemainingColumn,
    )

    from tvmbench import api

    config = tune_config(args)
    columns = [TextColumn("tuning {task.description}"), BarColumn(), MofNCompleteColumn(), TextColumn("trials"),
               TimeElapsedColumn(), TextColumn("ETA"), TimeRemainingColumn(), TextColumn("{task.fields[best]}")]
    with Progress(*columns, console=console, transient=True) as progress:
        bar = progress.add_task(model, total=config["trials"], best="")

        verbose = getattr(args, "verbose", False)
        # --quiet silences the progress bar, not a warning (such as winners not applied)
        warnings = make_console(stderr=True) if getattr(args, "quiet", False) else console

        def on_progress(done: int, total: int, estimate: float | None) -> None:
            best = f"tuned kernels ~{estimate:.2f} ms/inference" if estimate is not None else ""
            progress.update(bar, completed=min(done, total), best=best)
            if verbose:
                progress.console.print(f"trials {done}/{total}" + (f", {best}" if best else ""), highlight=False)

        report, path = api.tune(model, target or args.target, db=args.db, layout=getattr(args, "layout", "auto"),
                                timeout=float(args.tune_timeout), on_progress=on_progress,
                                on_warning=lambda w: warnings.print(f"[yellow]warning:[/yellow] {w}"),
                                wait=not getattr(args, "no_wait", False), history=history_arg(args),
                                verbose=verbose, in_model_check=getattr(args, "in_model_check", True),
                                threads=args.threads or None,
                                **model_kwargs(args), **config)
    for file in report.curve_files:
        console.print(f"tuning curve written to {file}")
    return report, path


def knob_changes(knobs: dict[str, list[Any]] | None) -> str:
    """The default rule's choices a record changed, as "name default -> value, ..." ("-": none)."""
    return ", ".join(f"{name} {old} -> {new}" for name, (old, new) in sorted((knobs or {}).items())) or "-"


def print_tune_report(report: Any, console: Any) -> None:
    from rich.table import Table

    table = Table(title=f"tuning database {report.database}")
    checked = any(t.in_model_gain is not None for t in report.tasks)
    for col in ("task", "weight", "MFLOP", "trials", "min", "default us", "best us", "std us", "GFLOP/s", "speedup",
                *(["in model"] if checked else [])):
        table.add_column(col, justify="left" if col == "task" else "right")
    for t in sorted(report.tasks, key=lambda t: -(t.weight * t.flops)):
        interval = f" [{t.in_model_interval[0]:.2f}-{t.in_model_interval[1]:.2f}]" if t.in_model_interval else ""
        in_model = "-" if t.in_model_gain is None else f"{t.in_model_gain:.3f}x{interval}" + (
            " (default kept)" if not t.kept_in_model else f" (#{t.in_model_rank})" if (t.in_model_rank or 1) > 1
            else "")
        table.add_row(t.name[:60], str(t.weight), f"{t.flops / 1e6:.2f}", str(t.trials),
                      f"{t.minutes:.2f}" if t.minutes is not None else "-",
                      f"{t.default_us:.1f}" if t.default_us else "-",
                      f"{t.best_us:.1f}" if t.best_us else "-", f"{t.std_us:.1f}" if t.std_us is not None else "-",
                      f"{t.gflops:.1f}" if t.gflops else "-",
                      f"{t.speedup:.2f}x" if t.speedup else "-", *([in_model] if checked else []))
    console.print(table)
    console.print("min: search minutes spent on the task (every run of this database); std us: the spread of "
                  "the best record's repeats ('-': measured once, --runner-repeat 1)")
    if checked:
        console.print("speedup: the best record over the default schedule in MetaSchedule's runner (the kernel "
                      "alone); in model: the task's winner inside the compiled model, paired blocks with the "
                      "default schedule [95 % interval], of its three fastest schedules alone (#2, #3: the "
                      "second or third fastest won); a task none of them is surely faster there (interval above "
                      "1, gain at least 1.02x) and faster alone keeps the default schedule (its records stay in "
                      "the database, not applied)")
    moved = [t for t in report.tasks if t.kept_in_model and t.rule_knobs]
    if moved:
        console.print("the default schedules' choices the kept records changed (default -> tuned; Droplet from the "
                      "defaults): where one recurs, a rule that made it would serve every model", soft_wrap=True)
        for t in moved:
            console.print(f"  {t.name[:60]}: {knob_changes(t.rule_knobs)}", highlight=False)
    console.print(f"{report.trials_after - report.trials_before} new trials ({report.trials_after} in total for "
                  f"this model) in {report.wall_s / 60:.1f} min; stopped: {report.stop_reason}")
    if report.untunable:
        console.print(f"not tuned, default schedules kept: {', '.join(report.untunable)} (MetaSchedule cannot "
                      "read their Let expressions: the fast exponential of softmax, SiLU and joined attention)")
    if report.end_to_end is not None:
        e2e = report.end_to_end
        console.print(f"end to end, the tuned build runs {e2e.gain:.3f}x as fast as the default schedules "
                      f"[{e2e.low:.3f}-{e2e.high:.3f}] (paired blocks of plain runs in each of {e2e.processes} "
                      "processes; applied only when surely faster)", soft_wrap=True)
        if e2e.states:
            console.print("  by the state of the host's cores (the host-state probe, microseconds per fork-join, "
                          "and per paired-work call where that told states apart): "
                          + ", ".join(f"{g:.3f}x at {name} ({n} pairs)" for name, g, n in e2e.states),
                          soft_wrap=True)
    if report.ceiling is not None:
        console.print(f"schedule ceiling {report.ceiling:.2f}x: no tuning of these kernels can make the model "
                      "faster than that (every kernel at the FMA peak; `tvmbench profile` shows where)",
                      soft_wrap=True)


def add_db_parser(sub: Any) -> None:
    db = sub.add_parser("db", help="inspect and manage tuning databases")
    db_sub = db.add_subparsers(dest="db_command", required=True)
    db_sub.add_parser("list", help="the databases in the cache folder")
    show = db_sub.add_parser("show", help="per workload: records, best latency, targets")
    show.add_argument("path")
    merge = db_sub.add_parser("merge", help="merge databases into one (created if missing)")
    merge.add_argument("sources", nargs="+")
    merge.add_argument("--into", required=True)
    prune = db_sub.add_parser("prune", help="keep only the fastest records per workload and target")
    prune.add_argument("path")
    prune.add_argument("--keep", type=positive_int, default=1)
    export = db_sub.add_parser("export", help="write a database as a .tar.gz")
    export.add_argument("path")
    export.add_argument("archive")
    check = db_sub.add_parser("check", help="judge a database's records inside a model again, against this "
                                            "tvmbench's default schedules (after an upgrade), without tuning")
    check.add_argument("path")
    add_model_args(check)
    _add_precision_arg(check)
    add_history_args(check)
    compare = db_sub.add_parser("compare", help="per layer, two databases' best times, spreads, trials and "
                                                "tuning minutes (also 'tvmbench tune report A B')")
    compare.add_argument("a")
    compare.add_argument("b")
    compare.add_argument("--model", default=None, help="only this model's tasks (as named to 'tvmbench tune')")
    compare.add_argument("--labels", default=None, metavar="A,B", help="column names (default: the folder names)")
    compare.add_argument("--csv", default=None, help="write the table here (default: layers-A-vs-B.csv here)")
    db.set_defaults(handler=cmd_db)


def cmd_db(args: argparse.Namespace) -> int:
    from pathlib import Path

    from rich.table import Table

    from tvmbench.tuning import database as dbm

    console = make_console()
    if args.db_command == "check":
        from tvmbench import api

        warnings = make_console(stderr=True)
        report, _ = api.check_database(args.model, args.path, args.target, layout=args.layout,
                                       threads=args.threads or None, history=history_arg(args),
                                       precision=args.precision,
                                       on_warning=lambda w: warnings.print(f"[yellow]warning:[/yellow] {w}"),
                                       **model_kwargs(args))
        print_tune_report(report, console)
    elif args.db_command == "compare":
        labels = args.labels.split(",") if args.labels else [Path(args.a).name, Path(args.b).name]
        if len(labels) != 2:
            from tvmbench.errors import UserError

            raise UserError(f"--labels takes two names separated by a comma, got {args.labels!r}")
        csv = args.csv or f"layers-{labels[0]}-vs-{labels[1]}.csv"
        check_output(csv)
        print_layer_table(args.a, args.b, labels[0], labels[1], args.model, csv)
    elif args.db_command == "list":
        table = Table(title="tuning databases")
        for col in ("path", "target", "TVM", "workloads", "records", "models", "last run"):
            table.add_column(col)
        for r in dbm.list_databases():
            table.add_row(r["path"], json.dumps(r["target"]), str(r["tvm_version"]), str(r["workloads"]),
                          str(r["records"]), ", ".join(r["models"]), str(r["last_run"]))
        console.print(table)
    elif args.db_command == "show":
        db = dbm.TuningDatabase.open(args.path)
        table = Table(title=f"{db.path} ({db.count_records()} records)")
        rows = dbm.show_database(db)
        moved = any(r["rule_knobs"] for r in rows)
        for col in ("workload", "structural hash", "records", "best us", "targets",
                    *(["kept record's changes to the default schedule"] if moved else [])):
            table.add_column(col, overflow="fold")  # a hash or knob name is wrapped, never cut short
        for r in rows:
            best = f"{r['best_us']:.1f}" if r["best_us"] is not None else "-"
            table.add_row(str(r["workload"]), str(r["shash"]), str(r["records"]), best, ", ".join(r["targets"]),
                          *([knob_changes(r["rule_knobs"])] if moved else []))
        console.print(table)
    elif args.db_command == "merge":
        sources = [dbm.TuningDatabase.open(p) for p in args.sources]
        dest = dbm.TuningDatabase.open(args.into, create=True)
        with dest.writing(on_wait=lambda msg: make_console(stderr=True).print(msg)):
            print(f"added {dbm.merge_databases(sources, dest)} records to {dest.path}")
    elif args.db_command == "prune":
        db = dbm.TuningDatabase.open(args.path)
        with db.writing(on_wait=lambda msg: make_console(stderr=True).print(msg)):
            print(f"dropped {dbm.prune_database(db, args.keep)} records from {db.path}")
    else:
        path = dbm.export_database(dbm.TuningDatabase.open(args.path), Path(args.archive))
        print(f"wrote {path}")
    return EXIT_OK


def add_rpc_parser(sub: Any) -> None:
    rpc = sub.add_parser("rpc", help="start TVM's RPC tracker or a device server (for remote tuning)")
    rpc_sub = rpc.add_subparsers(dest="rpc_command", required=True)
    tracker = rpc_sub.add_parser("tracker", help="a tracker devices register with")
    tracker.add_argument("--host", default="127.0.0.1",
                         help="address to listen on (default: this machine only; another address exposes it)")
    tracker.add_argument("--port", type=port, default=9190)
    server = rpc_sub.add_parser("server", help="serve this device to a tracker under a key")
    emulate = rpc_sub.add_parser("emulate", help="serve an emulated aarch64 device (qemu) to a tracker: runs "
                                                 "aarch64 builds to check their outputs; its times are not a device's")
    for p in (server, emulate):
        p.add_argument("--tracker", required=True, metavar="HOST:PORT")
        p.add_argument("--key", required=True)
        p.add_argument("--host", default="127.0.0.1",
                       help="address to listen on (default: this machine only; another address lets anyone "
                            "who reaches the port run code here)")
        p.add_argument("--port", type=port, default=9090)
    rpc.set_defaults(handler=cmd_rpc)


def cmd_rpc(args: argparse.Namespace) -> int:
    """Run TVM's own tracker or server in the foreground (Ctrl-C stops it)."""
    exposed = exposure_warning(args.rpc_command, args.host, args.port)
    if exposed:
        make_console(stderr=True).print(f"[yellow]warning:[/yellow] {exposed}")
    from tvmbench import tvm_exec

    env = None
    if args.rpc_command == "tracker":  # (a tracker runs nothing: TVM's runtime library is enough)
        cmd = tvm_exec.command("tvm.exec.rpc_tracker", "--host", args.host, "--port", str(args.port),
                               "--port-end", str(args.port + 10))
        env = {**os.environ, "TVM_USE_RUNTIME_LIB": "1"}
    else:
        from tvmbench.rpc import parse_tracker, reach_tracker

        reach_tracker(*parse_tracker(args.tracker))
        cmd = tvm_exec.command("tvm.exec.rpc_server", "--host", args.host, "--port", str(args.port), "--port-end",
                               str(args.port + 100), "--tracker", args.tracker, "--key", args.key)
    if args.rpc_command == "emulate":
        from tvmbench import emulator

        say = make_console(stderr=True).print
        cmd = emulator.server_command(args.tracker, args.key, args.host, args.port, say=say)
        say(f"an emulated aarch64 device under '{args.key}': outputs as on a board, times an emulator's")
    proc = subprocess.Popen(cmd, start_new_session=True, env=env)
    try:
        return proc.wait()
    except KeyboardInterrupt:  # the way to stop a server in the foreground: not a failure
        print(f"tvmbench: the RPC {args.rpc_command} stopped", file=sys.stderr)
        return EXIT_OK
    finally:
        if proc.poll() is None:  # Ctrl-C or SIGTERM: stop TVM's process group (launcher and worker)
            os.killpg(proc.pid, signal.SIGTERM)
            proc.wait(timeout=10)


def exposure_warning(kind: str, host: str, port: int) -> str | None:
    """What binding ``host`` exposes, or None for a loopback address. TVM's RPC has no
    authentication: a server loads and runs any library uploaded to it, and a tracker hands its
    devices to anyone who asks."""
    import ipaddress

    try:
        if ipaddress.ip_address(host).is_loopback:
            return None
    except ValueError:
        if host == "localhost":
            return None
    what = ("anyone who reaches it can upload a library and run it on this machine" if kind in ("server", "emulate")
            else "anyone who reaches it can register devices and take the devices registered with it")
    return (f"the RPC {kind} listens on {host}:{port} without authentication: {what}. Use it only on a "
            "private network, or keep the default 127.0.0.1 and reach it through an SSH tunnel")
