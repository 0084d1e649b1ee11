"""Command line: ``tvmbench run | models | target``.

User mistakes (unknown model, bad target, bad shape flag, missing framework) end with one line on
stderr and exit status 2, never a traceback. A framework that fails during a run is recorded in
the result and the other frameworks' numbers are still printed and written.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import threading
import time
from collections.abc import Callable
from typing import Any

from tvmbench.errors import UserError

EXIT_OK, EXIT_FAILED, EXIT_USAGE, EXIT_INTERRUPTED = 0, 1, 2, 130


class TuningFailed(Exception):
    """Tuning crashed inside TVM (not a user mistake): exit status 1."""


def _int_at_least(minimum: int, what: str) -> Callable[[str], int]:
    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected {what}, got '{text}'") from None
        if value < minimum:
            raise argparse.ArgumentTypeError(f"expected {what}, got {value}")
        return value

    return parse


_positive_int = _int_at_least(1, "a positive integer")
_nonneg_int = _int_at_least(0, "an integer >= 0")


def _positive_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number, got '{text}'") from None
    if value <= 0:
        raise argparse.ArgumentTypeError(f"expected a positive number, got {value}")
    return value


def _config_overrides(items: list[str] | None) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for item in items or []:
        key, sep, raw = item.partition("=")
        if not sep or not key:
            raise UserError(f"bad --hf-config '{item}': expected KEY=VALUE, e.g. num_hidden_layers=2")
        try:
            out[key] = json.loads(raw)
        except json.JSONDecodeError:
            out[key] = raw
    return out


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="tvmbench", description="Compile, benchmark and compare deep-learning models with Apache TVM.")
    parser.add_argument("--version", action="version", version=_version())
    sub = parser.add_subparsers(dest="command", required=True)

    run = sub.add_parser("run", help="compile a model with TVM and benchmark it against PyTorch")
    _add_model_args(run)
    run.add_argument("--frameworks", default=None,
                     help="comma-separated from tvm, tvm_untuned, pytorch, torch_compile, onnxruntime, openvino, tensorrt "
                          "(default tvm,pytorch; tvm alone for an ONNX file)")
    from tvmbench.backends.torch_compile import MODES as torch_compile_modes  # no torch import

    run.add_argument("--torch-compile-mode", default="default", choices=torch_compile_modes)
    run.add_argument("--openvino-hint", default="latency", choices=["latency", "throughput"])
    run.add_argument("--warmup", type=_nonneg_int, default=None,
                     help="exact warm-up runs (default: adaptive, >=10 runs and >=1 s, at most 10 s)")
    run.add_argument("--runs", type=_positive_int, default=None,
                     help="exact timed runs (default: adaptive until the median's 95%% CI is within +-2%%)")
    run.add_argument("--min-time", type=_positive_float, default=3.0, help="adaptive mode: minimum timed seconds")
    run.add_argument("--max-time", type=_positive_float, default=60.0, help="adaptive mode: maximum timed seconds")
    run.add_argument("--rounds", type=_positive_int, default=1,
                     help="measure every framework N times in alternating order (A B, B A, ...)")
    run.add_argument("--include-io", action="store_true",
                     help="time the input copies to the device and the output copies back")
    run.add_argument("--db", default=None,
                     help="MetaSchedule database directory to apply (with --tune: to tune into)")
    _add_database_args(run)
    run.add_argument("--compile-only", action="store_true",
                     help="build for the target without running (a GPU or cross target this machine lacks): "
                          "writes the library, params and a report (CUDA: PTX, kernels, tensor cores) to "
                          "--artifact-dir")
    run.add_argument("--artifact-dir", default=None, help="where --compile-only writes (default artifacts/MODEL-TARGET)")
    run.add_argument("--precision", default="fp32", choices=["fp32", "fp16", "amp", "bf16"],
                     help="precision of TVM, TensorRT and OpenVINO (fp16: fp16 matmul/conv with fp16 "
                          "accumulation; amp: fp32 accumulation); PyTorch stays the fp32 reference")
    run.add_argument("--cuda-graph", action="store_true",
                     help="CUDA: capture the model's kernel launches in a CUDA graph (Relax RewriteCUDAGraph), "
                          "for launch-bound models")
    run.add_argument("--tune", action="store_true", help="tune with MetaSchedule first, then benchmark")
    _add_tune_args(run, trials_default=None)
    run.add_argument("--output", "-o", default=None, help="write the result JSON here")
    run.add_argument("--no-cache", action="store_true", help="compile again even if a cached library exists")
    run.add_argument("--no-isolation", action="store_true",
                     help="measure in this process instead of one worker process per framework (debugging)")
    run.add_argument("--timeout", type=_positive_float, default=3600.0, help="seconds per framework")
    run.add_argument("--memory-limit", type=_positive_float, default=None,
                     help="GiB per framework worker (default: 90%% of the machine)")
    run.add_argument("--quiet", "-q", action="store_true", help="no progress, only the table")

    export = sub.add_parser("export", help="build a deployable artifact (library + params + report) for a target, "
                            "without running it")
    _add_model_args(export)
    export.add_argument("--precision", default="fp32", choices=["fp32", "fp16", "amp", "bf16"])
    export.add_argument("--output-dir", "-o", default=None, help="default artifacts/MODEL-TARGET")
    export.add_argument("--db", default=None, help="MetaSchedule database to apply")
    export.add_argument("--cuda-graph", action="store_true", help="CUDA: capture kernel launches in a CUDA graph")
    _add_database_args(export)

    prof = sub.add_parser("profile", help="where TVM's time goes: per-kernel times inside the model, FLOPs, "
                          "GFLOP/s, %% of peak, tuned or default schedule")
    _add_model_args(prof)
    prof.add_argument("--db", default=None, help="MetaSchedule database to apply (as `run --db`)")
    prof.add_argument("--vs-untuned", action="store_true",
                      help="profile again without any database and show each kernel's gain from tuning")
    prof.add_argument("--runs", type=_positive_int, default=20, help="instrumented runs (median per kernel)")
    prof.add_argument("--top", type=_positive_int, default=25, help="kernels shown (all are in --output)")
    prof.add_argument("--output", "-o", default=None, help="write the profile JSON here")
    prof.add_argument("--timeout", type=_positive_float, default=3600.0)
    prof.add_argument("--quiet", "-q", action="store_true")
    _add_database_args(prof)

    compare = sub.add_parser("compare", help="several models, shapes and frameworks in one run, with summaries")
    compare.add_argument("--models", default=None, help="comma-separated zoo names or files, e.g. resnet50,gpt2")
    compare.add_argument("--config", default=None, help="a JSON comparison config (see configs/); flags override it")
    compare.add_argument("--frameworks", default=None, help="comma-separated frameworks (default tvm,pytorch)")
    compare.add_argument("--all-frameworks", action="store_true",
                         help="every framework tvmbench knows; missing or unavailable ones are reported, not fatal")
    compare.add_argument("--batch-size", default=None, metavar="1,2,4", help="batch size(s): a list is a sweep")
    compare.add_argument("--seq-length", default=None, metavar="128,512", help="sequence length(s), text models")
    compare.add_argument("--image-size", type=_positive_int, default=None)
    compare.add_argument("--target", default=None, help="as for run (default: the config's, else auto)")
    compare.add_argument("--threads", type=_positive_int, default=None)
    compare.add_argument("--seed", type=int, default=0)
    compare.add_argument("--runs", type=_positive_int, default=None, help="exact timed runs (default: adaptive)")
    compare.add_argument("--warmup", type=_nonneg_int, default=None, help="exact warm-up runs (default: adaptive)")
    compare.add_argument("--min-time", type=_positive_float, default=3.0)
    compare.add_argument("--max-time", type=_positive_float, default=60.0)
    compare.add_argument("--rounds", type=_positive_int, default=None)
    compare.add_argument("--torch-compile-mode", default="default", choices=torch_compile_modes)
    compare.add_argument("--openvino-hint", default="latency", choices=["latency", "throughput"])
    compare.add_argument("--db", default=None, help="MetaSchedule database to apply (with --tune: to tune into)")
    _add_database_args(compare)
    compare.add_argument("--tune", action="store_true", help="tune every model first (else: as the config says)")
    _add_tune_args(compare, trials_default=None)
    compare.add_argument("--timeout", type=_positive_float, default=3600.0, help="seconds per framework")
    compare.add_argument("--output", "-o", default=None,
                         help="result JSON (default results/compare-DATE.json), rewritten after every model")
    compare.add_argument("--plots", default=None, metavar="DIR", help="write throughput-vs-batch PNGs here")
    compare.add_argument("--quiet", "-q", action="store_true")

    tune = sub.add_parser("tune", help="tune a model's kernels with MetaSchedule into a persistent database")
    _add_model_args(tune)
    _add_tune_args(tune, trials_default=1000)
    tune.add_argument("--db", default=None, help="database directory (default: one per target in the cache)")
    tune.add_argument("--output", "-o", default=None, help="write the tuning report JSON here")
    tune.add_argument("--quiet", "-q", action="store_true", help="no progress bar")

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
    prune.add_argument("--keep", type=_positive_int, default=1)
    export = db_sub.add_parser("export", help="write a database as a .tar.gz")
    export.add_argument("path")
    export.add_argument("archive")

    rpc = sub.add_parser("rpc", help="start TVM's RPC tracker or a device server (for remote tuning)")
    rpc_sub = rpc.add_subparsers(dest="rpc_command", required=True)
    tracker = rpc_sub.add_parser("tracker", help="a tracker devices register with")
    tracker.add_argument("--host", default="0.0.0.0")
    tracker.add_argument("--port", type=_positive_int, default=9190)
    server = rpc_sub.add_parser("server", help="serve this device to a tracker under a key")
    server.add_argument("--tracker", required=True, metavar="HOST:PORT")
    server.add_argument("--key", required=True)
    server.add_argument("--host", default="0.0.0.0")
    server.add_argument("--port", type=_positive_int, default=9090)

    models = sub.add_parser("models", help="list the model zoo with parameters and FLOPs")
    models.add_argument("--no-stats", action="store_true", help="list names only, without building the models")

    sub.add_parser("frameworks", help="each framework: installed or not, version, devices it can use")

    doctor = sub.add_parser("doctor", help="check this machine and a planned run for what makes TVM slow or "
                            "numbers misleading, with fixes")
    doctor.add_argument("--model", default=None, help="the model you plan to run (for its size)")
    doctor.add_argument("--target", default="auto")
    doctor.add_argument("--precision", default="fp32", choices=["fp32", "fp16", "bf16", "amp"])
    doctor.add_argument("--threads", type=_positive_int, default=None)
    doctor.add_argument("--warmup", type=_nonneg_int, default=None, help="the warm-up runs you plan to use")
    doctor.add_argument("--db", default=None, help="the tuning database you plan to apply")
    doctor.add_argument("--json", action="store_true", help="facts and findings as JSON")

    target = sub.add_parser("target", help="show how a --target value resolves on this machine")
    target.add_argument("spec", nargs="?", default="auto")
    return parser


def _add_model_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--model", required=True,
                   help="zoo name (see 'tvmbench models'), torchvision:NAME, a .onnx/.pt2 file or file.py:factory")
    p.add_argument("--batch-size", type=_positive_int, default=1)
    p.add_argument("--seq-length", type=_positive_int, default=None, help="tokens per sequence (text models)")
    p.add_argument("--image-size", type=_positive_int, default=None, help="image height = width (vision models)")
    p.add_argument("--input-shape", action="append", metavar="NAME:1x3x224x224",
                   help="shape of a dynamic input of a user file (repeatable)")
    p.add_argument("--hf-config", action="append", metavar="KEY=VALUE",
                   help="override a transformers config value, e.g. num_hidden_layers=2 (repeatable)")
    p.add_argument("--target", default="auto",
                   help="auto, llvm, cuda, a JSON dict or a string like 'llvm -mcpu=skylake-avx512'")
    p.add_argument("--threads", type=_positive_int, default=None,
                   help="threads for every framework and for tuning (default: physical cores)")
    p.add_argument("--layout", choices=["auto", "nchw", "nhwc"], default="auto",
                   help="convolution layout TVM compiles to: auto = NHWC on CPU, the model's NCHW on CUDA; "
                        "nhwc on CUDA suits fp16 tensor cores")
    p.add_argument("--seed", type=int, default=0, help="seed for weights and inputs")


def _duration(text: str) -> float:
    """'90', '90s', '30m', '1.5h' -> seconds."""
    units = {"s": 1, "m": 60, "h": 3600}
    try:
        if text and text[-1].lower() in units:
            value = float(text[:-1]) * units[text[-1].lower()]
        else:
            value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a duration like 90s, 30m or 1h, got '{text}'") from None
    if value <= 0:
        raise argparse.ArgumentTypeError(f"expected a positive duration, got '{text}'")
    return value


def _add_database_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--no-pretuned", action="store_true", help="do not apply the tuning databases shipped with tvmbench")
    p.add_argument("--untuned", action="store_true",
                   help="apply no tuning database at all: TVM with tvmbench's default schedules only")


def _add_tune_args(p: argparse.ArgumentParser, trials_default: int | None) -> None:
    from tvmbench.tune.config import COST_MODELS, SCHEDULERS, STRATEGIES

    p.add_argument("--trials", type=_positive_int, default=trials_default,
                   help="tuning budget: total trials for the model, counting those already in the database"
                   + (" (implies --tune; default 1000)" if trials_default is None else ""))
    p.add_argument("--trials-per-task", type=_positive_int, default=None,
                   help="at most this many trials per task (default: 2 x trials / tasks, at least 64)")
    p.add_argument("--trials-per-iter", type=_positive_int, default=32, help="candidates measured per batch")
    p.add_argument("--time-budget", type=_duration, default=None, help="search time, e.g. 30m: then no new batch starts and those in flight finish")
    p.add_argument("--strategy", choices=list(STRATEGIES), default="evolutionary")
    p.add_argument("--cost-model", choices=list(COST_MODELS), default="xgb")
    p.add_argument("--task-scheduler", choices=list(SCHEDULERS), default="gradient")
    p.add_argument("--builder-timeout", type=_positive_float, default=60.0, help="seconds per build")
    p.add_argument("--runner-timeout", type=_positive_float, default=30.0, help="seconds per measurement")
    p.add_argument("--runner-number", type=_positive_int, default=3)
    p.add_argument("--runner-repeat", type=_positive_int, default=1)
    p.add_argument("--min-repeat-ms", type=_positive_int, default=50)
    p.add_argument("--cpu-flush", action="store_true", help="flush the CPU caches before each measurement")
    p.add_argument("--rpc", default=None, metavar="HOST:PORT",
                   help="a TVM RPC tracker: tuning measures candidates on its devices; `run` also runs and "
                        "times TVM on one of them (cross-compiled for --target)")
    p.add_argument("--rpc-key", default=None, help="the devices' key at the tracker")
    p.add_argument("--rpc-workers", type=_positive_int, default=1,
                   help="candidates measured in parallel over RPC (one per device)")
    p.add_argument("--tune-timeout", type=_duration, default=86400.0,
                   help="kill the tuning worker after this long (default 24h; --time-budget stops it cleanly)")


def _model_options(args: argparse.Namespace) -> Any:
    from tvmbench.models import ModelOptions, check_model_name, parse_input_shapes

    options = ModelOptions(batch_size=args.batch_size, seq_length=args.seq_length, image_size=args.image_size,
                           config_overrides=_config_overrides(args.hf_config),
                           input_shapes=parse_input_shapes(args.input_shape), seed=args.seed)
    check_model_name(args.model)  # unknown names and missing files fail here, before any work starts
    return options


def _tune_config(args: argparse.Namespace, threads: int) -> Any:
    from tvmbench.tune.config import TuneConfig

    return TuneConfig(trials=args.trials or 1000, trials_per_task=args.trials_per_task,
                      trials_per_iter=args.trials_per_iter, time_budget_s=args.time_budget,
                      strategy=args.strategy, cost_model=args.cost_model, task_scheduler=args.task_scheduler,
                      threads=threads, builder_timeout_s=args.builder_timeout, runner_timeout_s=args.runner_timeout,
                      runner_number=args.runner_number, runner_repeat=args.runner_repeat,
                      runner_min_repeat_ms=args.min_repeat_ms, cpu_cache_flush=args.cpu_flush, seed=args.seed,
                      rpc_tracker=args.rpc, rpc_key=args.rpc_key, rpc_workers=args.rpc_workers)


def _run_tuning(args: argparse.Namespace, options: Any, target: Any, threads: int, console: Any) -> Any:
    """Tune into the database of --db or the target's default one; returns (report, db path)."""
    import psutil
    from rich.progress import (
        BarColumn,
        MofNCompleteColumn,
        Progress,
        TextColumn,
        TimeElapsedColumn,
        TimeRemainingColumn,
    )

    from tvmbench.benchmark import thread_env
    from tvmbench.measure.isolation import run_isolated
    from tvmbench.tune.database import TuningDatabase, default_database_dir
    from tvmbench.tune.tuner import TuneJob, run_tune_job

    if args.cost_model == "xgb":
        import importlib.util

        if importlib.util.find_spec("xgboost") is None:
            from tvmbench.errors import MissingFrameworkError

            raise MissingFrameworkError("tuning with the xgb cost model", "xgboost", "tune")
    cfg = _tune_config(args, threads)
    if cfg.rpc_tracker:  # an unreachable tracker or unknown key is reported before any work
        from tvmbench.rpc import check_tracker, parse_tracker

        if not cfg.rpc_key:
            raise UserError("--rpc needs --rpc-key, the key the devices registered with")
        check_tracker(*parse_tracker(cfg.rpc_tracker), cfg.rpc_key)
    db = TuningDatabase.open(args.db or default_database_dir(target), target, create=True)
    for w in db.warnings:
        console.print(f"[yellow]warning:[/yellow] {w}")
    memory_limit = int(psutil.virtual_memory().total * 0.9)
    job = TuneJob(model=args.model, options=options, target=target, db_path=str(db.path), config=cfg)
    columns = [TextColumn("tuning {task.description}"), BarColumn(), MofNCompleteColumn(), TextColumn("trials"),
               TimeElapsedColumn(), TextColumn("ETA"), TimeRemainingColumn(), TextColumn("{task.fields[best]}")]
    with Progress(*columns, console=console, transient=True) as progress:
        bar = progress.add_task(args.model, total=cfg.trials, best="")

        def on_progress(message: Any) -> None:
            done, total, estimate = message
            best = f"tuned kernels ~{estimate:.2f} ms/inference" if estimate is not None else ""
            progress.update(bar, completed=min(done, total), best=best)

        outcome = run_isolated(run_tune_job, job, timeout_s=float(args.tune_timeout), memory_limit_bytes=memory_limit,
                               env=thread_env(threads), on_progress=on_progress)
    if not outcome.ok:
        if outcome.error.get("kind") == "user":
            raise UserError(outcome.error["message"])
        raise TuningFailed(f"tuning failed: {outcome.error.get('message')} (the database keeps every batch "
                           f"measured so far; run the command again to resume)")
    report = outcome.value
    for path in report.write_curve(os.path.basename(args.model)):
        console.print(f"tuning curve written to {path}")
    return report, db.path


