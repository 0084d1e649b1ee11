"""Collect a model's operators into the store: features, and times inside the model and alone.

One :class:`CollectJob` is one model at one thread count; it runs in a worker process (the thread
count is fixed when TVM's runtime starts). Per schedule source:

- ``default``: tvmbench's default schedules only (no tuning database), every kernel;
- ``tuned``: the tuning databases applied; only the kernels a database has a record for are
  stored under this source (the others run the default schedule, already stored).

Per kernel, two contexts: ``in_model`` (its time per call inside the compiled model, from the
Relax VM's instrument hook, median over the instrumented runs) and ``alone_warm`` (the kernel
built by itself with the same schedule and timed with TVM's time evaluator, inputs hot in
cache). The gap between the two is what the neighbours cost a kernel (cold inputs, evicted
weights) and what a tuner that measures kernels alone cannot see.

A kernel's workload key is the structural hash of the kernel as MetaSchedule normalises it (the
key of tuning records), so the same convolution in two models is one operator, counted per model.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass
from typing import Any

from tvmbench.backends.base import BackendConfig
from tvmbench.models import ModelOptions
from tvmbench.targets import ResolvedTarget

SCHEDULES = ("default", "tuned")
# Relax ops that fuse into a kernel's write-back (its epilogue), as they appear in kernel names.
_ELEMENTWISE_OPS = {"add", "subtract", "multiply", "divide", "relu", "clip", "minimum", "maximum", "tanh", "erf",
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
        reduce = found[0] if found else []
        if len(reduce) == 3:
            return f"conv2d {reduce[0]}x{reduce[1]}"
        return {1: "conv2d 1x1", 2: "conv2d depthwise"}.get(len(reduce), "conv2d")
    if "matmul" in n or "dense" in n:
        shape = found[1] if found else []
        return "batch matmul" if len(shape) > 2 and any((d or 1) > 1 for d in shape[:-2]) else "dense"
    for kind, words in (("softmax", ("softmax",)), ("norm", ("norm",)), ("pool", ("pool",)),
                        ("reduction", ("mean", "sum", "max", "min")), ("layout", _LAYOUT_WORDS)):
        if any(w in n for w in words):
            return kind
    return "elementwise"


def features(name: str, func: Any) -> dict[str, Any]:
    """Kind, shapes, FLOPs, compulsory bytes (every argument read or written once) and intensity."""
    import numpy as np
    import tvm
    from tvm.s_tir.analysis import estimate_tir_flops

    from tvmbench.compile.names import WINOGRAD_INPUT, WINOGRAD_OUTPUT

    buffers = list(func.params)  # tensor-typed variables in TVM 0.27, with shape and dtype
    written = _written(func)
    args = [{"shape": [int(d) for d in b.shape], "dtype": str(b.dtype)} for b in buffers]
    nbytes = sum(int(np.prod(a["shape"])) * tvm.DataType(a["dtype"]).bits // 8 for a in args)
    flops: float | None
    try:
        flops = float(estimate_tir_flops(tvm.IRModule({"main": func})))
    except Exception:
        flops = None
    if WINOGRAD_INPUT in name or WINOGRAD_OUTPUT in name:
        flops = None  # TVM counts every branch of the transforms' coefficient selects
    tokens = [t.rstrip("0123456789") for t in name.split("_")]
    epilogue = ",".join(t for t in tokens if t in _ELEMENTWISE_OPS)
    return {"name": name, "kind": op_kind(name, func), "epilogue": epilogue,
            "inputs": [a for a, b in zip(args, buffers, strict=True) if b.name not in written],
            "outputs": [a for a, b in zip(args, buffers, strict=True) if b.name in written],
            "dtype": args[-1]["dtype"] if args else None, "flops": flops, "bytes": nbytes,
            "intensity": flops / nbytes if flops and nbytes else None}


def _written(func: Any) -> set[str]:
    """Names of the buffers the function's blocks write."""
    from tvm import s_tir

    sch = s_tir.Schedule(func)
    return {w.source.name for b in sch.get_child_blocks(sch.get_sblock("root")) for w in sch.get(b).writes}


