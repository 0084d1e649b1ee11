"""FastMath: TVM's FastMathTransform (polynomial ``exp``, ``erf``, ``tanh`` that vectorise, where
LLVM calls libm per element), with a softmax that multiplies by the reciprocal of the row's sum.

TVM's ``fast_softmax`` divides every probability by the row's sum. Without fast-math flags LLVM
keeps the division, and a vector division costs several times a multiplication: in Whisper's
joined attention (1500 keys per query row) the normalising loop was a ``vdivps`` per 16 scores.
Here the division is by the sum's reciprocal, computed once per row (loop-invariant, so LLVM
hoists it), the probabilities then within an ulp of the quotient. The blocks and their names
stay those of ``topi.nn.fast_softmax``, which the schedule rules recognise.
"""

from __future__ import annotations

from typing import Any

from tvm import te, topi

from tvmbench.compile.ir import builder_pass

# Off: TVM's FastMathTransform as it is (for A/Bs: ``benchmarks/rule_ab.py``).
RECIPROCAL_SOFTMAX = True


def fast_softmax(x: Any, axis: int) -> Any:
    """``topi.nn.fast_softmax`` with the normalisation a multiplication by 1 / sum."""
    axis = axis + len(x.shape) if axis < 0 else axis
    k1, k2 = te.reduce_axis((0, x.shape[axis]), "k"), te.reduce_axis((0, x.shape[axis]), "k")
    rows = tuple(d for i, d in enumerate(x.shape) if i != axis)

    def at(indices: tuple[Any, ...], k: Any) -> tuple[Any, ...]:
        return (*indices[:axis], k, *indices[axis:])

    def row(indices: tuple[Any, ...]) -> tuple[Any, ...]:
        return tuple(v for i, v in enumerate(indices) if i != axis)

    max_elem = te.compute(rows, lambda *i: te.max(x[at(i, k1)], axis=k1), name="T_softmax_maxelem")
    delta = te.compute(x.shape, lambda *i: x[i] - max_elem[row(i)], name="T_softmax_delta")
    exp = topi.math.fast_exp(delta)
    expsum = te.compute(rows, lambda *i: te.sum(exp[at(i, k2)], axis=k2), name="T_softmax_expsum")
    one = te.const(1.0, x.dtype)
    return te.compute(x.shape, lambda *i: exp[i] * (one / expsum[row(i)]), name="T_softmax_norm",
                      attrs={"axis": axis})


_FAST = {"relax.exp": topi.fast_exp, "relax.erf": topi.fast_erf, "relax.tanh": topi.fast_tanh}


def _replaced(builder: Any, call: Any) -> Any | None:
    """The fast form of one call, or None when it has none."""
    name = getattr(call.op, "name", None)
    if name == "relax.nn.softmax":
        return builder.call_te(fast_softmax if RECIPROCAL_SOFTMAX else topi.nn.fast_softmax, call.args[0],
                               int(call.attrs.axis))
    return builder.call_te(_FAST[name], call.args[0]) if name in _FAST else None


def fast_math() -> Any:
    """The pass (see the module's docstring); on CPU, before LegalizeOps."""
    from tvm.relax.expr_functor import PyExprMutator, mutator

    @mutator
    class FastMath(PyExprMutator):
        def visit_call_(self, call: Any) -> Any:
            call = super().visit_call_(call)
            replaced = _replaced(self.builder_, call)
            return call if replaced is None else replaced

    return builder_pass(FastMath, "FastMath")