def _print_tune_report(report: Any, console: Any) -> None:
    from rich.table import Table

    table = Table(title=f"tuning database {report.database}")
    for col in ("task", "weight", "MFLOP", "trials", "default us", "best us", "GFLOP/s", "speedup"):
        table.add_column(col, justify="left" if col == "task" else "right")
    for t in sorted(report.tasks, key=lambda t: -(t.weight * t.flops)):
        table.add_row(t.name[:60], str(t.weight), f"{t.flops / 1e6:.2f}", str(t.trials),
                      f"{t.default_us:.1f}" if t.default_us else "-",
                      f"{t.best_us:.1f}" if t.best_us else "-", f"{t.gflops:.1f}" if t.gflops else "-",
                      f"{t.speedup:.2f}x" if t.speedup else "-")
    console.print(table)
    console.print(f"{report.trials_after - report.trials_before} new trials ({report.trials_after} in total for "
                  f"this model) in {report.wall_s / 60:.1f} min; stopped: {report.stop_reason}")


def _version() -> str:
    from tvmbench.version import __version__

    return f"tvmbench {__version__}"


def cmd_run(args: argparse.Namespace) -> int:
    from tvmbench.backends import parse_frameworks
    from tvmbench.benchmark import RunConfig, run_benchmark
    from tvmbench.files import write_json_atomic
    from tvmbench.measure.timer import TimerConfig
    from tvmbench.results.report import make_console, print_run
    from tvmbench.targets import physical_cores

    console = make_console(stderr=True, quiet=args.quiet)
    is_onnx = args.model.lower().endswith(".onnx")
    frameworks = parse_frameworks(args.frameworks or ("tvm" if is_onnx else "tvm,pytorch"))
    options = _model_options(args)
    target = _target(args)
    _check_cuda_graph(args, target)
    if args.compile_only:
        args.output_dir = args.artifact_dir
        return cmd_export(args)
    remote = None
    if args.rpc:  # TVM runs on a device behind the tracker; checked before any work
        from tvmbench.rpc import check_tracker, parse_tracker

        if not args.rpc_key:
            raise UserError("--rpc needs --rpc-key, the key the devices registered with")
        check_tracker(*parse_tracker(args.rpc), args.rpc_key)
        remote = {"tracker": args.rpc, "key": args.rpc_key}
    else:
        _require_device(target)
    _check_untuned(args)
    threads = args.threads or physical_cores()
    db_dir = args.db
    if args.tune or args.trials is not None:
        report, path = _run_tuning(args, options, target, threads, console)
        _print_tune_report(report, console)
        db_dir = str(path)
    timer = TimerConfig(min_time_s=args.min_time, max_time_s=max(args.max_time, args.min_time),
                        max_warmup_s=10.0, fixed_warmup_runs=args.warmup, fixed_runs=args.runs)
    cfg = RunConfig(model=args.model, target=target, frameworks=tuple(frameworks), options=options,
                    threads=threads, timer=timer, db_dir=db_dir, use_default_db=not args.untuned,
                    use_pretuned=not (args.untuned or args.no_pretuned), use_cache=not args.no_cache,
                    isolate=not args.no_isolation, timeout_s=args.timeout,
                    rounds=args.rounds, include_io=args.include_io,
                    memory_limit_bytes=int(args.memory_limit * 2**30) if args.memory_limit else 0,
                    backend_options={"torch_compile_mode": args.torch_compile_mode,
                                     "openvino_hint": args.openvino_hint, "precision": args.precision,
                                     "cuda_graph": args.cuda_graph, "rpc": remote})
    if args.db:
        from tvmbench.tune.database import TuningDatabase

        TuningDatabase.open(args.db)  # a bad --db is a usage error, reported before compiling anything
    for note in target.notes:
        console.print(f"[dim]target: {note}[/dim]")
    started = time.monotonic()
    with console.status("starting") as status:
        def on_event(fw: str, msg: str) -> None:
            status.update(f"[bold]{fw}[/bold]: {msg}  [dim]({time.monotonic() - started:.0f} s)[/dim]")

        result = run_benchmark(cfg, on_event)
    print_run(result)
    if args.output:
        path = write_json_atomic(args.output, result)
        console.print(f"results written to {path}")
    from tvmbench.backends import result_key

    failed = [result[result_key(fw)] for fw in frameworks if result[result_key(fw)]["status"] != "ok"]
    if any(e.get("error_kind") in ("user", "missing") for e in failed):
        return EXIT_USAGE
    return EXIT_FAILED if failed else EXIT_OK


