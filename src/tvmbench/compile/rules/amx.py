"""Amx: bf16 dense layers and convolutions on AMX tiles (``--precision bf16`` on Intel CPUs with
AMX; ``compile/amx.py`` says why and how).

A contraction ``Contraction`` would give ``vdpbf16ps`` register tiles (bf16 weights packed in
pairs of 32 columns, fp32 sums) is tiled instead in ``rows x 32`` outputs: ``rows`` up to 16 of the
output's row axis per A tile, two A tiles where the row axis holds an even number of them, and the
32 columns of a weight pack block (two B tiles). The tile's reduction (the input channels, in
steps of 32 or else 16, and a convolution's window of two axes) becomes one call of the AMX
function, the sums held in tile registers across it; a window of one axis (a 1x7 convolution) stays a loop of
calls, except over a flattened map (``amx.FLAT_MAPS``: the rows a flattened map's pixels, its
window rows a map row apart, ``_wide_window``), where the window is inside the tile too. A CNN's stem over an image's 3 channels reads the image with each pixel's channels side by
side (``amx.stem_rows``): its window rows are a window over products of 32 values, a window row's
columns and channels (without that, its weights pair window columns, and it is a window of
channels and window rows over products of 8 columns). The tiles are spread over the cores, the
sums written back through the epilogue as ``Contraction`` writes its tiles (``write_back``).

A strided convolution's rows are ``stride`` rows apart in its input: the A tiles load with that
stride. It declines (and ``Contraction`` takes the kernel) where the tiles do not fit: a row axis
with no divisor of at least ``amx.MIN_ROWS`` rows (a classifier at batch 1; a dense layer over
ViT's 197 tokens gets zero rows to 208 from ``passes/pack_weights.py``), fewer than 16 input
channels or not a multiple of 16 (``amx.channel_steps``), a dilated window.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from tvmbench.compile import amx, bf16
from tvmbench.compile.knobs import knob
from tvmbench.compile.rules.base import Rule, schedule_injective_block
from tvmbench.compile.rules.contraction import (
    Match,
    Tile,
    fold_epilogue,
    inline_producers,
    match,
    operand_bytes,
    weight_batch_axes,
    write_back,
)
from tvmbench.compile.tiles import largest_divisor
from tvmbench.compile.tir import as_int, coefficient

# Tiles run channel-outer (one 32-column panel of weights swept over every row tile of every image
# and map row before the next: each weight read from memory once) where the weights outweigh the
# input by this factor, else row-outer (the input read once, the weights from L2 or L3 again for
# each row tile). Alone (session 86, Xeon VM), resnet50's 3x3 over 7x7 maps (4.7 MB of weights):
# 0.58 ms row-outer, 0.22 channel-outer; its 1x1 over 56x56 maps (32 KB of weights) 0.17 and 0.32.
CHANNEL_OUTER_WEIGHTS = 1.0
# ... and a convolution with a window runs row-outer up to this factor: inside the model its
# input is the previous layer's output, which that layer wrote row-outer, each core the rows it
# now reads (in its own L2), where channel-outer has each core read every row. Droplet's bf16
# records (``tvmbench tune --precision bf16``, session 90) flipped resnet18's 3x3 convolutions over
# 28x28 maps (weights 1.3x the input) to row-outer, 1.32-1.43x each inside the model.
# Same-process A/Bs (``benchmarks/rule_ab.py M rules.amx.CHANNEL_OUTER_WINDOW 1.0 --precision bf16
# --block 5``, 4.0 over 1.0): inception_v3 1.079x, resnet34 1.073x, resnet18 1.036x, googlenet
# 1.036x, resnet50 1.021x, resnet101 1.019x, the rest level (docs/performance.md, session 90).
# resnet18 at 1.5, 2, 4, 8, 16: 1.025, 1.019, 1.047, 1.038, 1.023. Dense layers keep 1.0 (ViT's
# at 4.0: 0.82x).
CHANNEL_OUTER_WINDOW = 4.0
# ... and so does a 1x1 convolution over a map (a spatial axis besides the tile rows: the reason
# holds for any contraction batched over rows another kernel wrote). Droplet's mobilenet_v2
# records ran its 1x1s over 14x14 maps row-outer (1.14x and 1.44x in the model). A/Bs (``rule_ab.py
# M rules.amx.CHANNEL_OUTER_MAPS 0 --precision bf16 --block 5``, 1 over 0): mobilenet_v2 1.079x,
# mnasnet1_0 1.070x, the other CNNs 0.991-1.015x, bert-base at batch 8 0.998x. 0: they keep 1.0.
CHANNEL_OUTER_MAPS = 1
# ... whatever the factors, tiles run channel-outer where the weights are larger than one core's L2
# (1; 0: the factors alone): row-outer, every row tile reads them all again from L3 or memory.
# At batch 8 the input grows past the factors (resnet50's last 3x3 convolutions, 4.7 MB of weights
# against 1.6 MB of input: 56 row tiles each reading 4.7 MB, 3.4 ms at 7 % of the peak).
CHANNEL_OUTER_OVER_L2 = 1
# Channel-outer tiles over an input larger than this go in blocks of rows whose input is at most
# this much (``_row_blocks``; 0: one block): each panel of weights sweeps a block's rows, the weights
# read once per block, the block's input from L2.
ROW_BLOCK_BYTES = 1 << 20
# Where the row axis makes an odd number of tiles (a 14x14 map: one tile of 14 per row), the two A
# tiles take two output rows (``amx._paired``), so each B tile serves two products: alone, tile
# loads cost more than the products in such kernels (session 87).
PAIRED_ROWS = 1


# AMX's bf16 arithmetic peak against the fp32 FMA peak the profiles measure: a ``tdpbf16ps`` is
# 16 x 16 x 32 multiply-adds every 16 cycles (1024 FLOP per cycle) against two 16-lane FMAs per
# cycle (64), Intel's figures. (Measured on the Xeon VM, session 91: a C loop of tile products
# 3.75 TFLOP/s on one core, 16x its fp32 FMAs' 239; session 86's 1230 was a loop with its loads.)
PEAK_RATE = 16.0


class Amx(Rule):
    """bf16 contractions on AMX tiles."""

    reductions = (1, 1)

    def schedule(self, func: Any, target: Any) -> Any:
        matched = _matched(func, target)
        if matched is None:
            return None
        found, (rows, tiles_a, stride, window, flat, paired, wide) = matched
        inline_producers(found, False)
        epilogue = fold_epilogue(found)
        if epilogue is False:
            return None
        sch = found.sch
        loops = sch.get_loops(found.main.block_rv)
        n_outer, n_inner = sch.split(loops[found.n_axis], factors=[None, amx.PACK])
        m_outer, m_inner = sch.split(loops[found.m_axis], factors=[None, rows * tiles_a])
        reductions = [loop for loop, k in zip(loops, found.kinds, strict=True) if k == "R"]
        tile = [m_inner]
        if paired is not None:  # (two output rows, one A tile each)
            h_outer, h_inner = sch.split(loops[paired[0]], factors=[None, 2])
            loops, tile = [h_outer if i == paired[0] else loop for i, loop in enumerate(loops)], [h_inner, m_inner]
        streamed = knob("amx_channel_outer", _channel_outer(found), (False, True))
        order = _tile_order(found, loops, n_outer, m_outer, streamed)
        share = _panel_share(found, rows * tiles_a) if streamed and knob("amx_prefetch_panel", True, (False, True)) else 0
        if streamed:
            order, share = _row_blocks(found, order, share)
        # (a window of two axes inside the tile, its sums held in the tiles; one of one axis, a 1x7
        # convolution's, a loop of tiles: each tap loads and stores the sums)
        taps = reductions[:-1] if window is None else []
        sch.reorder(*order, *taps, *tile, n_inner, *reductions[len(taps):])
        tile_loop = sch.fuse(*order)
        sch.parallel(tile_loop)
        if wide:
            _sums_in_place(found, tile[0], epilogue)
        else:
            write_back(found, Tile(vectors=amx.PACK // found.lanes, rows=rows * len(tile) * tiles_a,
                                   width=found.lanes), tile_loop, taps or tile[:1], epilogue, None)
        sch.tensorize(tile[0], amx.register(rows, tiles_a, found.extents[-1], stride, window, flat,
                                            paired[1] if paired else 0, wide, share))
        sch.annotate(tile_loop, "pragma_import_llvm", amx.llvm_ir())
        return sch


def _sums_in_place(found: Match, tile_loop: Any, epilogue: Any) -> None:
    """A flattened map's sums (``amx.FLAT_MAPS``) accumulated in the reduction's own output, zeroed
    before each tile, and the epilogue, which drops the padding columns' rows, a loop nest of its
    own after all tiles. (A tile's pixels are not a box of the output, and TVM's
    ``reverse_compute_at`` bounded such an epilogue wrongly: a 7x1 convolution's last three columns
    went unwritten. A tile-sized copy, as ``write_back`` makes, would be a second output-sized
    buffer.)"""
    sch = found.sch
    for block in (epilogue, found.after):
        if block is not None:
            schedule_injective_block(sch, block, found.lanes)
    init = sch.decompose_reduction(found.main.block_rv, tile_loop)
    sch.vectorize(sch.get_loops(init)[-1])


def peak_rate(func: Any, target: Any) -> float:
    """A kernel's arithmetic peak against the FMA peak (``bf16.peak_rate``), PEAK_RATE for one this
    rule puts on AMX tiles. ``target``: a ``ResolvedTarget``."""
    if target.kind == "llvm" and _matched(func, target.tvm()) is not None:
        return PEAK_RATE
    return bf16.peak_rate(func, target)


def _matched(func: Any, target: Any) -> tuple[Match, tuple[int, int, int, Any, bool, Any, int]] | None:
    """The contraction and its tiles (``_tile_shape``) where this rule applies: a bf16 contraction
    in pairs over weights packed in blocks of 32 or 64, on a target with AMX."""
    if not amx.usable(target):
        return None
    found = match(func, target)
    if found is None or not found.pairs or found.m_axis is None or set(found.packs) - set(amx.BLOCKS):
        return None
    # (packed in blocks of 32 or 64 columns: a single block, 32 outputs, reads it unpacked)
    if any(r.source.dtype == "bfloat16" and as_int(r.source.shape[-2]) not in amx.BLOCKS for r in found.block.reads
           if len(r.region) >= 3 and coefficient(r.region[-1].min, found.block.iter_vars[-1].var) is None):
        return None
    shape = _tile_shape(found)
    return None if shape is None else (found, shape)


def _tile_order(found: Match, loops: list[Any], n_outer: Any, m_outer: Any, channel_outer: bool) -> list[Any]:
    """The tile loops, outermost first: channel-outer or row-outer (CHANNEL_OUTER_WEIGHTS), a
    batch whose weights differ (the Winograd product's points) outside the weights' panels."""
    outer = [loop for i, (loop, k) in enumerate(zip(loops, found.kinds, strict=True))
             if k == "S" and i not in (found.n_axis, found.m_axis)]
    if not channel_outer:
        return [*outer, m_outer, n_outer]
    batch = weight_batch_axes(found)
    return ([loops[i] for i in sorted(batch)] + [n_outer]
            + [loop for i, loop in enumerate(loops) if loop in outer and i not in batch] + [m_outer])


def _row_blocks(found: Match, order: list[Any], share: int) -> tuple[list[Any], int]:
    """Channel-outer tiles (``order``: the weights' panels outermost, then the row loops) sweep
    every row of the input once per panel; an input larger than ROW_BLOCK_BYTES comes from L3 or
    memory for each. Then the row tiles go in blocks of at most that much input, each panel
    sweeping a block's: the weights are read once per block. A block is whole inner row loops and
    a divisor of the next one out, so that each loop stays an axis of its own (a block cut from
    the row loops fused could not be tensorized, TVM's blockize refusing the tile's bindings, and
    the kernels fell back to the dot product: vgg16's convolutions 10x slower). Returns the loops
    to fuse and the tiles that read a panel one after another."""
    sch = found.sch
    if not ROW_BLOCK_BYTES or weight_batch_axes(found) or len(order) < 2:
        return order, share
    extents = [as_int(sch.get(loop).extent) or 1 for loop in order[1:]]
    per_tile = operand_bytes(found, rows_dependent=True) / int(np.prod(extents))
    inner = 1
    for i in range(len(extents) - 1, -1, -1):
        if inner * extents[i] * per_tile <= ROW_BLOCK_BYTES:
            inner *= extents[i]
            continue
        part = largest_divisor(extents[i], max(int(ROW_BLOCK_BYTES // (inner * per_tile)), 1))
        if 2 * part * inner * per_tile < ROW_BLOCK_BYTES:
            return order, share  # (no divisor near the size: one block)
        outer, within = sch.split(order[1 + i], factors=[None, part])
        return [*order[1:1 + i], outer, order[0], within, *order[2 + i:]], inner * part if share else 0
    return order, share


def _panel_share(found: Match, tile_rows: int) -> int:
    """The tiles that read one panel of weights, one after another, when tiles run channel-outer:
    every row tile of the output's other spatial axes (not a batch whose weights differ)."""
    batch = weight_batch_axes(found)
    tiles = found.extents[found.m_axis] // tile_rows
    for i, (kind, extent) in enumerate(zip(found.kinds, found.extents, strict=True)):
        if kind == "S" and i not in (found.n_axis, found.m_axis) and i not in batch:
            tiles *= extent
    return tiles


def _channel_outer(found: Any) -> bool:
    """Whether the tiles run channel-outer (CHANNEL_OUTER_WEIGHTS; a convolution with a window, or
    one over a map: CHANNEL_OUTER_WINDOW; weights over L2: CHANNEL_OUTER_OVER_L2)."""
    windowed = sum(k == "R" for k in found.kinds) > 1
    mapped = any(k == "S" and i not in (found.n_axis, found.m_axis) and e > 1
                 for i, (k, e) in enumerate(zip(found.kinds, found.extents, strict=True)))
    factor = CHANNEL_OUTER_WINDOW if windowed or (mapped and CHANNEL_OUTER_MAPS) else CHANNEL_OUTER_WEIGHTS
    weights = operand_bytes(found, rows_dependent=False)
    return weights > factor * operand_bytes(found, rows_dependent=True) or bool(CHANNEL_OUTER_OVER_L2) and weights > found.l2


def _tile_shape(found: Any) -> tuple[int, int, int, tuple[int, int] | None, bool, tuple[int, int] | None, int] | None:
    """(rows per A tile, A tiles, the rows' stride in the input, the window the tile covers, whether
    it is a stem's: ``amx.register``) for the matched contraction, None where AMX tiles do not
    fit: the innermost reduction must be the pairs' (input channels in ``amx.channel_steps``, or a
    stem's window columns or a window row's values), other reductions none, a window of two axes
    (rows and columns, or a stem's channels and rows) read without dilation or of one (tile by
    tile; a stem's window rows inside the tile), the row axis index one dimension of the input,
    with a divisor of ``amx.MIN_ROWS`` to 16 rows, or a flattened map's (``_wide_window``). Last,
    where the row axis makes an odd number of tiles: the output's row axis and its stride in the
    input (``_paired``), and the flattened map's width (0: none)."""
    block, kinds, extents = found.block, found.kinds, found.extents
    reductions = [i for i, k in enumerate(kinds) if k == "R"]
    last = reductions[-1]
    if (last != len(kinds) - 1 or amx.steps(extents[last]) is None or extents[found.n_axis] % amx.PACK
            or len(reductions) > 3 or (len(reductions) == 2 and amx.channel_steps(extents[last]) is None)):
        return None
    m_var, k_var = block.iter_vars[found.m_axis].var, block.iter_vars[last].var
    window = [block.iter_vars[i].var for i in reductions[:-1]]
    shapes, wides = set(), set()
    for read in block.reads:  # (the packed weights' last index is ``k % 2``: not linear)
        step = coefficient(read.region[-1].min, k_var)
        if step is None:
            continue
        along = [coefficient(r.min, m_var) for r in read.region]
        taps = [[coefficient(r.min, v) for r in read.region] for v in window]  # (each in one dimension, undilated)
        wide = _wide_window(along, taps)
        if step != 1 or any(c is None or c < 0 for c in along) or sum(c > 0 for c in along) != 1 or not wide and any(
                c not in (0, 1) or sum(t) != 1 for t in taps for c in t):
            return None
        wides.add(wide)
        flat = along[-1] > 0
        rows_of_stem = flat and len(reductions) == 2 and amx.channel_steps(extents[last]) is not None  # (amx.stem_rows)
        if extents[last] not in (8, 16) and not rows_of_stem if flat else amx.channel_steps(extents[last]) is None:
            return None  # (a stem's window columns, or its window rows' values; channels)
        shapes.add((max(along), flat))
        a_read, rows_dim = read, along.index(max(along)) - 1
    extent = extents[found.m_axis]
    rows = amx.tile_rows(extent)
    if rows is None or len(shapes) != 1 or len(wides) != 1:
        return None
    (stride, flat), = shapes
    window_extents = (tuple(extents[r] for r in reductions[:-1])
                      if len(reductions) == 3 or (flat or wides != {0}) and len(reductions) == 2 else None)
    plain = window_extents is None and not flat and wides == {0}  # (a dense layer's or 1x1's tile: the knobs')
    if plain:
        rows = knob("amx_rows", rows, [r for r in range(amx.MIN_ROWS, amx.MAX_ROWS + 1) if extent % r == 0])
    tiles_a = 2 if (extent // rows) % 2 == 0 else 1
    if plain and tiles_a == 2:
        tiles_a = 2 if knob("amx_two_a_tiles", True, (False, True)) else 1
    paired = None if tiles_a == 2 or flat or not PAIRED_ROWS else _paired(found, a_read, rows_dim, window if window_extents else [])
    return rows, tiles_a, stride, window_extents, flat, paired, wides.pop()


def _wide_window(along: list[Any], taps: list[list[Any]]) -> int:
    """The step between a flattened map's window rows (``amx.FLAT_MAPS``; the map's width) where a
    read's index walks the rows of a 2-D input, its row axis and window axes in its first
    dimension with coefficients 1, ``width`` and 1 (a window of two axes), or 1 and a step of one
    axis (a 1x7 window's 1, a 7x1 window's width); else 0."""
    if along != [1, 0] or len(taps) not in (1, 2) or any(None in t or t[1] or t[0] < 1 for t in taps):
        return 0
    return taps[0][0] if len(taps) == 1 or (taps[1][0] == 1 and taps[0][0] > 1) else 0


def _paired(found: Any, a_read: Any, rows_dim: int, window: list[Any]) -> tuple[int, int] | None:
    """(the axis, its stride in the input) of the output rows two A tiles may take (PAIRED_ROWS):
    a spatial axis of even extent that indexes ``a_read``'s dimension before the tile rows' (and
    the window's first axis that one too), None where there is none."""
    block = found.block
    if window and coefficient(a_read.region[rows_dim].min, window[0]) != 1:
        return None
    for i, (kind, extent) in enumerate(zip(found.kinds, found.extents, strict=True)):
        if kind != "S" or i in (found.n_axis, found.m_axis) or extent % 2:
            continue
        along = [coefficient(r.min, block.iter_vars[i].var) for r in a_read.region]
        if None not in along and along[rows_dim] > 0 and sum(c > 0 for c in along) == 1:
            return i, along[rows_dim]
    return None
