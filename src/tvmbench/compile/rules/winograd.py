"""Winograd: the input and output transforms of a Winograd convolution (``passes/winograd.py``).

Both select their coefficients by the position inside the transformed or the output tile: those
position loops are unrolled inside the channel-vector loop, so every selection resolves at
compile time and each unrolled body is a straight sum of vector loads. The output transform's
consumers (bias, residual add, ReLU) are inlined into it: the tile is written once, finished.
Tiles are spread over the cores. The two kernels are told apart by the name the pass gives their
transform block (``names.WINOGRAD_INPUT`` / ``WINOGRAD_OUTPUT``).
"""

from __future__ import annotations

import math
from typing import Any

from tvm import s_tir
from tvm.s_tir.dlight.base.common_schedules import try_inline_contiguous_spatial

from tvmbench.compile.names import WINOGRAD_DILATION, WINOGRAD_INPUT, WINOGRAD_OUTPUT, WINOGRAD_PAD
from tvmbench.compile.rules.base import Rule, normalized, schedule_injective_block
from tvmbench.compile.tiles import vector_lanes, vector_width
from tvmbench.compile.tir import as_int, block_names, buffer_shape, dtype_bits


class Winograd(Rule):
    """The input and output transforms of a Winograd convolution, tile positions unrolled."""

    reductions = (0, 0)

    def schedule(self, func: Any, target: Any) -> Any:
        if not {WINOGRAD_INPUT, WINOGRAD_OUTPUT} & block_names(func):
            return None  # (asked first: DLight's normalisation is the cost of declining)
        found = normalized(func)
        if found is None or not all(b.is_injective() for b in found[1]):
            return None
        sch, infos = found
        names = [sch.get(b.block_rv).name_hint for b in infos]
        if JOINED_TILES and WINOGRAD_INPUT in names and WINOGRAD_OUTPUT in names:
            joined = output_then_input(sch.copy(), infos, names.index(WINOGRAD_OUTPUT), names.index(WINOGRAD_INPUT),
                                       target)
            if joined is not None:
                return joined
        for name, transform in ((WINOGRAD_INPUT, input_transform), (WINOGRAD_OUTPUT, output_transform)):
            if name in names:
                return transform(sch, infos, names.index(name), target)
        return None


# The cast to bf16 after an input transform (``--precision bf16``: the product reads bf16 pairs)
# is inlined into the transform, which then writes bf16 itself (0: the cast is its own parallel
# loop). As its own loop the cast ran over positions x tiles while the transform ran over tiles,
# so each core read half the fp32 tiles the other had just written, and the transform, next
# inference, wrote lines the other core had read: resnet34 bf16 on the Zen 4 VM took 1.7x as
# long when its two vCPUs sat on two core complexes (the far state, ``measure/probe.py``),
# these kernels 4-7x (session 67, docs/performance.md).
INLINE_CAST = 1


def _inline_casts(sch: Any, infos: list[Any]) -> list[Any]:
    """``infos`` without the blocks that could be inlined into their producer (a cast of the
    transform's output, element for element); the others are left to be scheduled."""
    left = []
    for info in infos:
        try:
            sch.reverse_compute_inline(info.block_rv)
        except s_tir.schedule.ScheduleError:  # (not an element-for-element consumer: scheduled alone)
            left.append(info)
    return left


# The zero padding of the transform's input is inlined into the transform (each tile reads the
# map itself, zeros past its edges; 0: the padding is an elementwise loop of its own, a padded
# copy of the map written and read again). densenet121's first dense block, in bf16 at batch 8
# on Zen 5, padded 56x56x128 maps (13.8 MB) six times: its input transforms took 17 % of the
# model. Same-process A/Bs of 0 (`rule_ab.py M rules.winograd.INLINE_PAD 0`, session 95, Zen 5):
# densenet121 b8 bf16 1.088x [1.057-1.126], b8 fp32 1.084x, b1 fp32 1.021x; resnet18 b1 fp32
# 1.018x; resnet50 b8 bf16 1.020x [0.996-1.043]; with only the padding inlined (``_inlined``):
# densenet121 b8 bf16 1.115x [1.080-1.144], resnet18 b1 fp32 1.039x [1.018-1.041].
INLINE_PAD = 1


def _inlined(sch: Any, block: Any) -> bool:
    """Whether ``block`` is the transform's padding and could be inlined into it, which it then
    is (not an output transform before it, in a kernel ``output_then_input`` did not take)."""
    if not sch.get(block).name_hint.startswith(WINOGRAD_PAD):
        return False
    try:
        sch.compute_inline(block)
    except s_tir.schedule.ScheduleError:
        return False
    return True