def cmd_export(args: argparse.Namespace) -> int:
    from tvmbench.compile.artifact import build_artifact
    from tvmbench.models import load_model
    from tvmbench.results.report import make_console
    from tvmbench.tune.database import database_sources, load_databases

    console = make_console(stderr=True, quiet=getattr(args, "quiet", False))
    options = _model_options(args)
    target = _target(args)
    _check_cuda_graph(args, target)
    out = args.output_dir or os.path.join(
        "artifacts", f"{os.path.basename(args.model).replace(':', '_')}-{target.kind}-{target.arch}-{args.precision}")
    sources = database_sources(target, args.db, not args.untuned, not (args.untuned or args.no_pretuned))
    with console.status(f"building {args.model} for {target.kind} {target.arch} ({args.precision})"):
        report = build_artifact(load_model(args.model, options), target, out, args.precision,
                                load_databases(sources, target), cuda_graph=args.cuda_graph)
    lines = [f"{args.model} for {target.kind} {target.arch}, {args.precision}: built in {report['compile_s']:.1f} s "
             f"-> {out}"]
    if target.kind == "cuda":
        tc = "yes" if report["uses_tensor_cores"] else "no"
        lines.append(f"{report['kernels']} CUDA kernels; tensor-core instructions: {tc}"
                     + (f" ({report['tensor_core_instructions_ptx']} mma in the PTX)" if report["ptx_compiled"] else "")
                     + f"; largest shared-memory use {report['max_shared_memory_bytes']} B")
        lines.append("PTX: compiled with nvcc" if report["ptx_compiled"] else f"PTX: not built ({report['ptx_error']})")
    else:
        lines.append(f"library {report['library']} ({report['library_bytes']} B, ELF {report['elf_machine']})")
    for line in lines:
        print(line)
    return EXIT_OK


