"""Summary statistics of latency samples and speedups.

Latency distributions are skewed (a floor set by the hardware, a tail of interruptions), so the
median is the headline number and its uncertainty is given as a distribution-free confidence
interval from order statistics (the binomial method): it needs no normality assumption and no
resampling, so the stop rule can evaluate it after every run.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np


def median_ci(samples: Sequence[float], confidence: float = 0.95) -> tuple[float, float]:
    """Confidence interval of the median from order statistics.

    For n samples, the number below the true median is Binomial(n, 1/2); the interval between the
    order statistics at its lower and upper quantiles covers the median with at least the asked
    probability. With fewer than 6 samples no finite 95 % interval exists and (min, max) is returned.
    """
    from scipy.stats import binom

    x = np.sort(np.asarray(samples, dtype=float))
    n = len(x)
    if n == 0:
        return (math.nan, math.nan)
    # The median lies below x[j] iff at most j samples fall below it: P = binom.cdf(j). Take the
    # largest j whose miss probability on each side is at most alpha/2.
    half_alpha = (1.0 - confidence) / 2
    j = int(binom.ppf(half_alpha, n, 0.5))
    if binom.cdf(j, n, 0.5) > half_alpha:
        j -= 1
    if j < 0:
        return float(x[0]), float(x[-1])
    lo, hi = j, n - 1 - j
    return float(x[lo]), float(x[hi])


def summarize(samples_s: Sequence[float], batch_size: int, confidence: float = 0.95) -> dict[str, Any]:
    """Latency statistics in milliseconds plus throughput in samples per second."""
    x = np.asarray(samples_s, dtype=float) * 1e3
    if x.size == 0:
        return {"runs": 0}
    mean = float(x.mean())
    std = float(x.std(ddof=1)) if x.size > 1 else 0.0
    p50, p90, p95, p99 = (float(v) for v in np.percentile(x, [50, 90, 95, 99]))
    lo, hi = median_ci(x, confidence)
    return {
        "runs": int(x.size),
        "mean_ms": mean,
        "median_ms": float(np.median(x)),
        "min_ms": float(x.min()),
        "max_ms": float(x.max()),
        "std_ms": std,
        "cv": std / mean if mean > 0 else 0.0,
        "p50_ms": p50,
        "p90_ms": p90,
        "p95_ms": p95,
        "p99_ms": p99,
        "median_ci_ms": [lo, hi],
        "ci_confidence": confidence,
        "throughput_samples_per_sec": batch_size * 1e3 / mean if mean > 0 else 0.0,
    }


def speedup(baseline_median_ms: float, candidate_median_ms: float) -> float:
    """Speedup of the candidate over the baseline: >1 means the candidate is faster."""
    return baseline_median_ms / candidate_median_ms


def geometric_mean(values: Sequence[float]) -> float:
    v = np.asarray([x for x in values if x > 0], dtype=float)
    return float(np.exp(np.log(v).mean())) if v.size else math.nan
