"""BoundedTake: ``take`` (embedding lookups, gathers, ``x[:, -1]``) and ``index_tensor`` (``x[i, j]``)
with negative indices counted from the end, and ``take`` with ``mode="clip"`` instead of Relax's
default ``"fast"``.

TVM 0.27's PyTorch importer turns ``x[:, -1]`` (``aten.select``), ``x[:, [-1, 0]]``
(``aten.index``) and ``torch.take(x, ...)`` into ``take`` with the indices as written, and
``take``'s ``"fast"`` mode reads index -1 before the start of the axis: the last LSTM step of a
sequence model, a decoder's last-token logits came out as garbage (1e27 in the stock build).
PyTorch and ONNX count a negative index from the end, so a constant index is rewritten to
``index + extent`` here, and a computed one gets a ``where(i < 0, i + extent, i)``.

With ``"fast"`` a token id outside the vocabulary reads out of bounds and can crash the process
(a user's model fed the wrong tokenizer's ids), and TVM logs a warning per gather while
compiling. Clipping costs a min/max per index.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import tvm
from tvm import relax
from tvm.relax.expr_functor import PyExprMutator, mutator

from tvmbench.compile.ir import function_pass, numel, op_name, static_shape


def _extent(data: Any, axis: int | None) -> int | None:
    """Length of the axis ``take`` indexes (every element when ``axis`` is None), if static."""
    if axis is None:
        return numel(data.ty)
    shape = static_shape(data.ty)
    return None if shape is None else shape[axis]


def from_front(indices: Any, extent: int | None) -> Any:
    """``indices`` with negative entries counted from the end of an axis of ``extent``."""
    if extent is None:
        return indices
    if isinstance(indices, tvm.ir.expr.Constant):
        values = indices.value.numpy()
        if not (values < 0).any():
            return indices
        return relax.const(np.where(values < 0, values + extent, values).astype(values.dtype))
    dtype = indices.ty.dtype
    if not str(dtype).startswith("int"):
        return indices
    zero, n = relax.const(0, dtype), relax.const(extent, dtype)
    return relax.op.where(relax.op.less(indices, zero), relax.op.add(indices, n), indices)


@mutator
class _Clip(PyExprMutator):
    def visit_call_(self, call: Any) -> Any:
        call = super().visit_call_(call)
        if op_name(call) == "relax.take" and str(call.attrs.mode) == "fast":
            axis = None if call.attrs.axis is None else int(call.attrs.axis)
            data, indices = call.args
            if axis is not None and axis < 0:
                axis += len(data.ty.shape)
            indices = from_front(indices, _extent(data, axis))
            return relax.op.take(data, indices, axis, mode="clip")
        if op_name(call) == "relax.index_tensor" and isinstance(call.args[1], relax.Tuple):
            data, indices = call.args
            fixed = [from_front(index, _extent(data, axis)) for axis, index in enumerate(indices.fields)]
            if any(not f.same_as(i) for f, i in zip(fixed, indices.fields, strict=True)):
                return relax.op.index_tensor(data, relax.Tuple(fixed))
        return call


def bounded_take() -> Any:
    """The pass (see the module's docstring)."""
    return function_pass(_Clip, "BoundedTake")
