"""FuseExpansionIntoWindow: each 1x1 convolution whose output (over ``min_bytes``: the target's
L2, ``tir.fuse_expansion_bytes``) feeds only a window reduction is joined into one fused function with it (runs between FuseOps
and FuseTIR).

An inverted-residual block (mobilenet_v2, mnasnet) expands channels 6x with a 1x1 convolution,
then runs a depthwise 3x3 over the expanded tensor: FuseOps keeps the two apart (two
reductions), so the expanded tensor (4.8 MB at 112x112x96) makes a round trip through memory.
Joined, the ExpandWindow rule (``rules/expand_window.py``) computes it band by band inside the
depthwise convolution's tiles.
"""

from __future__ import annotations

from typing import Any

import tvm
from tvm import relax
from tvm.relax.expr_functor import PyExprMutator, mutator

from tvmbench.compile import tir
from tvmbench.compile.ir import bindings, calls, numel, variables


class _Roles:
    """The fusion role (``fusion_role``) of each fused function a binding calls, cached."""

    def __init__(self, mod: Any) -> None:
        self.mod, self.roles = mod, {}

    def __call__(self, expr: Any) -> str | None:
        if not (isinstance(expr, relax.Call) and isinstance(expr.op, tvm.ir.GlobalVar)):
            return None
        if expr.op not in self.roles:
            func = self.mod[expr.op]
            called = [self.mod[c.args[0]] for c in calls(func, "relax.call_tir")] \
                if isinstance(func, relax.Function) and "Primitive" in (func.attrs or {}) else []
            found = [r for r in map(tir.fusion_role, called) if r is not None]
            self.roles[expr.op] = found[0] if len(found) == 1 else None
        return self.roles[expr.op]


def _pairs(func: Any, role: _Roles, min_bytes: int) -> dict[Any, Any]:
    """The window bindings of ``func`` to join: the window's var -> the expansion's call."""
    uses: dict[Any, int] = {}
    for binding in bindings(func):
        for var in variables(binding.value):
            uses[var] = uses.get(var, 0) + 1
    for var in variables(func.body.body):
        uses[var] = uses.get(var, 0) + 1
    value = {b.var: b.value for b in bindings(func)}
    fused: dict[Any, Any] = {}
    for b in bindings(func):
        if role(b.value) != "window" or not isinstance(b.value.args[0], relax.Var):
            continue
        first = b.value.args[0]
        size = numel(first.ty)
        if (role(value.get(first)) == "dot" and uses.get(first) == 1 and size is not None
                and size * tvm.DataType(str(first.ty.dtype)).bits // 8 > min_bytes):
            fused[b.var] = value[first]
    return fused


def _rewrite(func: Any, fused: dict[Any, Any], mod: Any, out: Any, joined: dict[Any, Any]) -> Any:
    """``func`` with each fused pair's two calls replaced by one call of their joined function."""
    skip = {call.args[0] for call in (b.value for b in bindings(func) if b.var in fused)}
    blocks = []
    for block in func.body.blocks:
        kept = []
        for b in block.bindings:
            if b.var in skip:
                continue
            if b.var in fused:
                dot_call, window_call = fused[b.var], b.value
                key = (dot_call.op, window_call.op)
                if key not in joined:
                    joined[key] = _join_functions(out, mod[dot_call.op], mod[window_call.op],
                                                  dot_call.op.name_hint, window_call.op.name_hint)
                b = relax.VarBinding(b.var, relax.Call(joined[key], [*dot_call.args, *window_call.args[1:]]))
            kept.append(b)
        blocks.append(type(block)(kept))
    return relax.Function(func.params, relax.SeqExpr(blocks, func.body.body), func.ret_ty, func.is_pure, func.attrs)


def _join_functions(mod: Any, first: Any, second: Any, first_name: str, second_name: str) -> Any:
    """Add to ``mod`` a primitive function computing ``second(first(a...), b...)`` from the
    bodies of both (FuseTIR then makes one PrimFunc of it); returns its GlobalVar."""
    params = [relax.Var(p.name, p.ty) for p in [*first.params, *second.params[1:]]]
    remap = dict(zip([*first.params, *second.params[1:]], params, strict=True))

    @mutator
    class Substitute(PyExprMutator):
        def visit_var_(self, var: Any) -> Any:
            return remap.get(var, var)

        def visit_dataflow_var_(self, var: Any) -> Any:
            return remap.get(var, var)

    name = f"fused_{first_name.removeprefix('fused_')}_{second_name.removeprefix('fused_')}"
    bb = relax.BlockBuilder(mod)
    with bb.function(name, params, attrs=dict(first.attrs), private=True):
        with bb.dataflow():
            for func in (first, second):
                if func is second:
                    remap[second.params[0]] = remap[first.body.body]
                for b in bindings(func):
                    remap[b.var] = bb.emit(Substitute().visit_expr(b.value))
            result = bb.emit_output(remap[second.body.body])
        gv = bb.emit_func_output(result)
    mod[gv] = bb.get()[gv]
    return gv


def fuse_expansion_into_window(min_bytes: int) -> Any:
    """The pass (see the module's docstring): joins expansions whose output is over ``min_bytes``."""

    @tvm.ir.transform.module_pass(opt_level=0, name="FuseExpansionIntoWindow")
    def run(mod: Any, ctx: Any) -> Any:
        role = _Roles(mod)
        out = tvm.IRModule(dict(mod.functions.items()))
        joined: dict[tuple[Any, Any], Any] = {}
        for gv, func in mod.functions.items():
            if not isinstance(func, relax.Function) or "Primitive" in (func.attrs or {}):
                continue
            fused = _pairs(func, role, min_bytes)
            if fused:
                out[gv] = _rewrite(func, fused, mod, out, joined)
        return out

    return run