def workload_key(func: Any) -> str:
    """The structural hash of the kernel as MetaSchedule normalises it (tuning records' key)."""
    import tvm_ffi
    from tvm.s_tir.meta_schedule.tune_context import _normalize_mod

    return str(tvm_ffi.structural_hash(_normalize_mod(func)))


def default_schedule(func: Any, target: ResolvedTarget) -> tuple[str | None, Any]:
    """(rule name, schedule) of the first default rule that applies, as ApplyDefaultSchedule picks."""
    from tvmbench.compile.pipeline import dlight_rules

    with target.tvm() as tvm_target:
        for rule in dlight_rules(target):
            sch = rule.apply(func, tvm_target, False)
            if sch is not None:
                return type(rule).__name__, sch
    return None, None


def decisions(sch: Any) -> dict[str, Any]:
    """What a schedule chose, from its trace: split factors, and how many loops it parallelised,
    vectorised and unrolled; a tuned trace's sampling decisions too."""
    out: dict[str, Any] = {"splits": [], "parallel": 0, "vectorize": 0, "unroll": 0}
    if sch is None:
        return out
    for inst in sch.trace.insts:
        kind = inst.kind.name
        if kind == "Split":
            out["splits"].append([_as_int(x) for x in inst.inputs[1:]])
        elif kind in ("Parallel", "Vectorize", "Unroll"):
            out[kind.lower()] += 1
    sampled = {str(inst.kind.name): [_as_int(x) for x in d] if isinstance(d, list | tuple) else _as_int(d)
               for inst, d in sch.trace.decisions.items()} if sch.trace.decisions else {}
    if sampled:
        out["sampled"] = sampled
    return out


def _as_int(x: Any) -> Any:
    try:
        return int(x)
    except (TypeError, ValueError):
        return None if x is None else str(x)


def time_alone(func: Any, sch: Any, target: ResolvedTarget, number: int = 10, repeat: int = 5) -> float:
    """Microseconds per call of ``func`` built alone with ``sch`` (inputs hot in cache): the median
    of ``repeat`` time-evaluator repeats of at least 20 ms each."""
    import numpy as np
    import tvm

    # A public entry: the fused kernels are private functions of the model's module.
    scheduled = (sch.mod["main"] if sch is not None else func).with_attr("global_symbol", "main")
    lib = tvm.compile(tvm.IRModule({"main": scheduled}), target.tvm()).jit()
    dev = tvm.cpu(0)
    rng = np.random.default_rng(0)
    args = []
    for p in func.params:
        shape, dtype = [int(d) for d in p.shape], str(p.dtype)
        data = rng.standard_normal(shape).astype(dtype) if "float" in dtype else np.zeros(shape, dtype)
        args.append(tvm.runtime.tensor(data, dev))
    evaluator = lib.time_evaluator("main", dev, number=number, repeat=repeat, min_repeat_ms=20)
    return float(np.median(evaluator(*args).results)) * 1e6


