"""One benchmark run's measurements: a model, several frameworks, the same inputs.

The parent process never runs a framework itself: each framework is measured by
:func:`measure_framework` in its own worker process (see ``isolation.py``), PyTorch eager first
because its outputs are the reference the others are checked against. :func:`run_frameworks`
returns each framework's :class:`~tvmbench.measure.records.FrameworkRun` (or why it failed);
``results/build.py`` turns them into the result.
"""

from __future__ import annotations

import dataclasses
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import psutil

from tvmbench.backends import BackendConfig, backend_class
from tvmbench.errors import FrameworkUnavailableError, UserError
from tvmbench.measure import accuracy, isolation
from tvmbench.measure.lockstep import Baton, Turns
from tvmbench.measure.probe import HostProbe
from tvmbench.measure.records import FrameworkRun, pool_rounds
from tvmbench.measure.timer import TimerConfig, measure
from tvmbench.models import ModelOptions, count_flops, load_model
from tvmbench.targets import ResolvedTarget

REFERENCE = "pytorch"
MEMORY_FRACTION = 0.9  # a worker may use this much of the machine's memory unless told otherwise

Events = Callable[[str, str], None]  # (framework, message)


def default_memory_limit() -> int:
    """Bytes a worker may use by default: most of the machine, leaving room for the parent."""
    return int(psutil.virtual_memory().total * MEMORY_FRACTION)


@dataclass(frozen=True)
class RunConfig:
    model: str
    target: ResolvedTarget
    frameworks: tuple[str, ...] = ("tvm", "pytorch")
    options: ModelOptions = field(default_factory=ModelOptions)
    threads: int = 1
    timer: TimerConfig = field(default_factory=TimerConfig)
    db_dir: str | None = None  # --db (or the database just tuned into)
    use_default_db: bool = True  # without --db: the target's default database, if tuning filled it
    use_pretuned: bool = True  # the databases shipped with tvmbench, where their target matches
    use_cache: bool = True
    isolate: bool = True
    rounds: int = 1  # >1: frameworks measured again in alternating order (A B, B A, ...)
    lockstep: bool | None = None  # frameworks of a round in alternating turns (None: when rounds > 1)
    probe: bool = True  # run the host-state probe between blocks (with rounds, on a CPU)
    include_io: bool = False  # time host-to-device input copies and output copies back
    timeout_s: float = 3600.0
    memory_limit_bytes: int = 0  # 0: MEMORY_FRACTION of the machine's memory
    tolerance: dict[str, float] = field(default_factory=dict)  # overrides of the fp32 tolerance
    backend_options: dict[str, Any] = field(default_factory=dict)  # torch_compile_mode, openvino_hint, ...
    # False: what a worker prints goes to a log file, named in its error if it fails (--verbose: True)
    show_worker_output: bool = False

    def memory_limit(self) -> int:
        return self.memory_limit_bytes or default_memory_limit()

    def interleaved(self) -> bool:
        """Whether each round's frameworks measure in lockstep turns (``lockstep.py``): with
        ``--rounds`` unless turned off, and only with workers (and more than one framework)."""
        wanted = self.rounds > 1 if self.lockstep is None else self.lockstep
        return wanted and self.isolate and len(self.frameworks) > 1

    def probed(self) -> bool:
        """Whether workers run the host-state probe (``probe.py``) between their blocks: with
        ``--rounds``, on a CPU target (the probe reads the CPU's cores), unless ``--no-probe``."""
        return self.probe and self.rounds > 1 and self.target.device == "cpu"


@dataclass(frozen=True)
class FrameworkJob:
    """Everything a worker needs, picklable: it rebuilds the model itself from the same seed."""

    framework: str
    model: str
    options: ModelOptions
    backend: BackendConfig
    timer: TimerConfig
    timed: bool = True  # False: only produce reference outputs
    count_flops: bool = False
    include_io: bool = False
    turns: Turns | None = None  # lockstep: this worker's place in the round's rotation
    probe: bool = False  # run the host-state probe between blocks (not for a remote device)


