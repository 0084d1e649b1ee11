"""The Python API: everything the command line does, for scripts. The CLI is a thin layer over it.

    import tvmbench

    result = tvmbench.run("resnet18", frameworks=["tvm", "pytorch"], target="llvm", runs=50)
    print(result.results["tvm"].median_ms, result.speedup.speedup)
    result.to_json()  # the document `tvmbench run --output` writes

Every framework is measured in a worker process of its own (spawned), so a call takes seconds
to minutes; progress comes back through ``on_event(framework, message)``. A plain script needs
no ``if __name__ == "__main__":`` guard: workers are started without re-running it.

User mistakes (an unknown model, a bad target, options that contradict each other) raise
:class:`tvmbench.errors.UserError` with a one-line message before any work starts. A framework
that fails during a run is recorded in the result (``status`` "failed" or "unavailable") and the
others' numbers are kept.
"""

from __future__ import annotations

import dataclasses
import importlib.util
import tempfile
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from tvmbench.errors import MissingFrameworkError, TuningFailed, UserError, WorkFailed, check_numbers
from tvmbench.measure.runner import Events, RunConfig, default_memory_limit, run_frameworks, thread_env
from tvmbench.measure.timer import TimerConfig
from tvmbench.models import ModelOptions, check_model_name, is_package
from tvmbench.results.records import RunResult
from tvmbench.targets import ResolvedTarget, physical_cores, resolve_target
from tvmbench.tuning.config import TuneConfig

__all__ = ["check_database", "collect_ops", "compare", "explain", "model_options", "profile", "run", "run_config", "target", "tune"]


def target(spec: str | dict[str, Any] | ResolvedTarget = "auto", layout: str = "auto") -> ResolvedTarget:
    """A ``--target`` value resolved on this machine, with ``--layout`` (auto, nchw, nhwc) applied."""
    resolved = spec if isinstance(spec, ResolvedTarget) else resolve_target(spec)
    if layout == "auto":
        return resolved
    if resolved.kind == "llvm" and layout == "nchw":
        raise UserError("--layout nchw: CPU builds use NHWC (tvmbench's CPU schedules need channels innermost); "
                        "--layout chooses between them on CUDA")
    return dataclasses.replace(resolved, conv_layout=layout.upper())


def model_options(model: str, batch_size: int = 1, seq_length: int | None = None, image_size: int | None = None,
                  hf_config: dict[str, Any] | None = None, input_shapes: dict[str, Sequence[int]] | None = None,
                  seed: int = 0, fill_mode: str = "random", inputs_file: str | None = None) -> ModelOptions:
    """The model's shape options and input values (seeded random, zeros, ones, or the arrays of
    an .npz file); an unknown name, a missing file or a bad fill mode fails here, before any work."""
    from tvmbench.models import FILL_MODES

    check_model_name(model)
    check_numbers(batch_size=batch_size, seq_length=seq_length, image_size=image_size)
    if fill_mode not in FILL_MODES:
        raise UserError(f"--fill-mode must be one of {', '.join(FILL_MODES)}, got '{fill_mode}'")
    if inputs_file and not Path(inputs_file).expanduser().is_file():
        raise UserError(f"--inputs {inputs_file} does not exist")
    options = ModelOptions(batch_size=batch_size, seq_length=seq_length, image_size=image_size,
                        config_overrides=dict(hf_config or {}),
                        input_shapes={k: tuple(v) for k, v in (input_shapes or {}).items()}, seed=seed,
                        fill_mode=fill_mode, inputs_file=str(Path(inputs_file).expanduser()) if inputs_file else None)
    if inputs_file and is_package(model):  # a package's input specs are at hand: check the file now
        from tvmbench.models import load_model

        load_model(model, options)
    return options


def require_device(resolved: ResolvedTarget) -> None:
    """Benchmarking a CUDA target needs the GPU: say so at once instead of failing in every worker."""
    if resolved.kind == "cuda":
        from tvmbench.targets import query_gpu

        if query_gpu() is None:
            raise UserError("--target cuda: this machine has no CUDA device (nvidia-smi lists none), so nothing "
                            "can be measured on it; run on a machine with an NVIDIA GPU, or check the build here "
                            "with --compile-only")


def check_rpc(rpc: str | None, rpc_key: str | None) -> dict[str, str] | None:
    """An unreachable tracker or an unknown key is reported before any work."""
    if not rpc:
        return None
    from tvmbench.rpc import check_tracker, parse_tracker

    if not rpc_key:
        raise UserError("--rpc needs --rpc-key, the key the devices registered with")
    check_tracker(*parse_tracker(rpc), rpc_key)
    return {"tracker": rpc, "key": rpc_key}


def check_precision(precision: str, resolved: ResolvedTarget) -> None:
    """A precision TVM cannot build for the target is a one-line usage error before any work."""
    if precision == "bf16":
        from tvmbench.compile.bf16 import check_target

        check_target(resolved.tvm())


