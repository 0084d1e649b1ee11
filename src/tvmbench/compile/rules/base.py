"""What every tvmbench CPU rule shares: the DLight base class, the guard that turns a rule's crash
on a half-matched function into a decline, and the loop schedules several rules apply."""

from __future__ import annotations

import logging
import math
from typing import Any

import numpy as np
import tvm
from tvm import s_tir
from tvm.s_tir import dlight as dl
from tvm.s_tir.dlight.analysis import normalize_prim_func
from tvm.s_tir.dlight.base.common_schedules import try_inline_contiguous_spatial
from tvm.s_tir.dlight.cpu.base import CPUScheduleRule

from tvmbench.compile.knobs import knob
from tvmbench.compile.tiles import vector_lanes, vector_width
from tvmbench.compile.tir import as_int, dtype_bits, reduction_block_count, select_cuts, uses

_log = logging.getLogger(__name__)

# Below this many output elements, a parallel loop costs more in thread wake-up than it saves.
PARALLEL_MIN_ELEMENTS = 8192
# Transposes read in tiles of vector-width rows (``_transpose_tiles``); False: in the output's order.
# Alone (Zen 5 host): BERT's and GPT-2's keys transposed for attention 54.0 -> 13.5 us and 47.6 ->
# 9.4 us, ViT's (padded to 208 keys) 68.2 -> 33.4 us; same-process A/Bs, both build orders:
# bert-base 1.007x / 1.008x (b8 1.009x), ViT 1.008x / 1.006x, t5-base 1.006x, gpt2 1.002x,
# mobilenet_v2 1.002x (docs/performance.md, "Transposes read in tiles of rows").
TRANSPOSE_TILES = True
# Cuts inside a vector (a padding to 208 of 197 keys) split the vector loop around the vector that
# holds them (``_partition_vectors_at``), not the lanes down to their gcd with the cut (1: scalar);
# cuts whose gcd with the vector width is at least this keep vectors of that gcd (concatenations),
# except in a transpose, whose narrower vectors would lose its tiles of rows (Whisper's 1500 keys
# in 4-wide vectors: 75 -> 227 us).
ODD_CUTS = True
ODD_CUT_WIDTH = 4


# Off: every rule normalises every kernel it is offered before declining (for A/Bs).
COUNT_FIRST = True


class Rule(CPUScheduleRule):
    """A DLight CPU rule: ``apply`` returns a schedule, or None when the rule does not apply.

    Subclasses implement ``schedule(func, target)`` for PrimFuncs of an LLVM target; ``apply``
    adds the checks every rule makes first. ``reductions``: the (fewest, most; None: any) reduction
    blocks a kernel the rule schedules has, counted from its blocks (``tir.reduction_block_count``)
    before DLight's normalisation, the cost of a rule's decline: densenet201's 304 elementwise
    kernels were normalised by five rules each before Injective took them."""

    reductions: tuple[int, int | None] | None = None

    def apply(self, func: Any, target: Any, tunable: bool) -> Any:
        if not isinstance(func, tvm.tirx.PrimFunc) or not self.is_target_available(target):
            return None
        if COUNT_FIRST and self.reductions is not None:
            fewest, most = self.reductions
            count = reduction_block_count(func)
            if count < fewest or (most is not None and count > most):
                return None
        return self.schedule(func, target)

    def schedule(self, func: Any, target: Any) -> Any:
        raise NotImplementedError


def guarded(rule: Any) -> Any:
    """``rule`` (tvmbench's or DLight's), declining instead of raising on a function it half-matches.

    TVM 0.27's CPU GEMV rule asserts inside its pattern analysis on some fused functions (one of
    mobilenet_v2's, for instance), and a tvmbench rule can meet a pattern its matcher let through
    that a schedule primitive then refuses; either would abort the whole compile. Each rule builds
    its own schedule from the untouched function, so declining leaves the function as it was for
    the next rule. This is the one place where rule exceptions are swallowed, each logged at debug
    level (logger ``tvmbench.compile.rules.base``): an AMX schedule that TVM refused once fell back
    to the dot product unseen, 10x slower.
    """

    class Guarded(dl.ScheduleRule):
        def apply(self, func: Any, target: Any, tunable: bool) -> Any:
            try:
                return rule.apply(func, target, tunable)
            except Exception as error:
                lines = str(error).strip().splitlines() or [type(error).__name__]
                _log.debug("rule %s declined %s after an error: %s", type(rule).__name__,
                           func.attrs.get("global_symbol", "a kernel") if func.attrs else "a kernel", lines[-1])
                return None

    Guarded.__name__ = type(rule).__name__
    return Guarded()


def normalized(func: Any) -> tuple[Any, list[Any]] | None:
    """A fresh schedule of ``func`` and its blocks as DLight describes them, or None."""
    sch = s_tir.Schedule(func)
    infos = normalize_prim_func(sch)
    return (sch, infos) if infos else None