def collect_job(job: CollectJob, progress: Any = None) -> dict[str, Any]:
    """Worker entry: measure the model's operators and store them; returns counts for the report."""
    import tvm

    from tvmbench.backends import backend_class
    from tvmbench.compile import pipeline
    from tvmbench.models import load_model
    from tvmbench.profiling.store import OpStore
    from tvmbench.version import __version__

    say = progress or (lambda msg: None)
    store = OpStore.open(job.store)
    machine = store.machine_id(machine_fingerprint(job.target))
    versions = store.versions_id(__version__, tvm.__version__)
    say("building the model")
    model = load_model(job.model, job.options)
    model_id = store.model_id(job.model, job.options.key())
    counts = {"operators": 0, "measured": 0, "skipped": 0}
    for source in job.schedules:
        variant = "tvm_untuned" if source == "default" else "tvm"
        backend = backend_class(variant)(BackendConfig(target=job.target, threads=job.threads,
                                                       databases=job.databases if source == "tuned" else ()))
        say(f"{source}: compiling")
        backend.prepare(model)
        legal = pipeline.per_inference(pipeline.legalized(backend.relax_module(), job.target))
        funcs = {gv.name_hint: f for gv, f in legal.functions.items() if isinstance(f, tvm.tirx.PrimFunc)}
        for _ in range(job.warmup):
            backend.run()
        say(f"{source}: kernels in the model")
        per_run, calls = backend.time_kernels(job.runs)
        ops = {name: {**features(name, f), "workload": workload_key(f), "count": calls.get(name, 0)}
               for name, f in funcs.items() if calls.get(name)}
        store.add_operators(model_id, list(ops.values()))
        counts["operators"] = max(counts["operators"], len(ops))
        databases = backend.tuning_databases()
        for i, (name, op) in enumerate(sorted(ops.items()), 1):
            say(f"{source}: operator {i}/{len(ops)}")
            sch, label = _schedule_for(funcs[name], source, databases, job.target)
            if sch is None and source == "tuned":
                continue  # no record: it ran the default schedule, stored under "default"
            _measure(store, job, op, funcs[name], sch, label, source, machine, versions, per_run, counts)
        backend.close()
    if not store.has_roofline(machine, job.threads):
        from tvmbench.measure.peak import measure_bandwidth, measure_sgemm_peak

        say("the machine's roofline")
        store.add_roofline(machine, job.threads, measure_sgemm_peak(job.threads, n=2048),
                           measure_bandwidth(job.threads))
    store.close()
    return counts


def _schedule_for(func: Any, source: str, databases: list[Any], target: ResolvedTarget) -> tuple[Any, str | None]:
    """The schedule a kernel ran with under ``source``: (schedule, its label), or (None, None) for
    "tuned" when no database has a record for it."""
    if source == "default":
        rule, sch = default_schedule(func, target)
        return sch, rule
    from tvm.s_tir.meta_schedule.tune_context import _normalize_mod

    mod = _normalize_mod(func)
    for db in databases:
        if db.has_workload(mod):
            with target.tvm() as tvm_target:
                sch = db.query_schedule(mod, tvm_target, workload_name="main")
            if sch is not None:
                return sch, "tuning record"
    return None, None


def _measure(store: Any, job: CollectJob, op: dict[str, Any], func: Any, sch: Any, label: str | None, source: str,
             machine: int, versions: int, per_run: list[dict[str, float]], counts: dict[str, int]) -> None:
    """Store the operator's in-model and alone times under ``source`` unless already stored."""
    chosen = {"schedule": label, **decisions(sch)}
    key = (op["workload"], machine, versions, source, job.threads)
    if not store.measured(*key, "in_model"):
        per_call = statistics.median(r.get(op["name"], 0.0) for r in per_run) / op["count"]
        store.add_measurement(*key, "in_model", per_call * 1e6, len(per_run), chosen)
        counts["measured"] += 1
    else:
        counts["skipped"] += 1
    if job.alone and not store.measured(*key, "alone_warm"):
        store.add_measurement(*key, "alone_warm", time_alone(func, sch, job.target), 5, chosen)
        counts["measured"] += 1
    elif job.alone:
        counts["skipped"] += 1


def machine_fingerprint(target: ResolvedTarget) -> dict[str, Any]:
    """What makes two machines' times comparable: the CPU, its ISA level and its core count."""
    from tvmbench.measure.environment import cpu_model
    from tvmbench.targets import isa_class, physical_cores

    return {"cpu_model": cpu_model(), "isa": isa_class(target.tvm()), "cores": physical_cores()}
