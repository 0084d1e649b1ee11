"""FuseExpansionIntoWindow: each 1x1 convolution whose output (over ``min_bytes``: the target's
L2, ``tir.fuse_expansion_bytes``) feeds only a window reduction is joined into one fused function with it (runs between FuseOps
and FuseTIR).

An inverted-residual block (mobilenet_v2, mnasnet) expands channels 6x with a 1x1 convolution,
then runs a depthwise 3x3 over the expanded tensor: FuseOps keeps the two apart (two
reductions), so the expanded tensor (4.8 MB at 112x112x96) makes a round trip through memory.
Joined, the ExpandWindow rule (``rules/expand_window.py``) computes it band by band inside the
depthwise convolution's tiles.

A window that no expansion feeds (the first block of mobilenet_v2 and mnasnet1_0: the stem's 32
channels straight into a depthwise 3x3) and whose output feeds only a 1x1 projection is joined
into the projection the same way (``rules/window_project.py``): at batch 8 and 320 px that
tensor is 26 MB, and the two kernels ran at 21 % and 36 % of peak, bound by memory.

Only expansions to a whole number of half the target's vectors are joined (``lanes``,
PARTIAL_VECTORS): over 116 channels (4 x 29) the joined kernel runs in quarter vectors, and
shufflenet_v2_x1_0 at batch 8 and 320 px ran 1.33x faster with all its joins undone (same-process
A/B on Zen 4: 36.9 against 49.0 ms). Half vectors still pay: undoing mnasnet1_0's joins over 72
and 120 channels (8 lanes of AVX-512's 16) made it 1.10x slower at batch 8.
"""

from __future__ import annotations

from typing import Any

import tvm
from tvm import relax

from tvmbench.compile import tir
from tvmbench.compile.ir import bindings, calls, numel, variables
from tvmbench.compile.passes.join import rewrite_chains

# The channels joined must be whole vectors of ``lanes // PARTIAL_VECTORS`` (0: any channels).
PARTIAL_VECTORS = 2
# Join a window into the 1x1 projection it alone feeds (``rules/window_project.py``), when no
# expansion was joined into it.
PROJECTIONS = True


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


def _pairs(func: Any, role: _Roles, min_bytes: int, lanes: int) -> list[list[Any]]:
    """The bindings of ``func`` to join, in order: [the expansion's, the window's] per pair, then
    [the window's, the projection's] for each window left whose output feeds only a 1x1
    convolution (the first block of mobilenet_v2 and mnasnet1_0, which expands nothing)."""
    uses: dict[Any, int] = {}
    for b in bindings(func):
        for var in variables(b.value):
            uses[var] = uses.get(var, 0) + 1
    for var in variables(func.body.body):
        uses[var] = uses.get(var, 0) + 1
    binding = {b.var: b for b in bindings(func)}

    def joinable(first: Any, first_role: str) -> bool:  # ``first``'s value feeds only the next kernel
        size = numel(first.ty)
        return (first in binding and role(binding[first].value) == first_role and uses.get(first) == 1
                and size is not None and size * tvm.DataType(str(first.ty.dtype)).bits // 8 > min_bytes
                and _vectors_fit(first, lanes))

    fused: list[list[Any]] = []
    for b in bindings(func):
        if role(b.value) == "window" and isinstance(b.value.args[0], relax.Var) and joinable(b.value.args[0], "dot"):
            fused.append([binding[b.value.args[0]], b])
    taken = {c.var for pair in fused for c in pair}
    for b in bindings(func) if PROJECTIONS else []:
        first = b.value.args[0] if isinstance(b.value, relax.Call) and b.value.args else None
        if (role(b.value) == "dot" and b.var not in taken and isinstance(first, relax.Var) and first not in taken
                and joinable(first, "window") and _vectors_fit(b.var, lanes)):
            fused.append([binding[first], b])
    return fused


def _vectors_fit(expanded: Any, lanes: int) -> bool:
    """Whether the expanded tensor's channels (its last axis) are whole vectors of
    ``lanes // PARTIAL_VECTORS``."""
    shape = expanded.ty.shape
    channels = shape[-1] if shape is not None and len(shape) else None
    return not PARTIAL_VECTORS or (isinstance(channels, tvm.tirx.IntImm)
                                   and int(channels) % max(lanes // PARTIAL_VECTORS, 1) == 0)


def _name(chain: list[Any]) -> str:
    return "fused_" + "_".join(c.value.op.name_hint.removeprefix("fused_") for c in chain)


def fuse_expansion_into_window(min_bytes: int, lanes: int = 1) -> Any:
    """The pass (see the module's docstring): joins expansions whose output is over ``min_bytes``
    and whose channels are whole vectors of ``lanes // PARTIAL_VECTORS``."""

    @tvm.ir.transform.module_pass(opt_level=0, name="FuseExpansionIntoWindow")
    def run(mod: Any, ctx: Any) -> Any:
        role = _Roles(mod)
        out = tvm.IRModule(dict(mod.functions.items()))
        joined: dict[tuple[Any, Any], Any] = {}
        for gv, func in mod.functions.items():
            if not isinstance(func, relax.Function) or "Primitive" in (func.attrs or {}):
                continue
            fused = _pairs(func, role, min_bytes, lanes)
            if fused:
                out[gv] = rewrite_chains(func, fused, mod, out, joined, _name)
        return out

    return run
