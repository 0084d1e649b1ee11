"""Build and time scheduled kernels as MetaSchedule times tuning candidates.

MetaSchedule's ``LocalBuilder`` compiles candidates in worker processes and its ``LocalRunner``
runs them in others: a schedule that crashes (a random draw from a design space can), hangs or
takes too long to compile costs that candidate an error, never the caller. Droplet's moves
(``tuning/droplet.py``) and the operator lab's alone times (``profiling/alone.py``) are measured
this way, so their numbers are the same measurement as a tuning record's ``run_secs``.

A candidate that runs is not yet a right one: a knob combination can race or drop a write (the
``reduction_block`` knob inside fused row blocks did, session 84), and a search keeps whatever is
fastest. Given a :class:`Reference` (the task's default schedule), :meth:`CandidateTimer.time`
also runs each timed candidate once on seeded inputs, in a worker process of its own, and a
candidate whose outputs differ from the reference's is a failed candidate ("wrong outputs").
"""

from __future__ import annotations

import os
import shutil
from dataclasses import dataclass, field
from typing import Any

import numpy as np

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
        self.wrong = 0  # candidates that ran but failed the output check
        self.checker: Any = None  # the output check's worker pool (``_outputs``), started on first use
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

    def time(self, mods: list[Any], reference: Reference | None = None) -> list[list[float] | str]:
        """Build and run; with a ``reference``, each candidate that ran is checked against it
        (``check``). The builder's temporary folders are removed afterwards."""
        built = self.build(mods)
        try:
            out = self.run(mods, built)
            return self.check(mods, built, out, reference) if reference is not None else out
        finally:
            remove_artifacts(built)

    def check(self, mods: list[Any], built: list[Any], timed: list[list[float] | str], reference: Reference
              ) -> list[list[float] | str]:
        """``timed`` with every candidate whose outputs differ from ``reference``'s (beyond
        ``TOLERANCE``) replaced by why it is wrong. Unchecked: candidates with other arguments
        than the reference's (a MetaSchedule trace that rewrote a weight's layout), kernels with
        integer arguments (indices, which random inputs would send out of bounds), and every
        candidate when the reference itself does not build and run."""
        expected = self.expected(reference)
        if not expected:
            return timed
        out = list(timed)
        for i, (m, b, secs) in enumerate(zip(mods, built, timed, strict=True)):
            if isinstance(secs, list) and argument_specs(m) == reference.args:
                got = self._outputs(b.artifact_path, reference.args, sorted(expected))
                out[i] = got if isinstance(got, str) else differs(got, expected, reference.args) or secs
                self.wrong += isinstance(out[i], str)
        return out

    def dropped(self) -> str:
        """What the stop reason adds when candidates failed the output check ('' if none did)."""
        return f"; {self.wrong} candidate(s) gave wrong outputs and were dropped" if self.wrong else ""

    def expected(self, reference: Reference) -> dict[int, np.ndarray]:
        """The reference's outputs on the seeded inputs (by argument position), computed once;
        empty when it cannot be checked against."""
        if reference.outputs is None:
            reference.args = argument_specs(reference.mod)
            reference.outputs = {}
            if all(is_float(dtype) for _, dtype in reference.args):
                built = self.build([reference.mod])
                try:
                    if built[0].error_msg is None:
                        got = self._outputs(built[0].artifact_path, reference.args, None)
                        reference.outputs = got if isinstance(got, dict) else {}
                finally:
                    remove_artifacts(built)
        return reference.outputs

    def _outputs(self, artifact: str, args: list[tuple[tuple[int, ...], str]], positions: list[int] | None
                 ) -> dict[int, np.ndarray] | str:
        """``outputs_of`` in the checker's worker: a crash or hang is the candidate's error."""
        from tvm.support.popen_pool import PopenPoolExecutor, StatusKind

        from tvmbench.tuning.build import WORKER_USES

        if self.checker is None:
            self.checker = PopenPoolExecutor(max_workers=1, timeout=self.runner.timeout_sec,
                                             maximum_process_uses=WORKER_USES)
        done = next(iter(self.checker.map_with_error_catching(lambda a: outputs_of(*a), [(artifact, args, positions)])))
        if done.status == StatusKind.COMPLETE:
            return done.value
        return f"wrong outputs: the output check {'timed out' if done.status == StatusKind.TIMEOUT else 'crashed'}"


