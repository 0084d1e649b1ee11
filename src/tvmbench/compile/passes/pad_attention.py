"""PadAttention: an attention over keys that are no whole number of vectors, or queries no whole
number of the Attention rule's row blocks, computed over padded keys and queries.

ViT-B/16 attends over 197 tokens. FuseAttention joins an attention only when its keys fill whole
vectors (the score tiles are whole vectors of keys) and the Attention rule splits queries into
blocks of 4 rows, which 197 (a prime) does not divide: ViT's attention stayed as four kernels
whose 12 x 197 x 197 scores per image crossed memory four times (ViT at batch 8 0.88x of
OpenVINO, the furthest behind of the transformers, session 26).

Here the whole attention, from ``matmul(q, k)`` to ``matmul(p, v)``, is computed on padded
operands: ``q`` gets zero rows (to a multiple of 4), ``k`` zero columns and ``v`` zero rows (to
whole vectors of keys), and a constant row of 0 (real keys) and the lowest float (padded keys)
is added to the scores, so a padded key's probability is exp(lowest - max) = 0 and its zero row
of ``v`` adds nothing. Every step in between (mask add, scale, reshapes, softmax, SDPA's check
for fully masked rows and its ``where``) runs as it was, on the padded shapes; masks added to the
scores get zero padding (the constant row already hides the padded keys); the output drops the
padded query rows. A fully masked row still gives zeros: its probabilities fall on padded keys,
whose rows of ``v`` are zero.

A head dimension that is no whole number of vectors (MobileViT-S's 144 channels over 4 heads: 36)
kept the attention unjoined too: the Attention rule's output tile is whole vectors of it. ``v``
then gets zero columns (36 -> 48), whose outputs are zero and sliced off; the scores' own
reduction over the head dimension needs no padding.

Applies where every value between the two matmuls is used only there, both matmuls multiply
computed tensors (not weights), and each step is one this pass knows how to pad.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from tvm import relax
from tvm.relax.expr_functor import PyExprMutator, mutator

from tvmbench.compile.ir import op_name, static_shape, use_counts
from tvmbench.compile.rules.attention import ONE_VECTOR_ROWS, score_vectors
from tvmbench.compile.rules.attention import ROWS as ATTENTION_ROWS
from tvmbench.compile.tiles import MAX_ACCUMULATORS, accumulator_budget, vector_lanes
from tvmbench.targets import ResolvedTarget

LOWEST = float(np.finfo(np.float32).min)
ROWS = ATTENTION_ROWS[0]  # the Attention rule's query rows per task
MAX_WASTE = 1 / 8  # padded queries at most this share
# The head dimension padded to whole vectors when that adds at most this share to the second
# matmul (its only cost: the scores are not touched). 0: off (for A/Bs).
HEAD_WASTE = 1 / 2
TILE_WASTE = 1 / 16  # keys padded to whole score tiles (``score_vectors``) at most this share
# Keys padded to whole vectors at most this share (else no join follows). Swin's windows of 49
# tokens (64 keys: 31 % more) kept their attentions as four kernels each, the softmax at 11 % of
# its bound: joined, swin_t 1.035x (same-process A/B, Zen 5).
KEY_WASTE = 1 / 3
# Where the keys take score tiles of one vector, the queries padded to the Attention rule's
# ONE_VECTOR_ROWS (``rows_for``). Off: to its ROWS only (for A/Bs).
ONE_VECTOR_QUERIES = True
# Off: attentions stay unpadded (for A/Bs: ``benchmarks/rule_ab.py``).
ENABLED = True

# Steps between the two matmuls that run unchanged on padded shapes (elementwise, broadcasting,
# reductions over the keys with keepdims), and the two that carry a shape to adjust.
_ELEMENTWISE = {"relax.add", "relax.subtract", "relax.multiply", "relax.divide", "relax.equal",
                "relax.not_equal", "relax.logical_not", "relax.astype", "relax.max", "relax.sum",
                "relax.full_like", "relax.where", "relax.nn.softmax"}
_SHAPED = {"relax.reshape", "relax.broadcast_to"}


def padded(n: int, multiple: int, waste: float | None = None) -> int:
    """``n`` rounded up to ``multiple`` when that wastes at most ``waste`` (MAX_WASTE), else ``n``."""
    whole = -(-n // multiple) * multiple
    return whole if whole - n <= n * (MAX_WASTE if waste is None else waste) else n


def rows_for(rows: int, keys: int, lanes: int) -> int:
    """The queries padded to whole row blocks of the Attention rule: of ONE_VECTOR_ROWS where they
    need padding anyway, the (padded) keys take score tiles of one vector and that wastes at most
    MAX_WASTE, else of ROWS. A task of 4 rows then had 4 accumulators in both matmuls, half what
    the FMA pipes' latency needs: ViT-H/14's and DINOv2's 257 tokens (260 rows of 4, 272 keys: 17
    vectors, a prime) and ViT-H's heads of 80 (5 vectors: output tiles of one vector, before
    WIDE_OUTPUT_ACCUMULATORS) ran the attention at half the FMA rate. Queries that need no padding
    keep it: padded, they cost a pass dropping the rows after the attention, and BERT's at 100
    tokens (112 keys) ran its attention 10 % slower as 104 rows in blocks of 8 than as 100 in 4."""
    if ONE_VECTOR_QUERIES and ONE_VECTOR_ROWS and rows % ROWS and keys % (2 * lanes):
        eight = padded(rows, ONE_VECTOR_ROWS)
        if eight % ONE_VECTOR_ROWS == 0:
            return eight
    return padded(rows, ROWS)


def padded_keys(keys: int, lanes: int, budget: int = MAX_ACCUMULATORS) -> int:
    """Keys rounded up to whole score tiles of the Attention rule (``score_vectors``) when
    that wastes at most TILE_WASTE, else to whole vectors (within KEY_WASTE). Whisper's 1500 keys
    in whole vectors are 94, which only tiles of 2 divide (4 rows x 2 vectors: 8 accumulators);
    padded to 1536 they take tiles of 4 (1.5 % faster end to end, 2.4 % more keys). A larger
    share does not pay: DINOv2's 257 keys padded to 320 (24 %) or to 288 for tiles of 2 (12 %)
    ran 2.5 % and 1.5 % slower than at 272, in tiles of one vector."""
    tile = lanes * score_vectors(budget)
    tiles = padded(keys, tile, TILE_WASTE)
    return tiles if tiles % tile == 0 else padded(keys, lanes, KEY_WASTE)


@mutator
class _PadAttention(PyExprMutator):
    def __init__(self, mod: Any, lanes: int, budget: int, func: Any) -> None:
        super().__init__(mod)
        self.lanes, self.budget, self.uses = lanes, budget, use_counts(func)
        self._order = [b.var for block in func.body.blocks for b in block.bindings]  # program order

    def visit_call_(self, call: Any) -> Any:
        call = super().visit_call_(call)
        if op_name(call) != "relax.matmul" or not isinstance(call.args[1], relax.Var):
            return call
        found = self._region(call.args[0])
        if found is None:
            return call
        first, region = found
        q, k, v = first.args[0], first.args[1], call.args[1]
        shapes = [static_shape(x.ty) for x in (q, k, v)]
        if any(s is None or len(s) < 2 for s in shapes) or any(not isinstance(x, relax.Var) for x in (q, k)):
            return call
        rows, keys, dims = shapes[0][-2], shapes[1][-1], shapes[2][-1]
        keys2 = padded_keys(keys, self.lanes, self.budget)
        rows2 = rows_for(rows, keys2, self.lanes)
        dims2 = padded(dims, self.lanes, HEAD_WASTE)
        if (rows2, keys2, dims2) == (rows, keys, dims) or keys2 % self.lanes or shapes[2][-2] != keys:
            return call  # (nothing to pad, or keys too far from whole vectors: no join would follow)
        return self._emit_padded(first, region, call, (rows, keys, dims), (rows2, keys2, dims2))

    def _region(self, p: Any) -> tuple[Any, list[tuple[Any, Any]]] | None:
        """The first matmul and the bindings from it to ``p`` (in program order), when they form
        an attention this pass can pad (see the module's docstring)."""
        behind: dict[Any, Any] = {}  # every bound variable p depends on, matmuls not crossed
        stack = [p]
        while stack:
            var = stack.pop()
            if not isinstance(var, relax.Var) or var in behind:
                continue
            value = self.lookup_binding(var)
            if op_name(value) is None:
                continue  # a parameter
            behind[var] = value
            if op_name(value) != "relax.matmul":
                stack.extend(a for a in value.args if isinstance(a, relax.Var))
        firsts = [v for v in behind if op_name(behind[v]) == "relax.matmul" and p in self._after(v, behind)]
        if len(firsts) != 1:
            return None
        first = firsts[0]
        region = {v: behind[v] for v in [first, *self._after(first, behind)]}
        if any(op_name(val) not in _ELEMENTWISE | _SHAPED for v, val in region.items() if v is not first):
            return None
        if not any(op_name(val) == "relax.nn.softmax" for val in region.values()):
            return None
        used = sum(len({a for a in val.args if isinstance(a, relax.Var) and a in region}) for val in region.values())
        if used + 1 != sum(self.uses.get(v, 0) for v in region):
            return None  # a value on the way is used elsewhere too (the last matmul reads p once)
        if any(self.lookup_binding(x) is None for x in region[first].args[:2]):
            return None  # a weight operand: a dense layer, no attention
        return region[first], [(v, region[v]) for v in self._order if v in region]

    def _after(self, start: Any, values: dict[Any, Any]) -> list[Any]:
        """The variables of ``values`` computed from ``start``, in program order."""
        found = {start}
        for var in self._order:
            if var in values and var is not start and any(
                    isinstance(a, relax.Var) and a in found for a in values[var].args):
                found.add(var)
        return [v for v in self._order if v in found and v is not start]

    def _emit_padded(self, first: Any, region: list[tuple[Any, Any]], last: Any, old_sizes: tuple[int, int, int],
                     new_sizes: tuple[int, int, int]) -> Any:
        (rows, keys, dims), (rows2, keys2, dims2) = old_sizes, new_sizes
        old, new = (rows, keys), (rows2, keys2)
        q = _pad(first.args[0], -2, rows2 - rows, 0.0)
        k = _pad(first.args[1], -1, keys2 - keys, 0.0)
        hide = np.zeros(keys2, "float32")
        hide[keys:] = LOWEST
        emit = self.builder_.emit
        scores = emit(relax.op.matmul(emit(q), emit(k), out_dtype=first.attrs.out_dtype))
        remap = {region[0][0]: emit(relax.op.add(scores, relax.const(hide))) if keys2 != keys else scores}
        for var, value in region[1:]:
            args = [remap.get(a, a) if a in remap else self._outside(a, old, new) for a in value.args]
            if op_name(value) in _SHAPED:
                args[1] = relax.ShapeExpr([_resized(int(d), i, len(value.args[1].values), old, new)
                                           for i, d in enumerate(value.args[1].values)])
            remap[var] = emit(relax.Call(value.op, args, value.attrs, value.ty_args))
        v = last.args[1]
        for axis, extra in ((-2, keys2 - keys), (-1, dims2 - dims)):
            v = emit(_pad(v, axis, extra, 0.0)) if extra else v
        out = emit(relax.op.matmul(remap[region[-1][0]], v, out_dtype=last.attrs.out_dtype))
        rank = len(static_shape(out.ty))
        axes = [(axis, n) for axis, n, n2 in ((rank - 2, rows, rows2), (rank - 1, dims, dims2)) if n2 != n]
        if not axes:
            return out
        return relax.op.strided_slice(out, axes=[a for a, _ in axes], begin=[0] * len(axes), end=[n for _, n in axes])

    def _outside(self, arg: Any, old: tuple[int, int], new: tuple[int, int]) -> Any:
        """An input from outside the attention (a mask, a scalar), padded with zeros where its
        last two axes are the queries and the keys."""
        shape = static_shape(arg.ty) if hasattr(arg, "ty") else None
        if not shape:
            return arg
        width = [0] * (2 * len(shape))
        for axis, (n, n2) in ((len(shape) - 2, (old[0], new[0])), (len(shape) - 1, (old[1], new[1]))):
            if axis >= 0 and shape[axis] == n and n2 != n:
                width[2 * axis + 1] = n2 - n
        return self.builder_.emit(relax.op.nn.pad(arg, width, pad_value=0.0)) if any(width) else arg


def _resized(d: int, i: int, rank: int, old: tuple[int, int], new: tuple[int, int]) -> int:
    """Dimension ``i`` of a reshape or broadcast target: the queries and keys axes padded."""
    if i == rank - 1 and d == old[1]:
        return new[1]
    if i == rank - 2 and d == old[0]:
        return new[0]
    return d


def _pad(x: Any, axis: int, extra: int, value: float) -> Any:
    if not extra:
        return x
    ndim = len(x.ty.shape)
    width = [0] * (2 * ndim)
    width[2 * (axis % ndim) + 1] = extra
    return relax.op.nn.pad(x, width, pad_value=value)


def pad_attention(target: ResolvedTarget) -> Any:
    """The pass (see the module's docstring), for the target's vector width."""
    import tvm

    lanes, budget = vector_lanes(target.tvm(), 32), accumulator_budget(target.tvm())

    @tvm.ir.transform.module_pass(opt_level=0, name="PadAttention")
    def rewrite(mod: Any, ctx: Any) -> Any:
        for gv, func in list(mod.functions.items()):
            if ENABLED and isinstance(func, relax.Function):
                func = relax.analysis.remove_all_unused(func)  # (dead bindings would count as uses)
                new = _PadAttention(mod, lanes, budget, func).visit_expr(func)
                mod[gv] = func if new.same_as(func) else relax.analysis.remove_all_unused(new)
        return mod

    return rewrite
