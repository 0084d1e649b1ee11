"""PadSoftmaxRows: a softmax over rows that are no whole number of vectors, padded to whole
vectors where the next operation is a matmul that contracts those rows.

ViT-B/16 attends over 197 tokens (196 patches and the class token): its attention softmax rows
are 197 floats, 12 vectors of 16 and a tail of 5, so the RowReduction rule (vector partial sums
per row) declines and DLight's scalar reduction ran it: 7.5 ms of 146 per inference at 18 % of
its roofline bound (``tvmbench explain``, Xeon host, session 20). The same holds for any text
model at a sequence length that is not a multiple of the vector width.

Where the probabilities feed ``matmul(p, v)`` (attention: ``v`` is [..., n, d]), the rows can
be padded at no cost to the result: the scores get columns of the lowest float32 (their
probabilities are exp(lowest - max) = 0, or about 1e-38 after FastMathTransform's clamped exp),
``v`` gets rows of zeros, and the matmul's sum over the padded index adds nothing. The softmax
then runs over whole vectors, and the matmul's reduction is as long as it was, rounded up.
Only a pad that wastes at most an eighth of the row is made (short rows stay as they are).
"""

from __future__ import annotations

from typing import Any

import numpy as np
from tvm import relax
from tvm.relax.expr_functor import PyExprMutator, mutator

from tvmbench.compile.ir import op_name, static_shape, use_counts
from tvmbench.compile.tiles import vector_lanes
from tvmbench.targets import ResolvedTarget

LOWEST = float(np.finfo(np.float32).min)
MAX_WASTE = 1 / 8  # padded columns at most this share of a row


def padded_length(n: int, lanes: int) -> int | None:
    """The row length to pad ``n`` to: the next whole number of vectors, when that is needed and
    wastes little."""
    whole = -(-n // lanes) * lanes
    return whole if whole != n and whole - n <= n * MAX_WASTE else None


@mutator
class _PadSoftmax(PyExprMutator):
    def __init__(self, mod: Any, lanes: int, uses: dict[Any, int]) -> None:
        super().__init__(mod)
        self.lanes, self.uses = lanes, uses

    def visit_call_(self, call: Any) -> Any:
        call = super().visit_call_(call)
        if op_name(call) != "relax.matmul":
            return call
        chain = self._chain(call.args[0])
        if chain is None:
            return call
        soft, steps = chain
        scores, v = static_shape(soft.args[0].ty), static_shape(call.args[1].ty)
        if scores is None or v is None or len(v) < 2 or v[-2] != scores[-1]:
            return call
        n = scores[-1]
        whole = padded_length(n, self.lanes)
        if whole is None:
            return call
        x = self.builder_.emit(relax.op.nn.softmax(self.builder_.emit(_pad(soft.args[0], -1, whole - n, LOWEST)),
                                                   axis=-1))
        for step in reversed(steps):
            x = self.builder_.emit(self._again(step, x, whole))
        return relax.op.matmul(x, self.builder_.emit(_pad(call.args[1], -2, whole - n, 0.0)),
                               out_dtype=call.attrs.out_dtype)

    def _chain(self, var: Any) -> tuple[Any, list[Any]] | None:
        """The softmax over the last axis that ``var`` comes from, and the calls on the way (last
        first), when each of them keeps rows whole (see ``_keeps_rows``) and nothing else uses
        what they compute."""
        steps = []
        while isinstance(var, relax.Var):
            value = self.lookup_binding(var)
            if op_name(value) == "relax.nn.softmax":
                rows = static_shape(value.args[0].ty)
                ok = (self._sole_use(var, steps) and rows is not None
                      and int(value.attrs.axis) in (-1, len(rows) - 1) and str(value.args[0].ty.dtype) == "float32")
                return (value, steps) if ok else None
            source = _keeps_rows(value, self.lookup_binding)
            if source is None or not self._sole_use(var, steps):
                return None
            steps.append(value)
            var = source
        return None

    def _sole_use(self, var: Any, steps: list[Any]) -> bool:
        """Is the step that reads ``var`` (the last of ``steps``, else the matmul) its only user?
        A where step's fill, ``full_like(var)``, reads only its shape and does not count."""
        fill = int(bool(steps) and op_name(steps[-1]) == "relax.where")
        return self.uses.get(var, 0) - fill == 1

    def _again(self, call: Any, x: Any, whole: int) -> Any:
        """``call`` applied to ``x``, the padded form of its row operand."""
        name = op_name(call)
        if name == "relax.broadcast_to":
            return x
        if name == "relax.reshape":
            return relax.op.reshape(x, [*static_shape(call.ty)[:-1], whole])
        cond, a, b = call.args
        rows_first = _is_row(a, b, self.lookup_binding)
        fill = relax.op.full_like(x, self.lookup_binding(b if rows_first else a).args[1])
        return relax.op.where(cond, x, fill) if rows_first else relax.op.where(cond, fill, x)


def _pad(x: Any, axis: int, extra: int, value: float) -> Any:
    ndim = len(x.ty.shape)
    width = [0] * (2 * ndim)
    width[2 * (axis % ndim) + 1] = extra
    return relax.op.nn.pad(x, width, pad_value=value)


def _is_fill_of(expr: Any, var: Any, lookup: Any) -> bool:
    value = lookup(expr) if isinstance(expr, relax.Var) else None
    return op_name(value) == "relax.full_like" and value.args[0].same_as(var)


def _is_row(a: Any, b: Any, lookup: Any) -> bool:
    """In ``where(cond, a, b)``: is ``a`` the rows (``b`` a fill of them)?"""
    return isinstance(a, relax.Var) and _is_fill_of(b, a, lookup)


def _keeps_rows(value: Any, lookup: Any) -> Any | None:
    """The row operand of a call that maps whole rows to whole rows in place, so it can run on
    padded rows: broadcast_to its own shape, a reshape that keeps the last axis, and torch's safe
    softmax, ``where(cond, full_like(p, c), p)`` with one condition per row. Else None."""
    name = op_name(value)
    shape = static_shape(value.ty) if name else None
    if shape is None:
        return None
    if name == "relax.broadcast_to":
        return value.args[0] if static_shape(value.args[0].ty) == shape else None
    if name == "relax.reshape":
        before = static_shape(value.args[0].ty)
        return value.args[0] if before is not None and before[-1:] == shape[-1:] else None
    if name == "relax.where":
        cond, a, b = value.args
        rows = a if _is_row(a, b, lookup) else b if _is_row(b, a, lookup) else None
        per_row = static_shape(cond.ty)
        return rows if rows is not None and per_row is not None and per_row[-1:] in ([], [1]) else None
    return None


def pad_softmax_rows(target: ResolvedTarget) -> Any:
    """The pass (see the module's docstring), to whole vectors of the target. Probabilities used
    anywhere else as well (returned as an output, say) are left as they are."""
    import tvm

    lanes = vector_lanes(target.tvm(), 32)

    @tvm.ir.transform.module_pass(opt_level=0, name="PadSoftmaxRows")
    def rewrite(mod: Any, ctx: Any) -> Any:
        for gv, func in list(mod.functions.items()):
            if isinstance(func, relax.Function):
                new = _PadSoftmax(mod, lanes, use_counts(func)).visit_expr(func)
                mod[gv] = func if new.same_as(func) else relax.analysis.remove_all_unused(new)
        return mod

    return rewrite
