"""The machine's attainable fp32 compute, measured, so model throughput can be put in proportion.

"% of peak" against a datasheet number says little on a shared or turbo-limited machine; what a
user can get is what a tuned BLAS gets here. We time a large square SGEMM through PyTorch (oneDNN/
MKL underneath) with the benchmark's thread count and take the best of several calls, as a
roofline's compute ceiling.
"""

from __future__ import annotations

import time
from dataclasses import dataclass


@dataclass(frozen=True)
class Peak:
    gflops: float
    method: str
    threads: int


def measure_sgemm_peak(threads: int, n: int = 2048, calls: int = 8) -> Peak:
    import torch

    previous = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        a, b = torch.randn(n, n), torch.randn(n, n)
        out = torch.empty(n, n)
        for _ in range(2):
            torch.mm(a, b, out=out)
        best = float("inf")
        for _ in range(calls):
            t0 = time.perf_counter()
            torch.mm(a, b, out=out)
            best = min(best, time.perf_counter() - t0)
    finally:
        torch.set_num_threads(previous)
    return Peak(gflops=2 * n**3 / best / 1e9, method=f"torch.mm {n}x{n}x{n} fp32, best of {calls}", threads=threads)


def percent_of_peak(gflops: float | None, peak: Peak | None) -> float | None:
    if gflops is None or peak is None or peak.gflops <= 0:
        return None
    return 100.0 * gflops / peak.gflops
