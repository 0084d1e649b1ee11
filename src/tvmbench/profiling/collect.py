"""Collect a model's operators into the store: features, and times inside the model and alone.

One :class:`CollectJob` is one model at one thread count; it runs in a worker process (the thread
count is fixed when TVM's runtime starts). Per schedule source (``profiling/sources.py``):

- ``default``: tvmbench's default schedules only (no tuning database), every kernel;
- ``tuned``: the tuning databases applied; only the kernels a database has a record for are
  stored under this source (the others run the default schedule, already stored);
- ``sampled:N``: N schedules drawn from MetaSchedule's design space per kernel, timed alone.

Per kernel, three contexts: ``in_model`` (its time per call inside the compiled model, from the
Relax VM's instrument hook, median over the instrumented runs), ``alone_warm`` (the kernel
built by itself with the same schedule and timed as MetaSchedule times tuning candidates, in its
runner's worker processes, inputs hot in cache) and ``alone_cold`` (the same with the caches
flushed of its weights before each call); see ``profiling/alone.py``.
The gaps between them are what the neighbours cost a kernel (cold inputs, evicted weights) and
what a tuner that measures kernels alone cannot see.

A kernel's workload key is the structural hash of the kernel as MetaSchedule normalises it (the
key of tuning records), so the same convolution in two models is one operator, counted per model.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from tvmbench.backends.base import BackendConfig
from tvmbench.models import ModelOptions
from tvmbench.targets import ResolvedTarget

ALONE = ("alone_warm", "alone_cold")
ALONE_SAMPLES = {"alone_warm": 5, "alone_cold": 20}  # the runner's repeats (profiling/alone.py)
# Relax ops that fuse into a kernel's write-back (its epilogue), as they appear in kernel names.
ELEMENTWISE_OPS = {"add", "subtract", "multiply", "divide", "relu", "clip", "minimum", "maximum", "tanh", "erf",
                    "sigmoid", "exp", "gelu", "silu", "power", "sqrt", "rsqrt", "negative"}
_LAYOUT_WORDS = ("transpose", "reshape", "layout", "concat", "split", "take", "strided_slice", "broadcast_to",
                 "pad", "squeeze", "expand_dims")


@dataclass(frozen=True)
class CollectJob:
    model: str
    options: ModelOptions
    target: ResolvedTarget
    threads: int
    store: str
    schedules: tuple[str, ...] = ("default",)
    databases: tuple[tuple[str, str], ...] = ()  # (kind, directory) for the "tuned" source
    runs: int = 20
    warmup: int = 5
    alone: bool = True


def op_kind(name: str, func: Any) -> str:
    """The operator's kind from its kernel name (the Relax ops it fused) and its reduction."""
    from tvmbench.compile.tir import single_reduction

    n = name.lower()
    if "winograd_product" in n:
        return "conv2d winograd"
    if "winograd" in n:
        return "winograd transform"
    found = None
    try:
        found = single_reduction(func)
    except Exception:
        pass
    if "conv2d" in n:
        return _conv_kind(found[0] if found else [], found[1] if found else [], func)
    if "attention" in n:
        return "batch matmul"  # (both matmuls of an attention and the softmax between, joined)
    if "_scan" in n:
        return "dense"  # (a recurrent layer's time loop: a matrix-vector product per step)
    if "matmul" in n or "dense" in n:
        shape = found[1] if found else []
        return "batch matmul" if len(shape) > 2 and any((d or 1) > 1 for d in shape[:-2]) else "dense"
    for kind, words in (("softmax", ("softmax",)), ("norm", ("norm",)), ("pool", ("pool",)),
                        ("reduction", ("mean", "sum", "max", "min")), ("layout", _LAYOUT_WORDS)):
        if any(w in n for w in words):
            return kind
    return "elementwise"


