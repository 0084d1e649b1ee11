"""From measurements to a result: statistics, accuracy against the reference, TVM's speedups,
and the warnings a reader needs (a noisy machine, a call too close for one process each)."""

from __future__ import annotations

from typing import Any

from tvmbench.measure import accuracy, environment, isolation, stats
from tvmbench.measure.records import FrameworkRun
from tvmbench.measure.runner import REFERENCE, RunConfig, precision_of, tolerance_of
from tvmbench.results.records import FrameworkResult, RunResult, Speedup


def build_result(cfg: RunConfig, order: list[str], raw: dict[str, isolation.Outcome],
                 ref_outputs: list[Any] | None, env: dict[str, Any], source: str | None = REFERENCE,
                 exact: isolation.Outcome | None = None, reduced: isolation.Outcome | None = None) -> RunResult:
    """The run's result from each framework's outcome (``raw``, by framework; ``_reference`` for
    reference outputs computed without timing) and the reference outputs, which came from
    ``source`` (PyTorch, a peer, or "package": the package's stored outputs). ``exact``: PyTorch
    in float64, when a framework missed narrowly (``runner.float64_reference``); ``reduced``:
    PyTorch under autocast, when a framework computing in bf16 or fp16 missed
    (``runner.reduced_reference``)."""
    runs: list[FrameworkRun] = [o.value for o in raw.values() if o.ok]
    model_info = next((r.model for r in runs), {})
    flops = next((r.flops for r in runs if r.flops is not None), None)
    batch = next((r.batch_size for r in runs), cfg.options.batch_size)
    results = {}
    for fw in order:
        tolerance = tolerance_of(cfg, fw)
        results[fw] = framework_result(raw[fw], ref_outputs, tolerance, batch, flops, fw == source)
        acc = results[fw].accuracy
        precision = precision_of(cfg, fw)
        if exact is not None and ref_outputs is not None and accuracy.narrow_miss(acc, tolerance):
            results[fw].accuracy = (accuracy.arbitrate(acc, raw[fw].value.outputs, ref_outputs, exact.value.outputs,
                                                       tolerance) if exact.ok else _unjudged(acc, "float64", exact))
        elif reduced is not None and precision != "float32" and ref_outputs is not None and accuracy.reduced_miss(acc):
            results[fw].accuracy = (accuracy.arbitrate_reduced(acc, reduced.value.outputs, ref_outputs, precision,
                                                               tolerance) if reduced.ok else
                                    _unjudged(acc, precision, reduced))
        if source != REFERENCE and ref_outputs is not None and fw != source and results[fw].accuracy:
            results[fw].accuracy["reference_from"] = ("the package's stored outputs for its inputs"
                                                      if source == "package" else source)
    speedups = tvm_speedups(results)
    tvm_db = (results["tvm"].info.get("database") or {}) if "tvm" in results else {}
    return RunResult(
        model=cfg.model, batch_size=batch, seq_length=model_info.get("seq_length"),
        image_size=model_info.get("image_size"), target=cfg.target.kind, target_config=cfg.target.config,
        target_source=cfg.target.source, frameworks=order, results=results, speedup=tvm_speedup(results),
        tvm_speedups=speedups,
        tuning_enabled=bool(tvm_db.get("tasks_with_records")),  # some kernel ran a tuned schedule
        tuning_database=tvm_db or None, model_info={**model_info, "flops": flops},
        measurement=_method(cfg), environment=env, warnings=_warnings(cfg, env, results, speedups),
        outputs={fw: raw[fw].value.outputs for fw in order if raw[fw].ok})


def _sensitive(results: dict[str, FrameworkResult]) -> list[str]:
    """A warning where reduced-precision outputs passed only by PyTorch's own error at that
    precision: the model itself loses that much there, so its outputs are far from float32's."""
    judged = {fw: second for fw, r in results.items() if (r.accuracy or {}).get("passed")
              for second in [accuracy.second_opinion(r.accuracy)] if second and second["precision"] != "float64"}
    if not judged:
        return []
    second = next(iter(judged.values()))
    return [f"{', '.join(sorted(judged))}: outputs within {second['factor']:g}x PyTorch's own {second['precision']} "
            f"error, not within the fixed bound: this model loses that much in {second['precision']} "
            f"(PyTorch's cosine to its float32 outputs {second['pytorch_cosine']:.4f})"]


