import itertools
import os
import time

import numpy as np
import pytest

from tvmbench.measure import accuracy, stats
from tvmbench.measure.timer import TimerConfig, measure

pytestmark = pytest.mark.serial  # the timer's and the probe's timings: run alone (Makefile)


def test_median_ci_covers_the_true_median_of_a_skewed_distribution():
    rng = np.random.default_rng(1)
    true_median = np.log(2)  # exponential(1)
    trials = 1000
    hits = 0
    for _ in range(trials):
        lo, hi = stats.median_ci(rng.exponential(size=50))
        hits += lo <= true_median <= hi
    assert 0.94 <= hits / trials <= 0.99


def test_median_ci_matches_textbook_order_statistics():
    # n = 100, 95 %: the 40th and 61st order statistics (1-based)
    assert stats.median_ci(list(range(1, 101))) == (40.0, 61.0)
    # too few samples for a finite interval: the range
    assert stats.median_ci([3.0, 1.0, 2.0]) == (1.0, 3.0)


def test_summary_of_known_samples():
    s = stats.summarize([0.001, 0.002, 0.003, 0.004, 0.010], batch_size=4)
    assert s["runs"] == 5
    assert s["median_ms"] == pytest.approx(3.0)
    assert s["mean_ms"] == pytest.approx(4.0)
    assert s["min_ms"] == pytest.approx(1.0) and s["max_ms"] == pytest.approx(10.0)
    assert s["std_ms"] == pytest.approx(np.std([1, 2, 3, 4, 10], ddof=1))
    assert s["throughput_samples_per_sec"] == pytest.approx(4 / 0.004)
    assert s["p90_ms"] == pytest.approx(np.percentile([1, 2, 3, 4, 10], 90))


def test_speedup_and_geomean():
    assert stats.speedup(20.0, 10.0) == 2.0
    assert stats.geometric_mean([2.0, 8.0]) == pytest.approx(4.0)



def test_fixed_counts_run_exactly():
    calls = itertools.count()
    m = measure(lambda: next(calls), TimerConfig(fixed_warmup_runs=3, fixed_runs=7))
    assert len(m.warmup_s) == 3 and len(m.samples_s) == 7 and m.block_size == 1
    assert m.total_calls == 10 == next(calls)
    assert "fixed count" in m.stop_reason


def test_steady_callable_stops_on_the_confidence_interval():
    m = measure(lambda: time.sleep(0.002),
                TimerConfig(min_warmup_runs=2, min_warmup_s=0.01, min_runs=10, min_time_s=0.05, max_time_s=5))
    assert "CI of the median" in m.stop_reason
    assert len(m.samples_s) >= 10 and m.timed_wall_s >= 0.05
    assert 0.0019 < float(np.median(m.samples_s)) < 0.01


def test_noisy_callable_stops_at_the_maximum_time():
    rng = np.random.default_rng(0)
    m = measure(lambda: time.sleep(float(rng.choice([0.001, 0.004]))),
                TimerConfig(min_warmup_runs=1, min_warmup_s=0.0, min_runs=5, min_time_s=0.01, max_time_s=0.3,
                            target_ci_rel=0.0001))
    assert "maximum time" in m.stop_reason
    assert 0.3 <= m.timed_wall_s < 0.6


def test_slow_callable_still_gets_a_few_timed_runs():
    m = measure(lambda: time.sleep(0.05),
                TimerConfig(min_warmup_runs=10, min_warmup_s=1, max_warmup_s=0.01, min_runs=30, min_time_s=3,
                            max_time_s=0.01))
    assert len(m.warmup_s) == 1  # capped by max_warmup_s, but at least one
    assert len(m.samples_s) == 3  # min_timed_runs_always
    assert "before 30 runs" in m.stop_reason


def test_slow_calls_warm_up_three_times_but_one_slow_first_call_does_not_count():
    cfg = TimerConfig(min_warmup_runs=10, min_warmup_s=0.3, slow_call_s=0.03, slow_warmup_runs=3,
                      min_runs=3, min_time_s=0.0, max_time_s=0.01)
    assert len(measure(lambda: time.sleep(0.04), cfg).warmup_s) == 3
    durations = itertools.chain([0.2], itertools.repeat(0.001))  # a lazy first call, then fast: a full warm-up
    m = measure(lambda: time.sleep(next(durations)), cfg)
    assert len(m.warmup_s) >= 10


