"""A kernel timed alone, as MetaSchedule times tuning candidates.

Schedules drawn at random from MetaSchedule's design space are not all safe to run: one of the
Winograd input transform's crashed the collecting process (SIGSEGV in TVM's parallel launch).
MetaSchedule never runs a candidate in its own process for that reason, and neither does the
lab: every schedule (default, tuned or sampled) is built by MetaSchedule's ``LocalBuilder`` and
timed by its ``LocalRunner``, whose worker processes survive a crashing candidate (the
candidate gets an error, the pool a fresh worker). It also makes the lab's alone times the same
measurement as a tuning record's ``run_secs``:

- warm: ``number=10`` calls per repeat, 5 repeats of at least 20 ms, inputs hot in cache;
- cold: 20 single calls, each after every argument but the first was flushed from the CPU caches
  (``enable_cpu_cache_flush``), so weights come from memory.

Arguments are MetaSchedule's random inputs of the kernel's shapes (weights in the layout a
schedule's layout rewrite asks for, as tuning measures them). The runner's workers inherit this
process's ``TVM_NUM_THREADS``.
"""

from __future__ import annotations

import os
import shutil
import statistics
from typing import Any

from tvmbench.targets import ResolvedTarget

CONTEXTS = {"alone_warm": (10, 5, 20, False), "alone_cold": (1, 20, 0, True)}  # number, repeat, min ms, flush


class AloneTimer:
    """One builder and one runner per context, their worker pools kept for every kernel."""

    def __init__(self, target: ResolvedTarget, build_timeout_s: float = 30.0, run_timeout_s: float = 15.0) -> None:
        from tvm.s_tir import meta_schedule as ms

        from tvmbench.tuning.build import fast_build

        self.target = target
        # Builds run in parallel (nothing is being measured meanwhile); a schedule LLVM needs more than
        # build_timeout_s to compile (a random draw can unroll a transform into a huge function) or
        # that runs more than run_timeout_s is a failed candidate, as in MetaSchedule's own search.
        self.builder = ms.builder.LocalBuilder(f_build=fast_build, max_workers=os.cpu_count() or 1,
                                               timeout_sec=build_timeout_s)
        self.runners = {
            context: ms.runner.LocalRunner(timeout_sec=run_timeout_s, evaluator_config=ms.runner.EvaluatorConfig(
                number=number, repeat=repeat, min_repeat_ms=min_ms, enable_cpu_cache_flush=flush))
            for context, (number, repeat, min_ms, flush) in CONTEXTS.items()}

    def time(self, mods: list[Any]) -> list[dict[str, Any]]:
        """Per scheduled module (``sch.mod``): ``{"alone_warm": us, "alone_cold": us}``, or
        ``{"error": message}`` when its build or a run failed (a crash included)."""
        from tvm.s_tir.meta_schedule.arg_info import ArgInfo
        from tvm.s_tir.meta_schedule.builder import BuilderInput
        from tvm.s_tir.meta_schedule.runner import RunnerInput

        out: list[dict[str, Any]] = [{} for _ in mods]
        built = self.builder.build([BuilderInput(m, self.target.tvm()) for m in mods])
        inputs, where = [], []
        for i, (m, b) in enumerate(zip(mods, built, strict=True)):
            if b.error_msg is not None:
                out[i]["error"] = _first_line(b.error_msg)
                continue
            inputs.append(RunnerInput(b.artifact_path, "cpu", ArgInfo.from_entry_func(m, remove_preproc=True)))
            where.append(i)
        try:
            for context, runner in self.runners.items():
                for i, future in zip(where, runner.run(inputs), strict=True):
                    result = future.result()
                    if result.error_msg is not None or not result.run_secs:
                        out[i]["error"] = _first_line(result.error_msg or "no time measured")
                    elif "error" not in out[i]:
                        out[i][context] = statistics.median(float(s) for s in result.run_secs) * 1e6
        finally:
            for b in built:  # the builder's temporary folders
                if b.artifact_path:
                    shutil.rmtree(os.path.dirname(b.artifact_path), ignore_errors=True)
        return out


def _first_line(message: str) -> str:
    lines = [line.strip() for line in str(message).splitlines() if line.strip()]
    return next((line for line in lines if "Error" in line or "error" in line), lines[0] if lines else "")[:300]