def cmd_compare(args: argparse.Namespace) -> int:
    from tvmbench import compare
    from tvmbench.backends import FRAMEWORKS, parse_frameworks, result_key
    from tvmbench.benchmark import RunConfig, run_benchmark
    from tvmbench.files import write_json_atomic
    from tvmbench.measure.timer import TimerConfig
    from tvmbench.models import ModelOptions, check_model_name
    from tvmbench.results.report import make_console, print_run
    from tvmbench.results.summary import print_summary, summarize
    from tvmbench.targets import physical_cores, resolve_target

    console = make_console(stderr=True, quiet=args.quiet)
    if bool(args.models) == bool(args.config):
        raise UserError("give the models either with --models a,b,c or with --config FILE.json (one of the two)")
    if args.config:
        config = compare.load_config(args.config)
    else:
        config = compare.CompareConfig(models=[compare.ModelEntry(name=m.strip())
                                               for m in args.models.split(",") if m.strip()])
    g = config.global_settings
    if args.all_frameworks:
        frameworks = list(FRAMEWORKS)
    else:
        frameworks = parse_frameworks(args.frameworks or ",".join(g.frameworks or ["tvm", "pytorch"]))
    points = compare.plan(config, compare.parse_int_list(args.batch_size, "--batch-size") if args.batch_size else None,
                          compare.parse_int_list(args.seq_length, "--seq-length") if args.seq_length else None,
                          tune=True if (args.tune or args.trials) else None, trials=args.trials)
    for m in dict.fromkeys(p.model for p in points):
        check_model_name(m)  # every name is checked before the first measurement
    target = resolve_target(args.target or g.target)
    _require_device(target)
    _check_untuned(args)
    threads = args.threads or g.threads or physical_cores()
    timer = TimerConfig(min_time_s=args.min_time, max_time_s=max(args.max_time, args.min_time), max_warmup_s=10.0,
                        fixed_warmup_runs=args.warmup if args.warmup is not None else g.warmup_runs,
                        fixed_runs=args.runs or g.num_runs)
    output = args.output or time.strftime("results/compare-%Y%m%d-%H%M%S.json")
    doc: dict[str, Any] = {"kind": "tvmbench.compare", "created": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
                           "command": sys.argv[1:], "config": config.model_dump(), "target": target.to_json(),
                           "frameworks": frameworks, "threads": threads, "points": [], "complete": False}
    started = time.monotonic()
    try:
        for i, point in enumerate(points, 1):
            console.print(f"[bold]{i}/{len(points)}[/bold] {point.model} batch {point.batch_size}"
                          + (f" seq {point.seq_length}" if point.seq_length else ""))
            options = ModelOptions(batch_size=point.batch_size, seq_length=point.seq_length,
                                   image_size=args.image_size or point.image_size,
                                   config_overrides=dict(point.hf_config), seed=args.seed)
            db_dir = args.db
            if point.tune:
                tune_args = argparse.Namespace(**{**vars(args), "model": point.model, "trials": point.trials or 1000})
                report, path = _run_tuning(tune_args, options, target, threads, console)
                db_dir = str(path)
            cfg = RunConfig(model=point.model, target=target, frameworks=tuple(frameworks), options=options,
                            threads=threads, timer=timer, db_dir=db_dir, use_default_db=not args.untuned,
                            use_pretuned=not (args.untuned or args.no_pretuned), timeout_s=args.timeout,
                            rounds=args.rounds or g.rounds,
                            backend_options={"torch_compile_mode": args.torch_compile_mode,
                                             "openvino_hint": args.openvino_hint})
            with console.status("starting") as status:
                def on_event(fw: str, msg: str, status: Any = status) -> None:
                    status.update(f"[bold]{fw}[/bold]: {msg}  [dim]({time.monotonic() - started:.0f} s)[/dim]")

                result = run_benchmark(cfg, on_event)
            result["model_type"] = point.type
            doc["points"].append(result)
            if not args.quiet:
                print_run(result, console=console, errors=console)
            doc["summary"] = summarize(doc["points"])
            write_json_atomic(output, doc)
    except KeyboardInterrupt:
        if doc["points"]:
            doc["summary"] = summarize(doc["points"])
            write_json_atomic(output, doc)
            console.print(f"interrupted: the {len(doc['points'])} point(s) measured are in {output}")
        raise
    doc["complete"] = True
    doc["summary"] = summarize(doc["points"])
    if args.plots:
        from tvmbench.plots import available, throughput_png

        if not available():
            console.print("[yellow]--plots: matplotlib is not installed (pip install 'tvmbench[plot]')[/yellow]")
        for sweep in doc["summary"]["sweeps"] if available() else []:
            name = os.path.basename(sweep["model"]) + (f"-seq{sweep['seq_length']}" if sweep["seq_length"] else "")
            png = throughput_png(sweep["throughput"], os.path.join(args.plots, f"{name}-throughput.png"),
                                 f"{sweep['model']}: throughput vs batch size")
            console.print(f"plot written to {png}")
    write_json_atomic(output, doc)
    print_summary(doc["summary"], make_console())
    console.print(f"results written to {output}")
    failed = [p[result_key(fw)] for p in doc["points"] for fw in frameworks
              if p[result_key(fw)]["status"] == "failed" and p[result_key(fw)].get("error_kind") != "missing"]
    return EXIT_FAILED if failed else EXIT_OK