def test_fast_callable_is_timed_in_blocks():
    m = measure(lambda: None, TimerConfig(min_warmup_runs=5, min_warmup_s=0.01, min_runs=10, min_time_s=0.05))
    assert m.block_size > 100  # a no-op takes well under 10 us
    assert m.timed_calls == m.block_size * len(m.samples_s)
    assert max(m.samples_s) < 1e-4


TOL = accuracy.tolerance_for("float32")


def test_accuracy_passes_on_tiny_error_and_reports_metrics():
    ref = np.linspace(-3, 3, 1000).astype(np.float32)
    r = accuracy.compare([ref + 1e-6], [ref], TOL)
    assert r["passed"] and r["max_abs_err"] == pytest.approx(1e-6, rel=0.1) and r["cosine"] > 0.999999


def test_accuracy_fails_on_wrong_values_shape_count_and_nan():
    ref = np.linspace(-3, 3, 1000).astype(np.float32)
    assert not accuracy.compare([ref[::-1].copy()], [ref], TOL)["passed"]
    assert not accuracy.compare([ref.reshape(10, 100)], [ref], TOL)["passed"]
    assert not accuracy.compare([ref, ref], [ref], TOL)["passed"]
    bad = ref.copy()
    bad[3] = np.nan
    assert "NaN" in accuracy.compare([bad], [ref], TOL)["reason"]


def test_relative_rule_accepts_large_outputs_with_small_relative_error():
    ref = np.linspace(-1000, 1000, 1000)
    assert accuracy.compare([ref + 0.5], [ref], TOL)["passed"]  # abs 0.5 but rel 5e-4
    assert not accuracy.compare([ref + 5], [ref], TOL)["passed"]  # rel 5e-3


def test_fp16_tolerance_is_looser_and_overridable():
    assert accuracy.tolerance_for("float16").atol == 1e-2
    assert accuracy.tolerance_for("float32", {"atol": 0.5}).atol == 0.5


def test_a_narrow_miss_is_judged_against_float64_and_a_bias_still_fails():
    """Two float32 computations rounding apart by 0.8e-3 of the largest output each miss one
    another's 1e-3 bound; against the exact outputs each is within it. A systematic 3e-3 bias
    misses narrowly too (cosine near 1), and fails against the exact outputs as well."""
    rng = np.random.default_rng(0)
    exact = rng.standard_normal(4000)
    noise = np.sign(rng.standard_normal(4000)) * 0.8e-3 * np.abs(exact).max()
    ours, theirs = (exact - noise).astype(np.float32), (exact + noise).astype(np.float32)
    check = accuracy.compare([ours], [theirs], TOL)
    assert not check["passed"] and accuracy.narrow_miss(check, TOL)
    judged = accuracy.arbitrate(check, [ours], [theirs], [exact], TOL)
    assert judged["passed"] and judged["judged_by"] == "float64"
    assert judged["float64"]["max_rel_err"] == pytest.approx(0.8e-3, rel=0.01)
    biased = theirs + np.float32(3e-3 * np.abs(exact).max())
    check = accuracy.compare([biased], [theirs], TOL)
    assert accuracy.narrow_miss(check, TOL)
    assert not accuracy.arbitrate(check, [biased], [theirs], [exact], TOL)["passed"]
    wrong = accuracy.compare([theirs[::-1].copy()], [theirs], TOL)  # a gross error is not judged again
    assert not wrong["passed"] and not accuracy.narrow_miss(wrong, TOL)
    assert not accuracy.narrow_miss(accuracy.compare([theirs], [theirs], TOL), TOL)  # nor a pass


def test_a_bf16_miss_is_judged_by_pytorchs_own_bf16_error_and_a_worse_one_still_fails():
    """A model that loses 30 % of its outputs' size in bf16 (PyTorch's own bf16 misses the fixed
    bound too): a framework rounding as badly passes by that error, one three times worse does
    not. On a model bf16 barely touches, the bound is not loosened: a 20 % error fails."""
    tol = accuracy.tolerance_for("bfloat16")
    rng = np.random.default_rng(1)
    exact = rng.standard_normal(4000)
    pytorch_bf16, ours, worse = (exact + scale * 0.3 * rng.standard_normal(4000) for scale in (1.0, 1.1, 3.0))
    check = accuracy.compare([ours], [exact], tol)
    assert not check["passed"] and accuracy.reduced_miss(check)
    judged = accuracy.arbitrate_reduced(check, [pytorch_bf16], [exact], "bfloat16", tol)
    assert judged["passed"] and judged["judged_by"] == "pytorch bfloat16"
    assert judged["bfloat16"]["pytorch_cosine"] < tol.min_cosine
    assert not accuracy.arbitrate_reduced(accuracy.compare([worse], [exact], tol), [pytorch_bf16], [exact],
                                          "bfloat16", tol)["passed"]
    barely = exact + 0.002 * rng.standard_normal(4000)
    wrong = accuracy.compare([exact + 0.2 * rng.standard_normal(4000)], [exact], tol)
    assert not accuracy.arbitrate_reduced(wrong, [barely], [exact], "bfloat16", tol)["passed"]
    assert not accuracy.reduced_miss(accuracy.compare([exact, exact], [exact], tol))  # nothing to judge again


