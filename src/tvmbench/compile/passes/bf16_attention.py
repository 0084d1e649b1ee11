"""Bf16Attention: an attention's two products read bf16 operands and accumulate in fp32
(``--precision bf16``, on CPUs whose AVX-512 BF16 dot product runs at their FMAs' rate).

Bf16Dense leaves every product of two computed tensors in fp32, so a bf16 build computed its
attentions as the fp32 build does: ViT-B/16 at batch 8 spent 37.7 ms in its joined attentions
against OpenVINO's 20.0 ms in bf16 (session 98, `tvmbench explain`), which rounds them as it rounds
every matmul. Here ``softmax(q @ k) @ v`` becomes ``softmax(bf16(q) @ bf16(k)) @ bf16(v)`` with
the probabilities rounded too (``matmul(.., out_dtype=float32)``, fp32 sums): the softmax itself
stays fp32. The casts join the kernels that write q, k and v (their heads' transposes), which
then write half the bytes; FuseAttention joins the attention and PackKeys lays k out in panels as
before, and the Attention rule computes both products with the dot product over pairs of rows of
k and v interleaved in registers (``bf16.DOT_16x2_ROWS``).

An attention, as this pass finds it in stage 1: a ``matmul`` of two computed tensors whose first
operand comes, through operators that are not matmuls and a softmax among them, from exactly one
other ``matmul`` of two computed tensors. Both products' reductions (the head dimension, the keys)
must be even (pairs), the keys whole vectors and the scores and probabilities used on the way
alone (FuseAttention's conditions, or the attention would stay unjoined). Not on CPUs with AMX tiles: there the dot product issues at half the FMAs' rate
(``bf16.slower_than_fp32``), and the fp32 attention is as fast.
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
    weight_only,
    weight_params,
)

# Off (0): attentions stay fp32 in bf16 builds (for A/Bs: ``benchmarks/rule_ab.py``).
ENABLED = 1


def _first_product(p: Any, bound: dict[Any, Any]) -> tuple[Any, set[Any]] | None:
    """(the one ``matmul`` that ``p``, the second product's first operand, comes from through
    other operators with a softmax among them, the variables on the way, those of the mask's
    computation included), else None."""
    stack, seen, products, softmax = [p], set(), set(), False
    while stack:
        var = stack.pop()
        if var in seen or var not in bound:
            continue
        seen.add(var)
        value = bound[var]
        name = op_name(value)
        if name == "relax.matmul":
            products.add(var)
            continue
        softmax = softmax or name == "relax.nn.softmax"
        stack.extend(a for a in getattr(value, "args", []) if isinstance(a, relax.Var))
    return (next(iter(products)), seen) if softmax and len(products) == 1 else None


def _only_used_inside(first: Any, seen: set[Any], last: Any, bound: dict[Any, Any], uses: dict[Any, int]) -> bool:
    """Whether every value the first product's result flows into on the way to the second (``last``)
    is used on the way alone, as FuseAttention requires to join them: where the scores or the
    probabilities are an output too, the products stay apart, and bf16 operands would reach a
    product no rule tiles with the dot product."""
    order = {var: i for i, var in enumerate(bound)}
    chain = {first}
    for var in sorted(seen - {first}, key=order.__getitem__):
        if any(a in chain for a in getattr(bound[var], "args", [])):
            chain.add(var)
    users = users_of(bound)
    return all(uses.get(var, 0) == len(users.get(var, [])) and all(u in chain or u is last for u in users.get(var, []))
               for var in chain)


def attentions(func: Any, lanes: int) -> dict[Any, Any]:
    """The variables of the attentions' products (both of each) in ``func``, each to its call."""
    bound = {b.var: b.value for b in bindings(func) if isinstance(b, relax.VarBinding)}
    weights, uses = weight_params(func), use_counts(func)

    def computed(x: Any) -> bool:
        return x in bound and str(x.ty.dtype) == "float32" and not weight_only(x, bound.get, weights)

    found: dict[Any, Any] = {}
    for var, value in bound.items():
        if op_name(value) != "relax.matmul" or not all(computed(a) for a in value.args):
            continue
        first_found = _first_product(value.args[0], bound)
        if first_found is None:
            continue
        first, seen = first_found
        if not all(computed(a) for a in bound[first].args) or not _only_used_inside(first, seen, var, bound, uses):
            continue
        depth, keys = (static_shape(bound[first].args[0].ty) or [1])[-1], (static_shape(value.args[0].ty) or [1])[-1]
        if depth % 2 == 0 and keys % 2 == 0 and keys % lanes == 0:
            found[first], found[var] = bound[first], value
    return found


@mutator
class _Bf16Attention(PyExprMutator):
    def __init__(self, mod: Any) -> None:
        super().__init__(mod)
        self.products: dict[Any, Any] = {}

    def visit_var_binding_(self, binding: Any) -> None:
        if binding.var not in self.products:
            return super().visit_var_binding_(binding)
        # (cast before the reshapes leading to each operand, as Bf16Dense's inputs)
        a, b = (cast_before_reshapes(self, self.visit_expr(x),
                                     lambda source: self.builder_.emit(relax.op.astype(source, "bfloat16")))
                for x in binding.value.args)
        self.set_var_remap(binding.var, self.builder_.emit(relax.op.matmul(a, b, out_dtype="float32"),
                                                           name_hint=binding.var.name))


def bf16_attention(lanes: int) -> Any:
    """The pass (module docstring) for vectors of ``lanes`` floats; applied by Bf16Dense's pass to
    a marked module on a target without AMX tiles."""

    def find(mutator_: Any, func: Any) -> None:
        mutator_.products = attentions(func, lanes) if ENABLED else {}

    return builder_pass(_Bf16Attention, "Bf16Attention", before=find)