def run_config(model: str, options: ModelOptions, resolved: ResolvedTarget, frameworks: Sequence[str], *,
               threads: int | None = None, runs: int | None = None, warmup: int | None = None,
               min_time: float = 3.0, max_time: float = 60.0, rounds: int = 1, lockstep: bool | None = None,
               probe: bool = True, db: str | None = None, pretuned: bool = True, untuned: bool = False, cache: bool = True, isolate: bool = True,
               include_io: bool = False, precision: str = "fp32", torch_compile_mode: str = "default",
               openvino_hint: str = "latency", cuda_graph: bool = False, timeout: float = 3600.0,
               memory_limit_gib: float | None = None, remote: dict[str, str] | None = None,
               show_worker_output: bool = False, rtol: float | None = None, atol: float | None = None) -> RunConfig:
    """The one place a run's configuration is put together (``run`` and ``compare`` both use it).
    ``show_worker_output``: workers print to this terminal (else to log files kept when they fail).
    ``rtol``/``atol``: the output check's bounds in place of the precision's (``accuracy.py``)."""
    check_numbers(threads=threads, runs=runs, rounds=rounds, min_time=min_time, max_time=max_time, timeout=timeout,
                  memory_limit_gib=memory_limit_gib, rtol=rtol, atol=atol,
                  times=("min_time", "max_time", "timeout", "memory_limit_gib", "rtol", "atol"))
    check_numbers(minimum=0, warmup=warmup)
    if untuned and db:
        raise UserError("--untuned applies no tuning database; it cannot be combined with --db, --tune or --trials")
    if cuda_graph and resolved.kind != "cuda":
        raise UserError("--cuda-graph captures CUDA kernel launches; it needs a CUDA target (--target cuda)")
    if db:
        from tvmbench.tuning.database import TuningDatabase

        TuningDatabase.open(db)  # a bad --db is a usage error, reported before compiling anything
    backend_options = {"torch_compile_mode": torch_compile_mode, "openvino_hint": openvino_hint,
                       "precision": precision, "cuda_graph": cuda_graph, "rpc": remote}
    from tvmbench.backends import load_class

    for name in frameworks:  # a bad option is a usage error now, not a failure in a worker later
        load_class(name).check_options(backend_options)
    if "tvm" in frameworks and not remote:
        check_precision(precision, resolved)
    timer = TimerConfig(min_time_s=min_time, max_time_s=max(max_time, min_time), max_warmup_s=10.0,
                        fixed_warmup_runs=warmup, fixed_runs=runs)
    return RunConfig(model=model, target=resolved, frameworks=tuple(frameworks), options=options,
                     threads=threads or physical_cores(), timer=timer, db_dir=db, use_default_db=not untuned,
                     use_pretuned=pretuned and not untuned, use_cache=cache, isolate=isolate, timeout_s=timeout,
                     rounds=rounds, lockstep=lockstep, probe=probe, include_io=include_io,
                     memory_limit_bytes=int(memory_limit_gib * 2**30) if memory_limit_gib else 0,
                     backend_options=backend_options, show_worker_output=show_worker_output,
                     tolerance={k: v for k, v in (("rtol", rtol), ("atol", atol)) if v is not None})


def _in_worker(fn: Callable[..., Any], job: Any, threads: int, timeout: float, what: str,
               on_progress: Callable[[str], None] | None = None) -> Any:
    """``fn(job)`` in a worker process with ``threads`` for every runtime; its failure is one line:
    a UserError for a mistake in the user's input, else WorkFailed (exit status 1). What the
    worker prints goes to a log file, named in that line (``isolation.output_file``)."""
    from tvmbench.measure.isolation import output_file, run_isolated

    outcome = run_isolated(fn, job, timeout_s=timeout, env=thread_env(threads),
                           memory_limit_bytes=default_memory_limit(), on_progress=on_progress,
                           output=output_file(getattr(fn, "__name__", "worker")))
    return _value(outcome, what)


def _value(outcome: Any, what: str) -> Any:
    if not outcome.ok:
        error = UserError if outcome.error.get("kind") == "user" else WorkFailed
        raise error(f"{what} failed: {outcome.error.get('message')}")
    return outcome.value


def _in_workers_in_turns(fn: Callable[..., Any], jobs: list[Any], threads: int, timeout: float,
                         what: list[str], envs: list[dict[str, str]],
                         on_progress: list[Callable[[str], None] | None]) -> list[Any]:
    """``fn(job)`` for every job at once, each in its own worker, the jobs (each given its
    ``turns``) measuring in alternating turns (``runner.run_in_turns``); the values in order, or
    the first failure as ``_in_worker`` reports it."""
    from tvmbench.measure.isolation import output_file, run_isolated
    from tvmbench.measure.runner import run_in_turns

    def run(i: int, turns: Any) -> Any:
        return run_isolated(fn, dataclasses.replace(jobs[i], turns=turns), timeout_s=timeout,
                            env={**thread_env(threads), **envs[i]}, memory_limit_bytes=default_memory_limit(),
                            on_progress=on_progress[i], output=output_file(f"{fn.__name__}-{i}"))

    return [_value(o, w) for o, w in zip(run_in_turns(len(jobs), run), what, strict=True)]


def run_benchmark(cfg: RunConfig, on_event: Events | None = None) -> RunResult:
    """Measure every framework of ``cfg`` and build the result (the machine's state is recorded
    before the first worker starts)."""
    from tvmbench.measure import environment
    from tvmbench.measure.runner import float64_reference, reduced_reference
    from tvmbench.results.build import build_result

    env = environment.collect(cfg.threads)
    order, raw, ref_outputs, source = run_frameworks(cfg, on_event)
    exact = float64_reference(cfg, raw, ref_outputs, source, on_event)
    reduced = reduced_reference(cfg, raw, ref_outputs, source, on_event)
    return build_result(cfg, order, raw, ref_outputs, env, source, exact, reduced)


