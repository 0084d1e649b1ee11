"""Argument types and the argument groups several commands share, with what they turn into."""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable
from typing import Any

from tvmbench.errors import UserError
from tvmbench.tuning.config import PRECISIONS as TUNE_PRECISIONS


def int_at_least(minimum: int, what: str) -> Callable[[str], int]:
    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected {what}, got '{text}'") from None
        if value < minimum:
            raise argparse.ArgumentTypeError(f"expected {what}, got {value}")
        return value

    return parse


positive_int = int_at_least(1, "a positive integer")
nonneg_int = int_at_least(0, "an integer >= 0")


def port(text: str) -> int:
    """A TCP port the RPC commands listen on: 1024..65000, so the range of ports TVM tries after
    it (up to 100 more) stays valid and needs no root."""
    value = int_at_least(1024, "a port number of at least 1024")(text)
    if value > 65000:
        raise argparse.ArgumentTypeError(f"expected a port number of at most 65000, got {value}")
    return value


def positive_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number, got '{text}'") from None
    if value <= 0:
        raise argparse.ArgumentTypeError(f"expected a positive number, got {value}")
    return value


def duration(text: str) -> float:
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


def since(text: str) -> str:
    """'2026-11-01', '2026-11-01T12:00', '3d', '12h' or '2w' -> the local time the history's
    entries are compared with ('YYYY-MM-DDTHH:MM:SS'). Parsed, not passed on as it is: the history
    compares dates as text, so a misspelt date would silently select everything or nothing."""
    import datetime as dt

    units = {"h": 1 / 24, "d": 1, "w": 7}
    try:
        if text and text[-1].lower() in units and text[:-1].replace(".", "", 1).isdigit():
            when = dt.datetime.now() - dt.timedelta(days=float(text[:-1]) * units[text[-1].lower()])
        else:
            when = dt.datetime.fromisoformat(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a date like 2026-11-01 or an age like 3d or 12h, "
                                         f"got '{text}'") from None
    if when.tzinfo is not None:
        when = when.astimezone().replace(tzinfo=None)
    return when.strftime("%Y-%m-%dT%H:%M:%S")


def config_overrides(items: list[str] | None) -> dict[str, Any]:
    """``--hf-config KEY=VALUE`` (repeatable) as a dict; values parsed as JSON where they are."""
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


PRECISIONS = list(TUNE_PRECISIONS)  # as compile/precision.py (not imported here: no TVM)


def add_model_args(p: argparse.ArgumentParser, package: bool = False) -> None:
    """The model and its shapes; with ``package``, ``--package DIR`` instead of ``--model`` and
    the input-value options (``--inputs``, ``--fill-mode``)."""
    which = p.add_mutually_exclusive_group(required=True) if package else p
    which.add_argument("--model", required=not package,
                       help="zoo name (see 'tvmbench models'), torchvision:NAME, a .onnx/.pt2 file or file.py:factory")
    if package:
        which.add_argument("--package", default=None, metavar="DIR",
                           help="a package written by 'tvmbench export' (or --compile-only): run it as built")
        p.add_argument("--inputs", default=None, metavar="FILE.npz",
                       help="input values by input name (shapes and dtypes must match the model's)")
        p.add_argument("--fill-mode", choices=["random", "zeros", "ones"], default="random",
                       help="input values without --inputs: seeded random (default), zeros or ones")
    p.add_argument("--batch-size", type=positive_int, default=1)
    p.add_argument("--seq-length", type=positive_int, default=None, help="tokens per sequence (text models)")
    p.add_argument("--image-size", type=positive_int, default=None, help="image height = width (vision models)")
    p.add_argument("--input-shape", action="append", metavar="NAME:1x3x224x224",
                   help="shape of a dynamic input of a user file (repeatable)")
    p.add_argument("--hf-config", action="append", metavar="KEY=VALUE",
                   help="override a transformers config value, e.g. num_hidden_layers=2 (repeatable)")
    p.add_argument("--target", default="auto",
                   help="auto, llvm, cuda, a JSON dict or a string like 'llvm -mcpu=skylake-avx512'")
    p.add_argument("--threads", type=positive_int, default=None,
                   help="threads for every framework and for tuning (default: physical cores)")
    p.add_argument("--layout", choices=["auto", "nchw", "nhwc"], default="auto",
                   help="convolution layout TVM compiles to: auto = NHWC on CPU, the model's NCHW on CUDA; "
                        "nhwc on CUDA suits fp16 tensor cores")
    p.add_argument("--seed", type=int, default=0, help="seed for weights and inputs")


