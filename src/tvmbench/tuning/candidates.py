"""Build and time scheduled kernels as MetaSchedule times tuning candidates.

MetaSchedule's ``LocalBuilder`` compiles candidates in worker processes and its ``LocalRunner``
runs them in others: a schedule that crashes (a random draw from a design space can), hangs or
takes too long to compile costs that candidate an error, never the caller. Droplet's moves
(``tuning/droplet.py``) and the operator lab's alone times (``profiling/alone.py``) are measured
this way, so their numbers are the same measurement as a tuning record's ``run_secs``.
"""

from __future__ import annotations

import os
import shutil
from typing import Any

from tvmbench.targets import ResolvedTarget


class CandidateTimer:
    """One builder and one runner, their worker pools kept for every call.

    ``number`` calls per repeat (at least ``min_repeat_ms`` each), ``repeat`` repeats: each
    candidate gets ``repeat`` times (seconds per call); ``flush`` evicts every argument but the
    first from the CPU caches before each repeat (cold weights)."""

    def __init__(self, target: ResolvedTarget, number: int = 10, repeat: int = 5, min_repeat_ms: int = 20,
                 flush: bool = False, build_timeout_s: float = 30.0, run_timeout_s: float = 15.0,
                 builder: Any = None) -> None:
        from tvm.s_tir import meta_schedule as ms

        from tvmbench.tuning.build import fast_build, local_builder
        from tvmbench.tvm_exec import light_workers

        light_workers()
        self.target = target
        # One build worker, kept across calls (``local_builder``): a handful of candidates per call
        # gains little from parallel builds. A schedule LLVM needs more than build_timeout_s to compile (a
        # draw can unroll a transform into a huge function), or that runs longer than
        # run_timeout_s, is a failed candidate, as in MetaSchedule's search.
        self.builder = builder or local_builder(f_build=fast_build, max_workers=1, timeout_sec=build_timeout_s)
        self.runner = ms.runner.LocalRunner(timeout_sec=run_timeout_s, evaluator_config=ms.runner.EvaluatorConfig(
            number=number, repeat=repeat, min_repeat_ms=min_repeat_ms, enable_cpu_cache_flush=flush))

    def build(self, mods: list[Any]) -> list[Any]:
        from tvm.s_tir.meta_schedule.builder import BuilderInput

        return list(self.builder.build([BuilderInput(m, self.target.tvm()) for m in mods]))

    def run(self, mods: list[Any], built: list[Any]) -> list[list[float] | str]:
        """Per module: its times in seconds, or the first line of why it has none."""
        from tvm.s_tir.meta_schedule.arg_info import ArgInfo
        from tvm.s_tir.meta_schedule.runner import RunnerInput

        out: list[list[float] | str] = []
        inputs, where = [], []
        for m, b in zip(mods, built, strict=True):
            if b.error_msg is not None:
                out.append(first_line(b.error_msg))
                continue
            where.append(len(out))
            out.append("")
            inputs.append(RunnerInput(b.artifact_path, "cpu", ArgInfo.from_entry_func(m, remove_preproc=True)))
        for i, future in zip(where, self.runner.run(inputs), strict=True):
            result = future.result()
            ok = result.error_msg is None and result.run_secs
            out[i] = [float(s) for s in result.run_secs] if ok else first_line(result.error_msg or "no time")
        return out

    def time(self, mods: list[Any]) -> list[list[float] | str]:
        """Build and run; the builder's temporary folders are removed afterwards."""
        built = self.build(mods)
        try:
            return self.run(mods, built)
        finally:
            remove_artifacts(built)


def remove_artifacts(built: list[Any]) -> None:
    for b in built:
        if b.artifact_path:
            shutil.rmtree(os.path.dirname(b.artifact_path), ignore_errors=True)


def first_line(message: str) -> str:
    lines = [line.strip() for line in str(message).splitlines() if line.strip()]
    return next((line for line in lines if "Error" in line or "error" in line), lines[0] if lines else "")[:300]
