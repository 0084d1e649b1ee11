"""Joining fused kernels: what the passes that run between FuseOps and FuseTIR share
(``fuse_expansion.py``, ``fuse_attention.py``).

After FuseOps, ``main`` calls each group of operators either as a Relax function marked
``Primitive`` (several operators) or as a ``call_tir`` of one PrimFunc (a lone operator).
Joining a chain of such calls into one new primitive function makes FuseTIR emit a single
PrimFunc for the whole chain, which one schedule rule can then compute tile by tile, keeping the
intermediate tensors in cache instead of sending each through memory.
"""

from __future__ import annotations

from typing import Any

import tvm
from tvm import relax
from tvm.relax.expr_functor import PyExprMutator, mutator

from tvmbench.compile.ir import bindings


def callee(mod: Any, call: Any) -> tuple[Any, list[Any]] | None:
    """(the called function, the call's arguments) of a call of a primitive Relax function or a
    ``call_tir``, else None."""
    if not isinstance(call, relax.Call):
        return None
    if isinstance(call.op, tvm.ir.GlobalVar):
        func = mod[call.op]
        if isinstance(func, relax.Function) and "Primitive" in (func.attrs or {}):
            return func, list(call.args)
        return None
    if isinstance(call.op, tvm.ir.Op) and call.op.name == "relax.call_tir" and isinstance(call.args[1], relax.Tuple):
        return mod[call.args[0]], list(call.args[1].fields)
    return None


def prim_funcs(mod: Any, call: Any) -> list[Any]:
    """The PrimFuncs a call runs (one for a ``call_tir``, one per operator of a primitive function)."""
    found = callee(mod, call)
    if found is None:
        return []
    func, _ = found
    if isinstance(func, tvm.tirx.PrimFunc):
        return [func]
    return [mod[c.args[0]] for c in _call_tirs(func)]


def _call_tirs(func: Any) -> list[Any]:
    found: list[Any] = []
    relax.analysis.post_order_visit(
        func.body, lambda e: found.append(e) if isinstance(e, relax.Call) and isinstance(e.op, tvm.ir.Op)
        and e.op.name == "relax.call_tir" else None)
    return found


def chain_inputs(mod: Any, chain: list[Any]) -> list[Any]:
    """The variables the bindings ``chain`` read and do not define, and the constants they read
    (a primitive function takes no tensor constant in its body), in order of first use."""
    defined = {b.var for b in chain}
    inputs: list[Any] = []
    for b in chain:
        for arg in callee(mod, b.value)[1]:
            if isinstance(arg, (relax.Var, tvm.ir.expr.Constant)) and arg not in defined \
                    and not any(arg.same_as(i) for i in inputs):
                inputs.append(arg)
    return inputs


def join_calls(mod: Any, out: Any, chain: list[Any], name: str) -> tuple[Any, list[Any]]:
    """Add to ``out`` one primitive function computing the bindings ``chain`` (calls as
    ``callee`` reads them, in order; the last one's value is the result) from the bodies of the
    functions they call; returns its GlobalVar and the arguments to call it with: every variable
    the chain reads and does not define (``chain_inputs``)."""
    inputs = chain_inputs(mod, chain)
    params = [relax.Var(v.name if isinstance(v, relax.Var) else "const", v.ty) for v in inputs]
    remap: dict[Any, Any] = dict(zip(inputs, params, strict=True))

    @mutator
    class Substitute(PyExprMutator):
        def visit_var_(self, var: Any) -> Any:
            return remap.get(var, var)

        def visit_dataflow_var_(self, var: Any) -> Any:
            return remap.get(var, var)

        def visit_constant_(self, const: Any) -> Any:
            return remap.get(const, const)

    attrs = next((dict(mod[b.value.op].attrs) for b in chain if isinstance(b.value.op, tvm.ir.GlobalVar)),
                 {"Primitive": True})
    bb = relax.BlockBuilder(out)
    with bb.function(name, params, attrs=attrs, private=True):
        with bb.dataflow():
            for b in chain:
                func, args = callee(mod, b.value)
                if isinstance(func, tvm.tirx.PrimFunc):
                    remap[b.var] = bb.emit(Substitute().visit_expr(b.value))
                    continue
                for p, a in zip(func.params, args, strict=True):
                    remap[p] = remap.get(a, a)
                for inner in bindings(func):
                    remap[inner.var] = bb.emit(Substitute().visit_expr(inner.value))
                remap[b.var] = remap[func.body.body]
            result = bb.emit_output(remap[chain[-1].var])
        gv = bb.emit_func_output(result)
    out[gv] = bb.get()[gv]
    return gv, inputs


def rewrite_chains(func: Any, chains: list[list[Any]], mod: Any, out: Any, joined: dict[Any, Any],
                   name: Any) -> Any:
    """``func`` with each chain's calls replaced by one call of their joined function (added to
    ``out`` once per distinct chain of callees, named ``name(chain)``), at the place of the
    chain's last call: every input of the chain is computed before it."""
    last = {chain[-1].var: chain for chain in chains}
    skip = {b.var for chain in chains for b in chain[:-1]}
    blocks = []
    for block in func.body.blocks:
        kept = []
        for b in block.bindings:
            if b.var in skip:
                continue
            if b.var in last:
                chain = last[b.var]
                key = tuple(c.value.op if isinstance(c.value.op, tvm.ir.GlobalVar) else c.value.args[0]
                            for c in chain)
                if key not in joined:
                    joined[key] = join_calls(mod, out, chain, name(chain))[0]
                b = relax.VarBinding(b.var, relax.Call(joined[key], chain_inputs(mod, chain)))
            kept.append(b)
        blocks.append(type(block)(kept))
    return relax.Function(func.params, relax.SeqExpr(blocks, func.body.body), func.ret_ty, func.is_pure, func.attrs)
