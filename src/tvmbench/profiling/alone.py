"""A kernel timed alone, as MetaSchedule times tuning candidates (``tuning/candidates.py``).

Schedules drawn at random from MetaSchedule's design space are not all safe to run: one of the
Winograd input transform's crashed the collecting process (SIGSEGV in TVM's parallel launch).
MetaSchedule never runs a candidate in its own process for that reason, and neither does the
lab: every schedule (default, tuned or sampled) is built by MetaSchedule's builder and timed by
its runner, whose worker processes survive a crashing candidate. It also makes the lab's alone
times the same measurement as a tuning record's ``run_secs``:

- warm: ``number=10`` calls per repeat, 5 repeats of at least 20 ms, inputs hot in cache;
- cold: 20 single calls, each after every argument but the first was flushed from the CPU caches
  (``enable_cpu_cache_flush``), so weights come from memory.

Arguments are MetaSchedule's random inputs of the kernel's shapes (weights in the layout a
schedule's layout rewrite asks for, as tuning measures them). The runner's workers inherit this
process's ``TVM_NUM_THREADS``.
"""

from __future__ import annotations

import statistics
from typing import Any

from tvmbench.targets import ResolvedTarget
from tvmbench.tuning.candidates import CandidateTimer, remove_artifacts

CONTEXTS = {"alone_warm": (10, 5, 20, False), "alone_cold": (1, 20, 0, True)}  # number, repeat, min ms, flush


class AloneTimer:
    """One runner per context sharing one builder (each schedule is built once)."""

    def __init__(self, target: ResolvedTarget) -> None:
        first: CandidateTimer | None = None
        self.timers: dict[str, CandidateTimer] = {}
        for context, (number, repeat, min_ms, flush) in CONTEXTS.items():
            timer = CandidateTimer(target, number, repeat, min_ms, flush, builder=first.builder if first else None)
            first = first or timer
            self.timers[context] = timer

    def time(self, mods: list[Any]) -> list[dict[str, Any]]:
        """Per scheduled module (``sch.mod``): ``{"alone_warm": us, "alone_cold": us}``, or
        ``{"error": message}`` when its build or a run failed (a crash included)."""
        timers = list(self.timers.items())
        built = timers[0][1].build(mods)
        out: list[dict[str, Any]] = [{} for _ in mods]
        try:
            for context, timer in timers:
                for i, times in enumerate(timer.run(mods, built)):
                    if isinstance(times, str):
                        out[i]["error"] = times
                    elif "error" not in out[i]:
                        out[i][context] = statistics.median(times) * 1e6
        finally:
            remove_artifacts(built)
        return out