def _check_cuda_graph(args: argparse.Namespace, target: Any) -> None:
    if getattr(args, "cuda_graph", False) and target.kind != "cuda":
        raise UserError("--cuda-graph captures CUDA kernel launches; it needs a CUDA target (--target cuda)")


def _check_untuned(args: argparse.Namespace) -> None:
    if args.untuned and (args.db or args.tune or args.trials):
        raise UserError("--untuned applies no tuning database; it cannot be combined with --db, --tune or --trials")


def _target(args: argparse.Namespace) -> Any:
    """--target resolved, with --layout applied."""
    import dataclasses

    from tvmbench.targets import resolve_target

    target = resolve_target(args.target)
    layout = getattr(args, "layout", "auto")
    if layout == "auto":
        return target
    if target.kind == "llvm" and layout == "nchw":
        raise UserError("--layout nchw: CPU builds use NHWC (tvmbench's CPU schedules need channels innermost); "
                        "--layout chooses between them on CUDA")
    return dataclasses.replace(target, conv_layout=layout.upper())


def _require_device(target: Any) -> None:
    """Benchmarking a CUDA target needs the GPU: say so at once instead of failing in every worker."""
    if target.kind == "cuda":
        from tvmbench.targets import query_gpu

        if query_gpu() is None:
            raise UserError("--target cuda: this machine has no CUDA device (nvidia-smi lists none), so nothing "
                            "can be measured on it; run on a machine with an NVIDIA GPU, or check the build here "
                            "with --compile-only")


