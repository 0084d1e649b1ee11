"""UnbroadcastMatmul: a matmul operand's ``broadcast_to`` dropped where the matmul broadcasts anyway.

PyTorch decomposes ``linear`` on a 3-D input that is not contiguous (BERT's attention output,
after the heads are permuted back) into ``bmm(expand(x), expand(W.T))``, which torch.export gives
TVM as ``matmul(broadcast_to(x, [B, M, K]), broadcast_to(W.T, [B, K, N]))``. The weight's
broadcast depends on weights only, so LiftTransformParams computed it once at load time, and the
model then carried B copies of every such weight (bert-base at batch 8: 12 x 18.9 MB) and read a
different copy for each batch element: the attention output dense layers ran at 160 GFLOP/s
against 300-330 for the other dense layers of the same model (``tvmbench profile``), and no
weight packing applied to them. Relax's matmul broadcasts the batch dimensions itself, so the
operand is used as it was before the broadcast: a 2-D weight that PackWeights lays out per
register tile, read once for all the rows of the batch. The rewrite is kept only when the
matmul's output shape is unchanged.
"""

from __future__ import annotations

from typing import Any

from tvm import relax
from tvm.relax.expr_functor import PyExprMutator, mutator

from tvmbench.compile.ir import function_pass, op_name, static_shape

# ... and where the operand left is a 3-D input against a 2-D weight, the matmul runs over its rows
# flattened (``[B * M, K]``, reshaped back after; 0: a 3-D matmul), as the other dense layers of
# such a model come from the importer: the Contraction rule blocks the rows and the reduction of a
# 2-D one to the L2 (``row_block``, ``reduction_block``) and not a 3-D one's, whose 8 images at
# batch 8 each streamed bert-base's 1.2 MB of bf16 weights (68 % of the bf16 peak against 85 %).
FLATTEN_ROWS = 1


@mutator
class _Unbroadcast(PyExprMutator):
    def visit_call_(self, call: Any) -> Any:
        call = super().visit_call_(call)
        if op_name(call) != "relax.matmul":
            return call
        args = [self._source(a) for a in call.args]
        if all(new.same_as(old) for new, old in zip(args, call.args, strict=True)):
            return call
        rewritten = relax.op.matmul(args[0], args[1], out_dtype=call.attrs.out_dtype)
        try:
            shape = static_shape(self.builder_.normalize(rewritten).ty)
        except Exception:  # operands the matmul cannot broadcast together
            return call
        if shape is None or shape != static_shape(call.ty):
            return call
        x_shape, w_shape = static_shape(args[0].ty), static_shape(args[1].ty)
        if not FLATTEN_ROWS or x_shape is None or w_shape is None or len(x_shape) < 3 or len(w_shape) != 2:
            return rewritten
        rows = self.builder_.emit(relax.op.reshape(args[0], [-1, x_shape[-1]]))
        flat = self.builder_.emit(relax.op.matmul(rows, args[1], out_dtype=call.attrs.out_dtype))
        return relax.op.reshape(flat, shape)

    def _source(self, arg: Any) -> Any:
        """What a ``broadcast_to`` operand broadcast, when that only added or repeated leading
        (batch) dimensions: the two matrix dimensions are the same."""
        value = self.lookup_binding(arg) if isinstance(arg, relax.Var) else None
        if op_name(value) != "relax.broadcast_to":
            return arg
        before, after = static_shape(value.args[0].ty), static_shape(arg.ty)
        if before is None or after is None or len(before) < 2 or before[-2:] != after[-2:]:
            return arg
        return value.args[0]


def unbroadcast_matmul() -> Any:
    """The pass (see the module's docstring). The broadcasts left without a use are removed, so
    LiftTransformParams does not compute them."""
    return function_pass(_Unbroadcast, "UnbroadcastMatmul", prune=True)