def run(model: str, frameworks: Sequence[str] | str | None = None, target_spec: Any = "auto", *,
        batch_size: int = 1, seq_length: int | None = None, image_size: int | None = None,
        hf_config: dict[str, Any] | None = None, input_shapes: dict[str, Sequence[int]] | None = None,
        seed: int = 0, layout: str = "auto", rpc: str | None = None, rpc_key: str | None = None,
        on_event: Events | None = None, history: str | Path | bool | None = None, **settings: Any) -> RunResult:
    """Benchmark ``model`` (a zoo name, ``torchvision:NAME``, a .onnx/.pt2 file or
    ``file.py:factory``) with ``frameworks`` (default TVM and PyTorch; TVM alone for an ONNX file)
    on ``target_spec`` (``auto``, ``llvm``, ``cuda``, a dict, a tag or a legacy string).

    ``settings`` are those of :func:`run_config`: ``threads``, ``runs``/``warmup`` (exact counts;
    adaptive without them), ``min_time``/``max_time``, ``rounds``, ``lockstep`` (with rounds, turns
    within a round; default on), ``probe`` (with rounds on a CPU, the host-state probe run
    between blocks, for ``diff`` to compare runs state with state; default on), ``db``, ``pretuned``,
    ``untuned``, ``cache``, ``isolate``, ``include_io``, ``precision``, ``torch_compile_mode``,
    ``openvino_hint``, ``cuda_graph``, ``timeout``, ``memory_limit_gib``, ``rtol``/``atol`` (the output
    check's bounds). The result is appended
    to the history (``results/history.py``; ``history`` names another file, False skips it) and
    carries its entry id in ``extra["history_entry"]``."""
    from tvmbench.backends import default_frameworks, parse_frameworks
    from tvmbench.results.history import record

    names = parse_frameworks(frameworks if isinstance(frameworks, str) else ",".join(frameworks)) \
        if frameworks else default_frameworks(model)
    options = model_options(model, batch_size, seq_length, image_size, hf_config, input_shapes, seed)
    resolved = target(target_spec, layout)
    remote = check_rpc(rpc, rpc_key)
    if remote is None:
        require_device(resolved)
    result = run_benchmark(run_config(model, options, resolved, names, remote=remote, **settings), on_event)
    entry = record("run", result.to_json(), history=history, environment=result.environment,
                   target=result.target_config)
    if entry is not None:
        result.extra["history_entry"] = entry
    return result


def tune(model: str, target_spec: Any = "auto", *, db: str | None = None, batch_size: int = 1,
         seq_length: int | None = None, image_size: int | None = None, hf_config: dict[str, Any] | None = None,
         input_shapes: dict[str, Sequence[int]] | None = None, seed: int = 0, layout: str = "auto",
         timeout: float = 86400.0, on_progress: Callable[[int, int, float | None], None] | None = None,
         on_warning: Callable[[str], None] | None = None, wait: bool = True,
         history: str | Path | bool | None = None, verbose: bool = False, in_model_check: bool = True,
         force_check: bool = False, **config: Any) -> tuple[Any, Path]:
    """Tune ``model``'s kernels with MetaSchedule into ``db`` (default: the target's database in
    the cache), in a worker process; a second call resumes. ``verbose``: MetaSchedule's per-task
    tables go to stderr (they always go to the database's ``logs/`` folder). ``config`` are :class:`TuneConfig`
    fields (``trials``, ``time_budget_s``, ``strategy``, ...). ``on_progress(trials done, trials
    budget, estimated ms of the tuned kernels)``; ``on_warning`` hears what the database reports
    on opening and when it waits for another process writing the database (with ``wait=False``
    that is a UserError instead). The tuning curve is written into the database's ``curves/``
    folder (``report.curve_files``). ``in_model_check``: then judge the records inside the model
    (``check_in_model``): after new trials, when a task was never judged, when a verdict was
    judged against an earlier pipeline's default schedules (``stale_verdicts``), or with
    ``force_check``. Returns the TuneReport and the database path."""
    from tvmbench.measure.isolation import run_isolated
    from tvmbench.rpc import refuse_emulated
    from tvmbench.tuning.database import IN_MODEL, TuningDatabase, default_database_dir, forget_stale_defaults

    options = model_options(model, batch_size, seq_length, image_size, hf_config, input_shapes, seed)
    resolved = target(target_spec, layout)
    config["threads"] = config.get("threads") or physical_cores()
    config.setdefault("seed", seed)
    cfg = TuneConfig(**config)
    check_precision(cfg.precision, resolved)
    if cfg.cost_model == "xgb" and importlib.util.find_spec("xgboost") is None:
        raise MissingFrameworkError("tuning with the xgb cost model", "xgboost", "tune")
    if check_rpc(cfg.rpc_tracker, cfg.rpc_key):
        refuse_emulated(cfg.rpc_tracker, cfg.rpc_key)  # (before the worker loads the model)
    from tvmbench.tuning.tuner import TuneJob, run_tune_job  # (imports TVM, and torch: after the checks)
    database = TuningDatabase.open(db or default_database_dir(resolved), resolved, create=True)
    job = TuneJob(model=model, options=options, target=resolved, db_path=str(database.path), config=cfg,
                  verbose=verbose)
    with database.writing(wait=wait, on_wait=on_warning):  # the worker appends; no one else may
        for warning in database.warnings if on_warning else []:
            on_warning(warning)
        stale = forget_stale_defaults(database)  # this pipeline's defaults are timed again
        outcome = run_isolated(run_tune_job, job, timeout_s=timeout, memory_limit_bytes=default_memory_limit(),
                               env=thread_env(cfg.threads), on_progress=lambda m: on_progress and on_progress(*m))
    if not outcome.ok:
        if outcome.error.get("kind") == "user":
            raise UserError(outcome.error["message"])
        raise TuningFailed(f"tuning failed: {outcome.error.get('message')} (the database keeps every batch "
                           f"measured so far; run the command again to resume)")
    report = outcome.value
    gains = (database.meta().get(IN_MODEL) or {}).get("gain", {})
    judged = not force_check and report.trials_after == report.trials_before and all(  # nothing new since
        t.workload in gains and t.workload not in stale for t in report.tasks if t.best_us)  # the last check
    if in_model_check and resolved.runs_here and not cfg.rpc_tracker and not judged and any(
            t.best_us for t in report.tasks):
        check_in_model(report, database, model, resolved, cfg.threads, options, on_warning, cfg.precision)
    report.curve_files = [str(p) for p in report.write_curve(Path(model).name)]
    from tvmbench.measure import environment
    from tvmbench.results.history import record

    record("tune", {"model": model, "database": str(database.path), **report.to_json()}, history=history,
           environment=environment.collect(cfg.threads), target=resolved.config)
    return report, database.path


