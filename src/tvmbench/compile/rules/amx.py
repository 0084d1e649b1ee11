"""Amx: bf16 dense layers and convolutions on AMX tiles (``--precision bf16`` on Intel CPUs with
AMX; ``compile/amx.py`` says why and how).

A contraction ``Contraction`` would give ``vdpbf16ps`` register tiles (bf16 weights packed in
pairs of 32 columns, fp32 sums) is tiled instead in ``rows x 32`` outputs: ``rows`` up to 16 of the
output's row axis per A tile, two A tiles where the row axis holds an even number of them, and the
32 columns of one weight pack block (two B tiles). The tile's innermost reduction (the input
channels, a multiple of 32) becomes one call of the AMX function; a convolution's window stays a
loop around it. The tiles are spread over the cores, the sums written back through the epilogue as
``Contraction`` writes its tiles (``write_back``).

A strided convolution's rows are ``stride`` rows apart in its input: the A tiles load with that
stride. It declines (and ``Contraction`` takes the kernel) where the tiles do not fit: a row axis
with no divisor of at least ``amx.MIN_ROWS`` rows (a classifier at batch 1; a dense layer over
ViT's 197 tokens gets zero rows to 208 from ``passes/pack_weights.py``), input
channels not a multiple of 32 (a network's stem).
"""

from __future__ import annotations

from typing import Any

from tvmbench.compile import amx
from tvmbench.compile.knobs import knob
from tvmbench.compile.rules.base import Rule
from tvmbench.compile.rules.contraction import (
    Tile,
    fold_epilogue,
    inline_producers,
    match,
    operand_bytes,
    weight_batch_axes,
    write_back,
)
from tvmbench.compile.tir import coefficient

# Tiles run channel-outer (one 32-column panel of weights swept over every row tile of every image
# and map row before the next: each weight read from memory once) where the weights outweigh the
# input by this factor, else row-outer (the input read once, the weights from L2 or L3 again for
# each row tile). Alone (session 86, Xeon VM), resnet50's 3x3 over 7x7 maps (4.7 MB of weights):
# 0.58 ms row-outer, 0.22 channel-outer; its 1x1 over 56x56 maps (32 KB of weights) 0.17 and 0.32.
CHANNEL_OUTER_WEIGHTS = 1.0


class Amx(Rule):
    """bf16 contractions on AMX tiles."""

    def schedule(self, func: Any, target: Any) -> Any:
        if not amx.usable(target):
            return None
        found = match(func, target)
        if found is None or not found.pairs or found.m_axis is None or set(found.packs) != {amx.PACK}:
            return None
        shape = _tile_shape(found)
        if shape is None:
            return None
        rows, tiles_a, stride = shape
        inline_producers(found, False)
        epilogue = fold_epilogue(found)
        if epilogue is False:
            return None
        sch = found.sch
        loops = sch.get_loops(found.main.block_rv)
        n_outer, n_inner = sch.split(loops[found.n_axis], factors=[None, amx.PACK])
        m_outer, m_inner = sch.split(loops[found.m_axis], factors=[None, rows * tiles_a])
        reductions = [loop for loop, k in zip(loops, found.kinds, strict=True) if k == "R"]
        outer = [loop for i, (loop, k) in enumerate(zip(loops, found.kinds, strict=True))
                 if k == "S" and i not in (found.n_axis, found.m_axis)]
        if knob("amx_channel_outer", _channel_outer(found), (False, True)):
            batch = weight_batch_axes(found)  # (a batch whose weights differ stays outside their panels)
            order = [loops[i] for i in sorted(batch)] + [n_outer] + [loop for i, loop in enumerate(loops)
                                                                    if loop in outer and i not in batch] + [m_outer]
        else:
            order = [*outer, m_outer, n_outer]
        sch.reorder(*order, *reductions[:-1], m_inner, n_inner, reductions[-1])
        tile_loop = sch.fuse(*order)
        sch.parallel(tile_loop)
        write_back(found, Tile(vectors=amx.PACK // found.lanes, rows=rows * tiles_a, width=found.lanes), tile_loop,
                   reductions[:-1] or [m_inner], epilogue, None)
        sch.tensorize(m_inner, amx.register(rows, tiles_a, found.extents[-1], stride))
        sch.annotate(tile_loop, "pragma_import_llvm", amx.LLVM_IR)
        return sch


def _channel_outer(found: Any) -> bool:
    """Whether the tiles run channel-outer (CHANNEL_OUTER_WEIGHTS)."""
    return operand_bytes(found, rows_dependent=False) > CHANNEL_OUTER_WEIGHTS * operand_bytes(found, rows_dependent=True)


def _tile_shape(found: Any) -> tuple[int, int, int] | None:
    """(rows per A tile, A tiles, the rows' stride in the input) for the matched contraction,
    None where AMX tiles do not fit: the innermost reduction must be the pairs' (the input
    channels, whole steps of 32), the row axis index one dimension of the input, with a divisor
    of ``amx.MIN_ROWS`` to 16 rows."""
    block, kinds, extents = found.block, found.kinds, found.extents
    last = max(i for i, k in enumerate(kinds) if k == "R")
    if last != len(kinds) - 1 or extents[last] % amx.STEP or extents[found.n_axis] % amx.PACK:
        return None
    m_var, k_var = block.iter_vars[found.m_axis].var, block.iter_vars[last].var
    strides = []
    for read in block.reads:  # (the packed weights' last index is ``k % 2``: not linear)
        step = coefficient(read.region[-1].min, k_var)
        if step is None:
            continue
        along = [coefficient(r.min, m_var) for r in read.region[:-1]]
        if step != 1 or any(c is None or c < 0 for c in along) or sum(c > 0 for c in along) > 1:
            return None
        strides += [c for c in along if c]
    extent = extents[found.m_axis]
    rows = amx.tile_rows(extent)
    if rows is None or len(set(strides)) != 1:
        return None
    return rows, 2 if (extent // rows) % 2 == 0 else 1, strides[0]
