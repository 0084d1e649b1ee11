"""Attention: a joined ``softmax(q @ k + mask) @ v`` (``passes/fuse_attention.py``) computed a
block of query rows at a time, the block's scores kept in cache.

Per parallel task (one head, ``rows`` query rows): the scores of those rows against every key in
register tiles (``rows x vectors`` accumulators, the reduction over the head dimension inside),
the softmax's row reductions as vector partial sums, its elementwise steps vectorised, then the
output rows as a register tile reducing over the keys. The intermediate tensors of the function
shrink to the task's rows (``rows x keys`` floats: 8 KB for 4 rows of 512 keys), so nothing but
q, k, v and the output crosses memory.

Blocks are recognised by kind, not name: the function's first and last reductions must be
product sums (the two matmuls), every reduction between them another kind (max, sum), and the
elementwise blocks are whatever the model put on the way (mask, scale, the check for fully
masked rows). Timed alone on the Xeon host (12 heads, 512 tokens, head dimension 64): 3.4 ms
for the joined kernel, against 5.15 ms for the unjoined kernels of the same attention in bert-base
(``tvmbench profile``).
"""

from __future__ import annotations

from typing import Any

import tvm
import tvm_ffi

from tvmbench.compile import bf16, tiles
from tvmbench.compile.knobs import knob
from tvmbench.compile.passes.key_limits import KEY_LIMITS, TASK, UNIT
from tvmbench.compile.rules.base import (
    Rule,
    normalized,
    register_tile_loops,
    schedule_injective_block,
    unroll_steps,
)
from tvmbench.compile.tiles import accumulator_budget, vector_lanes
from tvmbench.compile.tir import as_int, coefficient, is_product_sum, nodes, uses

# Query rows per task (the output tile's rows: rows x 4 vectors of accumulators for a head
# dimension of 64), the largest of these that divides the query count.
ROWS = (4, 2, 1)
# ... those whose score tile (rows x its vectors of keys) fits the target's accumulator budget:
# on 16 vector registers (AVX2) 4 rows x 4 vectors would be all of them. bert-base on the Zen 3
# VM, 2 rows instead of 4: 1.024x [1.010-1.043] end to end (`benchmarks/rule_ab.py
# bert-base-uncased rules.attention.ROWS 2,1 --block 2 --runs 150`, session 76; the joined
# attention alone 265 -> 162 us). On 32-register targets every choice of ROWS fits.
# ... and where the keys take score tiles of one vector only (ViT's 197 keys padded to 208: 13
# vectors), this many: 4 rows x 1 vector is 4 accumulators, fewer than the FMA pipes' latency
# needs (two pipes x 4 cycles: 8 independent sums), so the scores ran at half the FMA rate.
# The output tile then takes fewer vectors at a time (OUTPUT_ACCUMULATORS). 0: off.
ONE_VECTOR_ROWS = 8
# The output tile's accumulators at most (rows x vectors of the head dimension; the rest of the
# head dimension in a loop around it).
OUTPUT_ACCUMULATORS = 16
# A head dimension of whole vectors that neither 4 nor 2 divide (ViT-H's 80: 5 vectors) takes
# output tiles of all its vectors over fewer rows than the task's, within this many
# accumulators, instead of one vector over the task's rows (reloading the probabilities per
# vector). 0: off.
WIDE_OUTPUT_ACCUMULATORS = 24
# On 16 vector registers (AVX2) the output tile stays within the accumulator budget: over
# ViT's one-vector score tiles a task has 8 query rows, and its output tile over a head of 64
# (8 vectors) was 8 rows x 2 vectors, 16 accumulators for 16 registers; now the tile of most
# FMAs per load among the divisors within the budget (``_output_tile_in_budget``: 4 x 2). Same-process
# A/B (Zen 3, session 82, `benchmarks/rule_ab.py google/vit-base-patch16-224
# rules.attention.OUTPUT_TILE_IN_BUDGET True`): the attention 14.39 -> 11.70 ms over 12 layers,
# the model 1.017x [1.010-1.022]; as 2 rows x 4 vectors 1.15x alone. 32 registers unchanged.
OUTPUT_TILE_IN_BUDGET = True
# Vectors per score tile (rows x SCORE_VECTORS accumulators over the keys).
SCORE_VECTORS = 4
# ... on 16 vector registers (AVX2), this many (``score_vectors``): there a task then takes 4
# query rows x 2 vectors of keys, where 4 vectors took 2 rows (ROWS within the budget), the same 8
# accumulators. Each vector of k loaded per step then serves 4 rows, not 2, and the output tile
# gets 4 rows. Same-process A/Bs on the Zen 1 VM (session 114, `benchmarks/rule_ab.py M
# rules.attention.SIXTEEN_REGISTER_SCORE_VECTORS 0 --block 2`): bert-base at 512 tokens 1.011x
# [1.008-1.020] (the attention 1.08x); ViT-B/16, distilbert, gpt2 and bert-base at batch 8 level.
# 0: SCORE_VECTORS (for A/Bs).
SIXTEEN_REGISTER_SCORE_VECTORS = 2
# An injective block feeding several others is recomputed in each (inlined) when its expression
# has at most this many nodes (a reshape, a mask add); a costlier one (the exponential) is
# computed once into the task's buffer.
CHEAP_NODES = 8