def check_database(model: str, db: str | Path, target_spec: Any = "auto", **kwargs: Any) -> tuple[Any, Path]:
    """Judge ``db``'s records for ``model`` inside the model again, against this tvmbench's default
    schedules, without tuning: what to run after an upgrade changed the default schedules (a
    database applied then warns of its stale verdicts), or on a database filled elsewhere. The
    defaults of the stale workloads are timed again first. ``kwargs`` as for :func:`tune`
    (model shapes, ``threads``, ``on_warning``, ``history``). Returns the TuneReport (its tasks'
    in-model gains, the end-to-end gain) and the database path."""
    from tvmbench.tuning.database import WORKLOADS

    if not (Path(db).expanduser() / WORKLOADS).is_file():  # never a new, empty database
        raise UserError(f"{db} is not a tuning database (no {WORKLOADS}): give the folder 'tvmbench tune --db' "
                        "filled, or see 'tvmbench db list'")
    report, path = tune(model, target_spec, db=str(db), trials=0, force_check=True, **kwargs)
    report.stop_reason = "no search (db check): the records judged inside the model again"
    return report, path


# How many of each task's fastest schedules (timed alone) the in-model check times in the model.
IN_MODEL_CANDIDATES = 3


def check_in_model(report: Any, database: Any, model: str, resolved: ResolvedTarget, threads: int,
                   options: ModelOptions, on_warning: Callable[[str], None] | None = None,
                   precision: str = "fp32") -> None:
    """Selection inside the model, after tuning: MetaSchedule's runner times each kernel alone
    with hot caches, and a record that wins there can lose inside the model (its inputs come
    from the previous kernel, its weights were evicted), while the second or third fastest alone
    can win. The model is built once per rank of each task's fastest distinct schedules alone
    (``IN_MODEL_CANDIDATES``: the fastest of every task, then the second, ...) and once without
    any database, in one worker, and their kernels timed in alternating blocks
    (``paired_gains_job``). A task's winner is the candidate with the largest gain among those
    surely faster than the default schedule inside the model (``select_in_model``: a paired test
    over the blocks) and faster alone (a record that *is* the default schedule read 0.94x-1.19x
    "in the model", intervals excluding 1, its kernel moved by its tuned neighbours); only it is
    applied. A task without one keeps the default schedule. Verdicts go to the database
    (``mark_in_model``): no record is removed. Fills each task's ``in_model_gain``,
    ``in_model_interval``, ``in_model_rank``, ``kept_in_model`` and ``rule_knobs``, and the report's
    ``end_to_end`` (the winners together against the default schedules, end to end: unless surely
    faster, none is applied) and ``ceiling``. A failed check is a warning: the tuning is kept."""
    from tvmbench.profiling.kernels import select_in_model
    from tvmbench.tuning.database import mark_in_model, ranked_candidates, rule_knobs_of

    lines = database.count_records()  # the records this check judges
    with tempfile.TemporaryDirectory(prefix="tvmbench-candidates-") as root:
        candidates = ranked_candidates(database, resolved, IN_MODEL_CANDIDATES, Path(root))
        if not candidates:
            return
        try:
            rows, untuned, candidates = _gains_of_candidates(model, database, resolved, threads, options, candidates,
                                                             on_warning, precision)
        except UserError as e:
            if on_warning:
                on_warning(f"{e}; the tuned records are applied as tuned")
            return
        except WorkFailed as e:  # even each task's fastest schedule alone crashed inside the model
            if on_warning:
                on_warning(f"{e}; no tuned record is applied (every task keeps the default schedule)")
            with database.writing():
                mark_in_model(database, {}, set(database.records_per_workload()), lines)
            return
    verdicts = [select_in_model([[r for r in rows if r["candidate"] == i]]) for i in range(len(candidates))]
    gains, intervals, rank = _winners(verdicts, candidates, database.meta().get("default_us", {}))
    chosen = {wl: candidates[r - 1].picks[wl][0] for wl, r in rank.items()}
    losing = set(gains) - set(chosen)
    with database.writing():
        mark_in_model(database, gains, losing, lines, intervals, chosen)
    if chosen:
        # The winners together, end to end and without the instrument hook: what the user gets.
        # Not surely faster than the default schedules: none is applied (tuning never leaves a
        # build that may be slower than no tuning).
        report.end_to_end = e2e = in_model_end_to_end(model, database.path, resolved, threads, options, on_warning,
                                                      precision)
        if e2e and not e2e.surely_faster():
            if on_warning:
                on_warning(f"{_refusal(e2e, model)}; every task keeps the default schedule")
            losing, rank = set(gains), {}
            with database.writing():
                mark_in_model(database, gains, losing, lines, intervals)
    moved = rule_knobs_of(database, {wl: key for wl, key in chosen.items() if wl not in losing})
    for task in report.tasks:
        if task.workload in gains:
            task.in_model_gain = gains[task.workload]
            task.in_model_interval = intervals.get(task.workload)
            task.in_model_rank = rank.get(task.workload)
            task.kept_in_model = task.workload not in losing
            task.rule_knobs = moved.get(task.workload)
    ceiling = untuned.ceiling()  # the most any tuning could buy
    report.ceiling = ceiling.speedup if ceiling else None