INFERENCE_STARTS = "first inference"  # the progress message after which memory is inference memory
WORKER_DONE = "done"  # the event after a framework's worker has ended (progress counts these)


def measure_framework(job: FrameworkJob, progress: Callable[[str], None]) -> FrameworkRun:
    """Prepare, run once cold, time steady state, return outputs. Runs inside the worker."""
    from tvmbench.models import is_package

    if is_package(job.model) and "torch" not in sys.modules:
        # A package needs no torch, and proves it: TVM's FFI imports torch whenever it can (for
        # DLPack), so it is made unimportable here; a code path that needed it would fail loudly.
        from tvmbench.tvm_exec import hide_torch

        hide_torch()
    phases: dict[str, float] = {}
    t0 = time.perf_counter()
    progress("building the model")
    model = load_model(job.model, job.options)
    phases["load_model_s"] = time.perf_counter() - t0
    backend = backend_class(job.framework)(job.backend)
    backend.log = progress
    progress("importing and compiling" if job.framework == "tvm" else "preparing")
    t0 = time.perf_counter()
    backend.prepare(model)
    phases["prepare_s"] = time.perf_counter() - t0
    phases.update(backend.phases_s)
    progress(INFERENCE_STARTS)
    t0 = time.perf_counter()
    backend.run()
    phases["first_inference_s"] = time.perf_counter() - t0
    run = FrameworkRun(info=backend.info, phases_s=phases, outputs=backend.outputs(),
                       batch_size=model.batch_size, model=model.describe())
    if job.count_flops:  # before timing: in lockstep, other frameworks may be timed after this one
        progress("counting FLOPs")
        run.flops = count_flops(model)
    if job.timed:
        def on_timer(stage: str, n: int) -> None:
            progress(f"{stage} run {n}")

        if job.turns is not None:
            progress("waiting for the other frameworks (lockstep)")
            job.turns.arrive()
        try:
            block_timer = None if job.include_io else backend.block_timer()
            probe = HostProbe() if job.probe and block_timer is None and backend.tvm_thread_pool else None
            run.measurement = measure(backend.run_with_io if job.include_io else backend.run, job.timer, on_timer,
                                      block_timer=block_timer, turns=job.turns, probe=probe)
        finally:
            if job.turns is not None:
                job.turns.finish()
    backend.close()
    return run


def thread_env(threads: int) -> dict[str, str]:
    """The same thread count for every framework, set before any of them starts a pool."""
    n = str(threads)
    return {"TVM_NUM_THREADS": n, "OMP_NUM_THREADS": n, "MKL_NUM_THREADS": n, "OPENBLAS_NUM_THREADS": n}


