"""Bf16Dense: dense layers and convolutions read their input and weights as bf16 and accumulate
in fp32 (``--precision bf16``, on CPUs with AVX-512 BF16; ``compile/bf16.py`` says why and how).

It acts on a module :func:`mark` marked (``apply_precision``), in stage 1 just before
PackWeights: after batch norms are folded into the convolutions' fp32 weights and after
WinogradConv3x3 took the 3x3 convolutions it computes faster (their products round their
operands themselves: ``winograd.BF16_PRODUCT``). A ``matmul`` by a weight parameter (or a transpose
of one: what the importers give a dense layer) becomes ``matmul(astype(x, bf16), astype(w,
bf16), out_dtype=float32)``, an NHWC convolution over HWIO weights (not grouped) likewise. The weight's
``astype`` depends on weights only, so LiftTransformParams rounds the weights once at load time;
the input's is an elementwise step FuseOps joins to its producer where it can (a layer norm
writes its output in bf16 beside the fp32 one the residual reads). One ``astype`` serves every
dense layer reading the same input (a layer's query, key and value projections). Everything else
(attention's own products, norms, activations, depthwise and grouped convolutions) stays fp32.
A layer whose reduction (its input channels) is odd, or with fewer outputs than PackWeights
packs (``min_outputs``), stays fp32: the packed pairs need an even depth and whole vectors.
"""

from __future__ import annotations

from typing import Any

from tvm import relax
from tvm.relax.expr_functor import PyExprMutator, mutator

from tvmbench.compile.ir import builder_pass, from_weights, op_name, static_shape, weight_only, weight_params

ATTR = "tvmbench_precision"
# An input is cast before the reshapes leading to it (``round_input``; 0: after them).
CAST_BEFORE_RESHAPES = 1


def mark(mod: Any) -> Any:
    """``mod`` marked for this pass (the mark is part of the compile cache's key)."""
    return mod.with_attr(ATTR, "bf16")


def marked(mod: Any) -> bool:
    return bool(mod.attrs) and ATTR in mod.attrs and str(mod.attrs[ATTR]) == "bf16"


@mutator
class _Bf16Dense(PyExprMutator):
    def __init__(self, mod: Any, min_outputs: int) -> None:
        super().__init__(mod)
        self.min_outputs = min_outputs
        self.weights: set[Any] = set()
        self.rounded: dict[Any, Any] = {}  # input -> its bf16 copy

    def visit_call_(self, call: Any) -> Any:
        call = super().visit_call_(call)
        name = op_name(call)
        if name not in ("relax.matmul", "relax.nn.conv2d") or len(call.args) != 2:
            return call
        x, w = call.args
        shape, x_shape = static_shape(w.ty), static_shape(x.ty)
        if shape is None or x_shape is None or str(x.ty.dtype) != "float32" or str(w.ty.dtype) != "float32":
            return call
        # (a dense layer's weight as PackWeights packs it; a convolution's may be computed from
        # weights: batch norms folded in)
        if not (from_weights(self, w, self.weights) if name == "relax.matmul"
                else weight_only(w, self.lookup_binding, self.weights)):
            return call
        if name == "relax.matmul":
            depth, outputs = (shape[0], shape[1]) if len(shape) == 2 and len(x_shape) >= 2 else (1, 0)
        else:
            a = call.attrs
            if (a.data_layout != "NHWC" or a.kernel_layout != "HWIO" or a.out_layout != "NHWC" or int(a.groups) != 1
                    or len(shape) != 4):
                return call
            depth, outputs = shape[2], shape[3]
        if depth % 2 or outputs < self.min_outputs:
            return call
        xb = self.round_input(x)
        wb = self.builder_.emit(relax.op.astype(w, "bfloat16"))
        if name == "relax.matmul":
            return relax.op.matmul(xb, wb, out_dtype="float32")
        a = call.attrs
        return relax.op.nn.conv2d(xb, wb, a.strides, a.padding, a.dilation, 1, "NHWC", "HWIO", "NHWC",
                                  "float32")


    def round_input(self, x: Any) -> Any:
        """``x`` in bf16, cast before the reshapes that lead to it (CAST_BEFORE_RESHAPES): the
        cast then follows the value's producer and joins its kernel's epilogue (T5's feed-forward
        ReLU, moved into its dense layer by ElementwiseBeforeReshape, was followed by two reshapes
        and a cast in a kernel of its own), and one cast serves every reshape of it."""
        if x in self.rounded:
            return self.rounded[x]
        reshapes, source = [], x
        while CAST_BEFORE_RESHAPES and isinstance(source, relax.Var):
            bound = self.lookup_binding(source)
            if op_name(bound) != "relax.reshape":
                break
            reshapes.append(bound)
            source = bound.args[0]
        if source not in self.rounded:
            self.rounded[source] = self.builder_.emit(relax.op.astype(source, "bfloat16"))
        out = self.rounded[source]
        for reshape in reversed(reshapes):
            out = self.builder_.emit(relax.op.reshape(out, reshape.args[1]))
        self.rounded[x] = out
        return out


def bf16_dense(min_outputs: int) -> Any:
    """The pass (see the module's docstring); a module not :func:`mark` ed passes unchanged.
    ``min_outputs``: the fewest output channels PackWeights packs (two of its blocks)."""
    import tvm

    def set_weights(mutator_: Any, func: Any) -> None:
        mutator_.weights, mutator_.rounded = weight_params(func), {}

    rewrite = builder_pass(lambda mod: _Bf16Dense(mod, min_outputs), "Bf16Dense", before=set_weights)

    @tvm.ir.transform.module_pass(opt_level=0, name="Bf16DenseIfMarked")
    def pass_(mod: Any, ctx: Any) -> Any:
        return rewrite(mod) if marked(mod) else mod

    return pass_