def cmd_tune(args: argparse.Namespace) -> int:
    from tvmbench.files import write_json_atomic
    from tvmbench.results.report import make_console
    from tvmbench.targets import physical_cores

    console = make_console(stderr=True, quiet=args.quiet)
    options = _model_options(args)
    target = _target(args)
    report, _ = _run_tuning(args, options, target, args.threads or physical_cores(), console)
    _print_tune_report(report, make_console())
    if args.output:
        console.print(f"report written to {write_json_atomic(args.output, report.to_json())}")
    return EXIT_OK


def cmd_profile(args: argparse.Namespace) -> int:
    import psutil

    from tvmbench.backends.base import BackendConfig
    from tvmbench.benchmark import thread_env
    from tvmbench.files import write_json_atomic
    from tvmbench.measure.isolation import run_isolated
    from tvmbench.profile import compare_profiles
    from tvmbench.profile.kernels import ProfileJob, profile_job
    from tvmbench.results.report import make_console, print_profile
    from tvmbench.targets import physical_cores
    from tvmbench.tune.database import TuningDatabase, database_sources

    console = make_console(stderr=True, quiet=args.quiet)
    options = _model_options(args)
    target = _target(args)
    _require_device(target)
    if args.untuned and (args.db or args.vs_untuned):
        raise UserError("--untuned applies no tuning database; it cannot be combined with --db or --vs-untuned")
    if args.db:
        TuningDatabase.open(args.db)
    threads = args.threads or physical_cores()
    sources = database_sources(target, args.db, not args.untuned, not (args.untuned or args.no_pretuned))
    variants = ["tvm", "tvm_untuned"] if args.vs_untuned else ["tvm_untuned" if args.untuned else "tvm"]
    profiles = {}
    for variant in variants:
        job = ProfileJob(model=args.model, options=options, variant=variant, runs=args.runs,
                         backend=BackendConfig(target=target, threads=threads, databases=tuple(sources)),
                         measure_peak=variant == variants[0])
        with console.status(f"profiling {args.model} ({variant})") as status:
            outcome = run_isolated(profile_job, job, timeout_s=args.timeout, env=thread_env(threads),
                                   memory_limit_bytes=int(psutil.virtual_memory().total * 0.9),
                                   on_progress=lambda msg, v=variant: status.update(f"{v}: {msg}"))
        if not outcome.ok:
            raise UserError(f"profiling {args.model} ({variant}) failed: {outcome.error['message']}")
        profiles[variant] = outcome.value
    main_profile = profiles[variants[0]]
    if len(profiles) == 2:
        profiles["tvm_untuned"].peak_gflops = main_profile.peak_gflops
    gains, drift = compare_profiles(profiles["tvm"], profiles["tvm_untuned"]) if args.vs_untuned else (None, None)
    print_profile(main_profile, make_console(), top=args.top, gains=gains, drift=drift,
                  untuned=profiles.get("tvm_untuned") if args.vs_untuned else None)
    if args.output:
        doc = {variant: p.to_json() for variant, p in profiles.items()}
        if gains is not None:
            doc["gains"] = gains
            doc["process_drift"] = drift
        console.print(f"profile written to {write_json_atomic(args.output, doc)}")
    return EXIT_OK