TOLERANCE = {"float32": 1e-3, "float64": 1e-9}  # of the reference's largest magnitude; 3e-2 for 16-bit floats
CHECK_SEED = 0


@dataclass
class Reference:
    """A task's kernel known to be right (its default schedule), which candidates are checked
    against; its arguments and outputs are filled on first use (``CandidateTimer.expected``)."""

    mod: Any
    args: list[tuple[tuple[int, ...], str]] = field(default_factory=list)
    outputs: dict[int, np.ndarray] | None = None


def argument_specs(mod: Any) -> list[tuple[tuple[int, ...], str]]:
    """(shape, dtype) of each argument of a candidate as built (weights in a rewritten layout)."""
    from tvm.s_tir.meta_schedule.arg_info import ArgInfo

    return [(tuple(int(d) for d in a.shape), str(a.dtype))
            for a in ArgInfo.from_entry_func(mod, remove_preproc=True)]


def is_float(dtype: str) -> bool:
    return dtype.startswith(("float", "bfloat"))


def outputs_of(artifact: str, args: list[tuple[tuple[int, ...], str]], positions: list[int] | None
               ) -> dict[int, np.ndarray]:
    """(In a worker process.) A built kernel run once on inputs drawn from ``CHECK_SEED``: the
    arguments at ``positions``, or (None) those it wrote, as float arrays by position."""
    import ml_dtypes
    import tvm

    rng = np.random.default_rng(CHECK_SEED)
    before = [rng.standard_normal(shape).astype(ml_dtypes.bfloat16 if d == "bfloat16" else d) for shape, d in args]
    dev = tvm.cpu()
    tensors = [tvm.runtime.tensor(a, dev) for a in before]
    lib = tvm.runtime.load_module(artifact)
    lib[lib.entry_name](*tensors)
    after = [t.numpy() for t in tensors]
    if positions is None:
        positions = [i for i, (a, b) in enumerate(zip(before, after, strict=True)) if not np.array_equal(a, b)]
    return {i: after[i].astype("float64" if args[i][1] == "float64" else "float32") for i in positions}


def differs(got: dict[int, np.ndarray], expected: dict[int, np.ndarray], args: list[tuple[tuple[int, ...], str]]
            ) -> str | None:
    """Why ``got`` is not ``expected`` (None: it is, within ``TOLERANCE``): non-finite values in
    other places, or a difference above the tolerance times the reference's largest magnitude."""
    for i, want in expected.items():
        have, finite = got[i], np.isfinite(want)
        if not np.array_equal(finite, np.isfinite(have)):
            return f"wrong outputs: output {i} has non-finite values where the default schedule's has none"
        if not finite.any():
            continue
        diff = float(np.abs(have[finite] - want[finite]).max())
        bound = TOLERANCE.get(args[i][1], 3e-2) * max(1.0, float(np.abs(want[finite]).max()))
        if diff > bound:
            return f"wrong outputs: off by up to {diff:.3g} from the default schedule's (tolerance {bound:.3g})"
    return None


def remove_artifacts(built: list[Any]) -> None:
    for b in built:
        if b.artifact_path:
            shutil.rmtree(os.path.dirname(b.artifact_path), ignore_errors=True)


def first_line(message: str) -> str:
    lines = [line.strip() for line in str(message).splitlines() if line.strip()]
    return next((line for line in lines if "Error" in line or "error" in line), lines[0] if lines else "")[:300]
