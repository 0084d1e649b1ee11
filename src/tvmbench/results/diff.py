"""``tvmbench diff A B``: did anything get slower, for real?

Per model point and framework present on both sides: the ratio of B's median to A's (above 1:
B is slower) with its 95 % interval, and a verdict. The interval comes from the round medians
when both sides ran ``--rounds`` (processes are the units: a process's memory placement moves
its speed by more than its own run-to-run noise), else from a bootstrap of the timed samples.
The verdict says "slower" only when the whole interval lies above the noise band (default
+3 %), "faster" only when it lies below -3 %, and "no change" otherwise: a 1 % drift or a wide
interval is not a regression. As ``asv continuous`` and ``pytest-benchmark
--benchmark-compare-fail`` do, a regression makes the command's exit status 1, so it can gate CI.

When both sides also timed the host-speed probe beside every round (``measure/probe.py``,
``--rounds N --probe`` on a CPU), each round's median is first divided by its probe's: the
ratio and interval are then of the code's speed, not of how busy the machine was in each hour.
``host`` says how the probe itself moved (above 1: the machine was slower for B). A side whose
probe medians disagree among themselves (``PROBE_MAX_SPREAD``) is compared raw.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Any

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
    verdict: str  # "slower", "faster", "no change"
    host: float | None = None  # B's probe median over A's, when both sides timed it

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
    from tvmbench.measure.stats import rounds_ratio_ci, speedup_ci

    index = {_point(r): r for r in a}
    changes = []
    for run in b:
        old = index.get(_point(run))
        if old is None:
            continue
        for fw in [f for f in run.get("frameworks", []) if f in old.get("frameworks", [])]:
            ra, rb = old.get(result_key(fw)) or {}, run.get(result_key(fw)) or {}
            if ra.get("status") != "ok" or rb.get("status") != "ok" or not ra.get("median_ms") or not rb.get("median_ms"):
                continue
            sizes_a, sizes_b = (ra.get("rounds") or {}).get("sizes"), (rb.get("rounds") or {}).get("sizes")
            ratio, host = rb["median_ms"] / ra["median_ms"], None
            na, nb = _over_probe(ra.get("rounds")), _over_probe(rb.get("rounds"))
            if na is not None and nb is not None:
                low, high = rounds_ratio_ci(nb[0], na[0])
                ratio = _geomean(nb[0]) / _geomean(na[0])
                host, basis = _geomean(nb[1]) / _geomean(na[1]), "round medians over the host probe's (Welch's t, log)"
            else:
                low, high = speedup_ci([s / 1e3 for s in rb.get("samples_ms") or []],
                                       [s / 1e3 for s in ra.get("samples_ms") or []],
                                       baseline_rounds=sizes_b, candidate_rounds=sizes_a)
                basis = ("round medians (Welch's t, log scale)" if sizes_a and sizes_b and len(sizes_a) > 1
                         and len(sizes_b) > 1 else "bootstrap of the timed samples")
            ci = None if math.isnan(low) else (low, high)
            changes.append(Change(run.get("model", "?"), run.get("batch_size"), run.get("seq_length"), fw,
                                  ra["median_ms"], rb["median_ms"], ratio, ci, basis,
                                  verdict(low, high, band) if ci else "no change", host))
    return changes


# A side whose probe medians spread more than this (max / min) is not divided by them: on the
# 2-vCPU host 2 of 80 rounds timed the probe 100x slower than the rest (its BLAS threads against
# TVM's spinning pool), which would have made that run's interval useless.
PROBE_MAX_SPREAD = 1.5


def _over_probe(rounds: dict[str, Any] | None) -> tuple[list[float], list[float]] | None:
    """Each round's median over its probe's median, and the probe medians; None unless every one
    of two or more rounds timed the probe, and within ``PROBE_MAX_SPREAD`` of each other."""
    medians, probe = (rounds or {}).get("medians_ms"), (rounds or {}).get("probe_ms")
    if not medians or not probe or len(medians) != len(probe) or len(medians) < 2 or min(probe) <= 0:
        return None
    if max(probe) / min(probe) > PROBE_MAX_SPREAD:
        return None
    return [m / p for m, p in zip(medians, probe, strict=True)], list(probe)


def _geomean(values: list[float]) -> float:
    return math.exp(sum(math.log(v) for v in values) / len(values))


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