def run_frameworks(cfg: RunConfig, on_event: Events | None = None
                   ) -> tuple[list[str], dict[str, isolation.Outcome], list[Any] | None, str | None]:
    """Measure every framework, ``cfg.rounds`` times in alternating order. Returns the order
    (the reference first), each framework's outcome (its value a FrameworkRun), the reference
    outputs and where they came from: PyTorch, else ``fallback_reference`` (None, None without).

    Alternating (A B, B A, ...) with a fresh worker each time spreads slow drift of the machine
    (thermal, other load) over all frameworks alike; the round-to-round spread is reported. With
    several rounds, each round's frameworks also measure in lockstep, in turns of a quarter
    second (``lockstep.py``), so a burst of interference of a few seconds hits them all alike.
    """
    events = on_event or (lambda fw, msg: None)
    backend_cfg = backend_config(cfg)
    base = sorted(cfg.frameworks, key=lambda f: f != REFERENCE)  # the reference first
    rounds: dict[str, list[isolation.Outcome]] = {fw: [] for fw in base}
    for r in range(cfg.rounds):
        tag = f"round {r + 1}/{cfg.rounds}: " if cfg.rounds > 1 else ""
        order = base if r % 2 == 0 else base[::-1]
        jobs = [FrameworkJob(fw, cfg.model, cfg.options, backend_cfg, cfg.timer,
                             count_flops=fw == REFERENCE and r == 0, include_io=cfg.include_io,
                             probe=cfg.probed()) for fw in order]
        tagged = lambda f, m, tag=tag: events(f, tag + m)  # noqa: E731
        if cfg.interleaved():
            outcomes = _run_in_lockstep(cfg, jobs, tagged)
        else:
            outcomes = []
            for job in jobs:
                outcomes.append(_run_job(cfg, job, tagged))
                events(job.framework, WORKER_DONE)
        for job, outcome in zip(jobs, outcomes, strict=True):
            rounds[job.framework].append(outcome)
            if cfg.interleaved():  # lockstep: the round's workers end together
                events(job.framework, WORKER_DONE)
    raw = {fw: merge_rounds(outcomes) for fw, outcomes in rounds.items()}
    ref = raw.get(REFERENCE)
    if ref is None and backend_class_runs(REFERENCE, cfg.model):
        events(REFERENCE, "computing reference outputs")
        ref = _run_job(cfg, FrameworkJob(REFERENCE, cfg.model, cfg.options, backend_cfg, cfg.timer,
                                         timed=False, count_flops=True), events)
        raw["_reference"] = ref
    if ref is not None and ref.ok:
        return base, raw, ref.value.outputs, REFERENCE
    outputs, source = fallback_reference(cfg, raw)
    if outputs is None:
        # No PyTorch module and no peer measured (``--frameworks tvm`` on an ONNX file): a peer
        # runs once, untimed, so TVM's outputs are still checked.
        for peer in (p for p in REFERENCE_PEERS if p not in raw and backend_class_runs(p, cfg.model)):
            events(peer, "computing reference outputs")
            outcome = _run_job(cfg, FrameworkJob(peer, cfg.model, cfg.options, backend_cfg, cfg.timer,
                                                 timed=False), events)
            if outcome.ok:
                raw["_reference"] = outcome
                return base, raw, outcome.value.outputs, peer
    return base, raw, outputs, source


def backend_config(cfg: RunConfig, **options: Any) -> BackendConfig:
    """The settings every framework's worker gets (``options`` added to the run's)."""
    from tvmbench.tuning.database import database_sources

    sources = database_sources(cfg.target, cfg.db_dir, cfg.use_default_db, cfg.use_pretuned)
    return BackendConfig(target=cfg.target, threads=cfg.threads, databases=tuple(sources),
                         use_cache=cfg.use_cache, options={**cfg.backend_options, **options})


def precision_of(cfg: RunConfig, framework: str) -> str:
    """The precision ``framework`` computes in: "bfloat16" or "float16" for a framework that
    honours a reduced ``--precision``, else "float32"."""
    from tvmbench.backends import load_class

    precision = cfg.backend_options.get("precision", "fp32")
    if precision == "fp32" or not load_class(framework).reduced_precision:
        return "float32"
    return "bfloat16" if precision == "bf16" else "float16"


def tolerance_of(cfg: RunConfig, framework: str) -> accuracy.Tolerance:
    """The tolerance ``framework``'s outputs are checked at: that of its precision, with the run's
    overrides."""
    return accuracy.tolerance_for(precision_of(cfg, framework), cfg.tolerance)


def float64_reference(cfg: RunConfig, raw: dict[str, isolation.Outcome], ref_outputs: list[Any] | None,
                      source: str | None, on_event: Events | None = None) -> isolation.Outcome | None:
    """PyTorch's outputs in float64, computed only when some framework checked at the float32
    tolerance missed PyTorch's float32 outputs narrowly (``accuracy.narrow_miss``): the exact
    result that tells a framework rounding differently through a deep network from one computing
    something else (``accuracy.arbitrate``). None when nothing missed narrowly."""
    if source != REFERENCE or ref_outputs is None:
        return None
    misses = _misses(cfg, raw, ref_outputs, lambda check, tol, precision: precision == "float32"
                     and accuracy.narrow_miss(check, tol))
    if not misses:
        return None
    return _second_reference(cfg, f"{', '.join(misses)} missed the float32 reference narrowly: computing it in "
                                  "float64", on_event, float64=True)


