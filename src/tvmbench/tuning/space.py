"""Points of MetaSchedule's design space for a kernel, drawn at random (the operator lab's
``sampled:N`` schedules, and Droplet's starting points where no tuning record exists)."""

from __future__ import annotations

from typing import Any

from tvmbench.targets import ResolvedTarget


class DesignSpace:
    """A kernel's MetaSchedule design space on ``target`` (the CPU search's schedule rules) and
    the postprocessors that make a replayed trace legal or reject it."""

    def __init__(self, mod: Any, target: ResolvedTarget) -> None:
        from tvmbench.compile.intrinsics import import_tensor_intrin

        import_tensor_intrin(target.kind)  # the tuning context imports them, slowly otherwise
        from tvm.s_tir import meta_schedule as ms

        self.mod = mod
        with target.tvm() as tvm_target:
            ctx = ms.TuneContext(mod=mod, target=tvm_target, space_generator="post-order-apply",
                                 task_name="space", num_threads=1, rand_state=0)
            self.spaces = ctx.generate_design_space()
        self.postprocs = ctx.space_generator.postprocs

    def replay(self, trace: Any, seed: int = 1) -> Any | None:
        """``trace`` on the kernel (sampling instructions without a decision draw with ``seed``),
        then the postprocessors; None when the primitives or the postprocessors refuse it."""
        from tvm.s_tir.schedule import Schedule

        sch = Schedule(self.mod, seed=seed)
        try:
            trace.apply_to_schedule(sch, remove_postproc=True)
            # As MetaSchedule does: the postprocessors' instructions follow a marker, so that a
            # search mutating this record's decisions later replays them afresh. Without it they
            # were part of the schedule, and a mutation that moved a compute location replayed
            # loops that no longer existed (bert-base: evolutionary search after dpmeta stopped
            # with "old_outputs.size() == new_outputs.size() (4 vs. 6)").
            sch.enter_postproc()
            return sch if all(p.apply(sch) for p in self.postprocs) else None
        except Exception:  # decisions the schedule primitives refuse
            return None

    def kinds(self) -> list[list[str]]:
        """Each design space's instruction kinds, in order, as a record stores them (simplified:
        unused lookups dropped): where a record's own schedule ends and its postprocessing starts."""
        return [[inst.kind.name for inst in space.trace.simplified(True).insts] for space in self.spaces]


POSTPROC_MARKER = ["EnterPostproc", [], [], []]


def mark_postproc(trace_json: list[Any], space_kinds: list[list[str]]) -> list[Any] | None:
    """``trace_json`` (a record's trace, ``[instructions, decisions]``) with the postprocessor
    marker put back where its design space ends, when it samples decisions but has no marker
    (records Droplet refined before the marker was kept, see :meth:`DesignSpace.replay`); None
    when it needs none or no design space is a prefix of it."""
    insts, decisions = trace_json
    kinds = [inst[0] for inst in insts]
    if "EnterPostproc" in kinds or not any(k.startswith("Sample") for k in kinds):
        return None
    for space in sorted(space_kinds, key=len, reverse=True):
        n = len(space)
        if n < len(kinds) and kinds[:n] == space:
            return [[*insts[:n], POSTPROC_MARKER, *insts[n:]], [[i + (i >= n), d] for i, d in decisions]]
    return None


def sampled_schedules(func: Any, target: ResolvedTarget, n: int, attempts: int = 4) -> list[tuple[int, Any]]:
    """Up to ``n`` (k, schedule) drawn from MetaSchedule's design space for ``func``, as its
    evolutionary search draws its first population: a design space's instructions replayed
    without their decisions (so every sampling instruction draws afresh, with seed k), then the
    space's postprocessors, which reject a draw they cannot make legal. Design spaces are taken
    in turn; a rejected draw is retried with the next seed, up to ``attempts`` x n seeds."""
    from tvm.s_tir.meta_schedule.tune_context import _normalize_mod
    from tvm.s_tir.schedule import Trace

    space = DesignSpace(_normalize_mod(func), target)
    out: list[tuple[int, Any]] = []
    for seed in range(1, attempts * n + 1):
        if len(out) == n or not space.spaces:
            break
        sch = space.replay(Trace(space.spaces[seed % len(space.spaces)].trace.insts, {}), seed)
        if sch is not None:
            out.append((len(out) + 1, sch))
    return out
