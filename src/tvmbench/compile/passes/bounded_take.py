"""BoundedTake: ``take`` (embedding lookups, gathers) with ``mode="clip"`` instead of Relax's
default ``"fast"``.

With ``"fast"`` a token id outside the vocabulary reads out of bounds and can crash the process
(a user's model fed the wrong tokenizer's ids), and TVM logs a warning per gather while
compiling. Clipping costs a min/max per index.
"""

from __future__ import annotations

from typing import Any

from tvm import relax
from tvm.relax.expr_functor import PyExprMutator, mutator

from tvmbench.compile.ir import function_pass, op_name


@mutator
class _Clip(PyExprMutator):
    def visit_call_(self, call: Any) -> Any:
        call = super().visit_call_(call)
        if op_name(call) == "relax.take" and str(call.attrs.mode) == "fast":
            axis = call.attrs.axis
            return relax.op.take(call.args[0], call.args[1], None if axis is None else int(axis), mode="clip")
        return call


def bounded_take() -> Any:
    """The pass (see the module's docstring)."""
    return function_pass(_Clip, "BoundedTake")
