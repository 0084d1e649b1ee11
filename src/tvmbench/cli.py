"""Command line: ``tvmbench run | models | target``.

User mistakes (unknown model, bad target, bad shape flag, missing framework) end with one line on
stderr and exit status 2, never a traceback. A framework that fails during a run is recorded in
the result and the other frameworks' numbers are still printed and written.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from typing import Any

from tvmbench.errors import UserError

EXIT_OK, EXIT_FAILED, EXIT_USAGE, EXIT_INTERRUPTED = 0, 1, 2, 130


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got '{text}'") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {value}")
    return value


def _nonneg_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected an integer >= 0, got '{text}'") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"expected an integer >= 0, got {value}")
    return value


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
    run.add_argument("--model", required=True,
                     help="zoo name (see 'tvmbench models'), torchvision:NAME, a .onnx/.pt2 file or file.py:factory")
    run.add_argument("--batch-size", type=_positive_int, default=1)
    run.add_argument("--seq-length", type=_positive_int, default=None, help="tokens per sequence (text models)")
    run.add_argument("--image-size", type=_positive_int, default=None, help="image height = width (vision models)")
    run.add_argument("--input-shape", action="append", metavar="NAME:1x3x224x224",
                     help="shape of a dynamic input of a user file (repeatable)")
    run.add_argument("--hf-config", action="append", metavar="KEY=VALUE",
                     help="override a transformers config value, e.g. num_hidden_layers=2 (repeatable)")
    run.add_argument("--target", default="auto",
                     help="auto, llvm, cuda, a JSON dict or a string like 'llvm -mcpu=skylake-avx512'")
    run.add_argument("--frameworks", default="tvm,pytorch", help="comma-separated: tvm,pytorch")
    run.add_argument("--threads", type=_positive_int, default=None,
                     help="threads for every framework (default: physical cores)")
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
    run.add_argument("--db", default=None, help="MetaSchedule database directory to apply")
    run.add_argument("--output", "-o", default=None, help="write the result JSON here")
    run.add_argument("--no-cache", action="store_true", help="compile again even if a cached library exists")
    run.add_argument("--no-isolation", action="store_true",
                     help="measure in this process instead of one worker process per framework (debugging)")
    run.add_argument("--timeout", type=_positive_float, default=3600.0, help="seconds per framework")
    run.add_argument("--memory-limit", type=_positive_float, default=None,
                     help="GiB per framework worker (default: 90%% of the machine)")
    run.add_argument("--seed", type=int, default=0, help="seed for weights and inputs")
    run.add_argument("--quiet", "-q", action="store_true", help="no progress, only the table")

    models = sub.add_parser("models", help="list the model zoo with parameters and FLOPs")
    models.add_argument("--no-stats", action="store_true", help="list names only, without building the models")

    target = sub.add_parser("target", help="show how a --target value resolves on this machine")
    target.add_argument("spec", nargs="?", default="auto")
    return parser


def _version() -> str:
    from tvmbench import __version__

    return f"tvmbench {__version__}"


def cmd_run(args: argparse.Namespace) -> int:
    from tvmbench.backends import parse_frameworks
    from tvmbench.benchmark import RunConfig, run_benchmark
    from tvmbench.measure.timer import TimerConfig
    from tvmbench.models import ModelOptions, check_model_name, parse_input_shapes
    from tvmbench.results import make_console, print_run, write_json_atomic
    from tvmbench.targets import physical_cores, resolve_target

    console = make_console(stderr=True, quiet=args.quiet)
    frameworks = parse_frameworks(args.frameworks)
    options = ModelOptions(batch_size=args.batch_size, seq_length=args.seq_length, image_size=args.image_size,
                           config_overrides=_config_overrides(args.hf_config),
                           input_shapes=parse_input_shapes(args.input_shape), seed=args.seed)
    check_model_name(args.model)  # unknown names and missing files fail here, before any worker starts
    target = resolve_target(args.target)
    timer = TimerConfig(min_time_s=args.min_time, max_time_s=max(args.max_time, args.min_time),
                        max_warmup_s=10.0, fixed_warmup_runs=args.warmup, fixed_runs=args.runs)
    cfg = RunConfig(model=args.model, target=target, frameworks=tuple(frameworks), options=options,
                    threads=args.threads or physical_cores(), timer=timer, db_dir=args.db,
                    use_cache=not args.no_cache, isolate=not args.no_isolation, timeout_s=args.timeout,
                    rounds=args.rounds, include_io=args.include_io,
                    memory_limit_bytes=int(args.memory_limit * 2**30) if args.memory_limit else 0)
    if args.db:
        from tvmbench.compile import load_database

        load_database(args.db)  # a bad --db is a usage error, reported before compiling anything
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


def cmd_models(args: argparse.Namespace) -> int:
    from rich.table import Table

    from tvmbench.models.catalog import zoo_stats
    from tvmbench.results import make_console

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


def cmd_target(args: argparse.Namespace) -> int:
    from tvmbench.targets import resolve_target

    resolved = resolve_target(args.spec)
    print(json.dumps(resolved.to_json(), indent=2, default=str))
    return EXIT_OK


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    handler = {"run": cmd_run, "models": cmd_models, "target": cmd_target}[args.command]
    try:
        return handler(args)
    except UserError as e:
        print(f"tvmbench: error: {e}", file=sys.stderr)
        return EXIT_USAGE
    except KeyboardInterrupt:
        print("tvmbench: interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED


if __name__ == "__main__":
    sys.exit(main())