class Attention(Rule):
    """Joined attention: query-row blocks in parallel, scores in cache."""

    reductions = (3, None)

    def schedule(self, func: Any, target: Any, pairs: bool = True) -> Any:
        found = normalized(func)
        if found is None:
            return None
        sch, infos = found
        reductions = [i for i in infos if not i.is_injective()]
        if len(reductions) < 3 or not all(is_product_sum(sch.get(r.block_rv)) == (k in (0, len(reductions) - 1))
                                          for k, r in enumerate(reductions)):
            return None
        names = [sch.get(i.block_rv).name_hint for i in infos]
        scores, out = (sch.get(r.block_rv).name_hint for r in (reductions[0], reductions[-1]))
        if any(as_int(e) is None for i in infos for e in i.dom()):
            return None  # (dynamic shapes)
        # After the second matmul, elementwise steps (PadAttention's slice dropping padded query
        # rows) run as their own parallel loops.
        tail, names = names[names.index(out) + 1:], names[:names.index(out) + 1]
        lanes = vector_lanes(target, 32)
        if as_int(reductions[0].dom()[-2]) % lanes:
            return None  # (keys in no whole number of vectors: the score tile would need a tail)
        queries, keys = as_int(reductions[-1].dom()[-3]), as_int(reductions[0].dom()[-2])
        choices = [r for r in sorted({*ROWS, ONE_VECTOR_ROWS} - {0}, reverse=True) if queries % r == 0]
        budget = accumulator_budget(target)
        rows = knob("rows", _task_rows(queries, keys, lanes, budget), choices)
        row_names = [sch.get(r.block_rv).name_hint for r in reductions[1:-1]]
        # (the block producing the probabilities stays: inlined, it would divide per FMA step)
        feeds_out = [sch.get(b).name_hint for b in sch.get_producers(sch.get_sblock(out))]
        _inline_cheap(sch, [n for n in names if n not in row_names + feeds_out + [scores, out]])
        partial = {n: _vector_partial_sums(sch, n, lanes) for n in row_names}
        dots: list[Any] | None = [] if pairs else None  # (lanes loops the bf16 dot product takes at the end)
        task = _output_tile(sch, out, rows, lanes, budget, dots)
        order = [m for n in names[:-1] for m in ([partial[n], n] if partial.get(n) else [n])]
        for name in reversed([n for n in order if _exists(sch, n)]):
            sch.compute_at(sch.get_sblock(name), task, preserve_unit_loops=True)
        tile_vectors = _score_tile(sch, scores, lanes, budget, dots)
        for name in partial.values():
            if name:
                _schedule_partial(sch, name)
        _vectorise_rest(sch, task, {scores, out, *[p for p in partial.values() if p]}, lanes)
        for name in tail:
            schedule_injective_block(sch, sch.get_sblock(name), lanes)
        if KEY_LIMITS in (func.attrs or {}):
            _mark_key_loops(sch, task, out, rows, queries, keys, lanes * tile_vectors)
        if dots:
            bf16.register()
            try:
                for loop in dots:
                    sch.tensorize(loop, bf16.DOT_16x2_ROWS)
            except (RuntimeError, tvm.error.InternalError):
                return self.schedule(func, target, pairs=False)  # (bf16 widened to fp32 FMAs instead)
            sch.annotate(task, "pragma_import_llvm", bf16.LLVM_IR)
        return sch


