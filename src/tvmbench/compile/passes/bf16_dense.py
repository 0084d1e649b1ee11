"""Bf16Dense: dense layers read their input and weights as bf16 and accumulate in fp32
(``--precision bf16``, on CPUs with AVX-512 BF16; ``compile/bf16.py`` says why and how).

A ``matmul`` by a weight parameter (or a transpose of one: what the importers give a dense
layer) becomes ``matmul(astype(x, bf16), astype(w, bf16), out_dtype=float32)``. The weight's
``astype`` depends on weights only, so LiftTransformParams rounds the weights once at load time;
the input's is an elementwise step FuseOps joins to its producer where it can (a layer norm
writes its output in bf16 beside the fp32 one the residual reads). One ``astype`` serves every
dense layer reading the same input (a layer's query, key and value projections). Everything else
(attention's own products, norms, activations, convolutions) stays fp32. A layer whose
reduction is odd, or narrower than two vectors of outputs, stays fp32: the packed pairs need an
even depth and whole vectors.
"""

from __future__ import annotations

from typing import Any

from tvm import relax
from tvm.relax.expr_functor import PyExprMutator, mutator

from tvmbench.compile.ir import builder_pass, from_weights, op_name, static_shape, weight_params

MIN_OUTPUTS = 32  # two vectors of 16 lanes


@mutator
class _Bf16Dense(PyExprMutator):
    def __init__(self, mod: Any) -> None:
        super().__init__(mod)
        self.weights: set[Any] = set()
        self.rounded: dict[Any, Any] = {}  # input -> its bf16 copy

    def visit_call_(self, call: Any) -> Any:
        call = super().visit_call_(call)
        if op_name(call) != "relax.matmul":
            return call
        x, w = call.args
        shape, x_shape = static_shape(w.ty), static_shape(x.ty)
        if (shape is None or x_shape is None or len(shape) != 2 or len(x_shape) < 2 or str(x.ty.dtype) != "float32"
                or str(w.ty.dtype) != "float32" or shape[0] % 2 or shape[1] < MIN_OUTPUTS
                or not from_weights(self, w, self.weights)):
            return call
        if x not in self.rounded:
            self.rounded[x] = self.builder_.emit(relax.op.astype(x, "bfloat16"))
        wb = self.builder_.emit(relax.op.astype(w, "bfloat16"))
        return relax.op.matmul(self.rounded[x], wb, out_dtype="float32")


def bf16_dense() -> Any:
    """The pass (see the module's docstring)."""

    def set_weights(mutator_: Any, func: Any) -> None:
        mutator_.weights, mutator_.rounded = weight_params(func), {}

    return builder_pass(_Bf16Dense, "Bf16Dense", before=set_weights)