def reduction_blocks(func: Any) -> tuple[Any, list[Any], list[int]] | None:
    """A fresh schedule of ``func`` (``normalized``), its blocks and the indices of its reductions
    among them (a joined kernel's several), or None."""
    found = normalized(func)
    if found is None:
        return None
    sch, infos = found
    return sch, infos, [i for i, b in enumerate(infos) if not b.is_injective()]


def schedule_injective_block(sch: Any, block: Any, lanes: int) -> None:
    """Vectorise the innermost loop, spread the loops around it over the cores.

    The loop nest keeps its shape (rather than being fused into one flat loop) so that every
    index stays affine in the loop variables: a flat loop over a transpose or a broadcast would
    need a division and a modulo per element and per dimension, which costs more than the copy.
    """
    loops = sch.get_loops(block)
    if not loops:
        return
    extents = [as_int(sch.get(loop).extent) for loop in loops]
    if any(e is None for e in extents):
        return
    total = int(np.prod(extents))
    width = vector_width(extents[-1], lanes)
    inner = loops[-1]
    stmt = sch.get(block)
    cuts = select_cuts(stmt.body, stmt.iter_vars[-1].var, extents[-1], conjuncts=bool(ODD_CUTS)) \
        if len(stmt.iter_vars) == len(loops) and isinstance(stmt.body, tvm.tirx.BufferStore) else []
    odd = bool(cuts) and ODD_CUTS and width > 1 and math.gcd(width, *cuts) < width and (
        math.gcd(width, *cuts) < ODD_CUT_WIDTH or _row_walks(stmt) is not None)
    if cuts and not odd:
        partition_at_cuts(sch, inner, cuts, math.gcd(width, *cuts))
    elif width > 1:
        inner, vec = sch.split(inner, factors=[None, width])
        sch.vectorize(vec)
        loops = _transpose_tiles(sch, block, loops[:-1] + [inner])
        if odd:
            _partition_vectors_at(sch, inner, cuts, width, loops, total)
            return
    if total < PARALLEL_MIN_ELEMENTS or (cuts and len(loops) == 1):
        return
    outer = loops[:-1]
    if outer and int(np.prod(extents[:-1])) >= 2:
        sch.parallel(sch.fuse(*outer) if len(outer) > 1 else outer[0])
    else:
        # One long loop: chunks of 64 vectors, so the tail predicate (if any) sits on this scalar
        # loop and thread hand-offs stay few.
        par, _ = sch.split(inner, factors=[None, 64])
        sch.parallel(par)


def _transpose_tiles(sch: Any, block: Any, loops: list[Any]) -> list[Any]:
    """A transpose's vectors read the input across rows (``out[h, d, s] = x[s, h * 64 + d]``:
    16 values of ``s`` per vector, one per input row). Swept in the order of the output, every
    ``d`` reads the same rows again, one line each, until ``s`` has gone through all of them: 128
    rows of 3 KB apart (BERT's keys) fall into 4 of the 64 L1 sets and evict each other before the
    next ``d`` comes back to them. With the vector axis's outer loop moved outside the loop that
    walks the input's rows (``d``), a tile of 16 rows is read by every ``d`` in turn while its
    lines stay in L1. Returns the loops outside the vector lanes, outermost first, in their new order."""
    stmt = sch.get(block)
    if len(stmt.iter_vars) != len(loops) or len(loops) < 2:
        return loops
    walks = _row_walks(stmt)
    if walks is not None and walks and knob("transpose_tile", TRANSPOSE_TILES, (False, True)):
        i = walks[-1]
        sch.reorder(loops[-1], loops[i])
        return loops[:i] + [loops[-1]] + loops[i + 1:-1] + [loops[i]]
    return loops


def _row_walks(stmt: Any) -> list[int] | None:
    """The positions of the iterators that walk the rows of the block's first read taken across
    rows (a transpose: the vectors' iterator, the last, in an index other than the last), those in
    that read's last index; None when the block reads nothing across rows."""
    ivs = [iv.var for iv in stmt.iter_vars]
    out = stmt.writes[0].source if stmt.writes else None
    for read in stmt.reads:
        if read.source.same_as(out) or not read.region:
            continue
        last = read.region[-1].min
        if uses(last, ivs[-1]) or not any(uses(r.min, ivs[-1]) for r in read.region[:-1]):
            continue
        return [i for i in range(len(ivs) - 1) if uses(last, ivs[i])]
    return None


