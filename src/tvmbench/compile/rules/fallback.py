"""Fallback: tried after DLight's rules. Whatever is still unscheduled gets its leading spatial
loops spread over the cores and its elementwise blocks vectorised, so no function runs as one
scalar loop nest on one core."""

from __future__ import annotations

from typing import Any

import numpy as np
from tvm import s_tir

from tvmbench.compile.rules.base import PARALLEL_MIN_ELEMENTS, Rule, normalized, schedule_every_block
from tvmbench.compile.tir import as_int


class Fallback(Rule):
    """Parallel outer loops for whatever is left."""

    def schedule(self, func: Any, target: Any) -> Any:
        found = normalized(func)
        return schedule_every_block(*found, target) if found is not None else outer_loops_parallel(func)


def outer_loops_parallel(func: Any) -> Any:
    """A function DLight cannot describe (a block nested in a block: an adaptive pool whose
    windows differ in size, VGG's 6x6 -> 7x7 at 193 px, ran unscheduled on one core): each
    top-level block's loops but the innermost fused and spread over the cores, where they are
    data-parallel. None when no block has such loops."""
    sch = s_tir.Schedule(func)
    done = False
    for rv in sch.get_child_blocks(sch.get_sblock("root")):
        loops, block = sch.get_loops(rv), sch.get(rv)
        extents = [as_int(sch.get(loop).extent) for loop in loops]
        if len(loops) < 2 or None in extents or len(block.iter_vars) != len(loops) \
                or any(int(iv.iter_type) != 0 for iv in block.iter_vars):  # (0: data-parallel)
            continue
        if int(np.prod(extents)) >= PARALLEL_MIN_ELEMENTS:
            sch.parallel(sch.fuse(*loops[:-1]))
            done = True
    return sch if done else None
