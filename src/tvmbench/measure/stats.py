"""Summary statistics of latency samples and speedups.

Latency distributions are skewed (a floor set by the hardware, a tail of interruptions), so the
median is the headline number. Its reported 95 % confidence interval is a bootstrap interval
(scipy.stats.bootstrap, percentile method); the timer's stop rule uses the distribution-free order-statistic
interval instead, which needs no resampling and can be evaluated after every run. Speedups are
ratios of medians with a bootstrap interval of the ratio.

Samples from one process are not the whole story: on this project's VM the same compiled library
ran 116-127 ms (bert-base) in six fresh processes, each tight within itself, so an interval built
from one process per framework can exclude 1.0 for identical code. With ``--rounds N`` every
framework runs in N processes, and processes are the units: the intervals come from the rounds'
medians (Student's t, log scale), so the spread between processes widens them as it should, and
more rounds narrow them.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np

N_RESAMPLES = 2000  # bootstrap resamples of the one-process intervals


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


def bootstrap_median_ci(samples: Sequence[float], confidence: float = 0.95, seed: int = 0) -> tuple[float, float]:
    """Bootstrap (percentile) confidence interval of the median; (min, max) below 3 samples."""
    from scipy.stats import bootstrap

    x = np.asarray(samples, dtype=float)
    if x.size < 3 or np.all(x == x[0]):
        return (float(x.min()), float(x.max())) if x.size else (math.nan, math.nan)
    res = bootstrap((x,), np.median, confidence_level=confidence, n_resamples=N_RESAMPLES, vectorized=True,
                    method="percentile", random_state=np.random.default_rng(seed))
    lo, hi = float(res.confidence_interval.low), float(res.confidence_interval.high)
    if not (math.isfinite(lo) and math.isfinite(hi)):  # degenerate resamples (heavily tied data)
        lo, hi = median_ci(x, confidence)
    return lo, hi


def round_medians(samples: Sequence[float], rounds: Sequence[int] | None, percentile: float = 50
                  ) -> np.ndarray | None:
    """Each round's (process's) median (or other ``percentile``), when there are two rounds or
    more and their sizes add up to the samples, which are pooled round after round."""
    x = np.asarray(samples, dtype=float)
    if rounds is None or len(rounds) < 2 or sum(rounds) != x.size or min(rounds) < 1:
        return None
    return np.array([np.percentile(g, percentile) for g in np.split(x, np.cumsum(rounds)[:-1])])


def _t_quantile(confidence: float, df: float) -> float:
    from scipy.stats import t

    return float(t.ppf(1 - (1 - confidence) / 2, df))


def rounds_median_ci(medians: Sequence[float], confidence: float = 0.95) -> tuple[float, float]:
    """Interval of a framework's typical per-process median from its rounds' medians: Student's t
    with rounds - 1 degrees of freedom on the log scale. Processes, not samples, are the units:
    with few of them the interval is wide, as it must be (a cluster bootstrap over 3 rounds still
    excluded 1.0 in an A/A test of identical code)."""
    x = np.log(np.asarray(medians, dtype=float))
    half = _t_quantile(confidence, x.size - 1) * x.std(ddof=1) / math.sqrt(x.size)
    return float(np.exp(x.mean() - half)), float(np.exp(x.mean() + half))


def rounds_ratio_ci(baseline: Sequence[float], candidate: Sequence[float],
                    confidence: float = 0.95) -> tuple[float, float]:
    """Interval of baseline / candidate from the two frameworks' round medians: Welch's t on the
    logs (each side's spread between processes estimated from its own rounds)."""
    a, b = np.log(np.asarray(baseline, dtype=float)), np.log(np.asarray(candidate, dtype=float))
    va, vb = a.var(ddof=1) / a.size, b.var(ddof=1) / b.size
    centre = a.mean() - b.mean()
    if va + vb == 0:
        return float(np.exp(centre)), float(np.exp(centre))
    df = (va + vb) ** 2 / (va**2 / (a.size - 1) + vb**2 / (b.size - 1))
    half = _t_quantile(confidence, df) * math.sqrt(va + vb)
    return float(np.exp(centre - half)), float(np.exp(centre + half))


def within_strata_spread(sides: Sequence[dict[int, Sequence[float]]]) -> tuple[float, int]:
    """(variance, degrees of freedom) of the logs of round levels about their stratum's mean in
    their own run, pooled over ``sides`` (each one run's levels by stratum): the spread between
    a run's rounds, from many runs. NaN and 0 when no stratum of any run has two rounds."""
    ss, df = 0.0, 0
    for side in sides:
        for levels in side.values():
            if len(levels) < 2:
                continue
            logs = np.log(np.asarray(levels, dtype=float))
            ss, df = ss + float(((logs - logs.mean()) ** 2).sum()), df + logs.size - 1
    return (ss / df if df else math.nan), df


def stratified_ratio_ci(baseline: dict[int, Sequence[float]], candidate: dict[int, Sequence[float]],
                        confidence: float = 0.95, prior: tuple[float, int] | None = None
                        ) -> tuple[float, float, float, list[int]] | None:
    """(ratio, low, high, strata used) of baseline / candidate from round medians grouped by
    stratum (the host state they were timed in, ``probe.py``), compared stratum with stratum so
    that the host's jumps between states stay out of the ratio.

    Each side's spread between rounds is estimated once, pooled over its strata (the deviations
    of each round from its stratum's mean, on the logs): a state with one round on a side still
    counts, and two rounds no longer carry a whole variance estimate alone. The sides keep their
    own spreads (two runs, two hours). The strata both sides have are combined with
    inverse-variance weights; Welch-Satterthwaite degrees of freedom. None when no stratum is
    shared or a side has no stratum with two rounds.

    ``prior``: (variance, degrees of freedom) of the same spread from other runs of the point
    (``within_strata_spread``). Each side's own estimate is then moderated towards it, as
    limma's moderated t does with few replicates (Smyth 2004): the two are pooled, weighted by
    their degrees of freedom, and the side's degrees of freedom grow by the prior's. With four
    rounds a side Welch's t has about 3-6 degrees of freedom (t 2.6-3.2), and one run's spread,
    from three deviations, may be half or twice the true one by chance."""
    def pooled(side: dict[int, Sequence[float]]) -> tuple[dict[int, np.ndarray], float, int]:
        logs = {k: np.log(np.asarray(v, dtype=float)) for k, v in side.items() if len(v)}
        var, df = within_strata_spread([side])
        if prior is not None and prior[1] > 0 and df:
            var, df = (df * var + prior[1] * prior[0]) / (df + prior[1]), df + prior[1]
        return logs, var, df

    (a, va, dfa), (b, vb, dfb) = pooled(baseline), pooled(candidate)
    shared = sorted(set(a) & set(b))
    if not shared or not dfa or not dfb:
        return None
    va, vb = max(va, 1e-12), max(vb, 1e-12)
    weights = {k: 1 / (va / a[k].size + vb / b[k].size) for k in shared}
    total = sum(weights.values())
    centre = sum(w * (a[k].mean() - b[k].mean()) for k, w in weights.items()) / total
    ca = sum((w / total) ** 2 / a[k].size for k, w in weights.items()) * va  # the variance's two parts
    cb = sum((w / total) ** 2 / b[k].size for k, w in weights.items()) * vb
    df = (ca + cb) ** 2 / (ca**2 / dfa + cb**2 / dfb)
    half = _t_quantile(confidence, df) * math.sqrt(ca + cb)
    return math.exp(centre), math.exp(centre - half), math.exp(centre + half), shared


def bridged_ratio_ci(baseline: dict[int, Sequence[float]], candidate: dict[int, Sequence[float]],
                     bridges: Sequence[dict[int, Sequence[float]]], confidence: float = 0.95
                     ) -> tuple[float, float, float, int] | None:
    """(ratio, low, high, bridges used) of baseline / candidate from round levels grouped by
    stratum (host state) as ``stratified_ratio_ci`` takes them, when the two sides need not share
    a stratum: other runs of the same point (``bridges``) that saw several strata say how much a
    stratum moves the level, and the sides are compared through them.

    The model is additive on the logs: a round's log level = its run's own level + its stratum's
    effect + noise, the same stratum effects for every run (what a host state does to this
    model's time, whichever build runs) and one spread for all rounds. Least squares over every
    round of the sides and the bridges; the interval is Student's t with the residual degrees of
    freedom. None when the sides are not connected (no chain of runs and shared strata from one
    to the other) or no degree of freedom is left for the spread. ``bridges used``: the bridges
    in the connected part, those that carry the comparison."""
    runs = [baseline, candidate, *bridges]
    keep = _connected(runs, 0)
    if 1 not in keep:
        return None
    strata = sorted({k for i in keep for k, v in runs[i].items() if len(v)})
    rows, y = [], []
    for col, i in enumerate(keep):
        for k, values in runs[i].items():
            for v in values:
                row = np.zeros(len(keep) + len(strata) - 1)
                row[col] = 1.0
                if strata.index(k):
                    row[len(keep) + strata.index(k) - 1] = 1.0
                rows.append(row)
                y.append(math.log(v))
    x, yv = np.asarray(rows), np.asarray(y)
    beta, _, rank, _ = np.linalg.lstsq(x, yv, rcond=None)
    df = yv.size - rank
    if df < 1:
        return None
    sigma2 = float(((yv - x @ beta) ** 2).sum()) / df
    contrast = np.zeros(x.shape[1])
    contrast[0], contrast[1] = 1.0, -1.0  # baseline's run level minus the candidate's
    centre = float(contrast @ beta)
    half = _t_quantile(confidence, df) * math.sqrt(max(sigma2, 1e-12) * float(contrast @ np.linalg.pinv(x.T @ x)
                                                                              @ contrast))
    return math.exp(centre), math.exp(centre - half), math.exp(centre + half), len(keep) - 2


def _connected(runs: Sequence[dict[int, Sequence[float]]], start: int) -> list[int]:
    """The runs reachable from ``start`` through shared strata (in the order given)."""
    seen, frontier = {start}, [start]
    while frontier:
        strata = {k for k, v in runs[frontier.pop()].items() if len(v)}
        for j, run in enumerate(runs):
            if j not in seen and strata & {k for k, v in run.items() if len(v)}:
                seen.add(j)
                frontier.append(j)
    return sorted(seen)


def paired_ratio_ci(baseline: Sequence[float], candidate: Sequence[float],
                    confidence: float = 0.95) -> tuple[float, float, float]:
    """(ratio, low, high) of baseline / candidate from paired blocks: ``baseline[i]`` and
    ``candidate[i]`` were timed next to each other, so a burst on a shared machine falls on both
    and cancels in their ratio. Student's t with pairs - 1 degrees of freedom on the logs of the
    per-pair ratios; the ratio is their geometric mean. The pairs, not the runs inside a block,
    are the units: runs in one block share whatever the machine was doing then."""
    x = np.log(np.asarray(baseline, dtype=float)) - np.log(np.asarray(candidate, dtype=float))
    centre = float(x.mean())
    if x.size < 2:
        return math.exp(centre), math.nan, math.nan
    half = _t_quantile(confidence, x.size - 1) * x.std(ddof=1) / math.sqrt(x.size)
    return math.exp(centre), math.exp(centre - half), math.exp(centre + half)


def turn_medians(samples: Sequence[float], turns: Sequence[Sequence[float]],
                 rounds: Sequence[int] | None = None) -> list[tuple[float, float, int]] | None:
    """Each lockstep turn that took samples as (wall-clock middle, median of its samples, round),
    splitting the samples in order by the turns' counts (``lockstep.TurnClock``); ``rounds``: the
    samples per round, as in ``round_medians``. None when the turns carry no counts (documents
    from before them) or the counts do not add up to the samples."""
    if not turns or any(len(t) < 3 for t in turns) or sum(int(t[2]) for t in turns) != len(samples):
        return None
    bounds = np.cumsum(rounds) if rounds else np.array([len(samples)])
    out, i = [], 0
    for start, end, n in (t[:3] for t in turns):
        n = int(n)
        if n:
            out.append(((start + end) / 2, float(np.median(samples[i:i + n])), int(np.searchsorted(bounds, i, "right"))))
        i += n
    return out


def pair_turns(a: Sequence[tuple[float, float, int]], b: Sequence[tuple[float, float, int]],
               max_gap_s: float = 5.0) -> list[tuple[int, int]]:
    """Turns of two frameworks that were next to each other: the two frameworks' turns in time
    order, each pair one of ``a`` and one of ``b`` with no other turn of either between them, in
    the same round, each turn in one pair at most. Where one framework stopped early, the
    other's later turns follow one another and pair with nothing, instead of being set against
    a different stretch of the host."""
    merged = sorted([(t[0], 0, i) for i, t in enumerate(a)] + [(t[0], 1, j) for j, t in enumerate(b)])
    pairs, k = [], 0
    while k + 1 < len(merged):
        (t1, s1, i1), (t2, s2, i2) = merged[k], merged[k + 1]
        ia, ib = (i1, i2) if s1 == 0 else (i2, i1)
        if s1 != s2 and a[ia][2] == b[ib][2] and t2 - t1 <= max_gap_s:
            pairs.append((ia, ib))
            k += 2
        else:
            k += 1
    return pairs


def turn_paired_ratio(baseline: Sequence[tuple[float, float, int]], candidate: Sequence[tuple[float, float, int]],
                      confidence: float = 0.95, min_pairs: int = 3) -> tuple[float, float, float, int] | None:
    """(ratio, low, high, pairs) of baseline / candidate from lockstep turns (``turn_medians``):
    each candidate turn set against the baseline turn next to it (``pair_turns``), so the host's
    state, which on a shared machine moves by tens of percent within seconds, is nearly the same
    on both sides of each ratio. The ratio of the two frameworks' overall medians compares
    whatever stretches of the host each framework's samples happened to fall in: a framework
    that stops early (its interval narrow enough) leaves the other timing alone, at another
    speed of the host. The ratio is the median of the per-pair ratios (a burst inside one turn
    and not its neighbour makes one wild pair, which a mean would follow), its interval the
    median's order-statistic interval (``median_ci``); over two rounds or more, Student's t over
    the rounds' medians on the log scale (processes as the units, as ``rounds_ratio_ci``). None
    with fewer than ``min_pairs`` pairs."""
    logs, rounds = _paired_logs(baseline, candidate)
    if len(logs) < min_pairs:
        return None
    units = _round_units(logs, rounds)
    if len(units) < 2:
        lo, hi = median_ci(logs, confidence)
        return math.exp(float(np.median(logs))), math.exp(lo), math.exp(hi), len(logs)
    lo, hi = rounds_median_ci(np.exp(units), confidence)
    return math.exp(float(units.mean())), lo, hi, len(logs)


def turn_paired_rounds(baseline: Sequence[tuple[float, float, int]], candidate: Sequence[tuple[float, float, int]]
                       ) -> list[float] | None:
    """baseline / candidate per round from lockstep turns (``turn_medians``): each round's median
    of its paired turns' ratios (``pair_turns``), one value per round with a pair; None when no
    turn pairs. The host's state, which moves a whole run by 10 % over minutes on a shared
    machine (a neighbour on the memory), is nearly the same on both sides of each pair, so a
    round's value keeps the two frameworks' relation and drops most of the host."""
    logs, rounds = _paired_logs(baseline, candidate)
    return [float(v) for v in np.exp(_round_units(logs, rounds))] if len(logs) else None


def _paired_logs(baseline: Sequence[tuple[float, float, int]], candidate: Sequence[tuple[float, float, int]]
                 ) -> tuple[np.ndarray, list[int]]:
    """log(baseline / candidate) of each pair of neighbouring turns (``pair_turns``), and its round."""
    pairs = pair_turns(baseline, candidate)
    return (np.array([math.log(baseline[i][1] / candidate[j][1]) for i, j in pairs]),
            [baseline[i][2] for i, _ in pairs])


def _round_units(logs: np.ndarray, rounds: Sequence[int]) -> np.ndarray:
    """The median of ``logs`` within each round, rounds in order."""
    keys = np.asarray(rounds)
    return np.array([np.median(logs[keys == r]) for r in sorted(set(rounds))])


def speedup_ci(baseline_s: Sequence[float], candidate_s: Sequence[float], confidence: float = 0.95,
               seed: int = 0, baseline_rounds: Sequence[int] | None = None,
               candidate_rounds: Sequence[int] | None = None) -> tuple[float, float]:
    """Bootstrap interval of median(baseline) / median(candidate), resampling both independently;
    from the round medians (``rounds_ratio_ci``) when both sides say how many samples each of
    their rounds gave."""
    from scipy.stats import bootstrap

    a, b = np.asarray(baseline_s, dtype=float), np.asarray(candidate_s, dtype=float)
    if a.size < 3 or b.size < 3:
        return (math.nan, math.nan)
    ma, mb = round_medians(a, baseline_rounds), round_medians(b, candidate_rounds)
    if ma is not None and mb is not None:
        return rounds_ratio_ci(ma, mb, confidence)

    def ratio(x: np.ndarray, y: np.ndarray, axis: int = -1) -> np.ndarray:
        return np.median(x, axis=axis) / np.median(y, axis=axis)

    res = bootstrap((a, b), ratio, confidence_level=confidence, n_resamples=N_RESAMPLES, vectorized=True,
                    method="percentile", random_state=np.random.default_rng(seed))
    return float(res.confidence_interval.low), float(res.confidence_interval.high)


def summarize(samples_s: Sequence[float], batch_size: int, confidence: float = 0.95,
              rounds: Sequence[int] | None = None) -> dict[str, Any]:
    """Latency statistics in milliseconds plus throughput in samples per second. ``rounds``: how
    many of the samples (in order) each round's process gave; the median's interval then
    includes the spread between processes."""
    x = np.asarray(samples_s, dtype=float) * 1e3
    if x.size == 0:
        return {"runs": 0}
    mean = float(x.mean())
    std = float(x.std(ddof=1)) if x.size > 1 else 0.0
    p50, p90, p95, p99 = (float(v) for v in np.percentile(x, [50, 90, 95, 99]))
    medians = round_medians(x, rounds)
    if medians is not None:
        lo, hi = rounds_median_ci(medians, confidence)
        method = f"Student's t over the medians of {medians.size} rounds (processes), log scale"
    else:
        lo, hi = bootstrap_median_ci(x, confidence)
        method = f"bootstrap percentile, {N_RESAMPLES} resamples, one process"
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
        "ci_method": method,
        "ci_confidence": confidence,
        "throughput_samples_per_sec": batch_size * 1e3 / mean if mean > 0 else 0.0,
    }


def speedup(baseline_median_ms: float, candidate_median_ms: float) -> float:
    """Speedup of the candidate over the baseline: >1 means the candidate is faster."""
    return baseline_median_ms / candidate_median_ms


def geometric_mean(values: Sequence[float]) -> float:
    """Unclipped geometric mean: slowdowns count as much as speedups."""
    v = np.asarray([x for x in values if x > 0], dtype=float)
    return float(np.exp(np.log(v).mean())) if v.size else math.nan


def geometric_mean_clipped(values: Sequence[float]) -> float:
    """Geometric mean with each speedup clipped below at 1.0, the convention of PyTorch's
    TorchInductor performance dashboard (a slowdown counts as 1.0x). Always labelled as such."""
    return geometric_mean([max(v, 1.0) for v in values if v > 0])
