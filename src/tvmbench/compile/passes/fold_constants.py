"""FoldConstantsNumpy: Relax operators whose operands are all constants, evaluated with NumPy
before LegalizeOps.

A batch norm that cannot be folded into a convolution (DenseNet's pre-activation norms, each over
a different concatenation width) leaves ``expand_dims(mean)``, ``sqrt(var + eps)``, ``1 / ...`` on
constants in the graph. TVM's FoldConstant evaluates those after legalization by compiling each
distinct TIR function with LLVM and running it: about 0.1 s per function, and DenseNet-201 has
hundreds of channel widths, so FoldConstant took 57 of its 112 s of compile time. The same
arithmetic in NumPy takes microseconds. Operators outside the table below are left to
FoldConstant, as before.

TVM's FoldConstant never folds a tensor made from nothing (``full``, ``zeros``): a constant built
by filling and editing stays a chain of kernels that runs on every call. torchvision's Swin
models build their shifted windows' attention mask that way (``new_zeros`` then slice
assignments, per block); FuseAttention then joined the mask's window partition (reshapes with
divisions and modulos) into each attention kernel, once per head: Swin3D-T's shifted-window
attention ran at a third of the peak. Fills, the slicing that edits them, and comparisons and
selections of constants are folded here (Swin3D-T 1.21x faster end to end); a fill up to
``MAX_FILL`` elements only, since a fill a run-time operator consumes is a constant in the library.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import tvm
from tvm import relax
from tvm.relax.expr_functor import PyExprMutator, mutator

from tvmbench.compile.ir import function_pass, op_name, static_shape

# A constant larger than this is left to FoldConstant (and is rare: weights are parameters).
MAX_ELEMENTS = 1 << 24

_UNARY = {"relax.sqrt": np.sqrt, "relax.rsqrt": lambda x: 1 / np.sqrt(x), "relax.negative": np.negative,
          "relax.exp": np.exp}
_BINARY = {"relax.add": np.add, "relax.subtract": np.subtract, "relax.multiply": np.multiply,
           "relax.divide": np.divide, "relax.power": np.power, "relax.maximum": np.maximum,
           "relax.minimum": np.minimum}
# Operators that only rearrange elements into the output's (static) shape.
_RESHAPING = {"relax.expand_dims", "relax.reshape", "relax.squeeze", "relax.broadcast_to"}
_COMPARE = {"relax.equal": np.equal, "relax.not_equal": np.not_equal, "relax.less": np.less,
            "relax.less_equal": np.less_equal, "relax.greater": np.greater,
            "relax.greater_equal": np.greater_equal}
# Tensors made from nothing but a shape and a fill value, and the slicing that edits them.
_FILLS = {"relax.full", "relax.zeros", "relax.ones"}
_SLICING = {"relax.strided_slice", "relax.slice_scatter"}
_EDITS = {*_FILLS, *_SLICING, *_COMPARE, "relax.where"}
_FOLDABLE = {*_UNARY, *_BINARY, *_RESHAPING, *_EDITS, "relax.permute_dims", "relax.astype"}
MAX_FILL = 1 << 20
# Off: fills, slices, comparisons and selections are left to TVM, as before (for A/B runs).
FOLD_FILLS = True


@mutator
class _Fold(PyExprMutator):
    def visit_call_(self, call: Any) -> Any:
        call = super().visit_call_(call)
        name = op_name(call)
        shape = static_shape(getattr(call, "ty", None)) if name in _FOLDABLE else None
        if shape is None or int(np.prod(shape)) > MAX_ELEMENTS:
            return call
        if name in _EDITS and not FOLD_FILLS or name in _FILLS and int(np.prod(shape)) > MAX_FILL:
            return call
        args = [self.constant(a) for a in call.args if _is_tensor(a)]
        if any(a is None for a in args):
            return call
        value = self.evaluate(name, call, args, shape)
        if value is None or list(value.shape) != shape:
            return call
        return relax.const(value.astype(str(call.ty.dtype)), str(call.ty.dtype))

    def constant(self, expr: Any) -> np.ndarray | None:
        """The value of a constant, or of a variable bound to one, else None."""
        if isinstance(expr, relax.Var):
            expr = self.lookup_binding(expr)
        return expr.value.numpy() if isinstance(expr, tvm.ir.expr.Constant) else None

    def evaluate(self, name: str, call: Any, args: list[np.ndarray], shape: list[int]) -> np.ndarray | None:
        floating = str(call.ty.dtype).startswith(("float", "bfloat"))
        if name in _RESHAPING:
            return np.broadcast_to(args[0], shape) if name == "relax.broadcast_to" else args[0].reshape(shape)
        if name == "relax.permute_dims":
            axes = call.attrs.axes
            return np.transpose(args[0], None if axes is None else [int(a) for a in axes])
        if name == "relax.astype":
            return args[0]
        if name in _EDITS:
            return _edit(name, call, args, shape)
        if floating and name in _UNARY:
            return _UNARY[name](args[0])
        if floating and name in _BINARY:
            return np.broadcast_to(_BINARY[name](args[0], args[1]), shape)
        return None


def _is_tensor(expr: Any) -> bool:
    return isinstance(getattr(expr, "ty", None), relax.TensorType)


def _edit(name: str, call: Any, args: list[np.ndarray], shape: list[int]) -> np.ndarray | None:
    """Fills, slices, comparisons and selections; None where the form is not one handled here."""
    if name in _FILLS:
        fill = args[0] if name == "relax.full" else (0 if name == "relax.zeros" else 1)
        return np.full(shape, fill)
    if name in _COMPARE:
        return np.broadcast_to(_COMPARE[name](args[0], args[1]), shape)
    if name == "relax.where":
        return np.broadcast_to(np.where(*args), shape)
    if name == "relax.slice_scatter":
        start, end, step = (int(a.value) for a in call.args[2:5])
        index = [slice(None)] * args[0].ndim
        index[int(call.attrs.axis)] = slice(start, end, step)
        out = args[0].copy()
        out[tuple(index)] = args[1]
        return out
    axes, begin, end, *strides = ([int(p.value) for p in t.fields] for t in call.args[1:])
    index = [slice(None)] * args[0].ndim
    for i, axis in enumerate(axes):  # NumPy clamps out-of-range bounds as TVM does; the shape is checked
        index[axis] = slice(begin[i], end[i], strides[0][i] if strides else 1)
    return args[0][tuple(index)]


def fold_constants_numpy() -> Any:
    """The pass (see the module's docstring)."""
    return function_pass(_Fold, "FoldConstantsNumpy")
