"""ConvertLayoutGuards: forms TVM 0.27's ConvertLayout crashes on, rewritten to equal ones it takes.

- ``squeeze`` with a negative axis: ConvertLayout died with ``std::bad_alloc`` on a module holding
  ``squeeze(x, axis=[-2])``, whatever layouts it is asked for and whether or not a convolution
  precedes it (found by bisecting torchvision's ViT down to one squeeze). torch.export writes such
  a squeeze for every ``nn.MultiheadAttention`` with packed in-projections, so torchvision's
  ``vit_b_16`` (and any user model built on that module) failed to compile: the worker reported an
  out-of-memory at its 31.8 GiB limit right after the import. 28 other operators with negative
  axes (expand_dims, take, concat, split, softmax, reductions, strided_slice, cumsum, flip, repeat,
  ...) after a convolution compiled and computed the same before and after ConvertLayout.
- ``permute_dims`` with a negative axis (``x.permute(0, -1, 1, -2)``) failed with "Invalid
  layout A@B?" in any model, convolution or not.
- ``stack`` failed its layout inference ("Index -1 out of bounds", "Invalid SLayout") in any
  model: TVM's ONNX importer writes one for every ``Max``, ``Min``, ``Sum`` or ``Mean`` of several
  inputs, so an ONNX file with an elementwise ``Max`` of two tensors did not compile. It becomes
  the ``concat`` of the inputs each with the new axis inserted.

All are axes counted from the front, or the same values by another operator.
"""

from __future__ import annotations

from typing import Any

from tvm import relax
from tvm.relax.expr_functor import PyExprMutator, mutator

from tvmbench.compile.ir import function_pass, op_name


@mutator
class _Guards(PyExprMutator):
    def visit_call_(self, call: Any) -> Any:
        call = super().visit_call_(call)
        name = op_name(call)
        if name == "relax.stack" and isinstance(call.args[0], relax.Tuple):
            axis = int(call.attrs.axis) if call.attrs.axis is not None else 0
            rank = len(call.ty.shape)
            axis %= rank
            return relax.op.concat([relax.op.expand_dims(x, [axis]) for x in call.args[0].fields], axis)
        if name not in ("relax.squeeze", "relax.permute_dims"):
            return call
        axes = call.attrs.axis if name == "relax.squeeze" else call.attrs.axes
        if axes is None or all(int(a) >= 0 for a in axes):
            return call
        rank = len(call.args[0].ty.shape)
        op = relax.op.squeeze if name == "relax.squeeze" else relax.op.permute_dims
        return op(call.args[0], [int(a) % rank for a in axes])


def convert_layout_guards() -> Any:
    """The pass (see the module's docstring); before ConvertLayout."""
    return function_pass(_Guards, "ConvertLayoutGuards")
