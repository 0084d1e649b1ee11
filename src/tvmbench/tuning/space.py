"""Points of MetaSchedule's design space for a kernel, drawn at random (the operator lab's
``sampled:N`` schedules, and Droplet's starting points where no tuning record exists)."""

from __future__ import annotations

from typing import Any

from tvmbench.targets import ResolvedTarget


def sampled_schedules(func: Any, target: ResolvedTarget, n: int, attempts: int = 4) -> list[tuple[int, Any]]:
    """Up to ``n`` (k, schedule) drawn from MetaSchedule's design space for ``func``, as its
    evolutionary search draws its first population: a design space's instructions replayed
    without their decisions (so every sampling instruction draws afresh, with seed k), then the
    space's postprocessors, which reject a draw they cannot make legal. Design spaces are taken
    in turn; a rejected draw is retried with the next seed, up to ``attempts`` x n seeds."""
    from tvmbench.compile.intrinsics import stub_cuda_tensor_intrin

    if target.kind == "llvm":
        stub_cuda_tensor_intrin()  # the tuning context imports them: ~15 s, for nothing on a CPU
    from tvm.s_tir import meta_schedule as ms
    from tvm.s_tir.meta_schedule.tune_context import _normalize_mod
    from tvm.s_tir.schedule import Schedule, Trace

    mod = _normalize_mod(func)
    with target.tvm() as tvm_target:
        ctx = ms.TuneContext(mod=mod, target=tvm_target, space_generator="post-order-apply",
                             task_name="sample", num_threads=1, rand_state=0)
        spaces = ctx.generate_design_space()
        postprocs = ctx.space_generator.postprocs
        out: list[tuple[int, Any]] = []
        for seed in range(1, attempts * n + 1):
            if len(out) == n or not spaces:
                break
            sch = Schedule(mod, seed=seed)
            try:
                Trace(spaces[seed % len(spaces)].trace.insts, {}).apply_to_schedule(sch, remove_postproc=True)
                if all(p.apply(sch) for p in postprocs):
                    out.append((len(out) + 1, sch))
            except Exception:  # a draw the schedule primitives refuse: try the next seed
                continue
    return out