def cmd_db(args: argparse.Namespace) -> int:
    from pathlib import Path

    from rich.table import Table

    from tvmbench.results.report import make_console
    from tvmbench.tune import database as dbm

    console = make_console()
    if args.db_command == "list":
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
        for col in ("workload", "structural hash", "records", "best us", "targets"):
            table.add_column(col)
        for r in dbm.show_database(db):
            best = f"{r['best_us']:.1f}" if r["best_us"] is not None else "-"
            table.add_row(str(r["workload"]), str(r["shash"]), str(r["records"]), best, ", ".join(r["targets"]))
        console.print(table)
    elif args.db_command == "merge":
        sources = [dbm.TuningDatabase.open(p) for p in args.sources]
        dest = dbm.TuningDatabase.open(args.into, create=True)
        print(f"added {dbm.merge_databases(sources, dest)} records to {dest.path}")
    elif args.db_command == "prune":
        db = dbm.TuningDatabase.open(args.path)
        print(f"dropped {dbm.prune_database(db, args.keep)} records from {db.path}")
    else:
        path = dbm.export_database(dbm.TuningDatabase.open(args.path), Path(args.archive))
        print(f"wrote {path}")
    return EXIT_OK


def cmd_rpc(args: argparse.Namespace) -> int:
    """Run TVM's own tracker or server in the foreground (Ctrl-C stops it)."""
    import subprocess

    if args.rpc_command == "tracker":
        cmd = ["tvm.exec.rpc_tracker", "--host", args.host, "--port", str(args.port),
               "--port-end", str(args.port + 10)]
    else:
        from tvmbench.rpc import parse_tracker

        parse_tracker(args.tracker)
        cmd = ["tvm.exec.rpc_server", "--host", args.host, "--port", str(args.port), "--port-end",
               str(args.port + 100), "--tracker", args.tracker, "--key", args.key]
    proc = subprocess.Popen([sys.executable, "-m", *cmd], start_new_session=True)
    try:
        return proc.wait()
    finally:
        if proc.poll() is None:  # Ctrl-C or SIGTERM: stop TVM's process group (launcher and worker)
            os.killpg(proc.pid, signal.SIGTERM)
            proc.wait(timeout=10)