def _refusal(e2e: Any, model: str) -> str:
    """Why the winners of the in-model check are not applied (``EndToEnd.surely_faster`` is not)."""
    worst = e2e.worst_state()
    measured = f"{e2e.gain:.3f}x [{e2e.low:.3f}-{e2e.high:.3f}] over {e2e.processes} processes"
    if worst is not None and worst[1] < 1.0 <= e2e.gain:
        return (f"the tuned kernels together made {model} slower end to end ({worst[1]:.3f}x in {worst[2]} pairs "
                f"of blocks timed while the host's cores were in its {worst[0]} state, {e2e.gain:.3f}x over all)")
    if not e2e.gain >= 1.0:  # (nan: not faster)
        return f"the tuned kernels together made {model} slower end to end ({measured})"
    return f"the tuned kernels together did not make {model} surely faster end to end ({measured})"


def _gains_of_candidates(model: str, database: Any, resolved: ResolvedTarget, threads: int, options: ModelOptions,
                         candidates: list[Any], on_warning: Callable[[str], None] | None,
                         precision: str = "fp32") -> tuple[Any, Any, list[Any]]:
    """``in_model_gains`` over the candidate builds; when the worker crashes, again without the
    last candidate (resnet18's check crashed its worker with SIGSEGV in a TVM pool thread with
    all three candidate builds, for an evolutionary and a Droplet database alike, and ran with
    two; 2026-11-27, cause not found), down to the first alone: WorkFailed if that crashes too.
    Returns the rows, the untuned profile and the candidates judged."""
    while True:
        try:
            rows, untuned = in_model_gains(model, database.path, resolved, threads, options,
                                           tuple(str(c.path) for c in candidates), precision)
            return rows, untuned, candidates
        except WorkFailed as e:
            if len(candidates) == 1:
                raise
            if on_warning:
                on_warning(f"{e}; the build with each task's schedule #{len(candidates)} is left out, the "
                           f"{len(candidates) - 1} faster ones judged")
            candidates = candidates[:-1]


def _winners(verdicts: list[Any], candidates: list[Any], default_us: dict[str, float]
             ) -> tuple[dict[str, float], dict[str, tuple[float, float]], dict[str, int]]:
    """Per workload judged: its gain inside the model and interval (its winner's, else its fastest
    schedule's alone), and its winner's rank (1: the fastest alone) where it has one: the
    candidate with the largest gain among those ``select_in_model`` keeps (``verdicts[i]``:
    candidate build ``i``'s) that are also faster alone than the default schedule."""
    gains, intervals, rank = {}, {}, {}
    for wl in {wl for v in verdicts for wl in v.gains}:
        judged = [i for i, v in enumerate(verdicts) if wl in v.gains]
        winners = [i for i in judged if wl not in verdicts[i].losing
                   and candidates[i].picks[wl][1] * 1e6 < default_us.get(wl, float("inf"))]
        best = max(winners, key=lambda i: verdicts[i].gains[wl]) if winners else judged[0]
        gains[wl] = verdicts[best].gains[wl]
        if wl in verdicts[best].intervals:
            intervals[wl] = verdicts[best].intervals[wl]
        if winners:
            rank[wl] = best + 1
    return gains, intervals, rank


# Worker processes the end-to-end check of the winners runs in: on a shared VM the host's cores
# jump between states (``measure/probe.py``), and the fastest schedule in one need not be in the
# other (mobilenet_v2's Droplet winners: 1.02x in the near state, 0.92-0.95x in the far one); more
# processes, more time to see both. At first this many; then one more at a time while the gain's
# interval holds 1 (``EndToEnd.settled``), up to the most: the winners apply only when surely
# faster end to end (``EndToEnd.surely_faster``), and a real gain of 1-2 % needs more than three
# processes to show it (Student's t of 2 degrees of freedom is 4.3, of 7 is 2.4). (Stopping once
# the interval excludes 1 makes a false "faster" a little likelier than one test's 2.5 %; a build
# so applied has a true gain close to 1, not far below it.)
END_TO_END_PROCESSES = 3
END_TO_END_MAX_PROCESSES = 8