def test_the_table_says_how_an_output_check_was_judged():
    from tvmbench.results.report import _accuracy

    plain = {"passed": True, "max_abs_err": 1e-5, "max_rel_err": 1e-5, "cosine": 1.0}
    assert _accuracy(plain).startswith("ok (abs 1.0e-05")
    judged = {**plain, "max_rel_err": 1.8e-3, "judged_by": "float64",
              "float64": {"passed": True, "max_rel_err": 1.5e-3, "reference_fp32_max_rel_err": 7.5e-4}}
    assert _accuracy(judged) == "ok against float64 (rel 1.5e-03, PyTorch fp32's 7.5e-04; fp32 rel 1.8e-03)"
    unjudged = {**plain, "passed": False, "float64": {"passed": None, "reason": "PyTorch could not run it"}}
    assert _accuracy(unjudged).endswith("; no float64 check: PyTorch could not run it)")
    bf16 = {**plain, "max_rel_err": 0.17, "cosine": 0.9973, "judged_by": "pytorch bfloat16",
            "bfloat16": {"passed": True, "pytorch_max_rel_err": 0.19, "pytorch_cosine": 0.9928, "factor": 2.0}}
    assert _accuracy(bf16) == ("ok within 2x PyTorch's own bfloat16 error (cos 0.9973, PyTorch's 0.9928; "
                               "rel 1.7e-01, PyTorch's 1.9e-01)")


def test_bootstrap_median_ci_brackets_the_sample_median():
    rng = np.random.default_rng(3)
    x = rng.lognormal(size=200)
    lo, hi = stats.bootstrap_median_ci(x)
    assert lo < np.median(x) < hi
    assert hi - lo < 0.5 * (x.max() - x.min())


def test_speedup_ci_brackets_the_ratio_of_medians():
    rng = np.random.default_rng(4)
    slow, fast = 20 + rng.exponential(size=100), 10 + rng.exponential(size=100)
    lo, hi = stats.speedup_ci(slow, fast)
    assert lo < np.median(slow) / np.median(fast) < hi
    assert lo > 1.5


def test_intervals_over_rounds_include_the_spread_between_processes():
    """Identical code in fresh processes runs at different speeds (placement luck), each process
    tight in itself: an interval from pooled samples then claims a difference that is not there."""
    rng = np.random.default_rng(7)

    def rounds(centres):
        return np.concatenate([c + rng.normal(0, 0.5, 200) for c in centres]), [200] * len(centres)

    base, base_sizes = rounds([100.0, 108.0, 112.0])
    cand, cand_sizes = rounds([104.0, 106.0, 114.0])
    pooled = stats.speedup_ci(base, cand)
    assert pooled[0] > 1.0  # the pooled interval says "candidate faster": wrong
    lo, hi = stats.speedup_ci(base, cand, baseline_rounds=base_sizes, candidate_rounds=cand_sizes)
    assert lo < 1.0 < hi
    assert hi - lo > 5 * (pooled[1] - pooled[0])
    # more processes with the same spread narrow the interval; a real 20 % gap stays visible
    many, many_sizes = rounds([100.0, 108.0, 112.0] * 3)
    faster, faster_sizes = rounds([84.0, 90.0, 93.0] * 3)
    lo9, hi9 = stats.speedup_ci(many, faster, baseline_rounds=many_sizes, candidate_rounds=faster_sizes)
    assert 1.0 < lo9 < 1.2 < hi9

    s = stats.summarize(base / 1e3, batch_size=1, rounds=base_sizes)
    assert s["ci_method"].startswith("Student's t") and s["median_ci_ms"][0] < 100 and s["median_ci_ms"][1] > 112
    plain = stats.summarize(base / 1e3, batch_size=1)
    assert plain["median_ci_ms"][1] - plain["median_ci_ms"][0] < 2
    # sizes that do not add up to the samples fall back to the one-level interval
    assert stats.summarize(base / 1e3, batch_size=1, rounds=[200, 5])["ci_method"] == plain["ci_method"]


