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
from dataclasses import dataclass
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
    os.environ.setdefault("OPENBLAS_NUM_THREADS", str(threads))
    rng = np.random.default_rng(0)
    a = rng.standard_normal((n, n), dtype=np.float32)
    b = rng.standard_normal((n, n), dtype=np.float32)
    ta, tb = torch.from_numpy(a), torch.from_numpy(b)
    candidates = {"torch.mm (MKL)": lambda: torch.mm(ta, tb), "numpy.matmul (OpenBLAS)": lambda: np.matmul(a, b)}
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
    iterations = _calibrated(loop, seconds)
    flops = 2.0 * _CHAINS * lanes * iterations * threads
    best = min(_parallel_seconds(loop, iterations, threads) for _ in range(calls))
    gflops = flops / best / 1e9
    method = (f"FMA loop, {_CHAINS} chains of {lanes}-lane fp32 vectors on {threads} threads, best of "
              f"{calls}; SGEMM {sgemm.gflops:.0f} GFLOP/s ({sgemm.method})")
    return Peak(max(gflops, sgemm.gflops), method, threads)


def _compiled_fma_loop() -> tuple[Any, int]:
    import ctypes
    import subprocess
    import tempfile
    from pathlib import Path

    from tvm.support import cc

    folder = Path(tempfile.mkdtemp(prefix="tvmbench-peak-"))
    (folder / "fma.c").write_text(_FMA_SOURCE)
    cmd = [cc.get_cc() or "cc", "-O2", "-march=native", "-ffp-contract=fast", "-shared", "-fPIC",
           "-o", str(folder / "fma.so"), str(folder / "fma.c")]
    done = subprocess.run(cmd, capture_output=True, text=True)
    if done.returncode != 0:
        raise RuntimeError(done.stderr.strip().splitlines()[-1] if done.stderr.strip() else "cc failed")
    lib = ctypes.CDLL(str(folder / "fma.so"))
    lib.fma_loop.restype, lib.fma_loop.argtypes = ctypes.c_float, [ctypes.c_long, ctypes.c_float, ctypes.c_float]
    return lib.fma_loop, int(lib.lanes())


def _calibrated(loop: Any, seconds: float) -> int:
    """Iterations for one call of about ``seconds``."""
    iterations = 1 << 16
    while True:
        t0 = time.perf_counter()
        loop(iterations, 0.999999, 1e-6)
        took = time.perf_counter() - t0
        if took > seconds / 4 or iterations > 1 << 34:
            return max(1, int(iterations * seconds / took))
        iterations *= 4


def _parallel_seconds(loop: Any, iterations: int, threads: int) -> float:
    """Wall time of ``threads`` simultaneous calls."""
    import threading

    start = threading.Barrier(threads + 1)

    def work() -> None:
        start.wait()
        loop(iterations, 0.999999, 1e-6)

    workers = [threading.Thread(target=work) for _ in range(threads)]
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
class Bandwidth:
    gbs: float
    method: str
    threads: int


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
    return Bandwidth(gbs=3 * n * 4 / min(seconds) / 1e9,
                     method=f"TVM triad a = b + 3c, 3 x {megabytes} MB fp32, best of {calls}", threads=threads)


def _host_cpu() -> str:
    from tvm.target import codegen

    return str(codegen.llvm_get_system_cpu())