def reduced_reference(cfg: RunConfig, raw: dict[str, isolation.Outcome], ref_outputs: list[Any] | None,
                      source: str | None, on_event: Events | None = None) -> isolation.Outcome | None:
    """PyTorch's outputs under ``torch.autocast`` at the run's reduced precision, computed only
    when some framework computing in that precision missed PyTorch's float32 outputs
    (``accuracy.reduced_miss``): what that precision itself does to this model, which
    ``accuracy.arbitrate_reduced`` judges the miss by. None when nothing missed."""
    if source != REFERENCE or ref_outputs is None:
        return None
    misses = _misses(cfg, raw, ref_outputs, lambda check, tol, precision: precision != "float32"
                     and accuracy.reduced_miss(check))
    if not misses:
        return None
    precision = precision_of(cfg, misses[0])
    return _second_reference(cfg, f"{', '.join(misses)} missed the float32 reference in {precision}: computing "
                                  f"it with PyTorch's {precision} (autocast)", on_event, autocast=precision)


def _misses(cfg: RunConfig, raw: dict[str, isolation.Outcome], ref_outputs: list[Any],
            missed: Callable[[dict[str, Any], accuracy.Tolerance, str], bool]) -> list[str]:
    """The frameworks whose outputs' check against the reference (at their tolerance, computing
    in their precision) ``missed`` says deserves a second reference."""
    return [fw for fw, o in raw.items() if fw != REFERENCE and not fw.startswith("_") and o.ok
            for tol in [tolerance_of(cfg, fw)]
            if missed(accuracy.compare(o.value.outputs, ref_outputs, tol), tol, precision_of(cfg, fw))]


def _second_reference(cfg: RunConfig, why: str, on_event: Events | None, **options: Any) -> isolation.Outcome:
    """PyTorch's outputs once more, untimed, with ``options`` (its float64 or autocast run)."""
    events = on_event or (lambda fw, msg: None)
    events(REFERENCE, why)
    job = FrameworkJob(REFERENCE, cfg.model, cfg.options, backend_config(cfg, **options), cfg.timer, timed=False)
    return _run_job(cfg, job, events)


# Peers whose outputs serve as the reference when PyTorch cannot run the model (an ONNX file):
# ONNX Runtime first, the ONNX reference implementation in practice.
REFERENCE_PEERS = ("onnxruntime", "openvino")


def fallback_reference(cfg: RunConfig, raw: dict[str, isolation.Outcome]) -> tuple[list[Any] | None, str | None]:
    """Reference outputs without PyTorch: a package's stored outputs for its own inputs, else
    those of a peer that ran the model file. (outputs, where they came from), or (None, None)."""
    from tvmbench.models import is_package

    if is_package(cfg.model) and cfg.options.fill_mode == "random" and not cfg.options.inputs_file:
        from pathlib import Path

        from tvmbench.models.package import reference_outputs

        stored = reference_outputs(Path(cfg.model).expanduser())
        if stored is not None:
            return stored, "package"
    for peer in REFERENCE_PEERS:
        outcome = raw.get(peer)
        if outcome is not None and outcome.ok:
            return outcome.value.outputs, peer
    return None, None


def backend_class_runs(framework: str, model: str) -> bool:
    """Whether ``framework`` can run the model named ``model`` (PyTorch cannot run ONNX files)."""
    from tvmbench.backends import load_class

    return load_class(framework).can_run(model)