def _unjudged(acc: dict[str, Any], precision: str, second: isolation.Outcome) -> dict[str, Any]:
    """A miss left as it was: PyTorch could not compute the second reference at ``precision``."""
    message = (second.error or {}).get("message", "")
    return {**acc, precision: {"passed": None, "reason": f"PyTorch could not run the model in {precision}: {message}"}}


def _method(cfg: RunConfig) -> dict[str, Any]:
    return {"method": "tvmbench.measure.timer", "timer": cfg.timer.to_json(),
            "isolation": "process per framework (spawn)" if cfg.isolate else "none (in-process)",
            "threads": cfg.threads, "rounds": cfg.rounds,
            "io_policy": "host-to-device input copies and output copies back are timed"
            if cfg.include_io else "inputs resident on the device, outputs not copied back "
            "inside the timed region"}


def _warnings(cfg: RunConfig, env: dict[str, Any], results: dict[str, FrameworkResult],
              speedups: dict[str, Speedup]) -> list[str]:
    noisy = environment.warnings_for(env)
    noisy += [f"{fw}: high run-to-run variation (CV {r.statistics['cv']:.0%})" for fw, r in results.items()
              if r.statistics.get("cv", 0) > 0.10]
    states = host_states_note(results)
    if states:
        noisy.append(states)
    close = close_calls(cfg.rounds, {fw: s.to_json() for fw, s in speedups.items()})
    if close:
        noisy.append(close)
    noisy += [f"{fw}: {w}" for fw, r in results.items() for w in r.info.get("warnings") or []]
    precision = cfg.backend_options.get("precision", "fp32")
    if precision != "fp32":
        from tvmbench.backends import load_class

        full = sorted(fw for fw in results if not load_class(fw).reduced_precision)
        if full:
            noisy.append(f"{', '.join(full)} ran in fp32 (no --precision {precision} there): against the "
                         f"{precision} frameworks, their times are not like for like")
        noisy += _sensitive(results)
    remote = sorted(fw for fw, r in results.items() if r.info.get("remote"))
    emulated = sorted(fw for fw in remote if results[fw].info["remote"].get("emulated"))
    if emulated:
        noisy.append(f"{', '.join(emulated)} ran under emulation ({results[emulated[0]].info['remote']['emulated']}): "
                     "its outputs are checked as on a device, its times say nothing of a device's speed")
    if remote:
        noisy.append(f"{', '.join(remote)} ran on the remote device (timed with its own clock); the other "
                     "frameworks ran on this machine, so speedups between them compare two machines")
    return noisy


_PAIRED = " / per paired-work call"  # the second reading, named when it splits states


def host_states_note(results: dict[str, FrameworkResult]) -> str | None:
    """When the host-state probe (``--probe``) saw the machine's cores in more than one state
    during the run, each framework's median and share of samples in each: the run-to-run
    variation it explains, and why ``tvmbench diff`` compares runs state with state."""
    from tvmbench.measure.probe import split_by_state

    split = split_by_state({fw: (r.samples_ms, r.rounds.sizes, r.rounds.probe_turns) for fw, r in results.items()
                            if r.rounds is not None and r.rounds.probe_turns})
    if split is None or len(split.names) < 2:
        return None
    per_fw = [f"{fw} " + ", ".join(f"{got[0]:.2f} ms in {got[1]:.0%} of samples" if got else "-" for got in by_state)
              for fw, by_state in split.frameworks.items()]
    return (f"the host's cores were in {len(split.names)} states during this run (the host-state probe read "
            + ", ".join(split.names) + f" per fork-join{_PAIRED if any('/' in n for n in split.names) else ''}): "
            f"{'; '.join(per_fw)}. "
            "Times differ by state; `tvmbench diff` compares runs state with state")


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


