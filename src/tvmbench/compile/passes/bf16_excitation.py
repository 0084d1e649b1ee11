"""Bf16Excitation: a squeeze-excitation's feature map stored in bf16 (``--precision bf16``).

A squeeze-excitation block reads its feature map ``x`` twice: its mean over the map (the squeeze)
and the product ``s * x`` by the excitation ``s`` (one value per image and channel), which
Bf16Dense rounds to bf16 for the next convolution. Both readers read fp32, so the kernel that
computes ``x`` (EfficientNet's joined expansion and depthwise window, RegNetY's grouped
convolution) wrote it in fp32: at batch 8 efficientnet_b0's [8, 56, 56, 144] maps are 14.5 MB,
written once and read twice, where OpenVINO stores them in bf16 (its Mul layers took half the
time of TVM's excitation kernels in `tvmbench explain --precision bf16`). Here ``x`` is rounded
to bf16 where it is computed (the cast before the reshapes that lead to it, so it joins the
producer's kernel), the mean sums the widened values in fp32, and the product widens them too,
rounded to bf16 as before: ``bf16(s * float(bf16(x)))`` for ``bf16(s * x)``, one more rounding of
``x`` (as OpenVINO rounds every activation).

A map, as this pass finds it: a 4-d fp32 value whose only users are one ``mean`` over its rows
and columns (NHWC, keeping them) and one ``multiply`` by a value of that mean's shape whose only
user is its cast to bf16. Applied by Bf16Dense's pass after its own rewrites (ENABLED; 0: off).
"""

from __future__ import annotations

from typing import Any

from tvm import relax
from tvm.relax.expr_functor import PyExprMutator, mutator

from tvmbench.compile.ir import (
    bindings,
    builder_pass,
    cast_before_reshapes,
    op_name,
    static_shape,
    use_counts,
    users_of,
)

ENABLED = 1


def excitation_maps(func: Any) -> dict[Any, tuple[Any, Any, Any, Any]]:
    """For each map (module docstring): the map -> (the mean's variable, the product's, the cast's,
    the excitation)."""
    bound = {b.var: b.value for b in bindings(func) if isinstance(b, relax.VarBinding)}
    users, uses = users_of(bound), use_counts(func)
    found = {}
    for x, readers in users.items():
        shape = static_shape(x.ty)
        if shape is None or len(shape) != 4 or str(x.ty.dtype) != "float32" or uses.get(x) != 2 or len(readers) != 2:
            continue
        means = [r for r in readers if _squeeze(bound[r])]
        products = [r for r in readers if op_name(bound[r]) == "relax.multiply"]
        if len(means) != 1 or len(products) != 1:
            continue
        product = bound[products[0]]
        scale = product.args[1] if product.args[0].same_as(x) else product.args[0]
        casts = users.get(products[0], [])
        if (static_shape(scale.ty) != static_shape(means[0].ty) or str(scale.ty.dtype) != "float32"
                or uses.get(products[0]) != 1 or len(casts) != 1 or op_name(bound[casts[0]]) != "relax.astype"
                or str(bound[casts[0]].attrs.dtype) != "bfloat16"):
            continue
        found[x] = (means[0], products[0], casts[0], scale)
    return found


def _squeeze(value: Any) -> bool:
    """Whether ``value`` is the mean of an NHWC map over its rows and columns, keeping them."""
    return (op_name(value) == "relax.mean" and bool(value.attrs.keepdims)
            and sorted(int(a) for a in value.attrs.axis) == [1, 2])


@mutator
class _Bf16Excitation(PyExprMutator):
    def __init__(self, mod: Any) -> None:
        super().__init__(mod)
        self.means: dict[Any, Any] = {}  # the mean's variable -> its map
        self.casts: dict[Any, tuple[Any, Any]] = {}  # the cast's variable -> (its map, the excitation)
        self.products: set[Any] = set()  # the products in fp32, which no one reads once the casts read the copy
        self.rounded: dict[Any, Any] = {}  # a map -> its bf16 copy

    def _rounded(self, x: Any) -> Any:
        if x not in self.rounded:
            self.rounded[x] = cast_before_reshapes(
                self, self.visit_expr(x), lambda source: self.builder_.emit(relax.op.astype(source, "bfloat16")))
        return self.rounded[x]

    def visit_var_binding_(self, binding: Any) -> None:
        var = binding.var
        if var in self.products:
            return None
        if var in self.means:
            value = self.builder_.call_te(_widened_mean, self._rounded(self.means[var]), primfunc_name_hint="mean")
        elif var in self.casts:
            x, scale = self.casts[var]
            value = self.builder_.call_te(_scaled, self.visit_expr(scale), self._rounded(x),
                                          primfunc_name_hint="multiply")
        else:
            return super().visit_var_binding_(binding)
        self.set_var_remap(var, self.builder_.emit(value, name_hint=var.name))
        return None


def _widened_mean(xb: Any) -> Any:
    """The mean of bf16 ``xb`` [N, H, W, C] over H and W, in fp32 ([N, 1, 1, C]), each value widened
    in the kernel."""
    from tvm import te, topi

    n, h, w, c = (int(d) for d in xb.shape)
    wide = te.compute(xb.shape, lambda *i: xb(*i).astype("float32"), name="widen")
    total = topi.sum(wide, axis=[1, 2], keepdims=True)
    return te.compute((n, 1, 1, c), lambda *i: total(*i) / float(h * w), name="mean")


def _scaled(scale: Any, xb: Any) -> Any:
    """``bf16(scale * float(xb))``: the excitation ``scale`` [N, 1, 1, C] times the bf16 map."""
    from tvm import te

    return te.compute(xb.shape, lambda n, i, j, c: (scale[n, 0, 0, c] * xb[n, i, j, c].astype("float32")).astype(
        "bfloat16"), name="scaled")


def bf16_excitation() -> Any:
    """The pass (module docstring); applied by Bf16Dense's pass to a marked module."""

    def find(mutator_: Any, func: Any) -> None:
        maps = excitation_maps(func) if ENABLED else {}
        mutator_.means = {mean: x for x, (mean, _, _, _) in maps.items()}
        mutator_.products = {product for _, product, _, _ in maps.values()}
        mutator_.casts = {cast: (x, scale) for x, (_, _, cast, scale) in maps.items()}
        mutator_.rounded = {}

    return builder_pass(_Bf16Excitation, "Bf16Excitation", before=find)