def model_kwargs(args: argparse.Namespace) -> dict[str, Any]:
    """The model arguments as the API takes them, for one model: a shape flag that model cannot
    take is a usage error here (``compare`` and ``ops collect`` pass theirs to every model)."""
    from tvmbench.models import check_model_name, check_shape_flags, parse_input_shapes

    check_model_name(args.model)
    check_shape_flags(args.model, args.seq_length, args.image_size)
    kwargs = {"batch_size": args.batch_size, "seq_length": args.seq_length, "image_size": args.image_size,
              "hf_config": config_overrides(args.hf_config), "input_shapes": parse_input_shapes(args.input_shape),
              "seed": args.seed}
    if getattr(args, "inputs", None) or getattr(args, "fill_mode", "random") != "random":
        kwargs.update(fill_mode=args.fill_mode, inputs_file=args.inputs)
    return kwargs


def model_options(args: argparse.Namespace) -> Any:
    """The model's options; an unknown name or a missing file fails here, before any work."""
    from tvmbench import api

    return api.model_options(args.model, **model_kwargs(args))


def add_database_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--no-pretuned", action="store_true", help="do not apply the tuning databases shipped with tvmbench")
    p.add_argument("--untuned", action="store_true",
                   help="apply no tuning database at all: TVM with tvmbench's default schedules only")


def add_framework_args(p: argparse.ArgumentParser) -> None:
    """Framework-specific settings (``run`` and ``compare``)."""
    from tvmbench.backends.torch_compile import MODES

    p.add_argument("--torch-compile-mode", default="default", choices=MODES)
    p.add_argument("--openvino-hint", default="latency", choices=["latency", "throughput"])
    p.add_argument("--rtol", type=positive_float, default=None,
                   help="outputs match the reference when off by at most this fraction of its largest value "
                        "(default 1e-3 in fp32; a narrow miss is judged again against PyTorch in float64)")
    p.add_argument("--atol", type=positive_float, default=None,
                   help="... or by at most this much absolutely (default 1e-4 in fp32)")


def add_probe_arg(p: argparse.ArgumentParser) -> None:
    p.add_argument("--probe", action=argparse.BooleanOptionalAction, default=None,
                   help="with --rounds on a CPU (default on): run the host-state probe (TVM fork-joins) between "
                        "blocks, so that 'tvmbench diff' compares runs state with state on a host whose cores "
                        "jump between two speeds")


def add_timer_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--warmup", type=nonneg_int, default=None,
                   help="exact warm-up runs (default: adaptive, >=10 runs and >=1 s, at most 10 s)")
    p.add_argument("--runs", type=positive_int, default=None,
                   help="exact timed runs (default: adaptive until the median's 95%% CI is within +-2%%)")
    p.add_argument("--min-time", type=positive_float, default=3.0, help="adaptive mode: minimum timed seconds")
    p.add_argument("--max-time", type=positive_float, default=60.0, help="adaptive mode: maximum timed seconds")


def run_settings(args: argparse.Namespace) -> dict[str, Any]:
    """The settings ``api.run_config`` takes, from the flags a command has (others keep defaults)."""
    names = {"threads": "threads", "runs": "runs", "warmup": "warmup", "min_time": "min_time",
             "max_time": "max_time", "rounds": "rounds", "lockstep": "lockstep", "probe": "probe", "include_io": "include_io", "precision": "precision",
             "torch_compile_mode": "torch_compile_mode", "openvino_hint": "openvino_hint",
             "cuda_graph": "cuda_graph", "timeout": "timeout", "memory_limit_gib": "memory_limit",
             "rtol": "rtol", "atol": "atol",
             "show_worker_output": "verbose"}
    out = {key: getattr(args, flag) for key, flag in names.items() if getattr(args, flag, None) is not None}
    out.update(untuned=args.untuned, pretuned=not args.no_pretuned)
    if hasattr(args, "no_cache"):
        out.update(cache=not args.no_cache, isolate=not args.no_isolation)
    return out


