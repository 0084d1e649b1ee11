"""SlicesThroughLayout: a chain of layout ops (reshape, transpose, expand_dims, squeeze) that
several slices, constant ``take`` s or the parts of a ``split`` read is copied once per reader,
the takes and parts made slices.

torchvision's ``nn.MultiheadAttention`` (every ViT) computes q, k and v in one packed
projection, rearranges it to ``[3, tokens, batch, 768]`` and takes ``proj[0]``, ``proj[1]``,
``proj[2]``. Two things kept that from fusing into the heads' own rearrangement:

* ``take`` with a constant index is legalized as a gather that loads its index from a tensor,
  which FuseOps cannot see through (an opaque kernel): each third was copied out by a kernel of
  its own. As ``strided_slice`` + ``squeeze`` it is injective and fuses both ways. (Only where it
  reads a layout chain: a take of a layer norm's output, ViT's class token, joined the norm's
  kernel as a slice, which no row rule took: 0.42 ms for one row.)
* The rearranged tensor had three readers, and FuseOps fuses a producer only into a single
  consumer: the rearrangement ran as a kernel of its own, writing all of it. Copied per slice,
  each copy has one reader and fuses with it; inlined, each copy computes only what its slice
  reads, so the arithmetic is not repeated, while the packed projection is read once in all.

ViT-B/16 at batch 1 spent 2.4 of its 81 ms in these copies (12 rearrangements and 36 takes).
GPT-2 (``c_attn(x).split(768, dim=2)``) and MaxViT split their packed projections the same way:
``split`` is legalized as one kernel writing all its parts, so each part is a slice here, with
or without a layout chain before it; not after a concatenation, which joins a split into one
kernel that writes each part once (ShuffleNet's concat, channel shuffle and split: as slices, the
concat ran alone and one slice became a copy of its own, 13 kernels more).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import tvm
from tvm import relax
from tvm.relax.expr_functor import PyExprMutator, mutator

from tvmbench.compile.ir import function_pass, op_name, static_shape

# Ops that only move data.
LAYOUT_OPS = {"relax.reshape", "relax.permute_dims", "relax.expand_dims", "relax.squeeze", "relax.flatten"}
# Off (for A/Bs): takes stay gathers and slices read the chain's one output, as before.
ENABLED = True
# Longest chain copied (a guard, not a tuning knob: ViT's is four ops).
MAX_CHAIN = 8


def constant_index(take: Any) -> int | None:
    """The index of a ``take`` of one element along a known axis (a 0-d integer constant,
    counted from the front and clipped as BoundedTake's ``"clip"`` mode does), else None."""
    data, indices = take.args
    if take.attrs.axis is None or not isinstance(indices, tvm.ir.expr.Constant):
        return None
    value = indices.value.numpy()
    shape = static_shape(data.ty)
    if value.ndim != 0 or not np.issubdtype(value.dtype, np.integer) or shape is None:
        return None
    extent = shape[int(take.attrs.axis)]
    index = int(value) + extent if int(value) < 0 else int(value)
    return min(max(index, 0), extent - 1)


def split_span(split: Any, index: int) -> tuple[int, int, int] | None:
    """(axis, begin, end) of part ``index`` of a ``split`` along a static axis, else None."""
    shape = static_shape(split.args[0].ty)
    if shape is None:
        return None
    axis = int(split.attrs.axis) % len(shape)
    cut = split.attrs.indices_or_sections
    if isinstance(cut, tvm.tirx.IntImm):  # that many equal parts
        size = -(-shape[axis] // int(cut))
        bounds = [min(i * size, shape[axis]) for i in range(int(cut) + 1)]
    else:
        bounds = [0, *[min(int(c), shape[axis]) for c in cut], shape[axis]]
    return (axis, bounds[index], bounds[index + 1]) if index + 1 < len(bounds) else None


@mutator
class _Slices(PyExprMutator):
    def visit_call_(self, call: Any) -> Any:
        call = super().visit_call_(call)
        name = op_name(call) if ENABLED else None
        if name == "relax.take":
            index, data = constant_index(call), self._own_copy(call.args[0])
            if index is None or data.same_as(call.args[0]):  # (a take of a layer norm's output stays
                return call                                      # apart: joined, it normalised every row)
            axis = int(call.attrs.axis) % len(call.args[0].ty.shape)
            return relax.op.squeeze(relax.op.strided_slice(data, [axis], [index], [index + 1]), [axis])
        if name == "relax.strided_slice":
            data = self._own_copy(call.args[0])
            if not data.same_as(call.args[0]):
                return relax.Call(call.op, [data, *call.args[1:]], call.attrs, call.ty_args)
        return call

    def visit_tuple_getitem_(self, item: Any) -> Any:
        item = super().visit_tuple_getitem_(item)
        bound = self.lookup_binding(item.tuple_value) if isinstance(item.tuple_value, relax.Var) else None
        span = split_span(bound, int(item.index)) if ENABLED and op_name(bound) == "relax.split" else None
        if span is None or self._root_op(bound.args[0]) == "relax.concat":
            return item
        return relax.op.strided_slice(self._own_copy(bound.args[0]), [span[0]], [span[1]], [span[2]])

    def _root_op(self, data: Any) -> str | None:
        """The op that made ``data``, seen through its layout chain."""
        bound = self.lookup_binding(data) if isinstance(data, relax.Var) else None
        while op_name(bound) in LAYOUT_OPS and isinstance(bound.args[0], relax.Var):
            bound = self.lookup_binding(bound.args[0])
        return op_name(bound)

    def _own_copy(self, data: Any, depth: int = 0) -> Any:
        """``data`` recomputed by a fresh copy of the layout chain that made it (itself when it
        was not made by one), so that a slice of it is the copy's only reader."""
        bound = self.lookup_binding(data) if isinstance(data, relax.Var) else None
        if depth >= MAX_CHAIN or op_name(bound) not in LAYOUT_OPS:
            return data
        inner = self._own_copy(bound.args[0], depth + 1)
        return relax.Call(bound.op, [inner, *bound.args[1:]], bound.attrs, bound.ty_args)


def slices_through_layout() -> Any:
    """The pass (after BoundedTake, which counts negative indices from the end)."""
    return function_pass(_Slices, "SlicesThroughLayout", prune=True)