def partition_at_cuts(sch: Any, loop: Any, cuts: list[int], width: int) -> None:
    """One vector loop per segment between ``cuts`` (a concatenation along the vectorised axis).

    Vectorised as one loop, every lane evaluated the whole chain of ``if_then_else`` with a
    masked load from each input: a DenseNet layer's concat of 12 inputs ran at 1/15 of a copy's
    speed. Split into vectors first and partitioned at the boundaries, each segment's conditions
    are constant and simplify away, leaving a plain vector copy (or epilogue) per input."""
    outer, vec = sch.split(loop, factors=[None, width])
    bounds = [c // width for c in cuts]
    factors = [b - a for a, b in zip([0, *bounds], bounds, strict=False)] + [None]
    for part in sch.loop_partition(outer, factors):
        for child in sch.get_child_blocks(part) if width > 1 else []:
            sch.vectorize(sch.get_loops(child)[-1])


def _partition_vectors_at(sch: Any, vectors: Any, cuts: list[int], width: int, loops: list[Any], total: int) -> None:
    """A cut inside a vector (ViT's 197 keys padded to 208, vectors of 16) keeps its condition
    in that vector's lanes, and TVM evaluates a vector with a per-lane condition lane by lane,
    with a branch for each: the whole transpose of the keys ran so (47 us alone; 11 us after). The loop over
    ``vectors`` is split into the vectors before the cut (condition gone), the one holding it,
    and those after; the loops outside it run in parallel (``loops``: the loops outside the
    lanes, in their order)."""
    extent = as_int(sch.get(vectors).extent) or 0
    bounds = sorted({b for c in cuts for b in (c // width, c // width + 1) if 0 < b < extent})
    factors = [b - a for a, b in zip([0, *bounds], bounds, strict=False)] + [None]
    at = next(i for i, loop in enumerate(loops) if sch.get(loop).same_as(sch.get(vectors)))
    outside = loops[:at]
    if bounds:
        sch.loop_partition(vectors, factors)
    if total >= PARALLEL_MIN_ELEMENTS and outside:
        sch.parallel(sch.fuse(*outside) if len(outside) > 1 else outside[0])


def schedule_every_block(sch: Any, infos: list[Any], target: Any) -> Any:
    """Elementwise blocks vectorised and parallel; other blocks' leading spatial loops parallel."""
    for info in try_inline_contiguous_spatial(sch, infos):
        block = sch.get(info.block_rv)
        lanes = vector_lanes(target, dtype_bits(block.writes[0].source.dtype) if block.writes else 32)
        if block.writes and str(block.writes[0].source.dtype) == "bool":
            lanes = 1  # TVM's LLVM codegen cannot store a bool vector ("RHS's dtype is int8x8")
        if info.is_injective():
            schedule_injective_block(sch, info.block_rv, lanes)
            continue
        kinds = info.dom_kind()
        lead = len(kinds) - len(kinds.lstrip("S"))
        extents = [as_int(e) for e in info.dom()]
        if lead == 0 or any(e is None for e in extents):
            continue
        loops = sch.get_loops(info.block_rv)[:lead]
        fused = sch.fuse(*loops) if lead > 1 else loops[0]
        if int(np.prod(extents)) >= PARALLEL_MIN_ELEMENTS:
            sch.parallel(fused)
    return sch


def unroll_steps(sch: Any, loop: Any, depth: int, name: str = "unroll_depth") -> list[Any]:
    """A reduction loop split by ``depth`` steps (the largest of 1, 2, 4, 8 up to it that divides
    the loop; knob ``name``), the steps unrolled: each iteration's loads then take fixed offsets
    and the loop counter runs ``depth`` times less often (contraction.UNROLL_DEPTH has the
    measurements). Returns the loops that replace ``loop``."""
    extent = as_int(sch.get(loop).extent) or 1
    legal = [d for d in (1, 2, 4, 8) if extent % d == 0 and d < extent]
    chosen = knob(name, max([d for d in legal if d <= depth], default=1), legal or [1])
    if chosen <= 1:
        return [loop]
    outer, inner = sch.split(loop, factors=[None, chosen])
    sch.unroll(inner)
    return [outer, inner]


def _buffer_shape(sch: Any, block: Any) -> list[int | None]:
    return [as_int(d) for d in sch.get(block).writes[0].source.shape]


def register_tile_loops(sch: Any, block: Any, rows: Any, vecs: Any, lane: Any, tile: Any, first_reduce: Any,
                        lanes: int, epilogue: Any) -> None:
    """Unroll and vectorise a register tile, accumulate it in a tile buffer written back once
    (with ``epilogue`` applied) under ``tile``, and split off the initialisation. ``lane`` None:
    the block's lanes are a block inside it (a tensor intrinsic's, put on them after)."""
    sch.unroll(rows)
    sch.unroll(vecs)
    if lane is not None:
        sch.vectorize(lane)
    writeback = sch.cache_write(block, 0, "global")
    # Only an epilogue over the whole output joins the write-back (as in Contraction's
    # ``write_back``): a packed convolution's slice of its padded channels (mnasnet1_0's 40 of 48)
    # inlined there writes past the slice (outputs off by 1e10); it runs as its own loop nest.
    if epilogue is not None and _buffer_shape(sch, epilogue) == _buffer_shape(sch, block):
        sch.reverse_compute_inline(epilogue)
    elif epilogue is not None:
        schedule_injective_block(sch, epilogue, lanes)
    sch.reverse_compute_at(writeback, tile, preserve_unit_loops=True)
    _, vec = sch.split(sch.get_loops(writeback)[-1], factors=[None, lanes])
    sch.vectorize(vec)
    init = sch.decompose_reduction(block, first_reduce)
    inner = sch.get_child_blocks(init) if lane is None else []
    sch.vectorize(sch.get_loops(inner[0] if inner else init)[-1])
