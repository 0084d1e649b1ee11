"""FoldConstantsNumpy: Relax operators whose operands are all constants, evaluated with NumPy
before LegalizeOps.

A batch norm that cannot be folded into a convolution (DenseNet's pre-activation norms, each over
a different concatenation width) leaves ``expand_dims(mean)``, ``sqrt(var + eps)``, ``1 / ...`` on
constants in the graph. TVM's FoldConstant evaluates those after legalization by compiling each
distinct TIR function with LLVM and running it: about 0.1 s per function, and DenseNet-201 has
hundreds of channel widths, so FoldConstant took 57 of its 112 s of compile time. The same
arithmetic in NumPy takes microseconds. Operators outside the table below are left to
FoldConstant, as before.
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
_FOLDABLE = {*_UNARY, *_BINARY, *_RESHAPING, "relax.permute_dims", "relax.astype"}


@mutator
class _Fold(PyExprMutator):
    def visit_call_(self, call: Any) -> Any:
        call = super().visit_call_(call)
        name = op_name(call)
        shape = static_shape(getattr(call, "ty", None)) if name in _FOLDABLE else None
        if shape is None or int(np.prod(shape)) > MAX_ELEMENTS:
            return call
        args = [self.constant(a) for a in call.args[: 2 if name in _BINARY else 1]]
        if any(a is None for a in args):
            return call
        value = self.evaluate(name, call, args, shape)
        return call if value is None else relax.const(value.astype(str(call.ty.dtype)), str(call.ty.dtype))

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
        if floating and name in _UNARY:
            return _UNARY[name](args[0])
        if floating and name in _BINARY:
            return np.broadcast_to(_BINARY[name](args[0], args[1]), shape)
        return None


def fold_constants_numpy() -> Any:
    """The pass (see the module's docstring)."""
    return function_pass(_Fold, "FoldConstantsNumpy")
