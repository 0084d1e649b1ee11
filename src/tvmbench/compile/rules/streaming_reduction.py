"""StreamingReduction: a max, min, sum or mean over the outer axes of a tensor larger than L2,
read as it lies in memory.

PointNet's max over 1024 points of 1024 channels (8 clouds: 32 MB, channels innermost) went to
``Contraction``, which treats it as a register-tiled reduction: tasks of 32 channels, 4 clouds per
tile. Each task then read 128 bytes of every point's 4 KB row, one row after another, a new page
at every step, where no prefetcher follows: 2.3 ms a call, 14 GB/s. Nothing in such a reduction
is read twice, so there is nothing to tile for; what it needs is the input streamed once in
order. Here each task takes whole rows of channels (or a long run of them, at least
``MIN_RUN_BYTES``, two tasks at least, else it declines), walks the reduced axes outside and the channels inside, and keeps its running
values in a row of the output, which stays in L1.

It takes a kernel with one reduction of one input (no product: a matmul is ``Contraction``'s),
whose innermost axis is the output's and is read contiguously, each input index a single loop
variable (not a window: pooling windows stay ``Contraction``'s), reducing at least
``MIN_REDUCED`` elements per output over an input of more than one core's L2 (smaller inputs are
read from cache, where the register tiles are at home). An elementwise epilogue (a mean's
division) runs per task after its reduction.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import tvm
from tvm.s_tir.dlight.base.common_schedules import try_inline_contiguous_spatial

from tvmbench.compile.rules.base import Rule, normalized
from tvmbench.compile.tiles import vector_lanes
from tvmbench.compile.tir import as_int, dtype_bits
from tvmbench.targets import cpu_l2_bytes

# Off: such reductions go to Contraction again (``benchmarks/rule_ab.py M rules.streaming_reduction.ENABLED 0``).
ENABLED = 1
MIN_REDUCED = 64
# A task's channels are whole rows, or runs at least this long when rows are split for parallelism.
MIN_RUN_BYTES = 1024
# Tasks wanted where the outer axes give fewer (the parallel loop's chunks among the threads).
TASKS = 8
# The running values of one task (a row of the output) stay within this.
ROW_BYTES = 32 * 1024


class StreamingReduction(Rule):
    """A reduction over outer axes of a tensor larger than L2, streamed (see the module)."""

    reductions = (1, 1)

    def schedule(self, func: Any, target: Any) -> Any:
        if not ENABLED:
            return None
        found = normalized(func)
        if found is None:
            return None
        sch, infos = found
        infos = try_inline_contiguous_spatial(sch, infos)
        index = next((i for i, b in enumerate(infos) if not b.is_injective()), None)
        if index != 0 or any(not b.is_injective() for b in infos[1:]):
            return None
        info = infos[0]
        shape = _streamed(sch.get(info.block_rv), info, cpu_l2_bytes(target))
        if shape is None:
            return None
        bits = dtype_bits(sch.get(info.block_rv).writes[0].source.dtype)
        lanes = vector_lanes(target, bits)
        channels = shape[-1]
        if channels % lanes:
            return None
        outer = int(np.prod([as_int(i.dom) for i in info.iters if i.kind == "S"])) // channels
        run = _run(channels, outer, lanes, bits // 8)
        if run is None:
            return None
        _schedule(sch, info, infos[1:], channels // run, lanes)
        return sch


def _streamed(block: Any, info: Any, l2: int) -> list[int] | None:
    """The input's shape when ``block`` reduces one input over its outer axes with its innermost
    axis the output's (read contiguously, every index a single loop variable), over more than
    ``l2`` bytes and at least MIN_REDUCED elements per output; else None."""
    kinds = info.dom_kind()
    if "R" not in kinds or any(k not in "SR" for k in kinds):
        return None
    written = block.writes[0].source
    inputs = [r for r in block.reads if not r.source.same_as(written)]
    if len(inputs) != 1 or not isinstance(block.body, tvm.tirx.BufferStore):
        return None
    region = inputs[0].region
    shape = [as_int(d) for d in inputs[0].source.shape]
    if None in shape or any(as_int(r.extent) != 1 for r in region):
        return None
    if any(not isinstance(r.min, (tvm.tirx.Var, tvm.tirx.IntImm)) for r in region):
        return None  # (a window: an index is a sum)
    last = _channel(info, region[-1].min)
    out = block.writes[0].region
    if last is None or shape[-1] != as_int(last.dom) or not out[-1].min.same_as(last.var):
        return None
    reduced = int(np.prod([as_int(i.dom) for i in info.iters if i.kind == "R"]))
    nbytes = int(np.prod(shape)) * dtype_bits(inputs[0].source.dtype) // 8
    return shape if reduced >= MIN_REDUCED and nbytes > l2 else None


def _channel(info: Any, index: Any) -> Any | None:
    """The spatial iterator that ``index`` (the input's innermost) is, or None."""
    return next((i for i in info.iters if i.kind == "S" and i.var.same_as(index)), None)


def _run(channels: int, outer: int, lanes: int, item_bytes: int) -> int | None:
    """The channels one task takes: the longest run (a divisor, whole vectors, at most ROW_BYTES)
    that still gives TASKS tasks; where none does, the shortest of at least MIN_RUN_BYTES (the
    most tasks); None where that leaves fewer than two tasks (Contraction's tiles then)."""
    runs = [d for d in range(channels, 0, -1) if channels % d == 0 and d % lanes == 0]
    fits = [d for d in runs if d * item_bytes <= ROW_BYTES] or runs[-1:]
    long = [d for d in fits if d * item_bytes >= MIN_RUN_BYTES and outer * (channels // d) >= 2]
    enough = [d for d in long if outer * (channels // d) >= TASKS]
    return enough[0] if enough else long[-1] if long else None


def _schedule(sch: Any, info: Any, epilogue: list[Any], runs: int, lanes: int) -> None:
    """Outer spatial axes and the runs of channels in parallel, the reduced axes, then the run's
    channels in vectors; the running values initialised before the reduced axes, the epilogue
    computed per task."""
    block = info.block_rv
    last = _channel(info, sch.get(block).writes[0].region[-1].min)
    spatial = [i.loop_rv for i in info.iters if i.kind == "S" and i is not last]
    reduced = [i.loop_rv for i in info.iters if i.kind == "R"]
    run_loop, channel = sch.split(last.loop_rv, factors=[runs, None])
    sch.reorder(*spatial, run_loop, *reduced, channel)
    task = sch.fuse(*spatial, run_loop) if spatial else run_loop
    sch.parallel(task)
    _, vector = sch.split(channel, factors=[None, lanes])
    sch.vectorize(vector)
    init = sch.decompose_reduction(block, reduced[0])
    _, init_vector = sch.split(sch.get_loops(init)[-1], factors=[None, lanes])
    sch.vectorize(init_vector)
    for consumer in epilogue:
        sch.reverse_compute_at(consumer.block_rv, task)
        loop = sch.get_loops(consumer.block_rv)[-1]
        extent = as_int(sch.get(loop).extent)
        if extent is not None and extent % lanes == 0:
            sch.vectorize(sch.split(loop, factors=[None, lanes])[1])