def framework_result(outcome: isolation.Outcome, ref_outputs: list[Any] | None, tolerance: accuracy.Tolerance,
                     batch: int, flops: int | None, is_reference: bool) -> FrameworkResult:
    """Statistics of the samples (intervals from the round medians when there were rounds) and
    the accuracy verdict against the reference outputs."""
    if not outcome.ok:
        err = outcome.error
        return FrameworkResult(status="unavailable" if err.get("kind") == "unavailable" else "failed",
                               error=err.get("message", ""), error_type=err.get("type"), error_kind=err.get("kind"),
                               traceback=err.get("traceback"), peak_rss_bytes=outcome.peak_rss_bytes or None)
    run: FrameworkRun = outcome.value
    m = run.measurement
    samples = run.samples_s()
    summary = stats.summarize(samples, batch, rounds=run.rounds.sizes if run.rounds else None)
    result = FrameworkResult(
        status="ok", statistics=summary, total_runs=m.timed_calls if m else 0, device=run.info.get("device"),
        warmup_ms=[s * 1e3 for s in m.warmup_s] if m else [], block_size=m.block_size if m else None,
        stop_reason=m.stop_reason if m else None, phases_s=run.phases_s, peak_rss_bytes=outcome.peak_rss_bytes,
        peak_gpu_memory_bytes=outcome.peak_gpu_bytes, peak_inference_rss_bytes=outcome.peak_rss_marked_bytes,
        info=run.info, samples_ms=[s * 1e3 for s in samples],
        rounds=run.rounds, lockstep_turns=[list(t) for t in m.turns] if m else [])
    if flops and summary.get("median_ms"):
        result.gflops_per_sec = flops / (summary["median_ms"] * 1e-3) / 1e9
    if is_reference:
        result.accuracy = {"passed": True, "reference": True}
    elif ref_outputs is None:
        result.accuracy = {"passed": None, "reason": "no reference outputs (PyTorch cannot run this model and "
                                                     "no peer or package reference was available)"}
    else:
        result.accuracy = accuracy.compare(run.outputs, ref_outputs, tolerance)
    return result


def tvm_speedup(results: dict[str, FrameworkResult], other: str = REFERENCE) -> Speedup:
    """TVM's speedup over ``other`` (median other / median TVM) with a 95 % interval (from the
    round medians when the run had rounds, see stats.speedup_ci); in lockstep, from the two
    frameworks' adjacent turns instead (``_turn_paired``). None when either failed or either's
    outputs did not match the reference."""
    tvm_r, other_r = results.get("tvm"), results.get(other)
    basis = f"median({other}) / median(tvm)"
    if not tvm_r or not other_r or not tvm_r.ok or not other_r.ok:
        return Speedup(None, None, basis)
    if tvm_r.accuracy.get("passed") is False or not tvm_r.median_ms:
        return Speedup(None, None, basis + "; withheld: outputs did not match the reference")
    if other_r.accuracy.get("passed") is False:
        return Speedup(None, None, basis + f"; withheld: {other}'s outputs did not match the reference")
    paired = _turn_paired(other_r, tvm_r)
    if paired is not None:
        ratio, low, high, n = paired
        return Speedup(ratio, [low, high], f"lockstep turns: median over {n} pairs of adjacent turns of "
                                           f"median({other} turn) / median(tvm turn)")
    ci = stats.speedup_ci(other_r.samples_ms, tvm_r.samples_ms,
                          baseline_rounds=other_r.rounds.sizes if other_r.rounds else None,
                          candidate_rounds=tvm_r.rounds.sizes if tvm_r.rounds else None)
    return Speedup(stats.speedup(other_r.median_ms, tvm_r.median_ms), list(ci), basis)


def _turn_paired(baseline: FrameworkResult, candidate: FrameworkResult) -> tuple[float, float, float, int] | None:
    """baseline / candidate from their lockstep turns side by side (``stats.turn_paired_ratio``),
    when both measured in turns that say how many samples each took."""
    turns = [stats.turn_medians(r.samples_ms, r.lockstep_turns, r.rounds.sizes if r.rounds else None)
             for r in (baseline, candidate)]
    return stats.turn_paired_ratio(*turns) if turns[0] and turns[1] else None


def tvm_speedups(results: dict[str, FrameworkResult]) -> dict[str, Speedup]:
    """TVM's speedup over every other framework of the run (see ``tvm_speedup``)."""
    return {fw: tvm_speedup(results, fw) for fw in results if fw != "tvm" and "tvm" in results}