def _task_rows(queries: int, keys: int, lanes: int, budget: int = tiles.MAX_ACCUMULATORS) -> int:
    """Query rows per task: the first of ROWS dividing the queries whose score tile holds at most
    ``budget`` accumulators (else the last dividing them), or ONE_VECTOR_ROWS where it divides them
    and the keys allow no score tile wider than one vector."""
    if ONE_VECTOR_ROWS and queries % ONE_VECTOR_ROWS == 0 and keys % (2 * lanes):
        return ONE_VECTOR_ROWS
    dividing = [r for r in ROWS if queries % r == 0]
    vectors = score_tile_keys(keys, lanes, budget) // lanes
    return next((r for r in dividing if r * vectors <= budget), dividing[-1])


def _exists(sch: Any, name: str) -> bool:
    try:
        sch.get_sblock(name)
        return True
    except Exception:
        return False


def _inline_cheap(sch: Any, names: list[str]) -> None:
    """Inline each injective block into its consumers when it has one, or is cheap to recompute."""
    for name in names:
        block = sch.get_sblock(name)
        stmt = sch.get(block)
        if not isinstance(stmt.body, tvm.tirx.BufferStore):
            continue
        if len(sch.get_consumers(block)) <= 1 or sum(1 for _ in nodes(stmt.body.value, indices=False)) <= CHEAP_NODES:
            try:
                sch.compute_inline(block)
            except Exception:
                pass


def _vector_partial_sums(sch: Any, name: str, lanes: int) -> str | None:
    """rfactor a row reduction over the vector lanes (before any compute_at: rfactor wants the
    block first under its outermost loop); the partial block's name, None when the row is no
    whole number of vectors."""
    block = sch.get_sblock(name)
    loops = sch.get_loops(block)
    extent = as_int(sch.get(loops[-1]).extent)
    if not extent or extent % lanes or extent == lanes:
        return None
    _, lane = sch.split(loops[-1], factors=[None, lanes])
    written = sch.get(block).writes[0].source
    return sch.get(sch.rfactor(lane, factor_axis=len(written.shape))).name_hint


