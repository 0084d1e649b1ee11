"""FuseExpansionIntoWindow: each 1x1 convolution whose output (over ``min_bytes``: the target's
L2, ``tir.fuse_expansion_bytes``) feeds only a window reduction is joined into one fused function with it (runs between FuseOps
and FuseTIR).

An inverted-residual block (mobilenet_v2, mnasnet) expands channels 6x with a 1x1 convolution,
then runs a depthwise 3x3 over the expanded tensor: FuseOps keeps the two apart (two
reductions), so the expanded tensor (4.8 MB at 112x112x96) makes a round trip through memory.
Joined, the ExpandWindow rule (``rules/expand_window.py``) computes it band by band inside the
depthwise convolution's tiles.

An expansion is not joined when the window's rows split into no band short of the whole map
(``WHOLE_MAP_BANDS``), nor a window alone with its projection there (``WHOLE_MAP_PROJECTIONS``). A window whose output (over ``min_bytes`` too) feeds only a 1x1
projection is joined with the projection as well (``PROJECTIONS``; ``rules/window_project.py``):
the expansion, the window and the projection become one kernel, or the window and the projection
where no expansion feeds the window (the first block of mobilenet_v2 and mnasnet1_0: at batch 8
and 320 px its depthwise output is 26 MB, and the two kernels ran at 21 % and 36 % of peak,
bound by memory).

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

from tvmbench.compile import bf16, tir
from tvmbench.compile.ir import bindings, calls, numel, op_name, static_shape, use_counts, users_of, variables
from tvmbench.compile.passes.join import rewrite_chains
from tvmbench.compile.rules.expand_window import band_choices

# The channels joined must be whole vectors of ``lanes // PARTIAL_VECTORS`` (0: any channels).
PARTIAL_VECTORS = 2
# Join a window (and the expansion joined into it) with the 1x1 projection it alone feeds, when
# the window's map has at least PROJECTION_MIN_PIXELS: every task (an image and band) reads all the
# joined kernel's weights, and on a 7x7 map a task is a whole image of 49 pixels. mnasnet1_0's 7x7
# blocks at batch 8 and 224 px (192 -> 1152 -> 192: 1.77 MB of weights) ran 1.7-2x slower joined
# than apart (8.94 against 5.23 ms for three calls), the model 0.825x; at 320 px (10x10) joined,
# the model 1.10x. On maps of 13 or 14 rows a band is half the map or all of it (bands divide the
# rows; a halo of at most half the band), so a task recomputes the expansion for a whole image
# and holds all of its channels: same-process A/Bs of a threshold of 200 pixels against 64 (Zen 4,
# `rule_ab.py M passes.fuse_expansion.PROJECTION_MIN_PIXELS 200`, both build orders where given,
# session 41): at 193 px (13x13) apart was faster by 1.04x (mnasnet1_0 b3), 1.09x (b8) and 1.10x
# (mobilenet_v2 b3); at 224 px (14x14) mnasnet1_0 b3 1.055x / 1.022x, mobilenet_v2 b8 1.019x,
# mnasnet1_0 b8 0.989x / 0.997x; 10x10 maps at 160 px, b8: 1.028x / 1.000x and 1.032x / 1.007x;
# 10x10 maps at 320 px, b8 (the last blocks' 960-1152 channels): 0.979x / 0.976x and 0.985x /
# 1.001x. Maps of 15x15 and more keep the join.
PROJECTIONS = True
PROJECTION_MIN_PIXELS = 200
# Join an expansion into a window whose output rows split into no band short of the whole map (a
# prime height: 13x13 maps at 193 px, 7x7 and 5x5 ones): each task then computes the expansion
# for a whole image, and there are only as many whole-channel tasks as images (the cause as read
# from the schedule, not timed kernel by kernel). Same-process A/Bs of False against True (Zen 4,
# `rule_ab.py M passes.fuse_expansion.WHOLE_MAP_BANDS 0`, session 41): mobilenet_v2 b3 193 px
# 1.127x, mnasnet1_0 b3 193 px 1.067x, mnasnet1_0 b8 224 px 1.014x and b8 160 px 1.014x,
# mobilenet_v2 b8 224 px 0.986x (mnasnet1_0 b8 320 px, no prime height, 1.007x: the noise).
WHOLE_MAP_BANDS = False
# ... and a window alone (no expansion joined) with its projection over such a map: WindowProject's
# tasks are then whole images, one per image of the batch, and at batch 1 one core did all the
# work (mnasnet1_0's first block at 193 px, 97 rows). Same-process A/Bs of True against False
# (Zen 5, `rule_ab.py M passes.fuse_expansion.WHOLE_MAP_PROJECTIONS 1 [--build-order ba]`,
# session 55; > 1: apart faster): 193 px mnasnet1_0 b1 1.048x / 1.062x, b3 1.027x, b8 1.001x;
# mobilenet_v2 b1 1.045x, b8 1.006x.
WHOLE_MAP_PROJECTIONS = False
# The steps between an expansion and its window that ``joined_expansions`` passes through: cheap
# ones. The joined kernel recomputes the expansion's halo rows, and an exponential's recompute
# (EfficientNet's SiLU) cost more than the bf16 expansion saved (torchvision's efficientnet_b0
# 0.98x, both build orders).
CHEAP = {"relax.add", "relax.subtract", "relax.multiply", "relax.minimum", "relax.maximum", "relax.clip",
         "relax.nn.relu", "relax.nn.leakyrelu"}


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


def _pairs(func: Any, role: _Roles, min_bytes: int, lanes: int, half_vectors: bool = False) -> list[list[Any]]:
    """The chains of bindings of ``func`` to join: [the expansion's, the window's], extended by the
    projection's when the window's output feeds only a 1x1 convolution, and [the window's, the
    projection's] for such a window no expansion feeds. A bf16 expansion joins over whole vectors
    of the dot product's 16 lanes, or, ``half_vectors`` (they run at the full rate), over whole
    blocks of three of its 8-lane ones (``bf16_dense.BF16_HALF_EXPANSIONS``)."""
    uses: dict[Any, int] = {}
    for b in bindings(func):
        for var in variables(b.value):
            uses[var] = uses.get(var, 0) + 1
    for var in variables(func.body.body):
        uses[var] = uses.get(var, 0) + 1
    binding = {b.var: b for b in bindings(func)}

    def joinable(first: Any, *first_roles: str) -> bool:  # ``first``'s value feeds only the next kernel
        size = numel(first.ty)
        return (first in binding and role(binding[first].value) in first_roles and uses.get(first) == 1
                and size is not None and size * tvm.DataType(str(first.ty.dtype)).bits // 8 > min_bytes
                and _vectors_fit(first, lanes))

    def expansion(first: Any) -> bool:
        return joinable(first, "dot") or (joinable(first, "bf16_dot") and (
            _vectors_fit(first, bf16.LANES, 1) or (half_vectors and _vectors_fit(first, 3 * bf16.LANES // 2, 1))))

    fused: list[list[Any]] = []
    for b in bindings(func):
        if (role(b.value) == "window" and isinstance(b.value.args[0], relax.Var) and expansion(b.value.args[0])
                and (WHOLE_MAP_BANDS or _bands(b.var))):
            fused.append([binding[b.value.args[0]], b])
    # the projections: each joins the chain of the window it reads, or the window alone
    chain_of = {chain[-1].var: chain for chain in fused}
    taken = {c.var for chain in fused for c in chain}
    for b in bindings(func) if PROJECTIONS else []:
        first = b.value.args[0] if isinstance(b.value, relax.Call) and b.value.args else None
        if (role(b.value) != "dot" or b.var in taken or not isinstance(first, relax.Var)
                or not joinable(first, "window") or not _vectors_fit(b.var, lanes)):
            continue
        chain = chain_of.get(first) or ([] if first in taken else [binding[first]])
        whole_map = first not in chain_of and not _bands(first)
        if chain and map_pixels(first) >= PROJECTION_MIN_PIXELS and (WHOLE_MAP_PROJECTIONS or not whole_map):
            if first in chain_of:
                chain.append(b)
            else:
                fused.append([*chain, b])
    return fused


def joined_expansions(func: Any, min_bytes: int) -> set[Any]:
    """The 1x1 convolutions of ``func`` whose output (over ``min_bytes``) flows, through cheap
    elementwise steps (``CHEAP``) used once each, only into a depthwise convolution: the
    expansions of inverted-residual blocks this pass may join into their window (Bf16Dense leaves
    them in fp32, PackWeights leaves them convolutions)."""
    uses = use_counts(func)
    bound = {b.var: b.value for b in bindings(func) if isinstance(b, relax.VarBinding)}
    users = users_of(bound)
    found = set()
    for var, value in bound.items():
        shape = static_shape(value.args[1].ty) if op_name(value) == "relax.nn.conv2d" else None
        if shape is None or shape[:2] != [1, 1] or int(value.attrs.groups) != 1:
            continue
        size = numel(var.ty)  # (asked of 1x1 convolutions only: a second over every binding)
        if size is None or size * 4 <= min_bytes:
            continue
        cur = var
        while uses.get(cur) == 1 and len(users.get(cur, [])) == 1:
            nxt = users[cur][0]
            name = op_name(bound[nxt])
            if name == "relax.nn.conv2d":
                if bound[nxt].args[0].same_as(cur) and int(bound[nxt].attrs.groups) == shape[3] > 1:
                    found.add(value)
                break
            if name not in CHEAP:
                break
            cur = nxt
    return found


def map_pixels(value: Any) -> int:
    """Rows x columns of an NHWC tensor (0 when its shape is not static)."""
    shape = value.ty.shape
    dims = [shape[i] for i in (1, 2)] if shape is not None and len(shape) == 4 else []
    return int(dims[0]) * int(dims[1]) if all(isinstance(d, tvm.tirx.IntImm) for d in dims) and dims else 0


def _bands(value: Any) -> bool:
    """Whether the joined kernel could split an NHWC tensor's rows into bands short of the whole
    map (``expand_window.band_choices``, the rule's own choices; a prime height cannot)."""
    shape = value.ty.shape
    height = shape[1] if shape is not None and len(shape) == 4 else None
    if not isinstance(height, tvm.tirx.IntImm):
        return True
    return len(band_choices(int(height), int(height))[0]) > 1


def _vectors_fit(expanded: Any, lanes: int, parts: int = PARTIAL_VECTORS) -> bool:
    """Whether the expanded tensor's channels (its last axis) are whole vectors of
    ``lanes // parts`` (any channels when ``parts`` is 0)."""
    shape = expanded.ty.shape
    channels = shape[-1] if shape is not None and len(shape) else None
    return not parts or (isinstance(channels, tvm.tirx.IntImm) and int(channels) % max(lanes // parts, 1) == 0)


def _name(chain: list[Any]) -> str:
    return "fused_" + "_".join(c.value.op.name_hint.removeprefix("fused_") for c in chain)


def fuse_expansion_into_window(min_bytes: int, lanes: int = 1, half_vectors: bool = False) -> Any:
    """The pass (see the module's docstring): joins expansions whose output is over ``min_bytes``
    and whose channels are whole vectors of ``lanes // PARTIAL_VECTORS`` (``half_vectors``: the
    target's half vectors run at the full rate, ``_pairs``)."""

    @tvm.ir.transform.module_pass(opt_level=0, name="FuseExpansionIntoWindow")
    def run(mod: Any, ctx: Any) -> Any:
        role = _Roles(mod)
        out = tvm.IRModule(dict(mod.functions.items()))
        joined: dict[tuple[Any, Any], Any] = {}
        for gv, func in mod.functions.items():
            if not isinstance(func, relax.Function) or "Primitive" in (func.attrs or {}):
                continue
            fused = _pairs(func, role, min_bytes, lanes, half_vectors)
            if fused:
                out[gv] = rewrite_chains(func, fused, mod, out, joined, _name)
        return out

    return run