def test_close_speedups_from_one_process_each_ask_for_rounds():
    from tvmbench.results.build import close_calls

    speedups = {"pytorch": {"speedup": 1.7}, "onnxruntime": {"speedup": 0.95}, "openvino": {"speedup": None}}
    note = close_calls(1, speedups)
    assert "onnxruntime" in note and "pytorch" not in note and "--rounds" in note
    assert close_calls(4, speedups) is None  # the intervals already include the spread
    assert close_calls(1, {"pytorch": {"speedup": 1.7}}) is None


def test_paired_ratio_interval_excludes_one_exactly_when_a_paired_t_test_rejects():
    """``paired_ratio_ci`` is the paired t-test on log times, stated as an interval of the ratio."""
    from scipy.stats import ttest_rel

    rng = np.random.default_rng(3)
    for shift in (0.0, 0.01, 0.03, 0.1):
        base = 1.0 + rng.uniform(0, 0.5, 8)  # the machine's state, shared by both sides of a pair
        a = base * np.exp(rng.normal(0, 0.03, 8))
        b = base * np.exp(rng.normal(-shift, 0.03, 8))
        ratio, low, high = stats.paired_ratio_ci(a, b)
        assert low < ratio < high and ratio == pytest.approx(np.exp(np.mean(np.log(a) - np.log(b))))
        assert (not low <= 1.0 <= high) == (ttest_rel(np.log(a), np.log(b)).pvalue < 0.05)


