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
