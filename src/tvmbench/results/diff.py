"""``tvmbench diff A B``: did anything get slower, for real?

Per model point and framework present on both sides: the ratio of B's median to A's (above 1:
B is slower) with its 95 % interval, and a verdict. The interval comes from the round medians
when both sides ran ``--rounds`` (processes are the units: a process's memory placement moves
its speed by more than its own run-to-run noise), else from a bootstrap of the timed samples.
The verdict says "slower" only when the whole interval lies above the noise band (default
+3 %), "faster" only when it lies below -3 %, and "no change" otherwise: a 1 % drift or a wide
interval is not a regression. As ``asv continuous`` and ``pytest-benchmark
--benchmark-compare-fail`` do, a regression makes the command's exit status 1, so it can gate CI.

When both sides also ran the host-state probe between their blocks (``measure/probe.py``,
``--rounds N --probe`` on a CPU), the probe's values from both sides are grouped into host
states, each sample is labelled with its state, and each round gives one median per state it
spent enough samples in (``MIN_STATE_SAMPLES``); the two sides are then compared state with state
(``stats.stratified_ratio_ci``): a host that jumps between two speeds (the 2-vCPU EPYC VM's
vCPUs on one core complex or two) no longer reads as a change of the code. ``host`` says which
states each side was seen in. When the sides share no state (or a side has no state with two
rounds), the verdict is "inconclusive": neither a regression nor its absence can be read.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from tvmbench.measure.probe import StateSplit

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

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def verdict(low: float, high: float, band: float) -> str:
    if low > 1 + band:
        return "slower"
    if high < 1 - band:
        return "faster"
    return "no change"


def compare_runs(a: list[dict[str, Any]], b: list[dict[str, Any]], band: float = DEFAULT_BAND) -> list[Change]:
    """The changes from run documents ``a`` to ``b``, matched by model, batch, sequence and
    framework (points or frameworks on one side only are left out)."""
    from tvmbench.backends import result_key

    index = {_point(r): r for r in a}
    changes = []
    for run in b:
        old = index.get(_point(run))
        if old is None:
            continue
        for fw in [f for f in run.get("frameworks", []) if f in old.get("frameworks", [])]:
            ra, rb = old.get(result_key(fw)) or {}, run.get(result_key(fw)) or {}
            if ra.get("status") == "ok" and rb.get("status") == "ok" and ra.get("median_ms") and rb.get("median_ms"):
                changes.append(_change(run, fw, ra, rb, band))
    return changes


def _change(run: dict[str, Any], fw: str, ra: dict[str, Any], rb: dict[str, Any], band: float) -> Change:
    """One framework's change from result ``ra`` to ``rb``: state with state when both ran the
    host-state probe, else from the round medians or the samples."""
    from tvmbench.measure.stats import speedup_ci

    ratio, host = rb["median_ms"] / ra["median_ms"], None
    by_state = _by_host_state(ra, rb)
    if by_state is not None:
        ratio, low, high, basis, host = by_state
    else:
        sizes_a, sizes_b = (ra.get("rounds") or {}).get("sizes"), (rb.get("rounds") or {}).get("sizes")
        low, high = speedup_ci([s / 1e3 for s in rb.get("samples_ms") or []],
                               [s / 1e3 for s in ra.get("samples_ms") or []],
                               baseline_rounds=sizes_b, candidate_rounds=sizes_a)
        basis = ("round medians (Welch's t, log scale)" if sizes_a and sizes_b and len(sizes_a) > 1
                 and len(sizes_b) > 1 else "bootstrap of the timed samples")
    ci = None if math.isnan(low) else (low, high)
    said = "inconclusive" if basis == NO_SHARED_STATE else verdict(low, high, band) if ci else "no change"
    return Change(run.get("model", "?"), run.get("batch_size"), run.get("seq_length"), fw, ra["median_ms"],
                  rb["median_ms"], ratio, ci, basis, said, host)


MIN_STATE_SAMPLES = 10  # a round's samples in one host state, for that state's median of the round
NO_SHARED_STATE = "no host state seen by both sides (or one round per state)"  # the basis of "inconclusive"


def _by_host_state(ra: dict[str, Any], rb: dict[str, Any]) -> tuple[float, float, float, str, str] | None:
    """(ratio, low, high, basis, host) of B over A compared within host states, or None unless
    both sides carry the probe's turns for every round."""
    from tvmbench.measure.probe import state_levels, states
    from tvmbench.measure.stats import stratified_ratio_ci

    turns_a, turns_b = probe_turns_of(ra), probe_turns_of(rb)
    if turns_a is None or turns_b is None:
        return None
    values = [us for t in turns_a + turns_b for _, us in t]
    bounds = states(values)
    ma, mb = _state_medians(ra, turns_a, bounds), _state_medians(rb, turns_b, bounds)
    levels = [f"{us:.2f} us" if us is not None else "?"
              for us in state_levels(values, bounds)]

    def seen(m: dict[int, list[float]]) -> str:
        return ", ".join(f"{len(m.get(k, []))} in {levels[k]}" for k in range(len(levels)))

    host = f"A: {seen(ma)}; B: {seen(mb)}" if bounds else f"one host state ({levels[0]})"
    got = stratified_ratio_ci(mb, ma)
    if got is None:
        return math.nan, math.nan, math.nan, NO_SHARED_STATE, host
    ratio, low, high, used = got
    basis = (f"round medians within {'each host state' if len(used) > 1 else 'one host state'} "
             f"({', '.join(levels[k] for k in used)}; each side's spread pooled over its states, t on the logs)")
    return ratio, low, high, basis, host


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


def probe_turns_of(result: dict[str, Any]) -> list[list[tuple[int, float]]] | None:
    """A framework result document's probe turns per round, or None unless it has them for every
    round and its rounds account for its samples."""
    rounds = result.get("rounds") or {}
    turns, sizes = rounds.get("probe_turns"), rounds.get("sizes")
    if not turns or not sizes or len(turns) != len(sizes) or sum(sizes) != len(result.get("samples_ms") or []):
        return None
    return [[(int(i), float(us)) for i, us in t] for t in turns]


def _state_medians(result: dict[str, Any], turns: list[list[tuple[int, float]]],
                   bounds: list[float]) -> dict[int, list[float]]:
    """Per host state, the medians of the rounds that spent ``MIN_STATE_SAMPLES`` in it."""
    from tvmbench.measure.probe import round_states

    out: dict[int, list[float]] = {}
    for by_state in round_states(result["samples_ms"], result["rounds"]["sizes"], turns, bounds):
        for state, mine in sorted(by_state.items()):
            if len(mine) >= MIN_STATE_SAMPLES:
                out.setdefault(state, []).append(statistics.median(mine))
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