def test_lockstep_speedups_pair_each_turn_with_its_neighbour_not_the_whole_run():
    """In lockstep a framework that stops early (its interval narrow enough) leaves the other
    timing alone, in another stretch of a shared host, and the ratio of their overall medians
    then compares two speeds of the host. Each turn set against the turn next to it does not."""
    from tvmbench.results.build import tvm_speedups
    from tvmbench.results.records import FrameworkResult

    rng = np.random.default_rng(5)

    def host(t: float) -> float:  # the host's slowdown, in stretches of 2 s
        return 1.6 if int(t // 2) % 2 else 1.0

    def framework(true_ms: float, starts: list[float]) -> FrameworkResult:
        samples, turns = [], []
        for t in starts:
            samples += list(true_ms * host(t) * np.exp(rng.normal(0, 0.02, 20)))
            turns.append([t, t + 0.24, 20])
        return FrameworkResult(status="ok", statistics={"median_ms": float(np.median(samples))},
                               samples_ms=samples, lockstep_turns=turns, accuracy={"passed": True})

    # TVM (9 ms) and ONNX Runtime (10 ms) alternate for 2 s; then ONNX Runtime goes on alone
    tvm = framework(9.0, [0.25, 0.75, 1.25, 1.75])
    ort = framework(10.0, [0.0, 0.5, 1.0, 1.5] + [2.0 + 0.25 * k for k in range(8)])
    assert ort.median_ms / tvm.median_ms > 1.5  # the medians' ratio: mostly the host's slow stretch
    s = tvm_speedups({"tvm": tvm, "onnxruntime": ort})["onnxruntime"]
    assert s.speedup == pytest.approx(10 / 9, rel=0.02) and 1.0 < s.ci95[0] < 10 / 9 < s.ci95[1]
    assert s.basis.startswith("lockstep turns: median over 4 pairs")
    # turns without sample counts (documents from before them), or counts that do not add up: the medians
    assert stats.turn_medians(tvm.samples_ms, [t[:2] for t in tvm.lockstep_turns]) is None
    assert stats.turn_medians(tvm.samples_ms[1:], tvm.lockstep_turns) is None
    old = FrameworkResult(**{**tvm.__dict__, "lockstep_turns": [t[:2] for t in tvm.lockstep_turns]})
    assert tvm_speedups({"tvm": old, "onnxruntime": ort})["onnxruntime"].basis.startswith("median")
    # turns of two rounds never pair across them
    a = stats.turn_medians([1.0] * 8, [[0, 1, 2], [2, 3, 2], [100, 101, 2], [102, 103, 2]], rounds=[4, 4])
    b = stats.turn_medians([2.0] * 6, [[1, 2, 2], [3, 4, 2], [101, 102, 2]], rounds=[4, 2])
    assert [t[2] for t in a] == [0, 0, 1, 1] and stats.pair_turns(a, b) == [(0, 0), (1, 1), (2, 2)]


def test_a_prior_spread_moderates_each_sides_own_and_does_not_hide_a_noisy_side():
    """limma's moderated t: the prior's spread is pooled with each side's own by degrees of
    freedom, so the same spread known from other runs narrows the interval (Welch's t with
    about 6 df to t with hundreds), a prior with no degrees of freedom changes nothing, and a
    side far more spread than the prior still widens the interval."""
    levels = {0: [10.0, 10.4, 9.7, 10.1], 1: [12.0, 12.5]}
    logs = [np.log(v) - np.log(v).mean() for v in levels.values()]
    assert stats.within_strata_spread([levels, {0: [5.0]}]) == pytest.approx(
        (sum(float((x**2).sum()) for x in logs) / 4, 4))
    a, b = {0: [1.00, 1.04, 0.97, 1.01]}, {0: [1.10, 1.14, 1.07, 1.12]}
    own, _ = stats.within_strata_spread([a])

    def width(ci):
        return np.log(ci[2] / ci[1])

    alone = stats.stratified_ratio_ci(b, a)
    assert stats.stratified_ratio_ci(b, a, prior=(own, 0)) == alone
    many = stats.stratified_ratio_ci(b, a, prior=(own, 200))
    assert many[0] == alone[0] and width(many) < 0.85 * width(alone)  # t(6 df) 2.45 -> t(406) 1.97
    noisy = {0: [1.10, 1.30, 0.95, 1.12]}
    assert width(stats.stratified_ratio_ci(noisy, a, prior=(own, 12))) > 1.3 * width(
        stats.stratified_ratio_ci(b, a, prior=(own, 12)))


def test_clipped_geomean_is_the_dashboard_convention_and_differs_from_unclipped():
    assert stats.geometric_mean([0.25, 4.0]) == pytest.approx(1.0)
    assert stats.geometric_mean_clipped([0.25, 4.0]) == pytest.approx(2.0)


def test_rounds_pool_samples_and_report_per_round_medians():
    from tvmbench.measure.isolation import Outcome
    from tvmbench.measure.records import FrameworkRun
    from tvmbench.measure.runner import merge_rounds
    from tvmbench.measure.timer import Measurement

    def outcome(samples):
        m = Measurement(samples_s=samples, warmup_s=[], block_size=1, stop_reason="fixed runs",
                        total_calls=len(samples), timed_calls=len(samples), timed_wall_s=sum(samples))
        return Outcome(ok=True, value=FrameworkRun(info={}, phases_s={}, outputs=[], batch_size=1, model={},
                                                   measurement=m), peak_rss_bytes=10)

    merged = merge_rounds([outcome([0.01, 0.01, 0.01]), Outcome(ok=False, error={"message": "crash"}),
                           outcome([0.02, 0.02, 0.02])])
    assert merged.ok
    assert merged.value.measurement.timed_calls == 6 and len(merged.value.samples_s()) == 6
    assert merged.value.rounds.medians_ms == pytest.approx([10.0, 20.0])
    assert merged.value.rounds.sizes == [3, 3]
    assert merged.value.rounds.failures == ["crash"]
    assert not merge_rounds([Outcome(ok=False, error={"message": "x"})]).ok


def test_the_host_probe_runs_between_blocks_at_a_bounded_cost_and_never_among_the_samples():
    import time as _time

    from tvmbench.measure.probe import OVERHEAD, PROBE_TURN_S, HostProbe
    from tvmbench.measure.timer import measure

    calls = []

    def model():
        calls.append(1)
        _time.sleep(0.004)

    m = measure(model, TimerConfig(min_runs=10, min_time_s=1.0, max_time_s=1.0, min_warmup_runs=2,
                                   min_warmup_s=0.0), probe=HostProbe())
    turns = m.total_calls - m.timed_calls - len(m.warmup_s)  # each probe turn is followed by a re-warm-up call
    assert len(calls) == m.total_calls and 3 <= turns <= 1.0 / 0.25 + 1, turns  # after the first block, then
    assert len(m.probe_turns) == turns and min(m.samples_s) >= 0.004  # one per quarter second
    assert [i for i, *_ in m.probe_turns] == sorted({i for i, *_ in m.probe_turns})  # after different blocks
    # seconds per fork-join, and per call of the paired work (two tasks of multiply-adds at once)
    assert all(0 < fj < 1e-3 and fj < work < 1e-2 for _, fj, work in m.probe_turns), m.probe_turns
    assert turns * PROBE_TURN_S < OVERHEAD * sum(m.samples_s) * 1.5  # (the last turn may come late)
    # a slow call spaces the turns so that turn and re-warm-up stay within the overhead share
    probe = HostProbe()
    assert not probe.due(1.0, call_s=0.5) and probe.due(0.3, call_s=0.001)


def test_host_states_split_at_gaps_and_label_samples_by_the_turns_around_them():
    """The probe's turns split at gaps into host states; each sample is labelled by the turns
    around it, none where the state changed between them or a turn fits no state."""
    from tvmbench.measure.probe import HostStates, label_samples, states

    bounds = states([1.0, 0.95, 1.05, 1.4, 1.45, 1.02, 1.41])
    assert len(bounds) == 1 and 1.05 < bounds[0] < 1.4
    strays = states([0.7, 0.98, 1.0, 1.02, 1.05, 1.39, 1.4, 1.41, 1.45])
    assert len(strays) == 1 and 1.05 < strays[0] < 1.39  # a stray turn (0.7) founds no state of its own
    assert states([1.0, 1.05, 1.1, 1.12]) == []  # no gap over 15 %: one state
    # turns after samples 3 (near), 6 (near), 9 (far): samples 6-8 lie between near and far
    host = HostStates.of([(0, v) for v in [1.0, 0.95, 1.05, 1.4, 1.45, 1.02, 1.41]])
    labels = label_samples(12, [(3, 1.0), (6, 1.02), (9, 1.42)], host)
    assert labels == [0, 0, 0, 0, 0, 0, None, None, None, 1, 1, 1]
    assert label_samples(4, [], host) == [None] * 4
    # three turns of 58 far from every other (the host elsewhere for a moment): their samples are
    # of no state, not the state next to them; a spread with no clear states marks nothing
    turns60 = [(0, v) for v in [1.27, 1.3, 1.45, 1.6, 1.75] * 11 + [0.58, 0.74, 0.89]]
    odd = HostStates.of(turns60)
    assert len(odd) == 1 and [odd.is_stray(t) for t in [(0, 0.74), (0, 1.3)]] == [True, False]
    assert label_samples(9, [(3, 1.3), (6, 0.74)], odd) == [0, 0, 0, None, None, None, None, None, None]
    assert HostStates.of([(0, v) for v in [1.0, 1.2, 1.45, 1.7, 2.0, 2.4]]).strays == ()
    # with the paired-work reading: one core's two hyper-threads (18 us, fork-joins as near) is a
    # state of its own however few its turns; the fork-joins alone file it with the near state
    turns = [(0, fj, work) for fj, work in [(1.0, 10.1), (0.95, 10.3), (1.05, 10.0), (1.4, 10.6), (1.45, 10.8),
                                            (1.41, 10.7)] * 3 + [(0.9, 18.1), (0.92, 18.2), (0.91, 18.1)]]
    paired = HostStates.of(turns + [(0, 1.02, 10.2)] * 60)  # 3 turns in 81 on hyper-threads
    assert [n for n in paired.names if n] == ["1.02 us/10.2 us", "0.91 us/18.1 us (one core)", "1.41 us/10.7 us"]
    assert len({paired.of_turn(t) for t in turns}) == 3
    assert len({HostStates.of([t[:2] for t in turns]).of_turn(t[:2]) for t in turns}) == 2


def test_environment_warnings_for_a_noisy_machine():
    from tvmbench.measure import environment

    assert environment.warnings_for({"cpu_busy_percent_before": 5, "governor": "performance"}) == []
    notes = environment.warnings_for({"cpu_busy_percent_before": 80, "governor": "powersave",
                                      "busy_processes_before": ["make (150%)"]})
    assert any("busy" in n and "make (150%)" in n for n in notes) and any("powersave" in n for n in notes)
    env = environment.collect(threads=2)
    for key in ("cpu_model", "physical_cores", "threads_used", "os", "python", "packages", "date"):
        assert key in env
    assert env["packages"]["torch"].startswith("2.14")


def test_error_headline_skips_a_bare_source_location():
    from tvmbench.errors import headline

    ov = RuntimeError("Exception from src/inference/src/cpp/core.cpp:117:\n[ NOT_FOUND ] Unsupported property FOO\n")
    assert headline(ov) == "[ NOT_FOUND ] Unsupported property FOO"
    assert headline(ValueError("first line\nsecond")) == "first line"
    assert headline(KeyError()) == "KeyError"


def test_a_device_clock_replaces_the_host_clock_with_the_same_rules():
    from tvmbench.measure.timer import TimerConfig, measure

    asked = []

    def device(k):
        asked.append(k)
        return 0.004  # what the device says one call took

    m = measure(lambda: None, TimerConfig(fixed_warmup_runs=2, fixed_runs=5), block_timer=device)
    assert m.samples_s == [0.004] * 5 and m.warmup_s == [0.004] * 2
    assert asked == [1] * 7 and m.total_calls == 7


def test_atomic_writes_leave_ordinary_file_permissions(tmp_path):
    import os
    import stat

    from tvmbench.files import write_text_atomic

    umask = os.umask(0o022)
    try:
        path = write_text_atomic(tmp_path / "r.json", "{}")
    finally:
        os.umask(umask)
    assert stat.S_IMODE(path.stat().st_mode) == 0o644 and path.read_text() == "{}"


def test_the_compute_roof_is_the_cores_fma_throughput_not_a_blas():
    """The roof counts independent vector FMAs in registers on every thread: per thread and
    cycle, lanes x 2 flops x 1-2 FMA units at a clock between 0.8 and 6 GHz; a scalar,
    dependent or single-threaded loop would fall far below. On this Zen 5 VM the SGEMM of either
    BLAS reached about half of it at 2 threads, which TVM's convolutions then "beat"."""
    from tvmbench.measure.peak import _compiled_fma_loop, measure_compute_peak

    _, lanes = _compiled_fma_loop()
    peak = measure_compute_peak(1, seconds=0.05)
    assert peak.method.startswith("FMA loop") and peak.threads == 1
    assert lanes * 2 * 1 * 0.8 < peak.gflops < lanes * 2 * 2 * 6.0, peak
    # (NumPy's OpenBLAS runs on the threads it started with, every core here: not a 1-thread SGEMM)
    blas_threads = int(os.environ.get("OPENBLAS_NUM_THREADS") or len(os.sched_getaffinity(0)))
    assert ("OpenBLAS" in peak.method) == (blas_threads == 1), peak.method


def test_each_cache_level_gets_its_own_slope_and_a_kernel_the_slope_of_where_its_bytes_fit():
    """The cache-aware roofline: a triad over arrays that fill half of each level, per thread; a
    nearer level never reads slower than a farther one (nor than memory's ``floor_gbs``), and a
    kernel's bytes pick the nearest level that holds them (memory past the last)."""
    from tvmbench.measure.peak import (
        Bandwidth,
        CacheSlope,
        _cpu_list,
        _size_bytes,
        cache_levels,
        measure_cache_slopes,
    )

    assert _cpu_list("0-3,8") == [0, 1, 2, 3, 8] and _size_bytes("1024K") == 1 << 20 and _size_bytes("32M") == 1 << 25
    levels = cache_levels(1)
    if not levels:
        pytest.skip("no sysfs cache description on this OS")
    slopes = measure_cache_slopes(1, floor_gbs=1.0, seconds=0.01, calls=2)
    assert [s.level for s in slopes] == [name for name, _ in levels] and slopes[-1].level == "L3"
    assert all(near.gbs >= far.gbs >= 1.0 for near, far in zip(slopes, slopes[1:], strict=False))
    assert slopes[0].gbs > 4.0  # even one slow vCPU moves more than 4 GB/s from its L1
    roof = Bandwidth(10.0, "triad", 2, (CacheSlope("L1", 1000, 300.0), CacheSlope("L2", 10_000, 200.0)))
    assert [roof.slope_for(b) for b in (1000, 1001, 10_001)] == [("L1", 300.0), ("L2", 200.0), ("DRAM", 10.0)]


def test_paced_calls_of_two_workers_take_turns_and_profiled_ones_get_no_warm_up_call():
    """``explain``'s two workers measure in alternating turns (``lockstep.Pacer``): no call of
    one overlaps a call of the other, the turns change hands, each turn of plain calls starts
    with one warm-up call and a turn of profiled calls with none, and every turn with a pause
    (the other framework's threads stop spinning first); a worker that finishes frees the
    other."""
    import multiprocessing
    import threading

    from tvmbench.measure.lockstep import SETTLE_S, Baton, Pacer, Turns

    baton = Baton(2, multiprocessing.get_context("spawn"))
    spans: list[tuple[int, float, float]] = []
    warm_ups = [0, 0]
    warm_times: list[tuple[int, float]] = []

    def warm_up(i: int) -> None:
        warm_ups[i] += 1
        warm_times.append((i, time.monotonic()))

    def worker(i: int) -> None:
        pacer = Pacer(Turns(baton, i, turn_s=0.01), rewarm=lambda: warm_up(i))
        pacer.arrive()

        def call() -> None:
            t0 = time.monotonic()
            time.sleep(0.004)
            spans.append((i, t0, time.monotonic()))

        for _ in range(8):
            pacer(call)
        plain_turns = sum(1 for j, (w, *_) in enumerate(spans) if w == i and (j == 0 or spans[j - 1][0] != i))
        for _ in range(4 + 4 * i):  # the second worker goes on alone once the first has finished
            pacer.profiled(call)
        pacer.finish()
        assert warm_ups[i] == plain_turns, (i, warm_ups[i], plain_turns)

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(10)
    assert not any(t.is_alive() for t in threads) and len(spans) == 2 * 8 + 4 + 8
    ordered = sorted(spans, key=lambda s: s[1])
    assert all(a[2] <= b[1] for a, b in zip(ordered, ordered[1:], strict=False))  # never two at once
    assert sum(a[0] != b[0] for a, b in zip(ordered, ordered[1:], strict=False)) >= 4  # the turns alternate
    for i, t in warm_times:  # (a warm-up call only after a pause since the other worker's last call)
        before = [end for w, _, end in spans if w != i and end <= t]
        assert not before or t - max(before) >= 0.9 * SETTLE_S, (i, t - max(before))


def test_lockstep_turns_of_slow_calls_start_with_a_pause_and_fast_ones_with_an_untimed_call():
    """A turn's first call is untimed (the other framework just had the caches), except for
    calls of ``pause_turn_call_s`` or more, whose turns start with a pause: every call is then a sample."""
    import multiprocessing

    from tvmbench.measure.lockstep import Baton, Turns

    cfg = TimerConfig(min_warmup_runs=3, min_warmup_s=0.0, pause_turn_call_s=0.02, slow_warmup_runs=3,
                      turn_settle_s=0.01, min_runs=6, min_time_s=0.0, max_time_s=0.3, target_ci_rel=0.0)
    for seconds, slow in ((0.03, True), (0.002, False)):
        calls: list[None] = []
        turns = Turns(Baton(1, multiprocessing.get_context("spawn")), 0, turn_s=0.001)  # a turn per sample
        m = measure(lambda s=seconds, calls=calls: calls.append(time.sleep(s)), cfg, turns=turns)
        assert len(m.turns) == len(m.samples_s) >= 6
        untimed = len(calls) - len(m.warmup_s) - m.timed_calls
        assert untimed == (0 if slow else len(m.turns)), (seconds, untimed, len(m.turns))


BURN = "import time\nt = time.time()\nwhile time.time() - t < 5: pass\n"


def test_the_busy_sample_counts_other_work_but_not_tvmbench_own():
    """tvmbench's own fork server and workers are not "other work"; a process outside it is, and is named."""
    import signal
    import subprocess
    import sys

    import psutil

    from tvmbench.measure import environment

    mine = subprocess.Popen([sys.executable, "-c", BURN])  # a child of this process: ours
    try:
        time.sleep(0.3)
        ours, _ = environment.busy_sample()
    finally:
        mine.kill()
        mine.wait()
    # started by a shell that exits at once: adopted by init, not ours
    shell = subprocess.run(["sh", "-c", f"{sys.executable} -c '{BURN}' > /dev/null 2>&1 & echo $!"],
                           check=True, capture_output=True, text=True)
    try:
        time.sleep(0.3)
        other, busiest = environment.busy_sample()
    finally:
        os.kill(int(shell.stdout), signal.SIGKILL)
    core = 100 / psutil.cpu_count()  # one core's share of the machine (50 % on two)
    assert ours < 0.4 * core < 0.6 * core <= other, (ours, other, core)
    assert any(name.startswith("python") for name in busiest), busiest