def merge_rounds(outcomes: list[isolation.Outcome]) -> isolation.Outcome:
    """Pool the timed samples of the successful rounds (``records.pool_rounds``). A framework
    fails only if every round failed."""
    ok = [o for o in outcomes if o.ok]
    if not ok:
        return outcomes[0]
    if len(outcomes) == 1:
        return ok[0]
    value = pool_rounds([o.value for o in ok], [o.error.get("message") for o in outcomes if not o.ok], len(outcomes))
    gpu = [o.peak_gpu_bytes for o in ok if o.peak_gpu_bytes is not None]
    inference = [o.peak_rss_marked_bytes for o in ok if o.peak_rss_marked_bytes is not None]
    return isolation.Outcome(ok=True, value=value, peak_rss_bytes=max(o.peak_rss_bytes for o in ok),
                             peak_gpu_bytes=max(gpu) if gpu else None,
                             peak_rss_marked_bytes=max(inference) if inference else None,
                             wall_s=sum(o.wall_s for o in outcomes))


def _inline(job: FrameworkJob, on_progress: Callable[[str], None]) -> isolation.Outcome:
    """Same contract as run_isolated, in this process (for debugging: --no-isolation)."""
    t0 = time.monotonic()
    try:
        return isolation.Outcome(ok=True, value=measure_framework(job, on_progress),
                                 wall_s=time.monotonic() - t0,
                                 peak_rss_bytes=psutil.Process().memory_info().rss)
    except Exception as e:
        return isolation.Outcome(ok=False, error=isolation.describe_exception(e))


def _run_in_lockstep(cfg: RunConfig, jobs: list[FrameworkJob], events: Events) -> list[isolation.Outcome]:
    """Every job's worker at once, measuring in turns (``lockstep.py``); the outcomes in order."""
    from tvmbench.models import is_package

    return run_in_turns(len(jobs), lambda i, turns: _run_job(cfg, dataclasses.replace(jobs[i], turns=turns), events),
                        preloaded=not any(is_package(j.model) for j in jobs))


def run_in_turns(n: int, run: Callable[[int, Turns], isolation.Outcome], preloaded: bool = True
                 ) -> list[isolation.Outcome]:
    """``run(i, turns)`` for ``i`` in ``range(n)`` at once, each given its place in one rotation
    of turns (``lockstep.Turns``; ``run`` starts the worker that takes them); the outcomes in
    order. Each is watched by its own thread, which frees the worker's place in the rotation when
    it ends, however it ends, so the others never wait for a worker that is gone."""
    import threading

    baton = Baton(n, isolation.context(preloaded))
    outcomes: list[isolation.Outcome | None] = [None] * n

    def watch(i: int) -> None:
        try:
            outcomes[i] = run(i, Turns(baton, i))
        finally:
            baton.abandon(i)

    threads = [threading.Thread(target=watch, args=(i,), daemon=True) for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        while t.is_alive():
            t.join(0.2)  # short waits: Ctrl-C reaches this thread promptly
    return [o if o is not None else isolation.Outcome(ok=False, error={
        "kind": "crash", "type": "WorkerCrashed", "message": "the worker's watcher failed"}) for o in outcomes]


def _run_job(cfg: RunConfig, job: FrameworkJob, events: Events) -> isolation.Outcome:
    from tvmbench.models import is_package

    def progress(msg: str) -> None:
        events(job.framework, msg)

    try:  # a missing or unavailable framework is reported without starting a worker
        cls = backend_class(job.framework, cfg.target)
    except UserError as e:
        kind = "unavailable" if isinstance(e, FrameworkUnavailableError) else "missing"
        return isolation.Outcome(ok=False, error={"kind": kind, "type": type(e).__name__, "message": str(e)})
    if not cfg.isolate:
        return _inline(job, progress)
    sampler = None
    if cfg.target.device == "cuda":
        from tvmbench.measure.gpu_memory import GpuMemorySampler

        sampler = GpuMemorySampler()
    return isolation.run_isolated(measure_framework, job, timeout_s=cfg.timeout_s,
                                  memory_limit_bytes=cfg.memory_limit(),
                                  env={**thread_env(cfg.threads), **(cls.lockstep_env() if job.turns is not None else {})},
                                  on_progress=progress, gpu_sampler=sampler, mark=INFERENCE_STARTS,
                                  preloaded=not is_package(job.model),
                                  output=None if cfg.show_worker_output else isolation.output_file(job.framework))
