"""What a worker hands back for one framework: typed, picklable, no interpretation yet.

A :class:`FrameworkRun` is one framework's raw run (its timed samples, phases, outputs and the
backend's facts); the statistics, the accuracy verdict and the speedups are computed from it by
``results/build.py`` into a ``FrameworkResult``.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from tvmbench.measure.timer import Measurement


@dataclass
class Rounds:
    """How the pooled samples of ``--rounds N`` came about: one median and size per round (each
    round a fresh process, so the medians carry the spread between processes), and, when the
    host-state probe ran (``probe.py``), each round's probe turns as (samples of that round
    taken before the turn, microseconds per fork-join)."""

    count: int
    medians_ms: list[float]
    sizes: list[int]
    failures: list[str | None] = field(default_factory=list)
    probe_turns: list[list[tuple[float, ...]]] | None = None  # per round: (samples before, us[, us])

    def to_json(self) -> dict[str, Any]:
        medians = self.medians_ms
        doc = {**dataclasses.asdict(self), "spread": (max(medians) - min(medians)) / float(np.median(medians))}
        if self.probe_turns is None:  # (documents from before the probe, and runs without it, have no key)
            del doc["probe_turns"]
        else:
            doc["probe_turns"] = [[[int(t[0]), *(round(us, 4) for us in t[1:])] for t in turns]
                                  for turns in self.probe_turns]
        return doc

    @classmethod
    def from_json(cls, doc: dict[str, Any]) -> Rounds:
        turns = doc.get("probe_turns")  # (the first probe's ``probe_ms``, a speed to divide by, is not read)
        return cls(doc["count"], list(doc["medians_ms"]), list(doc["sizes"]), list(doc.get("failures", [])),
                   [[(int(t[0]), *map(float, t[1:])) for t in r] for r in turns] if turns is not None else None)


@dataclass
class FrameworkRun:
    """One framework's run in its worker: the timing (absent when only reference outputs were
    wanted), the phases before it, the outputs, and the backend's own facts (``info``)."""

    info: dict[str, Any]
    phases_s: dict[str, float]
    outputs: list[Any]
    batch_size: int
    model: dict[str, Any]  # LoadedModel.describe()
    measurement: Measurement | None = None
    flops: int | None = None
    rounds: Rounds | None = None

    def samples_s(self) -> list[float]:
        return self.measurement.samples_s if self.measurement is not None else []


def pool_rounds(runs: list[FrameworkRun], failures: list[str | None], count: int) -> FrameworkRun:
    """The successful rounds as one run: samples pooled, phases (compile time...) from the
    first, where nothing was cached yet."""
    first = runs[0]
    if count == 1:
        return first
    measurements = [r.measurement for r in runs if r.measurement is not None]
    pooled = dataclasses.replace(measurements[0], samples_s=[s for m in measurements for s in m.samples_s],
                                 timed_calls=sum(m.timed_calls for m in measurements),
                                 turns=[t for m in measurements for t in m.turns],
                                 probe_turns=[])  # (per round, in ``rounds``)
    probed = all(m.probe_turns for m in measurements)
    rounds = Rounds(count=count, medians_ms=[float(np.median(m.samples_s)) * 1e3 for m in measurements],
                    sizes=[len(m.samples_s) for m in measurements], failures=failures,
                    probe_turns=[[(t[0], *(s * 1e6 for s in t[1:])) for t in m.probe_turns] for m in measurements]
                    if probed else None)
    return dataclasses.replace(first, measurement=pooled, rounds=rounds)