def _output_tile(sch: Any, name: str, rows: int, lanes: int, budget: int = tiles.MAX_ACCUMULATORS,
                 dots: list[Any] | None = None) -> Any:
    """The second matmul as ``rows x vectors`` register tiles, one task per head and row block;
    returns the task loop (fused and parallel). Over bf16 pairs of keys (``_pair_split``) the
    tile's lanes loop is added to ``dots``."""
    block = sch.get_sblock(name)
    loops = sch.get_loops(block)
    *batch, i, d, j = loops
    j, pair = _pair_split(sch, block, j, lanes, dots)
    io, ii = sch.split(i, factors=[None, rows])
    width = as_int(sch.get(d).extent)
    fits = [v for v in (4, 2, 1) if width % (v * lanes) == 0 and (v == 1 or rows * v <= OUTPUT_ACCUMULATORS)]
    vectors = max(fits) if width % lanes == 0 else None
    if vectors is None:
        raise ValueError("the head dimension is no whole number of vectors")
    tile_rows = _wide_output_rows(rows, width // lanes) if vectors == 1 else None
    # (the accumulators of the tile chosen so far: tile_rows x all vectors, else rows x vectors)
    in_budget = OUTPUT_TILE_IN_BUDGET and budget < tiles.MAX_ACCUMULATORS \
        and (tile_rows or rows) * (width // lanes if tile_rows else vectors) > budget
    if in_budget:
        tile_rows, vectors = _output_tile_in_budget(rows, width // lanes, budget)
    outer = []
    if tile_rows:
        vectors = vectors if in_budget else width // lanes
        row_tiles, ii = sch.split(ii, factors=[None, tile_rows])
        outer = [row_tiles]
    do, dv, dl = sch.split(d, factors=[None, vectors, lanes])
    steps = unroll_steps(sch, j, 4)
    sch.reorder(*batch, io, do, *outer, *steps, ii, dv, dl, *pair)
    task = sch.fuse(*batch, io)
    sch.parallel(task)
    register_tile_loops(sch, block, ii, dv, None if pair else dl, (outer or [do])[0], steps[0], lanes, None)
    if pair and dots is not None:
        dots.append(dl)
    return task


def _output_tile_in_budget(rows: int, vectors: int, budget: int) -> tuple[int, int]:
    """(rows, vectors) of an output tile within ``budget`` accumulators: the most FMAs per load
    among the divisors of the task's rows and of the head dimension's vectors."""
    pairs = [(r, v) for r in range(1, rows + 1) if rows % r == 0 for v in range(1, vectors + 1)
             if vectors % v == 0 and r * v <= budget]
    return max(pairs, key=lambda p: (p[0] * p[1] / (p[0] + p[1]), p[0]))


def _wide_output_rows(rows: int, vectors: int) -> int | None:
    """Rows of an output tile of all ``vectors`` of the head dimension (WIDE_OUTPUT_ACCUMULATORS):
    the most that divide the task's rows, at least two; None when none fit or there is one vector."""
    fit = [r for r in range(2, rows + 1) if rows % r == 0 and r * vectors <= WIDE_OUTPUT_ACCUMULATORS]
    return max(fit) if vectors > 1 and fit else None


def score_vectors(budget: int = tiles.MAX_ACCUMULATORS) -> int:
    """Vectors of keys a score tile takes where they divide the keys, on a target whose register
    tiles hold ``budget`` accumulators (``tiles.accumulator_budget``)."""
    small = budget <= tiles.MAX_ACCUMULATORS_16_REGS and SIXTEEN_REGISTER_SCORE_VECTORS
    return SIXTEEN_REGISTER_SCORE_VECTORS if small else SCORE_VECTORS


def score_tile_keys(keys: int, lanes: int, budget: int = tiles.MAX_ACCUMULATORS) -> int:
    """The keys of a score tile by default: ``score_vectors(budget)`` vectors, or the most of 2
    and 1 that divide the keys (``passes/pack_keys.py`` lays ``k`` out in panels of this many)."""
    most = score_vectors(budget)
    return lanes * max(v for v in (most, 2, 1) if v <= most and keys % (v * lanes) == 0)


def _pair_split(sch: Any, block: Any, loop: Any, lanes: int, dots: list[Any] | None) -> tuple[Any, list[Any]]:
    """A product's reduction ``loop`` split in pairs where it reads bf16 operands
    (``passes/bf16_attention.py``) and vectors are the dot product's 16 lanes: (the loop over
    pairs, [the pair's loop]), the pair and the 16 lanes outside it then one ``DOT_16x2_ROWS``
    (``compile/bf16.py``); else, or where ``dots`` is None, (``loop``, []).

    The rows' pairs are interleaved in registers, each vector of k or v once per tile of 4-8 rows:
    with k and v written in pairs by their transposes instead (``[.., keys / T, d / 2, T, 2]``,
    ``[.., keys / 2, d, 2]``, ``DOT_16x2``), ViT-B/16's attentions at batch 8 in bf16 took 23.6
    against 25.7 ms, and the transposes 3.8 against 1.8 ms: level end to end, 0.985x [0.977-1.009]
    (same-process A/B, session 99), so the transposes keep their layout."""
    if dots is None or lanes != bf16.LANES or not any(str(r.source.dtype) == "bfloat16" for r in sch.get(block).reads):
        return loop, []
    outer, pair = sch.split(loop, factors=[None, 2])
    return outer, [pair]


def _score_tile(sch: Any, name: str, lanes: int, budget: int, dots: list[Any] | None = None) -> int:
    """The first matmul, inside the task: ``rows x score_vectors(budget)`` tiles over the keys (their
    lanes loop added to ``dots`` over bf16 pairs, as ``_output_tile``); returns the tiles' vectors."""
    block = sch.get_sblock(name)
    *_, i, j, k = sch.get_loops(block)
    k, pair = _pair_split(sch, block, k, lanes, dots)
    keys = as_int(sch.get(j).extent)
    vectors = knob("score_vectors", score_tile_keys(keys, lanes, budget) // lanes,
                   [v for v in (1, 2, 4, 8) if keys % (v * lanes) == 0])
    jo, jv, jl = sch.split(j, factors=[None, vectors, lanes])
    steps = unroll_steps(sch, k, 4)
    sch.reorder(jo, *steps, i, jv, jl, *pair)
    register_tile_loops(sch, block, i, jv, None if pair else jl, jo, steps[0], lanes, None)
    if pair and dots is not None:
        dots.append(jl)
    return vectors


def _schedule_partial(sch: Any, name: str) -> None:
    """A partial-sum block inside the task: lanes innermost and vectorised, its fold unrolled."""
    block = sch.get_sblock(name)
    loops = sch.get_loops(block)[1:]  # (compute_at orders them as the iterators: lanes first)
    sch.reorder(*loops[1:], loops[0])
    loops = sch.get_loops(block)[1:]
    sch.vectorize(loops[-1])
    init = sch.decompose_reduction(block, loops[-2])
    sch.vectorize(sch.get_loops(init)[-1])


def _vectorise_rest(sch: Any, task: Any, done: set[str], lanes: int) -> None:
    """Every other block in the task: an elementwise one vectorised where lanes divide its
    innermost loop, a reduction (the fold of partial sums over the lanes) unrolled."""
    for block in sch.get_child_blocks(task):
        stmt = sch.get(block)
        if any(stmt.name_hint.startswith(n) for n in done):
            continue
        loops = sch.get_loops(block)[1:]
        if not loops:
            continue
        if any(iv.iter_type == tvm.tirx.IterVar.CommReduce for iv in stmt.iter_vars):
            if as_int(sch.get(loops[-1]).extent) == lanes:
                sch.unroll(loops[-1])
            continue
        extent = as_int(sch.get(loops[-1]).extent)
        if extent and extent % lanes == 0:
            _, vec = sch.split(loops[-1], factors=[None, lanes])
            sch.vectorize(vec)


def _mark_key_loops(sch: Any, task: Any, out: str, rows: int, queries: int, keys: int, tile: int) -> None:
    """Annotate the task with what ``passes/key_limits.truncate_key_loops`` needs (rows per task,
    row blocks per head, the score tile, the keys, how many loops it must find) and, in every block
    of the task that indexes keys, its outermost key loop with its keys per iteration; nothing
    unless every such block has one that can be bounded (serial, linear in the keys)."""
    if keys <= tile or keys % tile:
        return
    func = sch.mod["main"]
    buffers = _key_buffers(sch, func, out, queries, keys)
    units: dict[Any, int] = {}  # loop (For) -> keys per iteration
    owner: dict[str, Any] = {}  # block name -> its outermost key loop
    blocks = list(_blocks_under(func.body, sch.get(task)))
    for name, loops, indices in blocks:
        found = [index for buf, index in indices if any(buf.same_as(b) for b in buffers)]
        key_loops = [loop for loop in loops if any(uses(index, loop.loop_var) for index in found)]
        if not key_loops:
            continue
        loop = key_loops[0]
        extent = as_int(loop.extent)
        unit = keys // extent if extent and keys % extent == 0 else None
        if loop.kind != tvm.tirx.ForKind.SERIAL or unit is None or tile % unit \
                or any(coefficient(index, loop.loop_var) != unit for index in found):
            return
        units[loop] = unit
        owner[name] = loop
    if not units or any(name not in owner and any(loop in units for loop in loops) for name, loops, _ in blocks):
        return  # (a block without keys under a key loop would be cut short too)
    marked = {}
    for name, loop in owner.items():
        marked[loop] = next(rv for rv in sch.get_loops(sch.get_sblock(name)) if sch.get(rv).same_as(loop))
    for loop, rv in marked.items():
        sch.annotate(rv, UNIT, units[loop])
    sch.annotate(task, TASK, [rows, queries // rows, tile, keys, len(units)])


def _key_buffers(sch: Any, func: Any, out: str, queries: int, keys: int) -> list[Any]:
    """The function's intermediate buffers indexed ``[..., query, key]`` (scores, their
    transformations, probabilities): shaped so, and not the output matmul's accumulators."""
    root = func.body.block
    out_name = out + "_update" if _exists(sch, out + "_update") else out
    accumulators = [w.source for w in sch.get(sch.get_sblock(out_name)).writes]
    return [b for b in root.alloc_buffers if len(b.shape) >= 2 and as_int(b.shape[-1]) == keys
            and as_int(b.shape[-2]) == queries and not any(b.same_as(a) for a in accumulators)]


def _blocks_under(body: Any, task: Any) -> Any:
    """(name, loops below ``task`` from the outermost, [(buffer, last index in loop variables)])
    for every block inside the loop ``task``."""
    found: list[Any] = []

    def walk(stmt: Any, loops: list[Any], inside: bool) -> None:
        if isinstance(stmt, tvm.tirx.For):
            inside_now = inside or stmt.same_as(task)
            walk(stmt.body, loops + [stmt] if inside else loops, inside_now)
        elif isinstance(stmt, tvm.s_tir.SBlockRealize):
            if inside:
                found.append((stmt.block.name_hint, loops, _last_indices(stmt)))
            walk(stmt.block.body, loops, inside)
        elif isinstance(stmt, (tvm.tirx.SeqStmt, tvm.tirx.IfThenElse)):
            parts = stmt.seq if isinstance(stmt, tvm.tirx.SeqStmt) else (stmt.then_case, stmt.else_case)
            for part in parts:
                if part is not None:
                    walk(part, loops, inside)
        elif hasattr(stmt, "body"):
            walk(stmt.body, loops, inside)

    walk(body, [], False)
    return found


def _last_indices(realize: Any) -> list[tuple[Any, Any]]:
    """Each load and store of the block with its last index, the block's variables replaced by
    their bindings."""
    binding = {iv.var: value for iv, value in zip(realize.block.iter_vars, realize.iter_values, strict=True)}
    accesses: list[tuple[Any, Any]] = []
    tvm_ffi.structural_walk(realize.block.body, [
        (tvm.ir.expr.TensorLoad, lambda n: accesses.append((n.source, n.indices))),
        (tvm.tirx.BufferStore, lambda n: accesses.append((n.buffer, n.indices)))])
    if realize.block.init is not None:
        tvm_ffi.structural_walk(realize.block.init, [(tvm.tirx.BufferStore, lambda n: accesses.append((n.buffer, n.indices)))])
    return [(buf, tvm_ffi.structural_map(indices[-1], (tvm.tirx.Var, lambda v: binding.get(v, v))))
            for buf, indices in accesses if len(indices)]