def in_model_end_to_end(model: str, database: str | Path, resolved: ResolvedTarget, threads: int,
                        options: ModelOptions, on_warning: Callable[[str], None] | None = None,
                        precision: str = "fp32") -> Any:
    """The model with ``database`` as it applies against no database, end to end: paired blocks
    in each of ``END_TO_END_PROCESSES`` workers (``end_to_end_job``), more while the result is not
    ``settled`` (up to ``END_TO_END_MAX_PROCESSES``), the processes the units: the geometric mean
    of their gains with its 95 % interval (Student's t); and the gain within each host state the
    probe told apart (the pairs the units): ``kernels.EndToEnd``. None (with a warning) when the
    check failed."""
    from tvmbench.profiling.kernels import EndToEnd, PairedJob, end_to_end_job

    job = PairedJob(model=model, options=options, runs=5, backend=_tuned_backend(resolved, threads, database, precision))
    runs: list[Any] = []
    try:
        while len(runs) < END_TO_END_MAX_PROCESSES:
            runs.append(_in_worker(end_to_end_job, job, threads, 3600.0,
                                   f"timing the tuned {model} end to end (process {len(runs) + 1})"))
            if len(runs) >= END_TO_END_PROCESSES and EndToEnd.of(runs).settled():
                break
    except (UserError, WorkFailed) as e:
        if on_warning:
            on_warning(str(e))
        return None
    return EndToEnd.of(runs)


def _tuned_backend(resolved: ResolvedTarget, threads: int, database: str | Path, precision: str) -> Any:
    """The TVM build the in-model checks time: ``database`` applied, at the tuned ``precision``."""
    from tvmbench.backends import BackendConfig

    return BackendConfig(target=resolved, threads=threads, databases=(("--db", str(database)),),
                         options={"precision": precision})


def in_model_gains(model: str, database: str | Path, resolved: ResolvedTarget, threads: int,
                   options: ModelOptions, candidates: tuple[str, ...] = (), precision: str = "fp32") -> Any:
    """Per kernel of ``model`` that runs a record of ``database`` (and no other database), or of
    each of the ``candidates`` databases in its own build: its gain inside the model over
    tvmbench's default schedule, all builds timed in alternating blocks in one worker
    (``paired_gains_job``), as ``select_in_model`` judges them; with the untuned build's profile
    (``PairedGains``)."""
    from tvmbench.profiling.kernels import PairedJob, paired_gains_job

    job = PairedJob(model=model, options=options, candidates=candidates,
                    backend=_tuned_backend(resolved, threads, database, precision))
    return _in_worker(paired_gains_job, job, threads, 3600.0, f"checking the tuned kernels of {model} in the model")


def profile(model: str, target_spec: Any = "auto", *, db: str | None = None, untuned: bool = False,
            pretuned: bool = True, vs_untuned: bool = False, runs: int = 20, threads: int | None = None,
            batch_size: int = 1, seq_length: int | None = None, image_size: int | None = None,
            hf_config: dict[str, Any] | None = None, input_shapes: dict[str, Sequence[int]] | None = None,
            seed: int = 0, layout: str = "auto", timeout: float = 3600.0, precision: str = "fp32",
            on_event: Callable[[str, str], None] | None = None) -> dict[str, Any]:
    """Per-kernel times of TVM inside the model (``ModelProfile`` by variant: "tvm", and
    "tvm_untuned" with ``vs_untuned`` or ``untuned``), each in a worker process; ``precision``
    as ``run``'s."""
    from tvmbench.backends import BackendConfig
    from tvmbench.profiling.kernels import ProfileJob, profile_job
    from tvmbench.tuning.database import TuningDatabase, database_sources

    options = model_options(model, batch_size, seq_length, image_size, hf_config, input_shapes, seed)
    resolved = target(target_spec, layout)
    require_device(resolved)
    check_precision(precision, resolved)
    if untuned and (db or vs_untuned):
        raise UserError("--untuned applies no tuning database; it cannot be combined with --db or --vs-untuned")
    if db:
        TuningDatabase.open(db)
    threads = threads or physical_cores()
    sources = database_sources(resolved, db, not untuned, pretuned and not untuned)
    variants = ["tvm", "tvm_untuned"] if vs_untuned else ["tvm_untuned" if untuned else "tvm"]
    profiles = {}
    for variant in variants:
        job = ProfileJob(model=model, options=options, variant=variant, runs=runs,
                         backend=BackendConfig(target=resolved, threads=threads, databases=tuple(sources),
                                               options={"precision": precision}),
                         measure_peak=variant == variants[0])
        profiles[variant] = _in_worker(profile_job, job, threads, timeout, f"profiling {model} ({variant})",
                                       lambda msg, v=variant: on_event and on_event(v, msg))
    if len(profiles) == 2:
        profiles["tvm_untuned"].peak_gflops = profiles[variants[0]].peak_gflops
    return profiles