def cmd_models(args: argparse.Namespace) -> int:
    from rich.table import Table

    from tvmbench.models.catalog import zoo_stats
    from tvmbench.results.report import make_console

    console = make_console()
    rows = zoo_stats(with_stats=not args.no_stats, console=make_console(stderr=True))
    table = Table(title="tvmbench model zoo (random weights; any torchvision classifier also as torchvision:NAME)")
    for col in ("name", "family", "description", "default input", "params (M)", "GFLOPs"):
        table.add_column(col, justify="right" if col in ("params (M)", "GFLOPs") else "left")
    for r in rows:
        params = f"{r['param_count'] / 1e6:.1f}" if r.get("param_count") else "-"
        flops = f"{r['flops'] / 1e9:.2f}" if r.get("flops") else "-"
        table.add_row(r["name"], r["family"], r["description"], r["default_input"], params, flops)
    console.print(table)
    return EXIT_OK


def cmd_frameworks(args: argparse.Namespace) -> int:
    from rich.markup import escape
    from rich.table import Table

    from tvmbench.backends import FRAMEWORKS, load_class
    from tvmbench.results.report import make_console

    table = Table(title="frameworks")
    for col in ("framework", "installed", "version", "devices", "notes"):
        table.add_column(col)
    for name in FRAMEWORKS:
        try:
            a = load_class(name).availability()
        except Exception as e:  # a broken install is reported, not fatal
            a = {"installed": False, "version": None, "devices": [], "install": f"broken: {e}"}
        table.add_row(name, "yes" if a["installed"] else "no", a["version"] or "-", ", ".join(a["devices"]) or "-",
                      escape("; ".join(n for n in (a.get("unavailable"), a["install"]) if n)))
    make_console().print(table)
    return EXIT_OK


def cmd_doctor(args: argparse.Namespace) -> int:
    from rich.markup import escape
    from rich.table import Table

    from tvmbench import doctor
    from tvmbench.results.report import make_console

    if args.model:
        from tvmbench.models import check_model_name

        check_model_name(args.model)
    facts = doctor.gather(args.target, args.model, args.precision, args.threads, args.warmup, args.db)
    findings = doctor.diagnose(facts)
    if args.json:
        print(json.dumps(doctor.to_json(facts, findings), indent=2, default=str))
    else:
        console = make_console()
        table = Table(title=f"tvmbench doctor: target {args.target}" + (f", model {args.model}" if args.model else ""))
        for col in ("", "check", "finding", "fix"):
            table.add_column(col)
        marks = {"error": "[red]error[/red]", "warn": "[yellow]warn[/yellow]", "info": "[dim]info[/dim]"}
        for x in findings:
            table.add_row(marks[x.level], x.check, escape(x.message), escape(x.fix))
        console.print(table if findings else "no problems found")
    return EXIT_FAILED if any(x.level == "error" for x in findings) else EXIT_OK


def cmd_target(args: argparse.Namespace) -> int:
    from tvmbench.targets import resolve_target

    resolved = resolve_target(args.spec)
    print(json.dumps(resolved.to_json(), indent=2, default=str))
    return EXIT_OK


def _terminate_as_interrupt(signum: int, frame: Any) -> None:
    raise KeyboardInterrupt


def main(argv: list[str] | None = None) -> int:
    # A SIGTERM (kill, a CI timeout) unwinds like Ctrl-C, so worker processes are killed too and
    # never outlive tvmbench.
    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGTERM, _terminate_as_interrupt)
    parser = build_parser()
    args = parser.parse_args(argv)
    handler = {"run": cmd_run, "export": cmd_export, "profile": cmd_profile, "compare": cmd_compare, "tune": cmd_tune, "db": cmd_db, "rpc": cmd_rpc, "models": cmd_models,
               "frameworks": cmd_frameworks, "doctor": cmd_doctor, "target": cmd_target}[args.command]
    try:
        return handler(args)
    except UserError as e:
        print(f"tvmbench: error: {e}", file=sys.stderr)
        return EXIT_USAGE
    except TuningFailed as e:
        print(f"tvmbench: error: {e}", file=sys.stderr)
        return EXIT_FAILED
    except KeyboardInterrupt:
        print("tvmbench: interrupted (a tuning database keeps every batch measured so far)", file=sys.stderr)
        return EXIT_INTERRUPTED


if __name__ == "__main__":
    sys.exit(main())