def _conv_kind(reduce: list[int], out: list[int | None], func: Any) -> str:
    """A convolution's kind from its reduction's extents above 1: a window's then the input
    channels (1x1: the channels alone; depthwise: the window alone). A 1-d convolution's 1 x K
    window leaves one window extent, so whether the last extent is the input's channel count
    (its first argument's last axis; the second where that is an NCHW map one row high) tells
    K channels-wide taps from a depthwise window:
    a 1 x 7 layer of a 1-d ResNet was labelled depthwise, QuartzNet's depthwise 1 x 33 layers 1x1.
    Such a window's orientation is the output's single row or column (``out``, NHWC), where it has one."""
    shape = [int(d) for d in func.params[0].shape] if func.params and len(func.params[0].shape) == 4 else []
    # (NHWC's channels; or NCHW's of a map one row high: not a 7x7 depthwise over a 7-pixel-high NHWC map)
    channels = bool(reduce) and bool(shape) and (reduce[-1] == shape[3] or (reduce[-1] == shape[1] and shape[2] == 1))
    if len(reduce) == 3:
        return f"conv2d {reduce[0]}x{reduce[1]}"
    if len(reduce) == 2 and channels:
        k = reduce[0]
        rows, cols = (out[1], out[2]) if len(out) == 4 else (None, None)
        window = f"1x{k}" if rows == 1 else f"{k}x1" if cols == 1 else f"1x{k} or {k}x1"
        return f"conv2d {window}"
    if len(reduce) == 1 and channels:
        return "conv2d 1x1"
    return "conv2d depthwise" if reduce else "conv2d"


def features(name: str, func: Any) -> dict[str, Any]:
    """Kind, shapes, FLOPs, compulsory bytes (every argument read or written once, or as much of
    it as the kernel's loads and stores can reach: ``_accesses``) and intensity."""

    from tvmbench.compile.names import WINOGRAD_INPUT, WINOGRAD_OUTPUT
    from tvmbench.compile.tir import contraction_output, kernel_flops, written_shape

    buffers = list(func.params)  # tensor-typed variables in TVM 0.27, with shape and dtype
    written = _written(func)
    args = [{"shape": [int(d) for d in b.shape], "dtype": str(b.dtype)} for b in buffers]
    nbytes = compulsory_bytes(func)
    flops = kernel_flops(func)
    if WINOGRAD_INPUT in name or WINOGRAD_OUTPUT in name:
        flops = None  # TVM counts every branch of the transforms' coefficient selects
    tokens = [t.rstrip("0123456789") for t in name.split("_")]
    epilogue = ",".join(t for t in tokens if t in ELEMENTWISE_OPS)
    return {"name": name, "kind": op_kind(name, func), "epilogue": epilogue,
            "inputs": [a for a, b in zip(args, buffers, strict=True) if b.name not in written],
            "outputs": [a for a, b in zip(args, buffers, strict=True) if b.name in written],
            "dtype": args[-1]["dtype"] if args else None, "flops": flops, "bytes": nbytes,
            "intensity": flops / nbytes if flops and nbytes else None, "contraction_out": contraction_output(func),
            "pixels_out": written_shape(func, lambda b: b.name_hint == WINOGRAD_OUTPUT)}


