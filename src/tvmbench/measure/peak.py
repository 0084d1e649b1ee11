"""The machine's attainable fp32 compute, measured, so model throughput can be put in proportion.

"% of peak" against a datasheet number says little on a shared or turbo-limited machine; what a
user can get is what a tuned BLAS gets here. We time a large square SGEMM with the benchmark's
thread count and take the best of several calls, as a roofline's compute ceiling.
"""

from __future__ import annotations

import time
from dataclasses import dataclass


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
