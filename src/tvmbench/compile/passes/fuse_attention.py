"""FuseAttention: the kernels of one attention, ``softmax(q @ k + mask) @ v``, joined into one
fused function (runs between FuseOps and FuseTIR), which the Attention rule
(``rules/attention.py``) computes a few query rows at a time.

Unjoined, the scores (heads x queries x keys floats: 12.6 MB per layer for BERT at 512 tokens)
go through memory four times: written by the first matmul, read by the check for fully masked
rows, read and written by the softmax, read by the second matmul. At 512 tokens those kernels
ran at 42-61 % of peak, bound by that traffic. Joined, a row block's scores stay in L1.

The pattern is structural: a call whose function has one reduction, a product sum (the second
matmul of two computed tensors), whose first operand comes, through calls whose reductions are not product sums (a
softmax's max and sum, the masked-row check) and elementwise ones (mask, scale, reshapes), from a
call with one product-sum reduction (the first matmul). Every value computed on the way must be
used only on the way. Whatever the way holds (T5's position bias, GPT-2's causal ``where``,
SDPA's masked-row check) is computed inside the joined function.
"""

from __future__ import annotations

from typing import Any

import tvm
from tvm import relax

from tvmbench.compile.ir import bindings, static_shape, variables
from tvmbench.compile.passes.join import callee, prim_funcs, rewrite_chains
from tvmbench.compile.tir import contraction_output, reduction_block_count, reduction_kinds

# Off: the attention kernels stay apart (for A/Bs: ``benchmarks/rule_ab.py``).
ENABLED = True


def _kinds(mod: Any, call: Any, cache: dict[Any, Any]) -> list[str] | None:
    """The reduction kinds (``tir.reduction_kinds``) of every PrimFunc a call runs; None when
    it is no call of a fused function or one of them cannot be read."""
    if callee(mod, call) is None:
        return None
    key = call.op if isinstance(call.op, tvm.ir.GlobalVar) else call.args[0]
    if key not in cache:
        kinds: list[str] | None = []
        for func in prim_funcs(mod, call):
            found = reduction_kinds(func)
            kinds = None if found is None or kinds is None else kinds + found
        cache[key] = kinds
    return cache[key]


def _chain(all_bindings: list[Any], mod: Any, last: Any, cache: dict[Any, Any], lanes: int) -> list[Any] | None:
    """The bindings from the first matmul to ``last`` (the second), in order, when they form an
    attention (see the module's docstring), else None."""
    index = {b.var: i for i, b in enumerate(all_bindings)}
    binding = {b.var: b for b in all_bindings}
    first_operand = callee(mod, last.value)[1][0]
    seen, stack, firsts = set(), [first_operand], []
    while stack:
        var = stack.pop()
        if var in seen or var not in binding:
            continue
        seen.add(var)
        kinds = _kinds(mod, binding[var].value, cache)
        if kinds is None:
            continue
        if "dot" in kinds:
            firsts.append(var)
            continue
        stack.extend(a for a in callee(mod, binding[var].value)[1] if isinstance(a, relax.Var))
    if len(firsts) != 1 or _kinds(mod, binding[firsts[0]].value, cache) != ["dot"]:
        return None
    # Both matmuls multiply computed tensors (a dense layer's second operand is a weight: a
    # parameter of the function), so two dense layers around a layer norm are no attention.
    operands = callee(mod, binding[firsts[0]].value)[1][:2] + callee(mod, last.value)[1][1:2]
    if any(v not in binding for v in operands):
        return None
    # The rule's tiles need keys and head dimension in whole vectors (ViT's 197 keys are not):
    # the scores' last axis, and that of the second matmul's own product (PadAttention's slice
    # of a padded head dimension follows it in the same call).
    products = [s for s in map(contraction_output, prim_funcs(mod, last.value)) if s is not None]
    shapes = [static_shape(firsts[0].ty), products[0] if products else None]
    if any(s is None or s[-1] % lanes for s in shapes):
        return None
    # The chain: what was seen on the way that the first matmul's result flows into.
    chain_vars = {firsts[0]}
    for var in sorted(seen, key=index.__getitem__):
        if any(v in chain_vars for v in variables(binding[var].value)):
            chain_vars.add(var)
    chain = sorted(chain_vars, key=index.__getitem__)
    if "row" not in [k for v in chain for k in _kinds(mod, binding[v].value, cache)]:
        return None
    return [binding[v] for v in chain] + [last]


def _only_used_inside(func: Any, chain: list[Any]) -> bool:
    inside = {b.var for b in chain}
    users = [b for b in bindings(func) if b.var not in inside]
    outside = [v for b in users for v in variables(b.value)] + variables(func.body.body)
    return not any(b.var in outside for b in chain[:-1])


def _attentions(func: Any, mod: Any, cache: dict[Any, Any], lanes: int) -> list[list[Any]]:
    found, taken = [], set()
    every = bindings(func)  # once: a CNN has a matmul-like call per convolution
    computed = {b.var for b in every}
    for b in every:
        # The second matmul's second operand is computed (``_chain``): asked first, it turns
        # away a CNN's convolutions (weights are parameters) before their kernels are read.
        # So is a call whose kernels hold no reduction (an elementwise chain, a concatenation).
        args = callee(mod, b.value)
        if args is None or (len(args[1]) > 1 and args[1][1] not in computed) \
                or not any(map(reduction_block_count, prim_funcs(mod, b.value))):
            continue
        if _kinds(mod, b.value, cache) != ["dot"]:
            continue
        chain = _chain(every, mod, b, cache, lanes)
        if chain and _only_used_inside(func, chain) and not any(c.var in taken for c in chain):
            found.append(chain)
            taken.update(c.var for c in chain)
    return found


def fuse_attention(lanes: int) -> Any:
    """The pass (see the module's docstring), for a target with vectors of ``lanes`` floats."""

    @tvm.ir.transform.module_pass(opt_level=0, name="FuseAttention")
    def run(mod: Any, ctx: Any) -> Any:
        if not ENABLED:
            return mod
        out = tvm.IRModule(dict(mod.functions.items()))
        joined: dict[Any, Any] = {}
        cache: dict[Any, Any] = {}
        for gv, func in mod.functions.items():
            if not isinstance(func, relax.Function) or "Primitive" in (func.attrs or {}):
                continue
            chains = _attentions(func, mod, cache, lanes)
            if chains:
                out[gv] = rewrite_chains(func, chains, mod, out, joined, lambda _: "fused_attention")
        return out

    return run
