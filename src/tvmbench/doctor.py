"""``tvmbench doctor``: find what would make a benchmark of TVM slow or misleading, and say the fix.

"TVM is slower than PyTorch on my GPU" usually comes down to a handful of mistakes: a CUDA
target without the GPU's architecture (TVM 0.27 silently compiles for sm_50), fp32 on a
tensor-core GPU, no tuning records, frameworks measured with different
thread counts, a CPU clocking down, other work on the machine, too little warm-up. ``gather``
collects the facts once (each check is then a plain function of them, so tests can trigger every
check with made-up facts) and ``diagnose`` returns one finding per problem, each with its fix.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Any

from tvmbench.errors import UserError

THREAD_VARS = ("TVM_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS")
BUSY_PERCENT = 25.0


@dataclass
class Finding:
    check: str
    level: str  # "error": the numbers would be wrong or meaningless; "warn": slower or noisier; "info"
    message: str
    fix: str = ""


@dataclass
class Facts:
    """What the checks look at. ``gather`` fills it from the machine; tests fill it by hand."""

    target_spec: str | None = None
    target: dict[str, Any] | None = None  # the resolved target config
    target_error: str | None = None  # why the target did not resolve
    gpu: dict[str, Any] | None = None  # device 0: name, arch, compute_capability
    precision: str = "fp32"
    bf16_dot: bool = False  # a CPU target with AVX-512 BF16 (compile/bf16.py)
    env: dict[str, str] = field(default_factory=dict)  # the thread variables that are set
    physical_cores: int = 1
    threads: int | None = None
    governor: str | None = None
    cpu_busy_percent: float | None = None
    busy_processes: list[str] = field(default_factory=list)
    frameworks: dict[str, dict[str, Any]] = field(default_factory=dict)  # name -> availability
    databases: list[dict[str, Any]] = field(default_factory=list)  # what a run would apply, per source
    model: str | None = None
    model_gflops: float | None = None
    warmup_runs: int | None = None


def check_cuda_arch(f: Facts) -> list[Finding]:
    if f.target_error:
        return [Finding("cuda-arch", "error", f.target_error,
                        "give the architecture: --target 'cuda -arch=sm_80' (or run where the GPU is, so it is detected)")]
    if not f.target or f.target.get("kind") != "cuda":
        return []
    arch = f.target.get("arch")
    if f.gpu and arch and arch != f.gpu["arch"]:
        return [Finding("cuda-arch", "error",
                        f"the target's arch is {arch} but device 0 ({f.gpu['name']}) is {f.gpu['arch']}: kernels "
                        "built for another architecture run slower or not at all",
                        f"--target cuda (tvmbench detects {f.gpu['arch']}) or --target 'cuda -arch={f.gpu['arch']}'")]
    return []


def check_precision(f: Facts) -> list[Finding]:
    cpu = bool(f.target) and f.target.get("kind") == "llvm"
    if cpu and f.precision == "bf16" and not f.bf16_dot:
        return [Finding("precision", "error", f"--precision bf16 on a CPU without AVX-512 BF16 "
                        f"({f.target.get('mcpu') or 'generic'}): TVM has no bf16 dot product to build there",
                        "--precision fp32")]
    if cpu and f.precision == "fp32" and f.bf16_dot:
        return [Finding("precision", "info", f"this CPU ({f.target.get('mcpu')}) has AVX-512 BF16: dense layers and "
                        "convolutions run about twice as fast over bf16 inputs (OpenVINO's own default here; "
                        "tvmbench keeps every framework in fp32 unless told)",
                        "--precision bf16 (TVM and OpenVINO in bf16, outputs checked at bf16's tolerance)")]
    if not f.gpu or not f.target or f.target.get("kind") != "cuda" or f.precision != "fp32":
        return []
    major = int(str(f.gpu["compute_capability"]).split(".")[0])
    if major >= 7:
        return [Finding("precision", "warn",
                        f"fp32 on {f.gpu['name']} ({f.gpu['arch']}), which has tensor cores: fp32 matmuls and "
                        "convolutions do not use them, while PyTorch and TensorRT may use TF32/fp16",
                        "--precision fp16 (or amp: fp16 inputs, fp32 accumulation) for TVM")]
    return []


def check_tuning(f: Facts) -> list[Finding]:
    if not f.target:
        return []
    applied = [d for d in f.databases if d.get("applied_records")]
    skipped = [d for d in f.databases if not d.get("applied_records")]
    out = []
    for d in skipped:
        why = d.get("skipped") or (f"its {d.get('foreign_target_records', 0)} records are for other targets"
                                  if d.get("records") else "it is empty")
        fix = ("tune for this target: tvmbench tune --model MODEL --target ..." if "pipeline" not in why else
               "tvmbench tune --model MODEL (your own database), or from a checkout "
               "benchmarks/build_pretuned.py --rejudge")
        out.append(Finding("tuning-db", "warn", f"the {d['source']} database {d['path']} does not apply: {why}", fix))
    if not applied:
        out.append(Finding("tuning-db", "warn" if f.target.get("kind") == "cuda" else "info",
                           "no tuning records apply to this target: TVM runs tvmbench's default schedules only",
                           f"tvmbench tune --model {f.model or 'MODEL'} --trials 2000 (later runs apply it)"))
    return out


def check_threads(f: Facts) -> list[Finding]:
    out = []
    values = {k: v for k, v in f.env.items() if k in THREAD_VARS}
    if len(set(values.values())) > 1:
        listed = ", ".join(f"{k}={v}" for k, v in sorted(values.items()))
        out.append(Finding("threads", "warn", f"thread settings differ between frameworks ({listed}): a comparison "
                           "run this way gives one framework more cores than another",
                           "unset them and let tvmbench set one count for all (--threads N)"))
    if f.threads and f.threads > f.physical_cores:
        out.append(Finding("threads", "warn", f"{f.threads} threads on {f.physical_cores} physical cores: "
                           "hyper-threads share a core's vector units and make timings noisier",
                           f"--threads {f.physical_cores}"))
    return out


def check_governor(f: Facts) -> list[Finding]:
    if f.governor and f.governor != "performance":
        return [Finding("governor", "warn", f"the CPU frequency governor is '{f.governor}': clock speed, and with "
                        "it latency, changes with load", "sudo cpupower frequency-set -g performance")]
    return []


def check_load(f: Facts) -> list[Finding]:
    if f.cpu_busy_percent is not None and f.cpu_busy_percent > BUSY_PERCENT:
        who = f"; busiest: {', '.join(f.busy_processes)}" if f.busy_processes else ""
        return [Finding("load", "warn", f"other work uses {f.cpu_busy_percent:.0f}% of the CPU{who}",
                        "benchmark on an idle machine (or stop those processes)")]
    return []


def check_warmup(f: Facts) -> list[Finding]:
    if f.warmup_runs is None:
        return []
    gpu = bool(f.target and f.target.get("kind") == "cuda")
    needed = 10 if not gpu else 20
    if f.model_gflops and f.model_gflops > 10:
        needed *= 2  # large models: allocator growth, cuDNN/inductor autotuning and caches take longer to settle
    if f.warmup_runs < needed:
        size = f" ({f.model_gflops:.1f} GFLOP)" if f.model_gflops else ""
        return [Finding("warmup", "warn", f"{f.warmup_runs} warm-up runs for {f.model or 'this model'}{size} on "
                        f"{'a GPU' if gpu else 'a CPU'}: the first runs include one-time costs (lazy "
                        "initialisation, autotuning, caches) and would be timed as steady state",
                        f"--warmup {needed} or more, or drop --warmup: the default warms up for >=10 runs and >=1 s "
                        "(3 runs of calls that take 0.25 s or more)")]
    return []


def check_frameworks(f: Facts) -> list[Finding]:
    out = []
    for name, a in f.frameworks.items():
        if a.get("unavailable"):
            out.append(Finding("frameworks", "info", f"{name} is {a['unavailable']}",
                               "" if a.get("installed") else f"then: {a.get('install') or ''}"))
        elif not a.get("installed"):
            out.append(Finding("frameworks", "info", f"{name} is not installed", a.get("install") or ""))
    return out


CHECKS: list[Callable[[Facts], list[Finding]]] = [check_cuda_arch, check_precision, check_tuning,
                                                  check_threads, check_governor, check_load, check_warmup,
                                                  check_frameworks]


def diagnose(facts: Facts) -> list[Finding]:
    return [finding for check in CHECKS for finding in check(facts)]


def gather(target_spec: str = "auto", model: str | None = None, precision: str = "fp32",
           threads: int | None = None, warmup_runs: int | None = None, db_dir: str | None = None) -> Facts:
    """The facts of this machine and of the planned run."""
    from tvmbench.backends import FRAMEWORKS, load_class
    from tvmbench.measure.environment import busy_sample, governor
    from tvmbench.targets import physical_cores, query_gpu, resolve_target

    f = Facts(target_spec=target_spec, model=model, precision=precision, threads=threads, warmup_runs=warmup_runs)
    f.physical_cores = physical_cores()
    f.env = {k: os.environ[k] for k in THREAD_VARS if k in os.environ}
    f.governor = governor()
    gpu = query_gpu()
    if gpu is not None:
        f.gpu = {"name": gpu.name, "arch": gpu.arch, "compute_capability": gpu.compute_capability}
    try:
        target = resolve_target(target_spec)
        f.target = target.config
        if target.kind == "llvm":
            from tvmbench.targets import has_bf16_dot

            f.bf16_dot = has_bf16_dot(target.tvm())
    except UserError as e:
        f.target_error = str(e)
        target = None
    f.cpu_busy_percent, f.busy_processes = busy_sample()
    for name in FRAMEWORKS:
        try:
            f.frameworks[name] = load_class(name).availability()
        except Exception as e:  # a broken install is a finding, not a crash
            f.frameworks[name] = {"installed": False, "install": f"broken install: {e}"}
    if target is not None:
        from tvmbench.tuning.database import TuningDatabase, database_sources

        for kind, path in database_sources(target, db_dir):
            _, info = TuningDatabase.open(path).view_for(target, by_isa_class=kind == "pretuned")
            f.databases.append({"source": kind, **info})
    if model:
        from tvmbench.models import ModelOptions, count_flops, load_model

        try:
            f.model_gflops = count_flops(load_model(model, ModelOptions())) / 1e9
        except Exception:
            f.model_gflops = None
    return f


def to_json(facts: Facts, findings: list[Finding]) -> dict[str, Any]:
    return {"facts": asdict(facts), "findings": [asdict(x) for x in findings]}