def compare(models: Sequence[str] | str | None = None, frameworks: Sequence[str] | str | None = None,
            target_spec: Any = None, *, config: str | Path | Any | None = None,
            batch_sizes: Sequence[int] | None = None, seq_lengths: Sequence[int] | None = None,
            image_size: int | None = None, seed: int = 0, tune_first: bool | None = None, trials: int | None = None,
            output: str | Path | None = None, on_point: Callable[[int, int, Any], None] | None = None,
            on_result: Callable[[dict[str, Any]], None] | None = None, on_event: Events | None = None,
            tuner: Callable[..., Any] | None = None, resume: bool = False,
            history: str | Path | bool | None = None, **settings: Any) -> dict[str, Any]:
    """Several models, shapes and frameworks in one document: the points of ``models`` (names)
    or of ``config`` (a JSON file or a ``compare.CompareConfig``; arguments override it), each
    measured as :func:`run` measures, in order, then summarised (``results.summary``).

    With ``output`` the document is rewritten after every point, and on Ctrl-C it keeps the
    points measured; ``resume`` keeps the points an earlier, interrupted call with the same
    options already wrote to ``output`` and measures only the rest. ``on_point(i, n, point)`` before each point, ``on_result(result document)``
    after it; ``tuner(point, options, target)`` tunes a point that asks for it and returns its
    database (default: :func:`tune` with the point's trials). ``settings`` as for :func:`run`."""
    import sys
    import time

    from tvmbench import comparison as planning
    from tvmbench.backends import parse_frameworks
    from tvmbench.files import write_json_atomic
    from tvmbench.results.summary import summarize

    cfg = planning.resolve_config(models, config)
    g = cfg.global_settings
    spec = frameworks if frameworks else (g.frameworks or ["tvm", "pytorch"])
    names = parse_frameworks(spec if isinstance(spec, str) else ",".join(spec))
    if settings.get("untuned") and tune_first is None:
        tune_first = False  # --untuned overrides the file's enable_tuning, as every flag overrides it
    points = planning.plan(cfg, list(batch_sizes) if batch_sizes else None,
                           list(seq_lengths) if seq_lengths else None, tune=tune_first, trials=trials)
    for m in dict.fromkeys(p.model for p in points):
        check_model_name(m)  # every name is checked before the first measurement
    if settings.get("untuned") and any(p.tune for p in points):
        raise UserError("--untuned applies no tuning database; it cannot be combined with --db, --tune or --trials")
    resolved = target(target_spec or g.target)
    require_device(resolved)
    settings = {"threads": g.threads, "runs": g.num_runs, "warmup": g.warmup_runs, "rounds": g.rounds,
                **{k: v for k, v in settings.items() if v is not None}}
    settings["threads"] = settings["threads"] or physical_cores()
    doc: dict[str, Any] = {"kind": "tvmbench.comparison", "created": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
                           "command": sys.argv[1:], "config": cfg.model_dump(), "target": resolved.to_json(),
                           "frameworks": names, "threads": settings["threads"], "points": [], "complete": False,
                           "options_key": planning.options_key(names, resolved.to_json(), settings, seed, image_size)}
    done = planning.resumable_points(output, doc["options_key"]) if resume else {}

    def save() -> None:
        doc["summary"] = summarize(doc["points"])
        if output:
            write_json_atomic(output, doc)

    try:
        for i, point in enumerate(points, 1):
            key = planning.point_key(point, image_size)
            if key in done:
                doc["points"].append(done[key])
                continue
            if on_point:
                on_point(i, len(points), point)
            options = ModelOptions(batch_size=point.batch_size, seq_length=point.seq_length,
                                   image_size=image_size or point.image_size,
                                   config_overrides=dict(point.hf_config), seed=seed)
            point_settings = dict(settings)
            if point.tune:
                point_settings["db"] = str(tuner(point, options, resolved) if tuner else
                                           _tune_point(point, options, resolved, settings.get("precision", "fp32")))
            result = run_benchmark(run_config(point.model, options, resolved, names, **point_settings), on_event)
            doc["points"].append({**result.to_json(), "model_type": point.type, "point_key": key})
            if on_result:
                on_result(doc["points"][-1])
            save()
    except KeyboardInterrupt:
        if doc["points"]:
            save()
        raise
    doc["complete"] = True
    doc["resumed_points"] = sum(1 for p in points if planning.point_key(p, image_size) in done)
    from tvmbench.results.history import record

    doc["history_entry"] = record("compare", doc, history=history, target=resolved.config,
                                  environment=doc["points"][0].get("environment") if doc["points"] else None)
    save()
    return doc


def _tune_point(point: Any, options: ModelOptions, resolved: ResolvedTarget, precision: str) -> Path:
    """A comparison point's tuning with the default settings and its trials, of the build at the
    comparison's ``precision``."""
    _, path = tune(point.model, resolved, batch_size=options.batch_size, seq_length=options.seq_length,
                   image_size=options.image_size, hf_config=options.config_overrides, seed=options.seed,
                   trials=point.trials or 1000, precision=precision)
    return path