def compulsory_bytes(func: Any) -> int:
    """Every argument read or written once, or as much of it as the kernel's loads and stores
    can reach (``_accesses``)."""
    import numpy as np
    import tvm

    accesses = _accesses(func)
    return sum(min(int(np.prod([int(d) for d in b.shape])), accesses.get(b.name, math.inf))
               * tvm.DataType(str(b.dtype)).bits // 8 for b in func.params)


def _accesses(func: Any) -> dict[str, int]:
    """Per buffer, how many loads and stores of it the kernel's blocks make in all (each block's
    iterations times its accesses): at most that many of its elements can be touched. An
    embedding's gather reads 512 rows of BERT's 30522, a slice part of its input; counted whole,
    the roofline bounded them by bytes they never read (``take``: the whole 94 MB table). Empty when
    the kernel has no blocks or a loop of unknown extent (every argument then counts whole)."""
    import tvm_ffi
    from tvm import s_tir

    from tvmbench.compile.tir import as_int

    counts: dict[str, int] = {}
    try:
        sch = s_tir.Schedule(func)
        blocks = []
        tvm_ffi.structural_walk(func.body, (s_tir.stmt.SBlock, blocks.append))
        for block in blocks:
            if block.name_hint == "root":
                continue
            extents = [as_int(sch.get(loop).extent) for loop in sch.get_loops(sch.get_sblock(block.name_hint))]
            if None in extents:
                return {}
            for name in _buffers_accessed(block.body):
                counts[name] = counts.get(name, 0) + math.prod(extents)
    except s_tir.schedule.ScheduleError:  # (no root block)
        return {}
    return counts


def _buffers_accessed(stmt: Any) -> list[str]:
    """The buffer of each load and store in ``stmt``, once per access."""
    import tvm
    import tvm_ffi

    names: list[str] = []
    tvm_ffi.structural_walk(stmt, [(tvm.ir.expr.TensorLoad, lambda n: names.append(n.source.name)),
                                   (tvm.tirx.stmt.BufferStore, lambda n: names.append(n.buffer.name))])
    return names


def _written(func: Any) -> set[str]:
    """Names of the buffers the function's blocks write (a hand-written kernel without blocks,
    ``compile/recurrent.py``'s: what TVM's access-region analysis finds its body writing)."""
    from tvm import s_tir

    try:
        sch = s_tir.Schedule(func)
        return {w.source.name for b in sch.get_child_blocks(sch.get_sblock("root")) for w in sch.get(b).writes}
    except s_tir.schedule.ScheduleError:  # (no root block)
        body = s_tir.stmt.SBlock([], [], [], "root", func.body)
        writes = s_tir.analysis.get_sblock_access_region(body, {p: p for p in func.params})[1]
        return {w.source.name for w in writes}


def workload_key(func: Any) -> str:
    """The structural hash of the kernel as MetaSchedule normalises it (tuning records' key)."""
    import tvm_ffi
    from tvm.s_tir.meta_schedule.tune_context import _normalize_mod

    return str(tvm_ffi.structural_hash(_normalize_mod(func)))


def collect_job(job: CollectJob, progress: Any = None) -> dict[str, Any]:
    """Worker entry: measure the model's operators and store them; returns counts for the report."""
    import tvm

    from tvmbench.models import load_model
    from tvmbench.profiling.store import OpStore
    from tvmbench.version import __version__

    say = progress or (lambda msg: None)
    store = OpStore.open(job.store)
    ctx = _Context(store, job, store.machine_id(machine_fingerprint(job.target)),
                   store.versions_id(__version__, tvm.__version__))
    say("building the model")
    model = load_model(job.model, job.options)
    model_id = store.model_id(job.model, job.options.key())
    counts = {"operators": 0, "measured": 0, "skipped": 0}
    sampling = any(s.startswith("sampled:") for s in job.schedules)
    for build in [b for b in ("default", "tuned") if b in job.schedules or (b == "default" and sampling)]:
        ops, funcs, per_run, databases = _in_model(model, job, build, say)
        store.add_operators(model_id, list(ops.values()))
        counts["operators"] = max(counts["operators"], len(ops))
        for i, (name, op) in enumerate(sorted(ops.items()), 1):
            say(f"{build}: operator {i}/{len(ops)}")
            schedules = list(_schedules(job, build, funcs[name], databases, ctx, op))
            ctx.measure(op, funcs[name], schedules, per_run, build, counts)
    if not store.has_roofline(ctx.machine, job.threads):
        from tvmbench.measure.peak import measure_bandwidth, measure_compute_peak

        say("the machine's roofline")
        store.add_roofline(ctx.machine, job.threads, measure_compute_peak(job.threads),
                           measure_bandwidth(job.threads))
    store.close()
    return counts


def _in_model(model: Any, job: CollectJob, build: str, say: Any) -> tuple[dict[str, Any], dict[str, Any],
                                                                           list[dict[str, float]], list[Any]]:
    """Compile the model with the default schedules or with the tuning databases, time its
    kernels inside it: (operators by kernel name, kernels by name, per-run times, databases)."""
    import tvm

    from tvmbench.backends import backend_class
    from tvmbench.compile import pipeline

    variant = "tvm_untuned" if build == "default" else "tvm"
    backend = backend_class(variant)(BackendConfig(target=job.target, threads=job.threads,
                                                   databases=job.databases if build == "tuned" else ()))
    say(f"{build}: compiling")
    backend.prepare(model)
    try:
        legal = pipeline.per_inference(pipeline.legalized(backend.relax_module(), job.target))
        funcs = {gv.name_hint: f for gv, f in legal.functions.items() if isinstance(f, tvm.tirx.PrimFunc)}
        for _ in range(job.warmup):
            backend.run()
        say(f"{build}: kernels in the model")
        per_run, calls = backend.time_kernels(job.runs)
        ops = {name: {**features(name, f), "workload": workload_key(f), "count": calls.get(name, 0)}
               for name, f in funcs.items() if calls.get(name)}
        return ops, funcs, per_run, backend.tuning_databases()
    finally:
        backend.close()


def _schedules(job: CollectJob, build: str, func: Any, databases: list[Any], ctx: _Context,
               op: dict[str, Any]) -> Iterator[tuple[str, str | None, Any]]:
    """(source, label, schedule) to measure a kernel of the ``build`` compile with. A tuned
    build yields only kernels a database has a record for (the others ran the default schedule,
    stored under "default"); sampled schedules are drawn only when some are not yet stored."""
    from tvmbench.compile.pipeline import default_schedule
    from tvmbench.profiling.sources import sample_count, sampled_schedules, tuned_schedule

    if build == "tuned":
        sch = tuned_schedule(func, databases, job.target)
        if sch is not None:
            yield "tuned", "tuning record", sch
        return
    if "default" in job.schedules:
        from tvm.s_tir.meta_schedule.tune_context import _normalize_mod

        rule, sch = default_schedule(_normalize_mod(func)["main"], job.target)  # public, as a tuning task
        yield "default", rule, sch
    n = sample_count(job.schedules)
    if n and job.alone and not all(ctx.stored(op, f"sampled:{k}", c) for k in range(1, n + 1)
                                   for c in ALONE):
        for k, sch in sampled_schedules(func, job.target, n):
            yield f"sampled:{k}", "MetaSchedule design space", sch


class _Context:
    """The store and the keys a worker writes under (machine, versions, thread count), and the
    timer of kernels alone (started on first use: MetaSchedule's worker pools)."""

    def __init__(self, store: Any, job: CollectJob, machine: int, versions: int) -> None:
        self.store, self.job, self.machine, self.versions = store, job, machine, versions
        self._timer: Any = None

    def stored(self, op: dict[str, Any], source: str, context: str) -> bool:
        return self.store.measured(op["workload"], self.machine, self.versions, source, self.job.threads, context)

    def measure(self, op: dict[str, Any], func: Any, schedules: list[tuple[str, str | None, Any]],
                per_run: list[dict[str, float]], build: str, counts: dict[str, int]) -> None:
        """Store the operator's in-model time under the ``build``'s own source and every
        schedule's alone times, each unless already stored; a schedule whose build or run fails
        (a crash in MetaSchedule's worker) is counted, not stored."""
        from tvmbench.profiling.sources import decisions

        for source, label, sch in schedules:
            chosen = {"schedule": label, **decisions(sch)}
            key = (op["workload"], self.machine, self.versions, source, self.job.threads)
            if source == build and not self.stored(op, source, "in_model"):
                per_call = statistics.median(r.get(op["name"], 0.0) for r in per_run) / op["count"]
                self.store.add_measurement(*key, "in_model", per_call * 1e6, len(per_run), chosen)
                counts["measured"] += 1
            elif source == build:
                counts["skipped"] += 1
        todo = [(s, label, sch) for s, label, sch in schedules
                if self.job.alone and not all(self.stored(op, s, c) for c in ALONE)]
        counts["skipped"] += (len(schedules) - len(todo)) * len(ALONE) if self.job.alone else 0
        if not todo:
            return
        if self._timer is None:
            from tvmbench.profiling.alone import AloneTimer

            self._timer = AloneTimer(self.job.target)
        mods = [sch.mod if sch is not None else _as_module(func) for _, _, sch in todo]  # public "main" each
        for (source, label, sch), times in zip(todo, self._timer.time(mods), strict=True):
            if "error" in times:
                counts["failed"] = counts.get("failed", 0) + 1
                continue
            chosen = {"schedule": label, **decisions(sch)}
            for context in ALONE:
                if not self.stored(op, source, context):
                    self.store.add_measurement(op["workload"], self.machine, self.versions, source, self.job.threads,
                                               context, times[context], ALONE_SAMPLES[context], chosen)
                    counts["measured"] += 1


def _as_module(func: Any) -> Any:
    import tvm

    return tvm.IRModule({"main": func.with_attr("global_symbol", "main")})


def machine_fingerprint(target: ResolvedTarget) -> dict[str, Any]:
    """What makes two machines' times comparable: the CPU, its ISA level and its core count."""
    from tvmbench.measure.environment import cpu_model
    from tvmbench.targets import isa_class, physical_cores

    return {"cpu_model": cpu_model(), "isa": isa_class(target.tvm()), "cores": physical_cores()}