def add_tune_args(p: argparse.ArgumentParser, trials_default: int | None) -> None:
    from tvmbench.tuning.config import COST_MODELS, SCHEDULERS, STRATEGIES

    p.add_argument("--trials", type=positive_int, default=trials_default,
                   help="tuning budget: total trials for the model, counting those already in the database"
                   + (" (implies --tune; default 1000)" if trials_default is None else ""))
    p.add_argument("--trials-per-task", type=positive_int, default=None,
                   help="at most this many trials per task (default: 2 x trials / tasks, at least 64)")
    p.add_argument("--trials-per-iter", type=positive_int, default=32, help="candidates measured per batch")
    p.add_argument("--time-budget", type=duration, default=None,
                   help="search time, e.g. 30m: then no new batch starts and those in flight finish")
    p.add_argument("--strategy", choices=list(STRATEGIES), default="evolutionary",
                   help="MetaSchedule's evolutionary or replay-trace search (random: replay-trace by its usual "
                        "name); grid: every point of each task's tile and categorical choices, refused when they "
                        "are more than --trials; droplet: coordinate descent from tvmbench's "
                        "default schedule (its rule's tile, order and unroll choices), then each task's best "
                        "record, a move kept only when Welch's test says it is faster; dpmeta: droplet "
                        "from MetaSchedule's --top-k best records (a MetaSchedule search first where there are none)")
    p.add_argument("--top-k", type=positive_int, default=3, help="dpmeta: records per task Droplet starts from")
    p.add_argument("--alpha", type=float, default=0.05,
                   help="droplet/dpmeta: significance level of the test that accepts a move (default 0.05)")
    p.add_argument("--population", type=positive_int, default=512,
                   help="evolutionary: schedules per generation, each scored by the cost model every batch "
                        "(MetaSchedule's population_size, default 512; smaller: faster batches, a coarser search)")
    p.add_argument("--cost-model", choices=list(COST_MODELS), default="xgb")
    p.add_argument("--task-scheduler", choices=list(SCHEDULERS), default="gradient")
    p.add_argument("--builder-timeout", type=positive_float, default=60.0, help="seconds per build")
    p.add_argument("--runner-timeout", type=positive_float, default=30.0, help="seconds per measurement")
    p.add_argument("--runner-number", type=positive_int, default=3)
    p.add_argument("--runner-repeat", type=positive_int, default=1)
    p.add_argument("--min-repeat-ms", type=positive_int, default=50)
    p.add_argument("--cpu-flush", dest="cpu_flush", action="store_true", default=None,
                   help="time candidates with cold caches: one call after each cache flush, as a kernel "
                        "meets its weights inside the model (default for droplet, dpmeta and grid, and "
                        "for a database tuned that way)")
    p.add_argument("--no-cpu-flush", dest="cpu_flush", action="store_false",
                   help="time candidates with hot caches, --runner-number calls per repeat (default for "
                        "MetaSchedule's strategies, and for a database tuned that way)")
    p.add_argument("--rpc", default=None, metavar="HOST:PORT",
                   help="a TVM RPC tracker: tuning measures candidates on its devices; `run` also runs and "
                        "times TVM on one of them (cross-compiled for --target)")
    p.add_argument("--rpc-key", default=None, help="the devices' key at the tracker")
    p.add_argument("--rpc-workers", type=positive_int, default=1,
                   help="candidates measured in parallel over RPC (one per device)")
    p.add_argument("--tune-timeout", type=duration, default=86400.0,
                   help="kill the tuning worker after this long (default 24h; --time-budget stops it cleanly)")
    p.add_argument("--no-wait", action="store_true",
                   help="fail at once if another tvmbench process is writing the tuning database "
                        "(default: wait for it)")
    p.add_argument("--no-in-model-check", dest="in_model_check", action="store_false",
                   help="skip the check after tuning that times the tuned kernels inside the model and "
                        "leaves unapplied the records that do not gain 3%% there")


def tune_config(args: argparse.Namespace) -> dict[str, Any]:
    """The TuneConfig fields of the tuning flags."""
    return {"trials": args.trials or 1000, "trials_per_task": args.trials_per_task,
            "trials_per_iter": args.trials_per_iter, "time_budget_s": args.time_budget, "strategy": args.strategy,
            "cost_model": args.cost_model, "task_scheduler": args.task_scheduler,
            "builder_timeout_s": args.builder_timeout, "runner_timeout_s": args.runner_timeout,
            "runner_number": args.runner_number, "runner_repeat": args.runner_repeat,
            "runner_min_repeat_ms": args.min_repeat_ms, "cpu_cache_flush": args.cpu_flush,
            "rpc_tracker": args.rpc, "rpc_key": args.rpc_key, "rpc_workers": args.rpc_workers,
            "top_k": args.top_k, "alpha": args.alpha, "population": args.population, "precision": getattr(args, "precision", "fp32")}


def add_history_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--history", default=None, metavar="FILE",
                   help="the results history to append to (default: $TVMBENCH_HISTORY or the cache folder's)")
    p.add_argument("--no-history", action="store_true", help="do not add this result to the history")


def history_arg(args: argparse.Namespace) -> str | bool | None:
    """What ``history=`` of the API takes: False with --no-history, else the file or None. A file
    given with --history is opened here, so one that cannot be written (or is not a history) is a
    one-line error before the work; the default file in the cache only warns, after it."""
    if getattr(args, "no_history", False):
        return False
    path = getattr(args, "history", None)
    if path:
        from tvmbench.results.history import History

        History.open(path).close()
    return path
