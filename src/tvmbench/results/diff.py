"""``tvmbench diff A B``: did anything get slower, for real?

Per model point and framework present on both sides: the ratio of B's level to A's (above 1: B
is slower) with its 95 % interval, and a verdict. When both sides ran ``--rounds`` the level is
each round's 5th percentile (``round_level``: interference on a shared host only adds time, and
the median carries whatever share of a round a burst hit) and the interval comes from the rounds
(processes are the units: each process keeps a speed of its own, beyond its own run-to-run
noise); else the ratio of medians with a bootstrap interval over the timed samples.
The verdict says "slower" only when the whole interval lies above the noise band (default
+3 %), "faster" only when it lies below -3 %, and "no change" otherwise: a 1 % drift or a wide
interval is not a regression. As ``asv continuous`` and ``pytest-benchmark
--benchmark-compare-fail`` do, a regression makes the command's exit status 1, so it can gate CI.

When both sides also ran the host-state probe between their blocks (``measure/probe.py``,
``--rounds N --probe`` on a CPU), the probe's turns from both sides are grouped into host
states, each sample is labelled with its state, and each round gives one level per state it
spent enough samples in (``MIN_STATE_SAMPLES``); the two sides are then compared state with state
(``stats.stratified_ratio_ci``): a host that jumps between speeds (the 2-vCPU EPYC VM's vCPUs on
one core complex, on two, or on one core's two hyper-threads) no longer reads as a change of the
code. ``host`` says which states each side was seen in. When the sides share no state (or a side
has no state with two rounds), the verdict is "inconclusive": neither a regression nor its
absence can be read.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import asdict, dataclass, replace
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:
    from tvmbench.measure.probe import HostStates, StateSplit

DEFAULT_BAND = 0.03


@dataclass(frozen=True)
class Change:
    model: str
    batch_size: int | None
    seq_length: int | None
    framework: str
    a_ms: float
    b_ms: float
    ratio: float  # b / a: above 1, B is slower
    ci95: tuple[float, float] | None
    basis: str
    verdict: str  # "slower", "faster", "no change", "inconclusive"
    host: str | None = None  # the host states each side was timed in, when both ran the probe
    confirm: dict[str, Any] | None = None  # the judgement over a reference (``confirmed_changes``)

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def verdict(low: float, high: float, band: float) -> str:
    if low > 1 + band:
        return "slower"
    if high < 1 - band:
        return "faster"
    return "no change"


def compare_runs(a: list[dict[str, Any]], b: list[dict[str, Any]], band: float = DEFAULT_BAND,
                 bridges: list[dict[str, Any]] | None = None, relative_to: str | None = None) -> list[Change]:
    """The changes from run documents ``a`` to ``b``, matched by model, batch, sequence and
    framework (points or frameworks on one side only are left out). ``bridges``: other run
    documents of the same machine (the history's), used only where the two sides were timed in
    no common host state (``_bridged``). ``relative_to``: a framework both sides timed in
    lockstep turns with the others; each other framework is judged by its time over that one's
    (``_relative_change``), and that framework itself is not judged."""
    from tvmbench.backends import result_key

    index = {_point(r): r for r in a}
    changes = []
    for run in b:
        old = index.get(_point(run))
        if old is None:
            continue
        for fw in [f for f in run.get("frameworks", []) if f in old.get("frameworks", []) and f != relative_to]:
            ra, rb = old.get(result_key(fw)) or {}, run.get(result_key(fw)) or {}
            if not (_ok(ra) and _ok(rb)):
                continue
            others = [o for o in bridges or [] if _point(o) == _point(run) and _ok(o.get(result_key(fw)) or {})
                      and o[result_key(fw)].get("samples_ms") not in (ra.get("samples_ms"), rb.get("samples_ms"))]
            if relative_to:
                refs = (old.get(result_key(relative_to)) or {}, run.get(result_key(relative_to)) or {})
                if _ok(refs[0]) and _ok(refs[1]):
                    pairs = [(o[result_key(fw)], o[result_key(relative_to)]) for o in others
                             if _ok(o.get(result_key(relative_to)) or {})]
                    linked = [s for p in pairs if (s := _relative_side(*p)) is not None]
                    units = [u for p in pairs if (u := _paired_rounds(*p))]
                    changes.append(_relative_change(run, fw, relative_to, (ra, rb), refs, band, linked, units))
            else:
                linked = [s for o in others if (s := _plain_side(o[result_key(fw)])) is not None]
                changes.append(_change(run, fw, ra, rb, band, linked))
    return changes


def confirmed_changes(a: list[dict[str, Any]], b: list[dict[str, Any]], reference: str,
                      band: float = DEFAULT_BAND, bridges: list[dict[str, Any]] | None = None) -> list[Change]:
    """Each framework but ``reference`` judged twice, on its own times and over ``reference``'s
    in the same lockstep turns (``compare_runs`` both ways), and given a verdict only where the
    two agree (``_agreed``). The two judgements go wrong for different reasons. A machine whose
    speed drifts between runs minutes apart moves a framework's own times, not its time over a
    peer beside it (the Ice Lake VM: whole runs 10 % apart, session 92). A host state that slows
    the two frameworks unequally, or a change of the peer itself (another version), moves the
    time over the peer, not the framework's own; on the Zen 4 VM an A/A pair read 6.8 % faster
    over ONNX Runtime while its own times read 0.976 [0.946-1.006], and the one injected 10 %
    slowdown its own times missed, 1.064 [1.014-1.117], read 1.150 over ONNX Runtime
    (session 121's files). Asking both to agree keeps one method's error from being a verdict."""
    over = {_change_key(c): c for c in compare_runs(a, b, band, bridges, relative_to=reference)}
    return [_agreed(plain, over[_change_key(plain)], reference, band) for plain in compare_runs(a, b, band, bridges)
            if plain.framework != reference and _change_key(plain) in over]


def _change_key(change: Change) -> tuple[Any, ...]:
    return change.model, change.batch_size, change.seq_length, change.framework


def _agreed(plain: Change, over: Change, reference: str, band: float) -> Change:
    """``plain`` with the verdict both judgements support: "slower" when one lies above the band
    and the other's interval above 1 and reaching past the band (it agrees on the direction and
    does not rule out the size), "faster" likewise, "inconclusive" when either is, "no change"
    otherwise. An interval that ends inside the band says the change is smaller than the band:
    on the Zen 4 VM an A/A pair read 1.068 [1.033-1.104] over ONNX Runtime and 1.010
    [1.001-1.020] on its own, and the older rule, direction only, called it slower (session 122's
    second set)."""
    said = "inconclusive" if "inconclusive" in (plain.verdict, over.verdict) else "no change"
    for direction, beyond in (("slower", lambda c: c.ci95[0] > 1 and c.ci95[1] > 1 + band),
                              ("faster", lambda c: c.ci95[1] < 1 and c.ci95[0] < 1 - band)):
        for one, other in ((plain, over), (over, plain)):
            if said == "no change" and one.verdict == direction and other.ci95 and beyond(other):
                said = direction
    second = {"framework": reference, "ratio": over.ratio, "ci95": over.ci95, "verdict": over.verdict,
              "basis": over.basis}
    return replace(plain, verdict=said, confirm=second)


def _ok(result: dict[str, Any]) -> bool:
    return result.get("status") == "ok" and bool(result.get("median_ms"))


def _change(run: dict[str, Any], fw: str, ra: dict[str, Any], rb: dict[str, Any], band: float,
            others: list[_Side] | None = None) -> Change:
    """One framework's change from result ``ra`` to ``rb``: state with state when both ran the
    host-state probe (through ``others`` when they share no state), else from the rounds' levels
    (``round_level``) or the samples' medians."""
    from tvmbench.measure.stats import rounds_ratio_ci, speedup_ci

    ratio, host = rb["median_ms"] / ra["median_ms"], None
    by_state = _state_with_state(_plain_side(ra), _plain_side(rb), others, f"rounds' {ROUND_LEVEL}s")
    levels_a, levels_b = _round_levels(ra), _round_levels(rb)
    if by_state is not None:
        ratio, low, high, basis, host = by_state
    elif levels_a is not None and levels_b is not None:
        ratio = math.exp(float(np.mean(np.log(levels_b)) - np.mean(np.log(levels_a))))
        low, high = rounds_ratio_ci(levels_b, levels_a)
        basis = f"rounds' {ROUND_LEVEL}s (Welch's t, log scale)"
    else:
        low, high = speedup_ci([s / 1e3 for s in rb.get("samples_ms") or []],
                               [s / 1e3 for s in ra.get("samples_ms") or []])
        basis = "bootstrap of the timed samples' medians"
    ci = None if math.isnan(low) else (low, high)
    said = "inconclusive" if basis == NO_SHARED_STATE else verdict(low, high, band) if ci else "no change"
    return Change(run.get("model", "?"), run.get("batch_size"), run.get("seq_length"), fw, ra["median_ms"],
                  rb["median_ms"], ratio, ci, basis, said, host)


def _relative_change(run: dict[str, Any], fw: str, ref: str, sides: tuple[dict[str, Any], dict[str, Any]],
                     refs: tuple[dict[str, Any], dict[str, Any]], band: float,
                     others: list[_Side] | None = None, other_rounds: list[list[float]] | None = None) -> Change:
    """``fw``'s change from A to B over ``ref``'s, each side's rounds as units: per round, the
    median ratio of ``fw``'s lockstep turns to the ``ref`` turns next to them
    (``stats.turn_paired_rounds``), compared between the sides by Welch's t on the logs. A
    machine whose speed drifts by 10 % between runs minutes apart (a neighbour on the memory,
    which no statistic of one framework's rounds can tell from a change of its code) moves both
    frameworks of a turn pair alike; what is left is ``fw``'s change against ``ref``'s, so a
    change of ``ref`` (another version) reads as the opposite change of ``fw``. "inconclusive"
    when a side has fewer than two rounds with turn pairs (run both with ``--rounds``, in
    lockstep).

    When both sides ran the host-state probe, the pairs are compared state with state
    (``_relative_side``; through ``others`` when the sides share no state): the host's states
    do not move the two frameworks alike. On the Zen 1 VM resnet18's TVM over ONNX Runtime read
    0.555-0.572 in runs timed in the near state and 0.578-0.597 in the far one (20 runs,
    docs/performance.md, session 115): one run in each state read as a 4-6 % change.

    Either way each side's spread between rounds is moderated by the other runs' (``others``,
    or ``other_rounds`` without the probe; ``stats.stratified_ratio_ci``): a run's TVM over
    ONNX Runtime moved between runs no more than its rounds' spread says (per-run log SD 0.016
    against 0.032 / 2 from the rounds: session 117's 10 runs on the Ice Lake VM)."""
    from tvmbench.measure.stats import stratified_ratio_ci

    units = [_paired_rounds(result, reference) for result, reference in zip(sides, refs, strict=True)]
    ra, rb = sides
    if units[0] is None or units[1] is None or min(len(units[0]), len(units[1])) < 2:
        return Change(run.get("model", "?"), run.get("batch_size"), run.get("seq_length"), fw, ra["median_ms"],
                      rb["median_ms"], math.nan, None, NO_RELATIVE_ROUNDS.format(ref=ref), "inconclusive")
    by_state = _state_with_state(_relative_side(ra, refs[0]), _relative_side(rb, refs[1]), others,
                                 f"over {ref} in the same lockstep turns: rounds' medians of paired turns",
                                 moderated=True)
    if by_state is not None:
        ratio, low, high, basis, host = by_state
        said = "inconclusive" if basis == NO_SHARED_STATE else verdict(low, high, band)
        return Change(run.get("model", "?"), run.get("batch_size"), run.get("seq_length"), fw, ra["median_ms"],
                      rb["median_ms"], ratio, None if math.isnan(low) else (low, high), basis, said, host)
    prior, moderated = _moderation([{0: u} for u in other_rounds or []])
    ratio, low, high, _ = stratified_ratio_ci({0: units[1]}, {0: units[0]}, prior=prior)
    spread = f"; each side's spread{moderated[1:]}" if moderated else ""  # (without its comma)
    basis = f"over {ref} in the same lockstep turns: rounds' medians of paired turns (Welch's t, log scale{spread})"
    return Change(run.get("model", "?"), run.get("batch_size"), run.get("seq_length"), fw, ra["median_ms"],
                  rb["median_ms"], ratio, (low, high), basis, verdict(low, high, band))


def _moderation(levels: list[dict[int, list[float]]]) -> tuple[tuple[float, int] | None, str]:
    """The prior (variance, degrees of freedom) that other runs' rounds (``levels``, one dict of
    levels by host state per run) give each side's spread, at most ``PRIOR_DF`` degrees of
    freedom, and the words for the basis; (None, "") when no run has two rounds in a state."""
    from tvmbench.measure.stats import within_strata_spread

    var, df = within_strata_spread(levels)
    if not df:
        return None, ""
    used = min(df, PRIOR_DF)
    return (var, used), f", moderated by {len(levels)} other run(s)' rounds ({used} df)"


def _paired_rounds(result: dict[str, Any], reference: dict[str, Any]) -> list[float] | None:
    """Per round, the median of ``result``'s lockstep turns over ``reference``'s next to them
    (``stats.turn_paired_rounds``); None without lockstep turns on both."""
    from tvmbench.measure.stats import turn_medians, turn_paired_rounds

    turns = [turn_medians(r.get("samples_ms") or [], r.get("lockstep_turns") or [], (r.get("rounds") or {}).get("sizes"))
             for r in (result, reference)]
    return turn_paired_rounds(*turns) if turns[0] and turns[1] else None


NO_RELATIVE_ROUNDS = ("fewer than two rounds with lockstep turns of {ref} on a side: run both with "
                      "--frameworks tvm,{ref} --rounds N")
ROUND_QUANTILE = 5  # percent: a round's level for the verdicts (``round_level``)
ROUND_LEVEL = f"{ROUND_QUANTILE}th percentile"


def round_level(samples_ms: list[float]) -> float:
    """A round's level for the verdicts: the ``ROUND_QUANTILE`` percentile of its samples, not
    their median. On a shared host interference only ever adds time (a stolen core, flushed
    caches), in bursts of seconds that hit one round's samples and spare the next's, so the
    median carries whatever share of a round the bursts hit; the fastest few percent are the
    time the code takes when the host leaves it alone, which is what a change of the code moves
    (BenchmarkTools.jl takes the minimum for this reason; a low percentile does not depend on how
    many samples a round had in a state as the minimum does). On the EPYC VM, 3 s rounds' medians
    within a host state spread 3-4 % (SD) between rounds; three A/A sets of 10 runs x 4 rounds
    (docs/performance.md, session 37) gave 4, 1 and 4 false alarms in 45 pairs by medians and
    none by any percentile from the 0th to the 30th. What it does not judge is the tail: a
    change that slows one call in twenty shows in p90/p99 (``tvmbench report``), not here."""
    return float(np.percentile(samples_ms, ROUND_QUANTILE))


def _round_levels(result: dict[str, Any]) -> list[float] | None:
    """Each round's ``round_level``, when there are two rounds or more accounting for the samples."""
    from tvmbench.measure.stats import round_medians

    levels = round_medians(result.get("samples_ms") or [], (result.get("rounds") or {}).get("sizes"), ROUND_QUANTILE)
    return None if levels is None else [float(v) for v in levels]


MIN_STATE_SAMPLES = 10  # a round's samples in one host state, for that state's median of the round
NO_SHARED_STATE = "no host state seen by both sides (or one round per state)"  # the basis of "inconclusive"


MIN_STATE_PAIRS = 3  # a round's pairs of lockstep turns in one host state, for that state's level of the round
# At most this many degrees of freedom from other runs' spread between rounds (``_by_host_state``):
# four rounds a side give 3 of their own, so the others weigh at most 80 % and a side whose own
# rounds spread more still widens its interval. On the Ice Lake VM's two A/A sets (session 118)
# 6, 12 and 1000 caught the same injected pairs (9 of 10 each), with no false alarm in 45.
PRIOR_DF = 12


@dataclass(frozen=True)
class _Side:
    """What the comparisons state with state read of one side: its probe turns per round, and
    its levels per host state once the states are known (each a list with one level per round
    that spent long enough in the state)."""

    turns: list[list[tuple[float, ...]]]
    levels: Callable[[HostStates], dict[int, list[float]]]


def _plain_side(result: dict[str, Any]) -> _Side | None:
    """A framework's rounds' ``round_level`` per host state; None without the probe's turns."""
    turns = probe_turns_of(result)
    return None if turns is None else _Side(turns, lambda host: _state_levels(result, turns, host))


def _relative_side(result: dict[str, Any], reference: dict[str, Any]) -> _Side | None:
    """A framework over the reference timed in lockstep turns beside it, per host state: each
    pair of neighbouring turns filed by the state of the turn of whichever of the two ran the
    probe (the one on TVM's thread pool); None when neither did."""
    for probed in (result, reference):
        turns = probe_turns_of(probed)
        if turns is not None:
            return _Side(turns, lambda host, p=probed, t=turns: _paired_state_levels(result, reference, p, t, host))
    return None


def _paired_state_levels(result: dict[str, Any], reference: dict[str, Any], probed: dict[str, Any],
                         turns: list[list[tuple[float, ...]]], host: HostStates) -> dict[int, list[float]]:
    """Per host state, each round's median of ``result`` over ``reference`` in neighbouring
    turns (``stats.pair_turns``), from rounds with ``MIN_STATE_PAIRS`` pairs in the state."""
    from tvmbench.measure.probe import turn_states
    from tvmbench.measure.stats import pair_turns, turn_medians

    timed = [turn_medians(r.get("samples_ms") or [], r.get("lockstep_turns") or [], (r.get("rounds") or {}).get("sizes"))
             for r in (result, reference)]
    if not (timed[0] and timed[1]):
        return {}
    states, which = turn_states(probed["rounds"]["sizes"], probed["lockstep_turns"], turns, host), int(probed is reference)
    logs: dict[tuple[int, int], list[float]] = {}
    for pair in pair_turns(*timed):
        (i, j), state = pair, states[pair[which]]
        if state is not None:
            logs.setdefault((timed[0][i][2], state), []).append(math.log(timed[0][i][1] / timed[1][j][1]))
    out: dict[int, list[float]] = {}
    for (_, state), mine in sorted(logs.items()):
        if len(mine) >= MIN_STATE_PAIRS:
            out.setdefault(state, []).append(math.exp(float(np.median(mine))))
    return out


def _state_with_state(a: _Side | None, b: _Side | None, others: list[_Side] | None, level: str,
                      moderated: bool = False) -> tuple[float, float, float, str, str] | None:
    """(ratio, low, high, basis, host) of B over A compared within host states (``level`` names
    what is compared), through ``others`` (``_bridged``) when the sides share no state; None
    unless both sides carry the probe's turns for every round. ``moderated``: each side's spread
    between rounds is moderated towards the ``others``' (``_by_host_state``)."""
    if a is None or b is None:
        return None
    by_state = _by_host_state(a, b, level, others if moderated else None)
    if others and by_state[3] == NO_SHARED_STATE:
        by_state = _bridged(a, b, others, level) or by_state
    return by_state


def _by_host_state(a: _Side, b: _Side, level: str, spread_from: list[_Side] | None = None
                   ) -> tuple[float, float, float, str, str]:
    """(ratio, low, high, basis, host) of B over A compared within the host states the two
    sides' probe turns show; NO_SHARED_STATE as the basis (and NaNs) when they share none.
    ``spread_from``: other runs of the point, whose spread between rounds (within their states)
    moderates each side's own (``stats.stratified_ratio_ci``), with at most ``PRIOR_DF``
    degrees of freedom."""
    from tvmbench.measure.probe import HostStates
    from tvmbench.measure.stats import stratified_ratio_ci

    host = HostStates.of([t for r in a.turns + b.turns for t in r])
    ma, mb = a.levels(host), b.levels(host)
    names = [n or "?" for n in host.names]
    host_says = f"A: {_seen(ma, host)}; B: {_seen(mb, host)}" if len(host) > 1 else f"one host state ({names[0]})"
    # Each other run's rounds are filed by the states its own turns show. Filed by the two sides'
    # states, a run timed in a state neither side saw has its rounds in two states read as one,
    # and the difference between them (TVM over ONNX Runtime 0.50-0.56 near, 0.63-0.72 far on
    # the Zen 4 VM, session 122) is taken for spread between rounds; the states of all the runs'
    # turns pooled blur into one (20 runs on that VM: one state from 0.7 to 2.9 us).
    prior, moderated = _moderation([side.levels(HostStates.of([t for r in side.turns for t in r]))
                                    for side in spread_from or []])
    got = stratified_ratio_ci(mb, ma, prior=prior)
    if got is None:
        return math.nan, math.nan, math.nan, NO_SHARED_STATE, host_says
    ratio, low, high, used = got
    basis = (f"{level} within {'each host state' if len(used) > 1 else 'one host state'} "
             f"({', '.join(names[k] for k in used)}; each side's spread pooled over its states{moderated}, "
             "t on the logs)")
    return ratio, low, high, basis, host_says


def _seen(levels: dict[int, list[float]], host: HostStates) -> str:
    """How many rounds a side has in each named host state."""
    return ", ".join(f"{len(levels.get(k, []))} in {name}" for k, name in enumerate(host.names) if name)


def _bridged(a: _Side, b: _Side, others: list[_Side], level: str) -> tuple[float, float, float, str, str] | None:
    """(ratio, low, high, basis, host) of B over A when they were timed in different host
    states, through other runs of the same point on this machine that saw several states
    (``stats.bridged_ratio_ci``: what each state does to the level, from those runs); None
    when no chain of runs and states joins the two sides."""
    from tvmbench.measure.probe import HostStates
    from tvmbench.measure.stats import bridged_ratio_ci

    # The states are the sides' own (as ``_by_host_state`` found them), the other runs' turns
    # filed by their bounds: pooled with many runs, turns caught between two states could join
    # them into one.
    host = HostStates.of([t for r in a.turns + b.turns for t in r])
    levels = [side.levels(host) for side in (a, b, *others)]
    got = bridged_ratio_ci(levels[1], levels[0], levels[2:])
    if got is None:
        return None
    ratio, low, high, used = got
    basis = (f"{level} in different host states, bridged by {used} other run(s) of this point "
             "on this machine (each state's effect estimated from them; t on the logs)")
    return ratio, low, high, basis, f"A: {_seen(levels[0], host)}; B: {_seen(levels[1], host)}"


def host_state_split(run: dict[str, Any]) -> StateSplit | None:
    """A run result document's samples split by host state (``probe.StateSplit``) over the
    frameworks that carry probe turns; None when none does."""
    from tvmbench.backends import result_key
    from tvmbench.measure.probe import split_by_state

    timed = {}
    for fw in run.get("frameworks", []):
        r = run.get(result_key(fw)) or {}
        turns = probe_turns_of(r) if r.get("status") == "ok" else None
        if turns is not None:
            timed[fw] = (r["samples_ms"], r["rounds"]["sizes"], turns)
    return split_by_state(timed)


def probe_turns_of(result: dict[str, Any]) -> list[list[tuple[float, ...]]] | None:
    """A framework result document's probe turns per round, or None unless it has them for every
    round and its rounds account for its samples."""
    rounds = result.get("rounds") or {}
    turns, sizes = rounds.get("probe_turns"), rounds.get("sizes")
    if not turns or not sizes or len(turns) != len(sizes) or sum(sizes) != len(result.get("samples_ms") or []):
        return None
    return [[(int(t[0]), *map(float, t[1:])) for t in r] for r in turns]


def _state_levels(result: dict[str, Any], turns: list[list[tuple[float, ...]]],
                  host: HostStates) -> dict[int, list[float]]:
    """Per host state, the ``round_level`` of each round that spent ``MIN_STATE_SAMPLES`` in it."""
    from tvmbench.measure.probe import round_states

    out: dict[int, list[float]] = {}
    for by_state in round_states(result["samples_ms"], result["rounds"]["sizes"], turns, host):
        for state, mine in sorted(by_state.items()):
            if len(mine) >= MIN_STATE_SAMPLES:
                out.setdefault(state, []).append(round_level(mine))
    return out


def _point(run: dict[str, Any]) -> tuple[Any, ...]:
    return run.get("model"), run.get("batch_size"), run.get("seq_length"), run.get("image_size")


def comparability(a_env: dict[str, Any], b_env: dict[str, Any], a_machine: dict[str, Any],
                  b_machine: dict[str, Any]) -> list[str]:
    """What differs between the two sides' machines and versions (said first, before any verdict)."""
    notes = []
    if a_machine != b_machine:
        diff = [k for k in sorted(set(a_machine) | set(b_machine)) if a_machine.get(k) != b_machine.get(k)]
        notes.append(f"different machines ({', '.join(diff)} differ): the times compare two machines")
    pa, pb = a_env.get("packages") or {}, b_env.get("packages") or {}
    changed = [f"{k} {pa.get(k)} -> {pb.get(k)}" for k in sorted(set(pa) | set(pb)) if pa.get(k) != pb.get(k)]
    if a_env.get("tvmbench_version") != b_env.get("tvmbench_version"):
        changed.insert(0, f"tvmbench {a_env.get('tvmbench_version')} -> {b_env.get('tvmbench_version')}")
    if changed:
        notes.append("different versions: " + ", ".join(changed))
    return notes
