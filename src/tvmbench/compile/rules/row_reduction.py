"""RowReduction: row-wise normalisations (layer norm, softmax) — reductions over the contiguous
last axis, then an elementwise output over the same rows.

One parallel task per row computes every reduction as vector partial sums (rfactor over the
vector lanes), folds the lanes, and writes the row vectorised. DLight's CPU Reduction rule keeps
one scalar accumulator per row: a chain of dependent adds that cannot be reordered without
fast-math (bert-base's layer norm 8x slower, its softmax 1.9x).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import tvm
import tvm_ffi
from tvm.s_tir.dlight.base.common_schedules import try_inline_contiguous_spatial

from tvmbench.compile.rules.base import PARALLEL_MIN_ELEMENTS, Rule, normalized
from tvmbench.compile.tiles import vector_lanes
from tvmbench.compile.tir import as_int, coefficient, dtype_bits, uses

# Rows that are no whole number of vectors (a group norm over 799 samples) are taken when at least
# this many vectors long: their reductions and elementwise loops stay plain loops over the row
# (LLVM vectorises the elementwise ones, with a remainder loop). DLight's Reduction rule took them
# with predicated vector loops, which TVM scalarises whole: a group norm's GELU ran scalar.
# Off (for A/Bs): DLight's rule takes them again.
ODD_ROWS = True
ODD_ROWS_LEAST_VECTORS = 4
# Vectors of independent partial sums per reduction: with one, a row of 768 floats (BERT's layer
# norm) was a chain of 48 dependent vector adds, then 48 dependent multiply-adds for the variance.
# 1: one vector (for A/Bs).
ACCUMULATORS = 4


class RowReduction(Rule):
    """Layer norm and softmax: per-row vector partial sums, rows in parallel."""

    reductions = (1, None)

    def schedule(self, func: Any, target: Any) -> Any:
        found = normalized(func)
        if found is None:
            return None
        sch, infos = found
        infos = try_inline_contiguous_spatial(sch, infos)
        reductions = [b for b in infos if not b.is_injective()]
        out = infos[-1]
        if not reductions or not out.is_injective() or not sch.get(out.block_rv).writes:
            return None
        lanes = vector_lanes(target, dtype_bits(sch.get(out.block_rv).writes[0].source.dtype))
        if not rows_match(sch, reductions, out, lanes):
            return None
        if all(as_int(info.dom()[-1]) % lanes == 0 for info in reductions):
            rfactored, plain = set().union(*(_vector_partial_sums(sch, info, lanes) for info in reductions)), set()
        else:  # (rfactor over a split with a partial last vector drops the split's predicate: wrong sums)
            rfactored, plain = set(), {sch.get(info.block_rv).name_hint for info in reductions}
        row = _rows_in_parallel(sch, out, lanes)
        _schedule_row(sch, row, out, rfactored, plain, lanes)
        return sch


def _whole(extent: int, lanes: int) -> bool:
    """Whether a row of ``extent`` is taken: whole vectors, or (``ODD_ROWS``) long enough that
    its partial-vector tail is a small part of it."""
    return extent % lanes == 0 or (ODD_ROWS and extent >= ODD_ROWS_LEAST_VECTORS * lanes)


def rows_match(sch: Any, reductions: list[Any], out: Any, lanes: int) -> bool:
    """Every reduction reduces the innermost, contiguous axis over the same rows as the output
    (unit axes aside: a group norm's reduction has its group axis), in rows ``_whole`` takes."""
    rows = None
    for info in reductions:
        kinds, extents = info.dom_kind(), [as_int(e) for e in info.dom()]
        if any(e is None for e in extents):
            return False
        reduced = [e for k, e in zip(kinds[:-1], extents[:-1], strict=True) if k == "R"]
        spatial = [e for k, e in zip(kinds[:-1], extents[:-1], strict=True) if k == "S" and e != 1]
        if (len(kinds) < 2 or kinds[-1] != "R" or any(e != 1 for e in reduced) or "R" in kinds.rstrip("R").lstrip("S")
                or not _whole(extents[-1], lanes) or (rows is not None and spatial != rows)):
            return False
        rows = spatial
        # The reduced axis must be the innermost, contiguous axis of everything the block reads.
        block = sch.get(info.block_rv)
        r_var = block.iter_vars[-1].var
        for read in block.reads:
            for d, r in enumerate(read.region):
                c = coefficient(r.min, r_var)
                if c is None or (d < len(read.region) - 1 and c != 0) or c not in (0, 1):
                    return False
    out_extents = [as_int(e) for e in out.dom()]
    return not (None in out_extents or [e for e in out_extents[:-1] if e != 1] != rows
                or not _whole(out_extents[-1], lanes))


def _vector_partial_sums(sch: Any, info: Any, lanes: int) -> set[str]:
    """rfactor the reduction over ``ACCUMULATORS`` vectors of lanes (the row's vectors summed
    into independent accumulators), then those over one vector; returns the partial-sum blocks'
    names."""
    loop = sch.get_loops(info.block_rv)[-1]
    extent = as_int(sch.get(loop).extent)
    acc = next(a for a in (ACCUMULATORS, 2, 1) if a <= ACCUMULATORS and extent % (a * lanes) == 0)
    axis = len(sch.get(info.block_rv).writes[0].source.shape)
    if acc == 1:
        _, lane = sch.split(loop, factors=[None, lanes])
        return {sch.get(sch.rfactor(lane, factor_axis=axis)).name_hint}
    _, _, lane = sch.split(loop, factors=[None, acc, lanes])
    narrow = sch.rfactor(lane, factor_axis=axis)  # one vector of partial sums, folding ...
    wide = sch.rfactor(sch.get_loops(narrow)[-2], factor_axis=axis)  # ... acc vectors of them (its loops: outer, group, lane)
    return {sch.get(wide).name_hint, sch.get(narrow).name_hint}


def _rows_in_parallel(sch: Any, out: Any, lanes: int) -> Any:
    """The output's row loops fused (parallel when large enough), its row vectorised."""
    out_loops = sch.get_loops(out.block_rv)
    row = sch.fuse(*out_loops[:-1]) if len(out_loops) > 2 else out_loops[0]
    if int(np.prod([as_int(e) for e in out.dom()])) >= PARALLEL_MIN_ELEMENTS:
        sch.parallel(row)
    if as_int(sch.get(out_loops[-1]).extent) % lanes == 0:
        _, vec = sch.split(out_loops[-1], factors=[None, lanes])
        sch.vectorize(vec)
    # (else a plain loop: a split would put a predicate in the vector loop, which TVM scalarises
    # whole; LLVM's own vectoriser takes the plain loop with a remainder loop)
    return row


def _schedule_row(sch: Any, row: Any, out: Any, rfactored: set[str], plain: set[str], lanes: int) -> None:
    """Every other block computed inside the row loop: partial sums vectorised over the lanes,
    elementwise blocks vectorised, the lane folds unrolled; the ``plain`` reductions (rows with
    a partial last vector) left as loops over the row."""
    root = sch.get_sblock("root")
    out_name = sch.get(out.block_rv).name_hint
    names = [sch.get(b).name_hint for b in sch.get_child_blocks(root)]
    for name in reversed(names):
        if name != out_name:
            sch.compute_at(sch.get_sblock(name), row, preserve_unit_loops=True)
    for name in names:
        if name == out_name or name in plain:
            continue
        block_rv = sch.get_sblock(name)
        loops = sch.get_loops(block_rv)[1:]
        if name in rfactored:
            _partial_sum_loops(sch, block_rv, loops)
        elif all(iv.iter_type != tvm.tirx.IterVar.CommReduce for iv in sch.get(block_rv).iter_vars):
            extent = as_int(sch.get(loops[-1]).extent) if loops else None
            if extent and extent % lanes == 0:
                _, vec = sch.split(loops[-1], factors=[None, lanes])
                sch.vectorize(vec)
        else:
            for loop in loops:  # folding the lanes of the partial sums
                sch.unroll(loop)


def _partial_sum_loops(sch: Any, block_rv: Any, loops: list[Any]) -> None:
    """A partial-sum block inside the row: its reduction outermost, then its unit loops, the
    vectors of partial sums unrolled, the lanes (what indexes the sums' last axis) vectorised."""
    block = sch.get(block_rv)
    found: list[Any] = []
    tvm_ffi.structural_walk(sch.mod["main"].body, [(tvm.s_tir.SBlockRealize, found.append)])
    realize = next(r for r in found if r.block.name_hint == block.name_hint)
    last = block.writes[0].region[-1].min
    reduced = [v for iv, v in zip(block.iter_vars, realize.iter_values, strict=True)
               if iv.iter_type == tvm.tirx.IterVar.CommReduce]
    lanes = [v for iv, v in zip(block.iter_vars, realize.iter_values, strict=True) if uses(last, iv.var)]
    var = {loop: sch.get(loop).loop_var for loop in loops}
    reduce = [loop for loop in loops if any(uses(v, var[loop]) for v in reduced)]
    units = [loop for loop in loops if loop not in reduce and as_int(sch.get(loop).extent) == 1]
    lane = [loop for loop in loops if loop not in reduce + units and any(uses(v, var[loop]) for v in lanes)]
    vectors = [loop for loop in loops if loop not in reduce + units + lane]
    sch.reorder(*reduce, *units, *vectors, *lane)
    sch.vectorize(lane[-1])
    for loop in vectors:
        sch.unroll(loop)
    init = sch.decompose_reduction(block_rv, (reduce + units + vectors + lane)[0])
    sch.vectorize(sch.get_loops(init)[-1])
