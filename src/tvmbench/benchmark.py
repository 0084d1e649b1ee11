"""One benchmark run: a model, several frameworks, the same inputs, one result.

The parent process never runs a framework itself: each framework is measured by
:func:`measure_framework` in its own worker process (see ``measure/isolation.py``), PyTorch eager
first because its outputs are the reference the others are checked against. The parent gathers the
results, checks accuracy, computes statistics and speedups and builds the result document.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import psutil

from tvmbench.backends import BackendConfig, backend_class, result_key
from tvmbench.errors import FrameworkUnavailableError, UserError
from tvmbench.measure import accuracy, environment, isolation, stats
from tvmbench.measure.timer import TimerConfig, measure
from tvmbench.models import ModelOptions, count_flops, load_model
from tvmbench.targets import ResolvedTarget

REFERENCE = "pytorch"

Events = Callable[[str, str], None]  # (framework, message)


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
    include_io: bool = False  # time host-to-device input copies and output copies back
    timeout_s: float = 3600.0
    memory_limit_bytes: int = 0  # 0: 90 % of the machine's memory
    tolerance: dict[str, float] = field(default_factory=dict)  # overrides of the fp32 tolerance
    backend_options: dict[str, Any] = field(default_factory=dict)  # torch_compile_mode, openvino_hint, ...

    def memory_limit(self) -> int:
        return self.memory_limit_bytes or int(psutil.virtual_memory().total * 0.9)


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


def measure_framework(job: FrameworkJob, progress: Callable[[str], None]) -> dict[str, Any]:
    """Prepare, run once cold, time steady state, return outputs. Runs inside the worker."""
    phases: dict[str, float] = {}
    t0 = time.perf_counter()
    progress("building the model")
    model = load_model(job.model, job.options)
    phases["load_model_s"] = time.perf_counter() - t0
    backend = backend_class(job.framework)(job.backend)
    progress("importing and compiling" if job.framework == "tvm" else "preparing")
    t0 = time.perf_counter()
    backend.prepare(model)
    phases["prepare_s"] = time.perf_counter() - t0
    phases.update(backend.phases_s)
    progress("first inference")
    t0 = time.perf_counter()
    backend.run()
    phases["first_inference_s"] = time.perf_counter() - t0
    outputs = backend.outputs()
    result: dict[str, Any] = {"info": backend.info, "phases_s": phases, "outputs": outputs,
                              "batch_size": model.batch_size, "model": model.describe()}
    if job.timed:
        def on_timer(stage: str, n: int) -> None:
            progress(f"{stage} run {n}")

        m = measure(backend.run_with_io if job.include_io else backend.run, job.timer, on_timer,
                    block_timer=None if job.include_io else backend.block_timer())
        result["measurement"] = {
            "samples_s": m.samples_s, "warmup_s": m.warmup_s, "block_size": m.block_size,
            "stop_reason": m.stop_reason, "total_calls": m.total_calls, "timed_calls": m.timed_calls,
            "timed_wall_s": m.timed_wall_s, "config": m.config,
        }
    if job.count_flops:
        progress("counting FLOPs")
        result["flops"] = count_flops(model)
    backend.close()
    return result


def _inline(job: FrameworkJob, on_progress: Callable[[str], None]) -> isolation.Outcome:
    """Same contract as run_isolated, in this process (for debugging: --no-isolation)."""
    t0 = time.monotonic()
    try:
        return isolation.Outcome(ok=True, value=measure_framework(job, on_progress),
                                 wall_s=time.monotonic() - t0,
                                 peak_rss_bytes=psutil.Process().memory_info().rss)
    except Exception as e:
        return isolation.Outcome(ok=False, error=isolation.describe_exception(e))


def thread_env(threads: int) -> dict[str, str]:
    """The same thread count for every framework, set before any of them starts a pool."""
    n = str(threads)
    return {"TVM_NUM_THREADS": n, "OMP_NUM_THREADS": n, "MKL_NUM_THREADS": n, "OPENBLAS_NUM_THREADS": n}


def run_benchmark(cfg: RunConfig, on_event: Events | None = None) -> dict[str, Any]:
    """Measure every framework, ``cfg.rounds`` times in alternating order, then build the result.

    Alternating (A B, B A, ...) with a fresh worker each time spreads slow drift of the machine
    (thermal, other load) over all frameworks alike; the round-to-round spread is reported.
    """
    events = on_event or (lambda fw, msg: None)
    from tvmbench.tune.database import database_sources

    sources = database_sources(cfg.target, cfg.db_dir, cfg.use_default_db, cfg.use_pretuned)
    backend_cfg = BackendConfig(target=cfg.target, threads=cfg.threads, databases=tuple(sources),
                                use_cache=cfg.use_cache, options=dict(cfg.backend_options))
    env = environment.collect(cfg.threads)
    base = sorted(cfg.frameworks, key=lambda f: f != REFERENCE)  # the reference first
    rounds: dict[str, list[isolation.Outcome]] = {fw: [] for fw in base}
    for r in range(cfg.rounds):
        for fw in base if r % 2 == 0 else base[::-1]:
            tag = f"round {r + 1}/{cfg.rounds}: " if cfg.rounds > 1 else ""
            job = FrameworkJob(fw, cfg.model, cfg.options, backend_cfg, cfg.timer,
                               count_flops=fw == REFERENCE and r == 0, include_io=cfg.include_io)
            rounds[fw].append(_run_job(cfg, job, lambda f, m, tag=tag: events(f, tag + m)))
    raw = {fw: merge_rounds(outcomes) for fw, outcomes in rounds.items()}
    if REFERENCE not in base and not cfg.model.lower().endswith(".onnx"):  # PyTorch cannot run ONNX files
        events(REFERENCE, "computing reference outputs")
        raw["_reference"] = _run_job(cfg, FrameworkJob(REFERENCE, cfg.model, cfg.options, backend_cfg, cfg.timer,
                                                       timed=False, count_flops=True), events)
    ref = raw.get(REFERENCE) or raw.get("_reference")
    ref_outputs = ref.value["outputs"] if ref is not None and ref.ok else None
    return build_result(cfg, base, raw, ref_outputs, env)


def merge_rounds(outcomes: list[isolation.Outcome]) -> isolation.Outcome:
    """Pool the timed samples of the successful rounds; phases (compile time...) come from the
    first, where nothing was cached yet. A framework fails only if every round failed."""
    ok = [o for o in outcomes if o.ok]
    if not ok:
        return outcomes[0]
    first = ok[0]
    if len(outcomes) == 1:
        return first
    value = dict(first.value)
    measurements = [o.value["measurement"] for o in ok]
    value["measurement"] = {**measurements[0],
                            "samples_s": [s for m in measurements for s in m["samples_s"]],
                            "timed_calls": sum(m["timed_calls"] for m in measurements)}
    value["rounds"] = {
        "count": len(outcomes),
        "medians_ms": [float(np.median(m["samples_s"])) * 1e3 for m in measurements],
        "sizes": [len(m["samples_s"]) for m in measurements],  # the pooled samples, round by round
        "failures": [o.error.get("message") for o in outcomes if not o.ok],
    }
    gpu = [o.peak_gpu_bytes for o in ok if o.peak_gpu_bytes is not None]
    return isolation.Outcome(ok=True, value=value, peak_rss_bytes=max(o.peak_rss_bytes for o in ok),
                             peak_gpu_bytes=max(gpu) if gpu else None,
                             wall_s=sum(o.wall_s for o in outcomes))


def _run_job(cfg: RunConfig, job: FrameworkJob, events: Events) -> isolation.Outcome:
    def progress(msg: str) -> None:
        events(job.framework, msg)

    try:  # a missing or unavailable framework is reported without starting a worker
        backend_class(job.framework, cfg.target)
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
                                  memory_limit_bytes=cfg.memory_limit(), env=thread_env(cfg.threads),
                                  on_progress=progress, gpu_sampler=sampler)


def build_result(cfg: RunConfig, order: list[str], raw: dict[str, isolation.Outcome],
                 ref_outputs: list[Any] | None, env: dict[str, Any]) -> dict[str, Any]:
    tolerance = accuracy.tolerance_for("float32", cfg.tolerance)
    model_info: dict[str, Any] = {}
    flops = None
    for outcome in raw.values():
        if outcome.ok:
            model_info = model_info or outcome.value["model"]
            flops = flops if flops is not None else outcome.value.get("flops")
    batch = next((o.value["batch_size"] for o in raw.values() if o.ok), cfg.options.batch_size)
    result: dict[str, Any] = {
        "model": cfg.model,
        "batch_size": batch,
        "seq_length": model_info.get("seq_length"),
        "image_size": model_info.get("image_size"),
        "target": cfg.target.kind,
        "target_config": cfg.target.config,
        "target_source": cfg.target.source,
        "frameworks": order,
    }
    per_fw: dict[str, dict[str, Any]] = {}
    reduced = cfg.backend_options.get("precision", "fp32") != "fp32"
    for fw in order:
        # TVM, TensorRT and OpenVINO honour --precision; their outputs are then checked at fp16 tolerance.
        tol = accuracy.tolerance_for("float16", cfg.tolerance) \
            if reduced and fw in ("tvm", "tvm_untuned", "tensorrt", "openvino") \
            else tolerance
        entry = framework_entry(raw[fw], ref_outputs, tol, batch, flops, fw == REFERENCE)
        per_fw[fw] = entry
        result[result_key(fw)] = entry
    result["speedup"], result["speedup_ci95"], result["speedup_basis"] = _tvm_speedup(per_fw)
    result["tvm_speedups"] = tvm_speedups(per_fw)
    tvm_db = (per_fw.get("tvm", {}).get("info") or {}).get("database") or {}
    result["tuning_enabled"] = bool(tvm_db.get("tasks_with_records"))  # some kernel ran a tuned schedule
    result["tuning_database"] = tvm_db or None
    result["model_info"] = {**model_info, "flops": flops}
    result["measurement"] = {"method": "tvmbench.measure.timer", "timer": cfg.timer.to_json(),
                             "isolation": "process per framework (spawn)" if cfg.isolate else "none (in-process)",
                             "threads": cfg.threads, "rounds": cfg.rounds,
                             "io_policy": "host-to-device input copies and output copies back are timed"
                             if cfg.include_io else "inputs resident on the device, outputs not copied back "
                             "inside the timed region"}
    result["environment"] = env
    noisy = environment.warnings_for(env)
    noisy += [f"{fw}: high run-to-run variation (CV {e['cv']:.0%})" for fw, e in per_fw.items()
              if e.get("cv", 0) > 0.10]
    close = close_calls(cfg.rounds, result["tvm_speedups"])
    if close:
        noisy.append(close)
    remote = sorted(fw for fw, e in per_fw.items() if (e.get("info") or {}).get("remote"))
    if remote:
        noisy.append(f"{', '.join(remote)} ran on the remote device (timed with its own clock); the other "
                     "frameworks ran on this machine, so speedups between them compare two machines")
    result["warnings"] = noisy
    return result


def close_calls(rounds: int, speedups: dict[str, dict[str, Any]], margin: float = 0.10) -> str | None:
    """With one process per framework, a speedup within ``margin`` of 1.0 may be nothing but the
    two processes' placement luck (5-30 % between processes of one library on the development
    VM), which a one-process interval cannot show."""
    if rounds > 1:
        return None
    close = [fw for fw, s in speedups.items() if s.get("speedup") and abs(s["speedup"] - 1.0) < margin]
    if not close:
        return None
    return (f"TVM vs {', '.join(close)}: within {margin:.0%} of each other, and each ran in one process, whose "
            "speed can differ from the next process's by more than that; rerun with --rounds 4 for intervals "
            "that include the spread between processes")


def framework_entry(outcome: isolation.Outcome, ref_outputs: list[Any] | None, tolerance: accuracy.Tolerance,
                    batch: int, flops: int | None, is_reference: bool) -> dict[str, Any]:
    if not outcome.ok:
        err = outcome.error
        return {"status": "unavailable" if err.get("kind") == "unavailable" else "failed",
                "error": err.get("message", ""), "error_type": err.get("type"),
                "error_kind": err.get("kind"), "traceback": err.get("traceback"),
                "peak_rss_bytes": outcome.peak_rss_bytes or None}
    value = outcome.value
    m = value.get("measurement", {})
    summary = stats.summarize(m.get("samples_s", []), batch, rounds=value.get("rounds", {}).get("sizes"))
    entry: dict[str, Any] = {
        "status": "ok",
        # The seed's field names, kept: avg = mean over the timed runs.
        "avg_latency_ms": summary.get("mean_ms"),
        "throughput_samples_per_sec": summary.get("throughput_samples_per_sec"),
        "total_runs": m.get("timed_calls", 0),
        "device": value["info"].get("device"),
        **{k: v for k, v in summary.items() if k not in ("throughput_samples_per_sec",)},
        "warmup_runs": len(m.get("warmup_s", [])),
        "warmup_ms": [s * 1e3 for s in m.get("warmup_s", [])],
        "block_size": m.get("block_size"),
        "stop_reason": m.get("stop_reason"),
        "first_inference_ms": value["phases_s"].get("first_inference_s", 0) * 1e3,
        "phases_s": value["phases_s"],
        "peak_rss_bytes": outcome.peak_rss_bytes,
        **({"peak_gpu_memory_bytes": outcome.peak_gpu_bytes} if outcome.peak_gpu_bytes is not None else {}),
        "info": value["info"],
        "samples_ms": [s * 1e3 for s in m.get("samples_s", [])],
    }
    if "rounds" in value:
        medians = value["rounds"]["medians_ms"]
        entry["rounds"] = {**value["rounds"], "spread": (max(medians) - min(medians)) / float(np.median(medians))}
    if flops and summary.get("median_ms"):
        entry["gflops_per_sec"] = flops / (summary["median_ms"] * 1e-3) / 1e9
    if is_reference:
        entry["accuracy"] = {"passed": True, "reference": True}
    elif ref_outputs is None:
        entry["accuracy"] = {"passed": None, "reason": "no PyTorch reference outputs"}
    else:
        entry["accuracy"] = accuracy.compare(value["outputs"], ref_outputs, tolerance)
    return entry


def _tvm_speedup(per_fw: dict[str, dict[str, Any]], other: str = REFERENCE
                 ) -> tuple[float | None, list[float] | None, str]:
    """TVM's speedup over ``other`` (median other / median TVM) with a 95 % interval (from the
    round medians when the run had rounds, see stats.speedup_ci); none when either failed or
    either's outputs did not match the reference."""
    tvm_e, other_e = per_fw.get("tvm"), per_fw.get(other)
    basis = f"median({other}) / median(tvm)"
    if not tvm_e or not other_e or tvm_e["status"] != "ok" or other_e["status"] != "ok":
        return None, None, basis
    if tvm_e["accuracy"].get("passed") is False or not tvm_e.get("median_ms"):
        return None, None, basis + "; withheld: outputs did not match the reference"
    if other_e["accuracy"].get("passed") is False:
        return None, None, basis + f"; withheld: {other}'s outputs did not match the reference"
    ci = stats.speedup_ci(other_e["samples_ms"], tvm_e["samples_ms"],
                          baseline_rounds=(other_e.get("rounds") or {}).get("sizes"),
                          candidate_rounds=(tvm_e.get("rounds") or {}).get("sizes"))
    return stats.speedup(other_e["median_ms"], tvm_e["median_ms"]), list(ci), basis


def tvm_speedups(per_fw: dict[str, dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """TVM's speedup over every other framework of the run (see ``_tvm_speedup``)."""
    out = {}
    for fw in per_fw:
        if fw != "tvm" and "tvm" in per_fw:
            value, ci, basis = _tvm_speedup(per_fw, fw)
            out[fw] = {"speedup": value, "ci95": ci, "basis": basis}
    return out
