"""CPUFriendlyArithmetic: rewrites that make elementwise epilogues cheap on CPU.

* ``clip(x, lo, hi)`` (ReLU6, hardtanh) becomes ``minimum(maximum(x, lo), hi)``: ConvertLayout
  has no layout rule for clip in TVM 0.27, so every ReLU6 of an NHWC network became
  transpose -> clip -> transpose, three kernels where the convolution's epilogue could have
  done it; the binary ops follow the layout and fuse.
* ``x / d`` with a broadcast divisor (batch-norm's ``sqrt(var + eps)``, attention's scale)
  becomes ``x * (1 / d)``: a vector division costs several multiplies, and when ``d`` comes
  from the weights LiftTransformParams then computes ``1 / d`` once at load time.
* ``x ** 2`` and ``x ** 3`` with a constant exponent (GPT-2's tanh GELU) become products:
  ``pow`` is a libm call per element that LLVM does not vectorise, and TVM warns once per
  kernel that it is unsafe for negative ``x`` with an exponent of 3 or more.
* ``gelu`` becomes its elementwise formula, moved in front of a reshape that feeds it: as one
  opaque op after the dense layer's reshape it ran as its own kernel with a scalar ``erf``
  per element (FastMathTransform knows ``erf`` but not ``gelu``), 7 % of ViT's time; as
  multiplies, adds and a fast ``erf`` it joins the dense layer's write-back.
* ``sigmoid(x)`` (SiLU's and squeeze-and-excitation's) becomes ``1 / (1 + exp(-x))``: TVM
  lowers ``sigmoid`` to LLVM's ``exp``, a scalar libm call per element, and FastMathTransform
  only replaces Relax's ``exp`` with its vectorised polynomial. An EfficientNet block's 1x1 +
  SiLU + depthwise kernel ran 11x slower than the same block with ReLU6.
* ``op(reshape(y), b)`` (add, multiply, subtract) with ``b`` of the same shape becomes
  ``reshape(op(y, reshape(b)))``, and a reshape of a reshape one reshape (or none): a
  transformer's residual add then follows its dense layer directly and joins its write-back
  (only when ``y`` is computed, not a reshaped parameter such as a bias). So does a ``b`` that
  broadcasts over the dimensions the reshape split off ``y``'s first: the attention mask added
  to ``[heads, q, k]`` scores viewed as ``[1, heads, q, k]`` joins the scores' matmul instead of
  a pass over them of its own (bert-base at seq 512: 11.6 ms of 362).
* A transpose that only moves axes of length 1 becomes a reshape: ``nn.MultiheadAttention``
  swaps batch and tokens, at batch 1 a copy kernel before each attention and one between the
  output projection and its residual add, which then joins the projection's write-back.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from tvm import relax
from tvm.relax.expr_functor import PyExprMutator, mutator

from tvmbench.compile.ir import function_pass, numel, op_name, scalar_constant, static_shape

_FLOAT = ("float", "bfloat")
# 0 (for A/Bs): transposes of unit axes stay transposes.
UNIT_TRANSPOSES = 1


def gelu(x: Any, tanh: bool) -> Any:
    """``x * (0.5 + 0.5 * erf(x / sqrt(2)))``, or the tanh approximation, as Relax ops."""
    dtype = str(x.ty.dtype)

    def c(v: float) -> Any:
        return relax.const(v, dtype)

    if tanh:
        inner = relax.op.multiply(relax.op.add(x, relax.op.multiply(c(0.044715), relax.op.multiply(
            relax.op.multiply(x, x), x))), c(0.7978845608028654))
        curve = relax.op.tanh(inner)
    else:
        curve = relax.op.erf(relax.op.multiply(x, c(0.7071067811865476)))
    return relax.op.multiply(x, relax.op.add(c(0.5), relax.op.multiply(curve, c(0.5))))


@mutator
class _Rewrite(PyExprMutator):
    def visit_call_(self, call: Any) -> Any:
        call = super().visit_call_(call)
        rewrite = {
            "relax.clip": self.clip, "relax.nn.gelu": self.gelu, "relax.nn.gelu_tanh": self.gelu,
            "relax.reshape": self.reshape, "relax.add": self.before_reshape,
            "relax.multiply": self.before_reshape, "relax.subtract": self.before_reshape,
            "relax.power": self.power, "relax.divide": self.divide, "relax.sigmoid": self.sigmoid,
            "relax.permute_dims": self.permute,
        }.get(op_name(call) or "")
        new = rewrite(call) if rewrite is not None else None
        return call if new is None else new

    def bound_reshape(self, expr: Any) -> Any:
        """The ``reshape`` call ``expr`` is bound to, else None."""
        bound = self.lookup_binding(expr) if isinstance(expr, relax.Var) else None
        return bound if op_name(bound) == "relax.reshape" else None

    def clip(self, call: Any) -> Any:
        x, lo, hi = call.args
        dtype = x.ty.dtype
        low = relax.op.maximum(x, relax.const(float(lo.value), dtype))
        return relax.op.minimum(low, relax.const(float(hi.value), dtype))

    def gelu(self, call: Any) -> Any:
        x = call.args[0]
        reshaped = self.bound_reshape(x)
        y = gelu(reshaped.args[0] if reshaped is not None else x, call.op.name == "relax.nn.gelu_tanh")
        return relax.op.reshape(y, x.ty.shape) if reshaped is not None else y

    def reshape(self, call: Any) -> Any:
        """A reshape of a reshape (left by the GELU move): one reshape, or none at all."""
        bound = self.bound_reshape(call.args[0])
        if bound is None:
            return None
        source = bound.args[0]
        same = static_shape(source.ty) is not None and static_shape(source.ty) == static_shape(call.ty)
        return source if same else relax.op.reshape(source, call.args[1])

    def permute(self, call: Any) -> Any:
        """A transpose that moves only axes of length 1 (``[1, T, C] -> [T, 1, C]``): a reshape."""
        shape, out = static_shape(call.args[0].ty), static_shape(call.ty)
        if not UNIT_TRANSPOSES or shape is None or out is None:
            return None
        axes = list(range(len(shape)))[::-1] if call.attrs.axes is None else [int(a) for a in call.attrs.axes]
        moved = [a for a in axes if shape[a] != 1]
        if moved != sorted(moved):
            return None
        reshaped = relax.op.reshape(call.args[0], out)
        collapsed = self.reshape(reshaped)
        return reshaped if collapsed is None else collapsed

    def before_reshape(self, call: Any) -> Any:
        a, b = call.args
        for first, operand, other in ((True, a, b), (False, b, a)):
            bound = self.bound_reshape(operand)
            if bound is None:
                continue
            y = bound.args[0]
            shape, y_shape = static_shape(operand.ty), static_shape(y.ty)
            # Only a computed ``y`` (a dense layer's output): a reshaped parameter is a bias
            # (``[C] -> [1, C, 1, 1]``) added to a convolution's output, which at 1x1 pixels
            # (a squeeze-and-excitation block) has its shape too; rewritten, the add left
            # ConvertLayout's reach and the SE scale transposed the whole feature map twice.
            # (and only where the reshaped operand is as large as the result: one broadcast along
            # the other's axes, FT-Transformer's ``einsum("bf,fd->bfd")``, cannot be undone by a
            # reshape to its shape)
            if (shape is None or y_shape is None or not isinstance(y, relax.Var)
                    or self.lookup_binding(y) is None or static_shape(call.ty) != shape):
                continue
            other_shape = _reshaped_operand(static_shape(other.ty), shape, y_shape)
            if other_shape is None:
                continue
            other_y = relax.op.reshape(other, other_shape)
            args = (y, other_y) if first else (other_y, y)
            return relax.op.reshape(relax.Call(call.op, list(args), call.attrs), shape)
        return None

    def sigmoid(self, call: Any) -> Any:
        x = call.args[0]
        if not str(x.ty.dtype).startswith(_FLOAT):
            return None
        one = relax.const(1.0, str(x.ty.dtype))
        return relax.op.divide(one, relax.op.add(one, relax.op.exp(relax.op.negative(x))))

    def power(self, call: Any) -> Any:
        x, e = call.args
        exponent = scalar_constant(e)
        if exponent in (2.0, 3.0) and str(x.ty.dtype).startswith(_FLOAT):
            square = relax.op.multiply(x, x)
            return square if exponent == 2.0 else relax.op.multiply(square, x)
        return None

    def divide(self, call: Any) -> Any:
        x, d = call.args
        xs, ds = x.ty, d.ty
        if str(xs.dtype).startswith(_FLOAT) and numel(ds) is not None and numel(xs) is not None \
                and numel(ds) < numel(xs):
            return relax.op.multiply(x, relax.op.divide(relax.const(1.0, str(ds.dtype)), d))
        return None


def _reshaped_operand(other: list[int] | None, shape: list[int], y_shape: list[int]) -> list[int] | None:
    """The shape to give the other operand of ``op(reshape(y), other)`` so that
    ``op(y, reshape(other))`` computes the same: ``y``'s own shape when ``other`` has the
    reshape's shape; or, when the reshape only split ``y``'s first dimension (attention scores
    ``[heads, q, k]`` viewed as ``[1, heads, q, k]``) and ``other`` is 1 along the split dims (the
    attention mask, ``[1, 1, q, k]`` or ``[1, 1, 1, k]``), ``other`` without them. Else None."""
    if other == shape:
        return y_shape
    if other is None or len(other) > len(shape) or not y_shape:
        return None
    other = [1] * (len(shape) - len(other)) + other
    split = len(shape) - len(y_shape) + 1  # leading dims of ``shape`` that make y's first
    if split < 1 or shape[split:] != y_shape[1:] or int(np.prod(shape[:split])) != y_shape[0]:
        return None
    return [1, *other[split:]] if all(d == 1 for d in other[:split]) else None


def cpu_friendly_arithmetic() -> Any:
    """The pass (see the module's docstring)."""
    return function_pass(_Rewrite, "CPUFriendlyArithmetic")
