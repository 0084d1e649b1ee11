"""MetaSchedule's searches, without measuring again what the database already holds.

MetaSchedule's evolutionary search remembers the candidates it measured in one run only (its
``measured_workloads_``; the TODO in evolutionary_search.cc: "add records from the database to
avoid re-measuring"). A resumed or repeated ``tvmbench tune`` therefore spends trials timing
schedules the database already has, and writes them a second time. The wrapper here hands the
inner strategy's candidates on, minus those whose trace (the schedule's every decision) a record
of the same workload already has; the inner strategy has marked them measured, so the next batch
is new ones.
"""

from __future__ import annotations

import hashlib
import json
import time
from collections.abc import Callable
from typing import Any

# Batches the inner strategy may offer that are all known, before a task is given an empty batch
# (MetaSchedule then counts an empty iteration, and stops the task after five of them).
ATTEMPTS = 4


def trace_key(trace: Any) -> str:
    """A schedule as its trace's JSON, in plain numbers: equal for a candidate and its record read
    back from disk (where a decision's instruction index is an IntImm, a flag 1 or true)."""
    return json.dumps(_plain(trace.as_json()), sort_keys=True)


def schedule_key(trace_json: Any) -> str:
    """A short key of a schedule: its trace's JSON in plain numbers, hashed. The same for
    ``Trace.as_json()`` of a candidate and for the trace part of its record line as read from the
    file (``json.loads(line)[1][0]``)."""
    return hashlib.sha256(json.dumps(_plain(trace_json), sort_keys=True).encode()).hexdigest()[:16]


def _plain(x: Any) -> Any:
    if isinstance(x, (list, tuple)):
        return [_plain(v) for v in x]
    if isinstance(x, bool):
        return int(x)
    if isinstance(x, (int, float)):
        return x
    value = getattr(x, "value", None)  # IntImm, FloatImm
    return _plain(value) if isinstance(value, (bool, int, float)) else str(x)


def skipping_known(inner: Any, stop: Callable[[float], bool] = lambda seconds: False) -> Any:
    """A search strategy (for ``TuneContext``) that runs ``inner`` but never measures a schedule
    the tuning database already holds for the task's workload. ``stop(seconds)`` true after a
    batch of known schedules that took ``seconds`` to generate ends the retries: one evolutionary
    batch of a large fused kernel can take minutes (resnet18's joined Winograd output + input
    transform: 6 min a batch, every one known), and four retries of it ran a 10-minute budget 20
    minutes over (``tuner.RETRY_SECONDS``)."""
    from tvm.ir.utils import derived_object
    from tvm.s_tir.meta_schedule.search_strategy import PySearchStrategy

    @derived_object
    class SkipKnown(PySearchStrategy):
        def __init__(self, strategy: Any) -> None:
            super().__init__()
            self.inner = strategy
            self.mod: Any = None
            self.known: set[str] = set()

        def _initialize_with_tune_context(self, context: Any) -> None:
            self.mod = context.mod
            self.inner._initialize_with_tune_context(context)

        def pre_tuning(self, max_trials: int, num_trials_per_iter: int, design_spaces: list[Any],
                       database: Any = None, cost_model: Any = None) -> None:
            self.inner.pre_tuning(max_trials, num_trials_per_iter, design_spaces, database, cost_model)
            self.known = set()
            if database is not None and self.mod is not None:
                token = database.commit_workload(self.mod)
                self.known = {trace_key(r.trace) for r in database.get_all_tuning_records()
                              if r.workload.same_as(token)}

        def post_tuning(self) -> None:
            self.inner.post_tuning()

        def generate_measure_candidates(self) -> list[Any] | None:
            for attempt in range(ATTEMPTS):
                began = time.monotonic()
                candidates = self.inner.generate_measure_candidates()
                if candidates is None:
                    return None
                new = []
                for c in candidates:
                    key = trace_key(c.sch.trace)
                    if key not in self.known:
                        self.known.add(key)
                        new.append(c)
                if new or not candidates:
                    return new
                if attempt + 1 < ATTEMPTS and not stop(time.monotonic() - began):
                    self.inner.notify_runner_results([], [])  # an empty turn, and the inner search goes on
                else:
                    break
            return []  # the task scheduler's empty turn

        def notify_runner_results(self, measure_candidates: list[Any], results: list[Any]) -> None:
            self.inner.notify_runner_results(measure_candidates, results)

        def clone(self) -> Any:
            return SkipKnown(self.inner.clone())

    return SkipKnown(inner)
