"""PadWindowChannels: an inverted-residual block whose expanded channels are not whole vectors of
the target (mnasnet's 72 and 120, MobileNetV3's 72, 120, 184 and 200 on AVX-512's 16 lanes) runs
over zero channels added up to whole vectors: the 1x1 expansion's weights get zero output
channels, the depthwise convolution's weights and the per-channel operands between them zeros
too, and the projection's weights zero input channels, so the added channels compute zeros (or
any finite value) that the projection multiplies by zero. The result is the same to the last bit.

Why: a vector axis of 72 channels is nine 8-lane vectors, and where 512-bit FMAs run at twice
the rate of 256-bit ones (Zen 5, Intel's AVX-512 cores; not Zen 4, which splits them:
``tiles.half_vectors_full_rate``) the block's depthwise and projection ran at half the rate in
every FMA. Two of mnasnet's 49x49 blocks (24 -> 72 -> 24, batch 3) as a test model, each build
timed apart (Zen 5, `tvmbench run --model blocks.py:...`): 0.737 ms with 72 channels, 0.640 ms
with 80 (11 % more FLOPs), 0.687 ms with 96; its stride-2 5x5 block (24 -> 72 -> 40) 0.340
against 0.223 ms. Same-process A/Bs (`benchmarks/rule_ab.py M pipeline.PAD_WINDOW_CHANNELS 0`,
session 55, Zen 5; both build orders where two): mnasnet1_0 1.014x / 1.020x, at batch 3 and
193 px 1.059x, at batch 8 1.074x; torchvision's mobilenet_v3_large (one such block: the others
feed a squeeze-excite) 0.992x / 0.987x, at batch 8 1.009x.

Matched: a conv2d (NHWC, HWIO, one group) whose output channels C are not whole vectors, then
elementwise ops whose other operands are per-channel or scalars, a depthwise conv2d (C groups),
elementwise ops again, and a conv2d of one group reading the C channels; every intermediate used
once. Channels are padded only when whole vectors add at most MAX_PAD of them. The weight pads
depend on weights only, so LiftTransformParams does them at load time.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import tvm
from tvm import relax
from tvm.relax.expr_functor import PyExprMutator, mutator

from tvmbench.compile.ir import bindings, op_name, static_shape, use_counts

# The most channels added, as a fraction of the channels (72 -> 80: 0.11; 40 -> 48: 0.2).
MAX_PAD = 0.25
_UNARY = {"relax.nn.relu", "relax.clip", "relax.sigmoid", "relax.nn.silu", "relax.tanh", "relax.nn.gelu",
          "relax.nn.gelu_tanh", "relax.nn.leakyrelu"}
_BINARY = {"relax.add", "relax.subtract", "relax.multiply", "relax.divide", "relax.minimum", "relax.maximum"}


def _conv(value: Any) -> Any:
    """The NHWC / HWIO conv2d ``value`` is, else None."""
    if op_name(value) != "relax.nn.conv2d":
        return None
    a = value.attrs
    ok = a.data_layout == "NHWC" and a.kernel_layout == "HWIO" and (a.out_layout or "NHWC") == "NHWC"
    return value if ok and static_shape(value.args[1].ty) is not None else None


def _per_channel(expr: Any, channels: int) -> bool:
    """A scalar, or a tensor broadcast along every axis but the last, which is 1 or ``channels``."""
    shape = static_shape(expr.ty)
    return shape is not None and (not shape or (all(d == 1 for d in shape[:-1]) and shape[-1] in (1, channels)))


@dataclass(frozen=True)
class _Member:
    role: str  # "expansion", "depthwise", "projection" or "elementwise"
    channels: int
    padded: int


@mutator
class _Pad(PyExprMutator):
    def __init__(self, mod: Any, lanes: int) -> None:
        super().__init__(mod)
        self.lanes = lanes
        self.members: dict[Any, _Member] = {}  # each chain's variables

    def prepare(self, func: Any) -> None:
        """Find the chains of ``func``."""
        uses = use_counts(func)
        bound = {b.var: b.value for b in bindings(func) if isinstance(b, relax.VarBinding)}
        user = {}
        for var, value in bound.items():
            for arg in getattr(value, "args", []):
                if isinstance(arg, relax.Var) and uses.get(arg) == 1:
                    user[arg] = var
        for var, value in bound.items():
            conv = _conv(value)
            if conv is None or conv.attrs.groups != 1:
                continue
            channels = static_shape(conv.args[1].ty)[3]
            padded = -(-channels // self.lanes) * self.lanes
            if channels % self.lanes == 0 or padded - channels > MAX_PAD * channels:
                continue
            chain = self.follow(var, channels, bound, user)
            if not any(member in self.members for member, _ in chain):  # (a projection feeding the next window
                for member, role in chain:                                # directly stays one chain's)
                    self.members[member] = _Member(role, channels, padded)

    @staticmethod
    def follow(var: Any, channels: int, bound: dict[Any, Any], user: dict[Any, Any]) -> list[tuple[Any, str]]:
        """The chain from the expansion ``var`` to its projection with each member's role, or []."""
        chain, cur, depthwise = [(var, "expansion")], var, False
        while cur in user and isinstance(cur, relax.DataflowVar):
            nxt = user[cur]
            value, conv = bound[nxt], _conv(bound[nxt])
            if conv is not None and conv.args[0].same_as(cur):
                weight = static_shape(conv.args[1].ty)
                if not depthwise and conv.attrs.groups == channels and weight[2:] == [1, channels]:
                    depthwise = True
                    chain.append((nxt, "depthwise"))
                elif depthwise and conv.attrs.groups == 1 and weight[2] == channels:
                    # (re-emitted inside the dataflow block: a block's output variable cannot be)
                    return [*chain, (nxt, "projection")] if isinstance(nxt, relax.DataflowVar) else []
                else:
                    return []
            elif (op_name(value) in _UNARY and value.args[0].same_as(cur)) or (
                    op_name(value) in _BINARY and len(value.args) == 2
                    and all(a.same_as(cur) or _per_channel(a, channels) for a in value.args)):
                chain.append((nxt, "elementwise"))
            else:
                return []
            cur = nxt
        return []

    def pad(self, expr: Any, axis: int, to: int, value: float = 0.0) -> Any:
        """``expr`` with ``axis`` padded to ``to`` by ``value``."""
        shape = static_shape(expr.ty)
        width = [0] * (2 * len(shape))
        width[2 * axis + 1] = to - shape[axis]
        return self.builder_.emit(relax.op.nn.pad(expr, width, pad_value=value))

    def visit_var_binding_(self, binding: Any) -> None:
        member = self.members.get(binding.var)
        if member is None:
            return super().visit_var_binding_(binding)
        value = binding.value
        args = [self.visit_expr(a) for a in value.args]
        if member.role == "elementwise":
            for i, old in enumerate(value.args):
                shape = static_shape(old.ty)
                if old not in self.members and shape and shape[-1] == member.channels:
                    divisor = op_name(value) == "relax.divide" and i == 1  # (a zero divisor would make NaNs)
                    args[i] = self.pad(args[i], len(shape) - 1, member.padded, 1.0 if divisor else 0.0)
            new = relax.Call(value.op, args, value.attrs)
        else:
            a = value.attrs
            weight = self.pad(args[1], 2 if member.role == "projection" else 3, member.padded)
            new = relax.op.nn.conv2d(args[0], weight, strides=a.strides, padding=a.padding, dilation=a.dilation,
                                     groups=member.padded if member.role == "depthwise" else 1,
                                     data_layout="NHWC", kernel_layout="HWIO", out_layout="NHWC",
                                     out_dtype=a.out_dtype)
        self.set_var_remap(binding.var, self.builder_.emit(new, name_hint=binding.var.name))


def pad_window_channels(lanes: int) -> Any:
    """The pass (see the module's docstring) for vectors of ``lanes`` channels."""

    @tvm.ir.transform.module_pass(opt_level=0, name="PadWindowChannels")
    def run(mod: Any, ctx: Any) -> Any:
        for gv, func in list(mod.functions.items()):
            if isinstance(func, relax.Function) and isinstance(func.body, relax.SeqExpr):
                mutator_ = _Pad(mod, lanes)
                mutator_.prepare(func)
                if mutator_.members:
                    mod[gv] = mutator_.visit_expr(func)
        return mod

    return run
