"""The machine's attainable fp32 compute, measured, so model throughput can be put in proportion.

"% of peak" against a datasheet number says little on a shared or turbo-limited machine (clocks,
the hypervisor, whether AVX-512 runs at full width), so the compute roof is measured, with the
benchmark's thread count: a loop of independent vector fused multiply-adds held in registers
(``measure_compute_peak``), which is what the cores can do at their present clock, and as a
reference a large SGEMM through the best BLAS installed (``measure_sgemm_peak``). The SGEMM alone
is not a roof: on this Zen 5 VM OpenBLAS and MKL reach about half of the FMA loop, and TVM's own
convolutions ran at 150-200 % of that "peak".
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class Peak:
    gflops: float
    method: str
    threads: int


def measure_sgemm_peak(threads: int, n: int = 4096, calls: int = 4) -> Peak:
    """Best of a large SGEMM through PyTorch (MKL) and through NumPy (OpenBLAS): MKL is slowed on
    AMD CPUs, OpenBLAS on others, so the better of the two stands for "a tuned BLAS here"."""
    import os

    import numpy as np
    import torch

    previous = torch.get_num_threads()
    torch.set_num_threads(threads)
    rng = np.random.default_rng(0)
    a = rng.standard_normal((n, n), dtype=np.float32)
    b = rng.standard_normal((n, n), dtype=np.float32)
    ta, tb = torch.from_numpy(a), torch.from_numpy(b)
    candidates = {"torch.mm (MKL)": lambda: torch.mm(ta, tb)}
    # (OpenBLAS reads its thread count once, when NumPy loads it: every core unless the process
    # started with OPENBLAS_NUM_THREADS. Asked for fewer threads, its SGEMM on all of them was taken
    # for a one-thread peak, 397 GFLOP/s against the FMA loop's ~240 on the Xeon VM.)
    blas_threads = int(os.environ.get("OPENBLAS_NUM_THREADS") or len(os.sched_getaffinity(0)))
    if blas_threads == threads:
        candidates["numpy.matmul (OpenBLAS)"] = lambda: np.matmul(a, b)
    results = {}
    try:
        for label, fn in candidates.items():
            fn()
            best = float("inf")
            for _ in range(calls):
                t0 = time.perf_counter()
                fn()
                best = min(best, time.perf_counter() - t0)
            results[label] = 2 * n**3 / best / 1e9
    finally:
        torch.set_num_threads(previous)
    label = max(results, key=lambda k: results[k])
    others = ", ".join(f"{k} {v:.0f}" for k, v in results.items() if k != label)
    return Peak(gflops=results[label], method=f"{label} {n}x{n}x{n} fp32, best of {calls} ({others} GFLOP/s)",
                threads=threads)


# Independent accumulators: more than FMA latency x FMA units (4 x 2 on current x86 cores), and
# few enough for the 16 vector registers of AVX2 (AVX-512 and NEON have 32).
_FMA_SOURCE = r"""
#if defined(__AVX512F__)
#define VBYTES 64
#elif defined(__AVX__)
#define VBYTES 32
#else
#define VBYTES 16
#endif
#ifdef __cplusplus
extern "C" {
#endif
typedef float vf __attribute__((vector_size(VBYTES)));
int lanes(void) { return VBYTES / 4; }
float fma_loop(long iterations, float m, float c) {
    vf vm = (vf){} + m, vc = (vf){} + c;
    vf a0 = vc, a1 = vc + 1, a2 = vc + 2, a3 = vc + 3, a4 = vc + 4, a5 = vc + 5;
    vf a6 = vc + 6, a7 = vc + 7, a8 = vc + 8, a9 = vc + 9, a10 = vc + 10, a11 = vc + 11;
    for (long i = 0; i < iterations; i++) {
        a0 = a0 * vm + vc; a1 = a1 * vm + vc; a2 = a2 * vm + vc; a3 = a3 * vm + vc;
        a4 = a4 * vm + vc; a5 = a5 * vm + vc; a6 = a6 * vm + vc; a7 = a7 * vm + vc;
        a8 = a8 * vm + vc; a9 = a9 * vm + vc; a10 = a10 * vm + vc; a11 = a11 * vm + vc;
    }
    vf s = a0 + a1 + a2 + a3 + a4 + a5 + a6 + a7 + a8 + a9 + a10 + a11;
    float out = 0;
    for (int k = 0; k < VBYTES / 4; k++) out += s[k];
    return out;
}
#ifdef __cplusplus
}
#endif
"""
_CHAINS = 12


def measure_compute_peak(threads: int, seconds: float = 0.1, calls: int = 3) -> Peak:
    """The FMA throughput of ``threads`` cores: the loop above, compiled for this CPU
    (``-march=native``) with the system C compiler, run on ``threads`` threads at once (ctypes
    releases the GIL); the best of ``calls`` rounds of about ``seconds`` each. Falls back to the
    SGEMM when no C compiler works, and never reports less than the SGEMM got."""
    sgemm = measure_sgemm_peak(threads, n=2048)
    try:
        loop, lanes = _compiled_fma_loop()
    except (OSError, RuntimeError) as e:
        return Peak(sgemm.gflops, f"{sgemm.method}; no FMA loop ({e})", threads)
    iterations = _calibrated(lambda i: loop(i, 0.999999, 1e-6), seconds)
    flops = 2.0 * _CHAINS * lanes * iterations * threads
    best = min(_parallel_seconds(lambda _: loop(iterations, 0.999999, 1e-6), threads) for _ in range(calls))
    gflops = flops / best / 1e9
    method = (f"FMA loop, {_CHAINS} chains of {lanes}-lane fp32 vectors on {threads} threads, best of "
              f"{calls}; SGEMM {sgemm.gflops:.0f} GFLOP/s ({sgemm.method})")
    return Peak(max(gflops, sgemm.gflops), method, threads)


def _compiled_fma_loop() -> tuple[Any, int]:
    import ctypes

    lib = _compiled_c(_FMA_SOURCE, "fma")
    lib.fma_loop.restype, lib.fma_loop.argtypes = ctypes.c_float, [ctypes.c_long, ctypes.c_float, ctypes.c_float]
    return lib.fma_loop, int(lib.lanes())


def _compiled_c(source: str, name: str, optimize: str = "-O2") -> Any:
    """``source`` compiled for this CPU with the system C compiler and loaded (ctypes)."""
    import ctypes
    import subprocess
    import tempfile
    from pathlib import Path

    from tvm.support import cc

    folder = Path(tempfile.mkdtemp(prefix="tvmbench-peak-"))
    (folder / f"{name}.c").write_text(source)
    cmd = [cc.get_cc() or "cc", optimize, "-march=native", "-ffp-contract=fast", "-shared", "-fPIC",
           "-o", str(folder / f"{name}.so"), str(folder / f"{name}.c")]
    done = subprocess.run(cmd, capture_output=True, text=True)
    if done.returncode != 0:
        errors = [line for line in done.stderr.splitlines() if "error" in line] or done.stderr.strip().splitlines()
        raise RuntimeError(errors[0] if errors else "cc failed")
    return ctypes.CDLL(str(folder / f"{name}.so"))


def _calibrated(call: Callable[[int], Any], seconds: float, iterations: int = 1 << 16) -> int:
    """Iterations for one ``call(iterations)`` of about ``seconds``."""
    while True:
        t0 = time.perf_counter()
        call(iterations)
        took = time.perf_counter() - t0
        if took > seconds / 4 or iterations > 1 << 34:
            return max(1, int(iterations * seconds / took))
        iterations *= 4


def _parallel_seconds(call: Callable[[int], Any], threads: int) -> float:
    """Wall time of ``threads`` simultaneous calls, ``call(i)`` on thread ``i`` (ctypes calls
    release the GIL)."""
    import threading

    start = threading.Barrier(threads + 1)

    def work(i: int) -> None:
        start.wait()
        call(i)

    workers = [threading.Thread(target=work, args=(i,)) for i in range(threads)]
    for w in workers:
        w.start()
    start.wait()
    t0 = time.perf_counter()
    for w in workers:
        w.join()
    return time.perf_counter() - t0


def percent_of_peak(gflops: float | None, peak: Peak | None) -> float | None:
    if gflops is None or peak is None or peak.gflops <= 0:
        return None
    return 100.0 * gflops / peak.gflops


@dataclass(frozen=True)
class CacheSlope:
    """One cache level's bandwidth for the roofline: ``capacity_bytes`` is what the benchmark's
    threads hold at that level together (a per-core cache once per thread, a shared one once)."""

    level: str
    capacity_bytes: int
    gbs: float


@dataclass(frozen=True)
class Bandwidth:
    """The roofline's slopes: ``gbs`` from memory (DRAM), ``caches`` from each cache level,
    nearest first (empty where they could not be measured).

    A roofline with the DRAM slope alone puts every memory-bound kernel whose data fits in a
    cache above its "bound" (a layer norm over BERT's 512 x 768 activations, 3 MB in and out,
    read from L3 at 4x DRAM's rate: "315 % of bound"). So each kernel is bounded by the level that
    holds its compulsory bytes (``gbs_for``), as the cache-aware roofline model does (Ilic, Pratas
    and Sousa, 2014): the least time, if its data is already as near as it can be. Inputs the
    previous kernel just wrote usually are; the weights of a model larger than the last cache
    are not, so for such kernels the bound is optimistic, never too strict."""

    gbs: float
    method: str
    threads: int
    caches: tuple[CacheSlope, ...] = field(default=())

    def gbs_for(self, nbytes: float) -> float:
        return self.slope_for(nbytes)[1]

    def slope_for(self, nbytes: float) -> tuple[str, float]:
        """(level, GB/s) of the nearest level whose capacity holds ``nbytes``; DRAM past the last."""
        for c in sorted(self.caches, key=lambda c: c.capacity_bytes):
            if nbytes <= c.capacity_bytes:
                return c.level, c.gbs
        return "DRAM", self.gbs


def measure_bandwidth(threads: int, megabytes: int = 64, calls: int = 5) -> Bandwidth:
    """Memory bandwidth as a roofline's slope: a STREAM-triad-like kernel ``a = b + 3 c`` over
    three arrays of ``megabytes`` each (far beyond any cache), compiled with TVM, parallel over
    the runtime's threads (``TVM_NUM_THREADS``, set by the caller's worker) and vectorised; the
    best of ``calls`` timed calls, counting 3 arrays of traffic (STREAM's convention: the write
    allocate is not counted)."""
    import numpy as np
    import tvm
    from tvm import s_tir, te

    n = megabytes * (1 << 20) // 4
    b, c = te.placeholder((n,), name="b"), te.placeholder((n,), name="c")
    a = te.compute((n,), lambda i: b[i] + np.float32(3.0) * c[i], name="a")
    sch = s_tir.Schedule(te.create_prim_func([b, c, a]).with_attr("global_symbol", "main"))
    (loop,) = sch.get_loops(sch.get_sblock("a"))
    outer, inner = sch.split(loop, factors=[None, 4096])
    sch.parallel(outer)
    _, lanes = sch.split(inner, factors=[None, 16])
    sch.vectorize(lanes)
    fn = tvm.compile(sch.mod, tvm.target.Target({"kind": "llvm", "mcpu": _host_cpu()})).jit()
    dev = tvm.cpu(0)
    args = [tvm.runtime.tensor(np.ones(n, "float32"), dev) for _ in range(3)]
    seconds = fn.time_evaluator("main", dev, number=1, repeat=calls)(*args).results
    dram = 3 * n * 4 / min(seconds) / 1e9
    caches = measure_cache_slopes(threads, floor_gbs=dram)
    levels = "".join(f", {c.level} {c.gbs:.0f} GB/s in {c.capacity_bytes >> 10} KB" for c in caches)
    return Bandwidth(gbs=dram, method=f"TVM triad a = b + 3c, 3 x {megabytes} MB fp32, best of {calls}{levels}",
                     threads=threads, caches=caches)


_TRIAD_SOURCE = r"""
#ifdef __cplusplus
extern "C" {
#endif
__attribute__((noinline)) static void pass(float *__restrict a, const float *__restrict b,
                                           const float *__restrict c, long n) {
    for (long i = 0; i < n; i++) a[i] = b[i] + 3.0f * c[i];
}
void triad(float *a, float *b, float *c, long n, long repeats) {
    for (long r = 0; r < repeats; r++) { pass(a, b, c, n); __asm__ volatile("" ::: "memory"); }
}
#ifdef __cplusplus
}
#endif
"""


def measure_cache_slopes(threads: int, floor_gbs: float = 0.0, seconds: float = 0.03, calls: int = 3
                         ) -> tuple[CacheSlope, ...]:
    """Each data cache level's bandwidth on ``threads`` threads: the triad over three arrays per
    thread that together fill half of the level's capacity (the rest for everything else),
    repeated in place (a call the compiler cannot fold away between repeats), the best of
    ``calls`` rounds of about ``seconds``. A level never reads slower than the one beyond it
    (nor than ``floor_gbs``, memory's): a noisy moment must not make the bound stricter than
    a farther level's. Empty where sysfs or a C compiler is missing."""
    import ctypes

    levels = cache_levels(threads)
    try:
        lib = _compiled_c(_TRIAD_SOURCE, "triad", optimize="-O3") if levels else None
    except (OSError, RuntimeError):
        return ()
    if lib is None:
        return ()
    lib.triad.restype, lib.triad.argtypes = None, [ctypes.c_void_p] * 3 + [ctypes.c_long] * 2
    slopes, floor = [], floor_gbs
    for level, capacity in reversed(levels):
        floor = max(floor, _triad_gbs(lib.triad, max(256, capacity // 2 // threads // 12), threads, seconds, calls))
        slopes.append(CacheSlope(level, capacity, floor))
    return tuple(reversed(slopes))


def _triad_gbs(triad: Any, n: int, threads: int, seconds: float, calls: int) -> float:
    """GB/s of ``threads`` threads each repeating the triad over its own three arrays of ``n``."""
    import numpy as np

    arrays = [[np.ones(n, np.float32) for _ in range(3)] for _ in range(threads)]
    pointers = [[a.ctypes.data for a in mine] for mine in arrays]
    repeats = _calibrated(lambda r: triad(*pointers[0], n, r), seconds, iterations=1)
    best = min(_parallel_seconds(lambda i: triad(*pointers[i], n, repeats), threads) for _ in range(calls))
    return 12 * n * threads * repeats / best / 1e9


def cache_levels(threads: int) -> list[tuple[str, int]]:
    """(level, bytes) of each data cache level, nearest first, as ``threads`` threads on separate
    cores hold them together (Linux sysfs; empty elsewhere): a cache of one core's counts once
    per thread, a shared one once per group of cores that shares it."""
    from pathlib import Path

    base = Path("/sys/devices/system/cpu/cpu0")
    try:
        siblings = len(_cpu_list((base / "topology/thread_siblings_list").read_text()))
        found = {}
        for index in sorted((base / "cache").glob("index*")):
            if (index / "type").read_text().strip() == "Instruction":
                continue
            size = _size_bytes((index / "size").read_text().strip())
            cores = max(1, len(_cpu_list((index / "shared_cpu_list").read_text())) // max(1, siblings))
            found[f"L{int((index / 'level').read_text())}"] = size * -(-threads // cores)  # (ceil)
    except (OSError, ValueError):
        return []
    return sorted(found.items(), key=lambda kv: kv[1])


def _cpu_list(text: str) -> list[int]:
    """CPUs of a sysfs list such as ``0-3,8``."""
    cpus: list[int] = []
    for part in text.strip().split(","):
        low, _, high = part.partition("-")
        cpus.extend(range(int(low), int(high or low) + 1))
    return cpus


def _size_bytes(text: str) -> int:
    """``32K``, ``1024K``, ``32M`` as bytes."""
    scale = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}.get(text[-1:].upper(), 1)
    return int(text.rstrip("KMGkmg")) * scale


def _host_cpu() -> str:
    from tvm.target import codegen

    return str(codegen.llvm_get_system_cpu())