def input_transform(sch: Any, infos: list[Any], index: int, target: Any) -> Any:
    """Tiles in parallel; per tile, vectors of channels with the tile positions unrolled inside.
    The input's padding is inlined (INLINE_PAD); other blocks are scheduled as elementwise loops."""
    transform = infos[index].block_rv
    lanes = vector_lanes(target, dtype_bits(sch.get(transform).writes[0].source.dtype))
    after = _inline_casts(sch, infos[index + 1:]) if INLINE_CAST else infos[index + 1:]
    before = infos[:index]
    if INLINE_PAD:
        before = [info for info in before if not _inlined(sch, info.block_rv)]
    for info in before + after:
        schedule_injective_block(sch, info.block_rv, lanes)
    pos, tiles, channels = sch.get_loops(transform)
    width = vector_width(as_int(sch.get(channels).extent) or 1, lanes)
    c_outer, c_lane = sch.split(channels, factors=[None, width])
    sch.reorder(tiles, c_outer, pos, c_lane)
    sch.parallel(tiles)
    sch.unroll(pos)
    sch.vectorize(c_lane)
    return sch


# A kernel holding one convolution's output transform and the next one's input transform (FuseOps
# joins them through the epilogue: bias, ReLU, a residual add) computes the first by output tiles
# too, its positions unrolled and the epilogue inlined, then pads and transforms (0: the output
# transform and each epilogue block were elementwise loops of their own, each pixel choosing its
# coefficients at run time, the map written and read once per block).
JOINED_TILES = 1


def output_then_input(sch: Any, infos: list[Any], out: int, into: int, target: Any) -> Any:
    """An output transform and its epilogue (``infos[out:]`` up to the first block over another
    shape: the next input's padding) as ``output_transform`` schedules them, the rest as
    ``input_transform``; None when the output part does not take that schedule."""
    shape = buffer_shape(sch.get(infos[out].block_rv).writes[0].source)
    pad = next((i for i in range(out + 1, into) if buffer_shape(sch.get(infos[i].block_rv).writes[0].source) != shape),
               into)
    if out != 0 or output_transform(sch, infos[:pad], out, target) is None:
        return None
    return input_transform(sch, infos[pad:], into - pad, target)


def output_transform(sch: Any, infos: list[Any], index: int, target: Any) -> Any:
    """Every block inlined into the epilogue's last (over the same output), whose rows and
    columns are split into output tiles of ``m``: tiles in parallel, positions unrolled."""
    transform = sch.get(infos[index].block_rv)
    # (M [positions, tiles, o], or a 3-d convolution's [positions, clips, steps, tiles, o])
    products = [r.source for r in transform.reads if len(r.source.shape) in (3, 5)]
    alpha = math.isqrt(as_int(products[0].shape[0]) or 0) if products else 0
    m = alpha - 2
    shape = buffer_shape(transform.writes[0].source)
    # The epilogue ends at the last block over the transform's own shape; what follows (a
    # concatenation with another branch: SqueezeNet's fire modules, Inception) is scheduled as
    # its own elementwise loop nest.
    finished = max(i for i, info in enumerate(infos) if buffer_shape(sch.get(info.block_rv).writes[0].source) == shape)
    for info in infos[:finished]:
        sch.compute_inline(info.block_rv)
    last = infos[finished].block_rv
    out = sch.get(last).writes[0].source
    lanes = vector_lanes(target, dtype_bits(out.dtype))
    # The blocks after it (a concatenation, and a DenseNet's next batch norm and ReLU over it)
    # become one loop nest: one pass over the concatenated tensor, not one per block.
    for info in try_inline_contiguous_spatial(sch, infos[finished + 1:]):
        schedule_injective_block(sch, info.block_rv, lanes)
    # (the batch loop is gone when the batch is 1: normalize_prim_func drops unit loops)
    loops = sch.get_loops(last)
    if m < 2 or len(loops) < 3 or buffer_shape(out) != shape \
            or [as_int(sch.get(loop).extent) for loop in loops[-3:]] != shape[-3:]:
        return None
    *batch, rows, cols, channels = loops
    width = vector_width(as_int(sch.get(channels).extent) or 1, lanes)
    dh, dw = (int(d) for d in transform.annotations.get(WINOGRAD_DILATION, (1, 1)))
    # (dilated: a tile's rows are every d-th, its residue mod d a loop of the tiles)
    r_outer, r_inner, *r_residue = sch.split(rows, factors=[None, m] + ([dh] if dh > 1 else []))
    w_outer, w_inner, *w_residue = sch.split(cols, factors=[None, m] + ([dw] if dw > 1 else []))
    c_outer, c_lane = sch.split(channels, factors=[None, width])
    sch.reorder(*batch, r_outer, w_outer, *r_residue, *w_residue, c_outer, r_inner, w_inner, c_lane)
    sch.parallel(sch.fuse(*batch, r_outer, w_outer, *r_residue, *w_residue))
    sch.unroll(r_inner)
    sch.unroll(w_inner)
    sch.vectorize(c_lane)
    return sch