def collect_ops(models: Sequence[str] | str, target_spec: Any = "auto", *, threads: Sequence[int] | None = None,
                schedules: Sequence[str] = ("default",), store: str | Path | None = None, runs: int = 20,
                alone: bool = True, db: str | None = None, pretuned: bool = True, batch_size: int = 1,
                seq_length: int | None = None, image_size: int | None = None,
                hf_config: dict[str, Any] | None = None, seed: int = 0, timeout: float = 3600.0,
                on_job: Callable[[int, int, str, int], None] | None = None,
                on_event: Callable[[str], None] | None = None,
                history: str | Path | bool | None = None) -> list[dict[str, Any]]:
    """Collect every operator of ``models`` into the operator store (``profiling/store.py``):
    features, and times inside the model and alone, per thread count and schedule source
    ("default", "tuned", "sampled:N"; see ``profiling/sources.py``). One worker per model and thread count; what the store already has for
    this machine, these versions and that schedule is skipped, so an interrupted collection
    resumes. ``on_job(i, n, model, threads)`` before each worker. Returns each worker's counts."""
    from tvmbench.profiling.collect import CollectJob, collect_job
    from tvmbench.profiling.sources import parse_sources
    from tvmbench.profiling.store import OpStore, default_store_path
    from tvmbench.tuning.database import database_sources

    names = [m.strip() for m in (models.split(",") if isinstance(models, str) else models) if m.strip()]
    if not names:
        raise UserError("ops collect: give at least one model, e.g. --models resnet18")
    schedules = parse_sources(schedules)
    options = {m: model_options(m, batch_size, seq_length, image_size, hf_config, None, seed) for m in names}
    resolved = target(target_spec)
    if resolved.kind != "llvm" or not resolved.runs_here:
        raise UserError("ops collect measures on this machine's CPU: use --target llvm (or auto without a GPU)")
    path = Path(store) if store else default_store_path()
    OpStore.open(path).close()  # a bad or newer store is a one-line error before any work
    sources = tuple(database_sources(resolved, db, True, pretuned)) if "tuned" in schedules else ()
    jobs = [(m, n) for m in names for n in (threads or [physical_cores()])]
    counts = []
    for i, (m, n) in enumerate(jobs, 1):
        if on_job:
            on_job(i, len(jobs), m, n)
        job = CollectJob(model=m, options=options[m], target=resolved, threads=n, store=str(path),
                         schedules=schedules, databases=sources, runs=runs, alone=alone)
        counts.append({"model": m, "threads": n,
                       **_in_worker(collect_job, job, n, timeout, f"collecting {m} ({n} threads)", on_event)})
    from tvmbench.measure import environment
    from tvmbench.results.history import record

    record("ops collect", {"models": names, "schedules": list(schedules), "store": str(path), "jobs": counts},
           history=history, environment=environment.collect(max(n for _, n in jobs)), target=resolved.config)
    return counts


def import_tuning_db(paths: Sequence[str | Path] | str, store: str | Path | None = None) -> list[dict[str, Any]]:
    """Import tuning databases into the operator store: every record a ``tuning_records`` row,
    keyed by the same workload hash as collected operators (``profiling/imports.py``). Returns,
    per database, how many records it had and how many were new to the store."""
    from tvmbench.profiling.imports import import_database
    from tvmbench.profiling.store import OpStore

    dirs = [paths] if isinstance(paths, str | Path) else list(paths)
    if not dirs:
        raise UserError("ops import-db: give at least one tuning database folder")
    opened = OpStore.open(store)
    try:
        return [{"database": str(d), **import_database(opened, d)} for d in dirs]
    finally:
        opened.close()


def explain(model: str, vs: str = "onnxruntime", target_spec: Any = "auto", *, threads: int | None = None,
            runs: int = 20, db: str | None = None, untuned: bool = False, pretuned: bool = True,
            batch_size: int = 1, seq_length: int | None = None, image_size: int | None = None,
            hf_config: dict[str, Any] | None = None, seed: int = 0, timeout: float = 3600.0, lockstep: bool = True,
            precision: str = "fp32", on_event: Callable[[str, str], None] | None = None) -> dict[str, Any]:
    """Where TVM wins and loses against ``vs`` (onnxruntime, openvino, pytorch, torch_compile), by operator
    kind: each framework's own per-operator profile next to TVM's kernels inside the model, with
    each one's end-to-end median and the part its profile does not explain
    (``profiling/explain.py``). Both frameworks' workers run at once and measure in alternating
    turns (``lockstep``; off: one after the other). ``precision`` as ``run``'s (bf16: TVM and
    OpenVINO in bf16). Returns the document ``tvmbench explain --json`` writes."""
    from tvmbench.backends import BackendConfig, backend_class
    from tvmbench.profiling.explain import PEERS, ExplainJob, compare, explain_job, match_layers
    from tvmbench.tuning.database import database_sources

    if vs not in PEERS:
        raise UserError(f"explain --vs takes one of {', '.join(PEERS)}, got '{vs}'")
    options = model_options(model, batch_size, seq_length, image_size, hf_config, None, seed)
    from tvmbench.backends import load_class

    if precision != "fp32" and not load_class(vs).reduced_precision:  # (a layer-by-layer comparison across precisions)
        raise UserError(f"explain --precision {precision} compares like with like: {vs} runs fp32 only; "
                        "use --vs openvino, or drop --precision")
    resolved = target(target_spec)
    require_device(resolved)
    check_precision(precision, resolved)
    backend_class(vs, resolved)  # a missing or unavailable peer is a one-line error before any work
    threads = threads or physical_cores()
    sources = tuple(database_sources(resolved, db, not untuned, pretuned and not untuned))
    frameworks = ("tvm", vs)
    jobs = [ExplainJob(model=model, options=options, framework=fw, runs=runs,
                       backend=BackendConfig(target=resolved, threads=threads, databases=sources,
                                             options={"precision": precision})) for fw in frameworks]
    what = [f"profiling {model} with {fw}" for fw in frameworks]
    progress = [lambda msg, fw=fw: on_event and on_event(fw, msg) for fw in frameworks]
    if lockstep:
        envs = [backend_class(fw, resolved).lockstep_env() for fw in frameworks]
        values = _in_workers_in_turns(explain_job, jobs, threads, timeout, what, envs, progress)
    else:
        values = [_in_worker(explain_job, j, threads, timeout, w, p) for j, w, p in zip(jobs, what, progress, strict=True)]
    breakdowns = dict(zip(frameworks, values, strict=True))
    return {"model": model, "vs": vs, "threads": threads, "target": resolved.config, "runs": runs,
            "lockstep": lockstep, "precision": precision, "frameworks": {fw: b.to_json() for fw, b in breakdowns.items()},
            "kinds": compare(breakdowns["tvm"], breakdowns[vs]), **match_layers(breakdowns["tvm"], breakdowns[vs])}
