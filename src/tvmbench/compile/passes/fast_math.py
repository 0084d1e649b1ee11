"""FastMath: TVM's FastMathTransform (polynomial ``exp``, ``erf``, ``tanh`` that vectorise, where
LLVM calls libm per element), with a cheaper exponential and a softmax that multiplies by the
reciprocal of the row's sum.

TVM's ``fast_exp`` (Cephes' ``expf``) spends 18 vector instructions per element (znver4): both
clamps, ``floor(x log2e + 0.5)``, a degree-7 polynomial in eight steps, and a final ``max`` with
the input. ``exp_expr`` reduces the argument the same way (``x = n ln2 + r``, ``|r| <= ln2 / 2``)
with ``round`` (one instruction) and two multiply-adds, and evaluates a degree-5 polynomial fitted
for the least largest relative error on that interval (7.4e-8 in exact arithmetic; measured in
float32 against float64 over [-87, 88]: 2.0e-7 at worst, TVM's 3.1e-7 with multiply-adds and
4.1e-6 without): 15 vector instructions, 14 in a softmax, whose argument is never positive
(``x - max(x)``), so the upper clamp goes. Whisper-tiny's encoder computes 54 million per call.

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
# Off: TVM's ``fast_exp`` (for A/Bs).
CHEAP_EXP = True

# exp(r) ~ 1 + r (1 + r (c2 + r (c3 + r (c4 + r c5)))) on |r| <= ln 2 / 2: the coefficients that
# minimise the largest relative error (a linear programme over 4001 points; 7.4e-8).
EXP_POLY = (1.0, 0.49999043345451355, 0.16666939854621887, 0.04190804436802864, 0.008325664326548576)
# The lower clamp gives n = -127, whose 2^n has the bits of 0.0: e^x is 0 below about -87.7 (a
# masked score's probability is 0, as with TVM's fast_exp).
EXP_LOW = -88.0
EXP_HIGH = 88.3  # n = 127 at most
LN2_HI, LN2_LO = 0.693359375, -2.12194440e-4  # ln 2 = LN2_HI + LN2_LO; LN2_HI has 9 bits


def exp_expr(x: Any, nonpositive: bool = False) -> Any:
    """``exp(x)`` of a float32 expression as the expression (see the module's docstring); with
    ``nonpositive`` the caller promises ``x <= 0`` (a softmax's ``x - max``) and the upper clamp
    goes. Intermediate values are ``Let``-bound, so each is computed once."""
    from tvm import tirx

    f32 = lambda v: tirx.const(v, "float32")  # noqa: E731
    xv, cv, nv, rv = (tirx.Var(name, "float32") for name in ("x", "c", "n", "r"))
    p = f32(EXP_POLY[-1])
    for coef in reversed(EXP_POLY[:-1]):
        p = p * rv + f32(coef)
    scale = tirx.reinterpret("float32", tirx.shift_left(tirx.Cast("int32", nv) + tirx.const(127, "int32"),
                                                        tirx.const(23, "int32")))
    # r = c - n ln2 in two steps (Cody and Waite): n * LN2_HI is exact, so r does not lose n's
    # rounding error (5e-6 of the result at n = 127) where no multiply-add fuses the product.
    r = (cv - nv * f32(LN2_HI)) - nv * f32(LN2_LO)
    body = tirx.Let(rv, r, (p * rv + f32(1.0)) * scale)
    body = tirx.Let(nv, tirx.round(cv * f32(1.4426950408889634)), body)
    clamped = tirx.max(xv, f32(EXP_LOW))
    body = tirx.Let(cv, clamped if nonpositive else tirx.min(clamped, f32(EXP_HIGH)), body)
    return tirx.Let(xv, x, body)


def fast_exp(x: Any, nonpositive: bool = False) -> Any:
    """``topi.fast_exp`` with ``exp_expr`` (its block's name and tag kept)."""
    if not CHEAP_EXP or x.dtype != "float32":
        return topi.math.fast_exp(x)
    return te.compute(x.shape, lambda *i: exp_expr(x[i], nonpositive), name="T_fast_exp", tag=topi.tag.ELEMWISE)


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
    exp = fast_exp(delta, nonpositive=True)
    expsum = te.compute(rows, lambda *i: te.sum(exp[at(i, k2)], axis=k2), name="T_softmax_expsum")
    one = te.const(1.0, x.dtype)
    return te.compute(x.shape, lambda *i: exp[i] * (one / expsum[row(i)]), name="T_softmax_norm",
                      attrs={"axis": axis})


_FAST = {"relax.exp": fast_exp, "relax.erf": topi.fast_erf, "relax.tanh": topi.fast_tanh}


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
