"""PadWindowChannels: an inverted-residual block whose expanded channels are not whole vectors of
the target (mnasnet's 72 and 120, MobileNetV3's 72, 120, 184 and 200 on AVX-512's 16 lanes) runs
over zero channels added up to whole vectors: the 1x1 expansion's weights get zero output
channels, the depthwise convolution's weights and the per-channel operands between them zeros
too, and the projection's weights zero input channels, so the added channels compute zeros (or
any finite value) that the projection multiplies by zero. The result is the same to the last bit.

Why: a vector axis of 72 channels is nine 8-lane vectors, and where 512-bit FMAs run at twice
the rate of 256-bit ones (Zen 5, Intel's AVX-512 cores; not Zen 4, which splits them:
``tiles.half_vectors_full_rate``) the block's depthwise and projection ran at half the rate in
every FMA. On Zen 4 channels are padded to whole half vectors only (``HALF_VECTORS``):
ShuffleNetV2's 58 (2 x 29) and 116 (4 x 29) ran its windows in vectors of 2 and 4 lanes.
Two of mnasnet's 49x49 blocks (24 -> 72 -> 24, batch 3) as a test model, each build
timed apart (Zen 5, `tvmbench run --model blocks.py:...`): 0.737 ms with 72 channels, 0.640 ms
with 80 (11 % more FLOPs), 0.687 ms with 96; its stride-2 5x5 block (24 -> 72 -> 40) 0.340
against 0.223 ms. Same-process A/Bs (`benchmarks/rule_ab.py M pipeline.PAD_WINDOW_CHANNELS 0`,
session 55, Zen 5; both build orders where two): mnasnet1_0 1.014x / 1.020x, at batch 3 and
193 px 1.059x, at batch 8 1.074x. Blocks joined by more than a chain (hard-swish, squeeze-excite,
SiLU; session 56): torchvision's mobilenet_v3_large 1.020x / 1.011x, at batch 8 1.091x (one
chain-shaped block alone: 0.99x), mobilenet_v3_small 1.028x / 1.036x, at batch 8 1.065x,
efficientnet_b3 (its stem's 40 channels) 1.011x / 1.016x.

Matched: a conv2d (NHWC, HWIO, one group) whose output channels C are not whole vectors, and
everything its channels flow through up to the convolutions of one group that read them back down
(the projection; a squeeze-excite's squeeze): elementwise ops whose other operands are scalars or
vary along the batch and the channels only (a squeeze-excite's scale, padded where the block
runs), reductions over other axes than the channels, and a depthwise conv2d (C groups). Every use
of every member is another member or such a reader, so the added channels never leave the block:
MobileNetV3's hard-swish (each activation used twice) and squeeze-excite (the depthwise output
scaled by its own mean's excitation), EfficientNet's SiLU and its stem feeding the first window.
Channels are padded only when whole vectors add at most MAX_PAD of them. The weight pads depend
on weights only, so LiftTransformParams does them at load time.
"""

from __future__ import annotations

from typing import Any

import tvm
from tvm import relax
from tvm.relax.expr_functor import PyExprMutator, mutator

from tvmbench.compile.ir import bindings, op_name, static_shape, use_counts, users_of

# Where half vectors run at the full rate (Zen 4), channels are padded to whole half vectors:
# ShuffleNetV2's 58 channels (2 x 29) ran its depthwise convolutions in vectors of 2 lanes
# (0: not padded there).
HALF_VECTORS = 1
# The most channels added, as a fraction of the channels (72 -> 80: 0.11; 40 -> 48: 0.2).
MAX_PAD = 0.25
_UNARY = {"relax.nn.relu", "relax.clip", "relax.negative", "relax.exp", "relax.sigmoid", "relax.nn.silu", "relax.tanh", "relax.nn.gelu",
          "relax.nn.gelu_tanh", "relax.nn.leakyrelu"}
_BINARY = {"relax.add", "relax.subtract", "relax.multiply", "relax.divide", "relax.minimum", "relax.maximum"}
_REDUCTIONS = {"relax.mean", "relax.sum", "relax.max"}


def _conv(value: Any) -> Any:
    """The NHWC / HWIO conv2d ``value`` is, else None."""
    if op_name(value) != "relax.nn.conv2d":
        return None
    a = value.attrs
    ok = a.data_layout == "NHWC" and a.kernel_layout == "HWIO" and (a.out_layout or "NHWC") == "NHWC"
    return value if ok and static_shape(value.args[1].ty) is not None else None


def _broadcast(expr: Any, channels: int) -> bool:
    """A scalar, a tensor of one channel, or one that varies along the batch and the ``channels``
    only (a squeeze-excite's scale): small enough to pad where the block runs."""
    shape = static_shape(expr.ty)
    return shape is not None and (not shape or shape[-1] == 1
                                  or (shape[-1] == channels and all(d == 1 for d in shape[1:-1])))


def _channel_preserving(value: Any, cur: Any) -> bool:
    """An elementwise op of ``cur`` or a reduction of ``cur`` over axes other than the last."""
    name = op_name(value)
    if name in _UNARY:
        return value.args[0].same_as(cur)
    if name in _BINARY:
        return len(value.args) == 2
    if name in _REDUCTIONS and value.attrs.axis is not None:
        rank = len(static_shape(cur.ty) or [])
        return rank > 0 and all(int(a) % rank != rank - 1 for a in value.attrs.axis)
    return False


@mutator
class _Pad(PyExprMutator):
    def __init__(self, mod: Any, lanes: int) -> None:
        super().__init__(mod)
        self.lanes = lanes
        self.padded: dict[Any, tuple[int, int]] = {}  # variables whose last axis grows: channels, padded

    def prepare(self, func: Any) -> None:
        """Find the blocks of ``func``."""
        uses = use_counts(func)
        bound = {b.var: b.value for b in bindings(func) if isinstance(b, relax.VarBinding)}
        users = users_of(bound)
        for var, value in bound.items():
            conv = _conv(value)
            if conv is None or conv.attrs.groups != 1:
                continue
            channels = static_shape(conv.args[1].ty)[3]
            padded = -(-channels // self.lanes) * self.lanes
            if channels % self.lanes == 0 or padded - channels > MAX_PAD * channels:
                continue
            region = self.region(var, channels, bound, users, uses)
            if not region & self.padded.keys():  # (each variable pads once)
                self.padded.update(dict.fromkeys(region, (channels, padded)))

    @staticmethod
    def region(start: Any, channels: int, bound: dict[Any, Any], users: dict[Any, list[Any]],
               uses: dict[Any, int]) -> set[Any]:
        """Every variable from the expansion ``start`` up to the convolutions that read its
        channels back down (the projection, a squeeze-excite's squeeze), or none.

        Each one's every use must be another member or such a reader, so the added channels never
        leave the block; there must be a depthwise convolution among them."""
        members, stack, depthwise = {start}, [start], False
        while stack:
            cur = stack.pop()
            # (re-emitted inside the dataflow block: a block's output variable cannot be)
            if not isinstance(cur, relax.DataflowVar) or len(users.get(cur, [])) != uses.get(cur, 0):
                return set()
            for nxt in users[cur]:
                value, conv = bound[nxt], _conv(bound[nxt])
                if nxt in members:
                    continue
                if conv is None:
                    if not _channel_preserving(value, cur):
                        return set()
                    members.add(nxt)
                    stack.append(nxt)
                    continue
                weight = static_shape(conv.args[1].ty)
                if not conv.args[0].same_as(cur) or not isinstance(nxt, relax.DataflowVar):
                    return set()
                if conv.attrs.groups == channels and weight[2:] == [1, channels]:
                    depthwise = True
                    members.add(nxt)
                    stack.append(nxt)
                elif conv.attrs.groups != 1 or weight[2] != channels:
                    return set()
        operands_ok = all(op_name(bound[m]) not in _BINARY or all(a in members or _broadcast(a, channels)
                                                                   for a in bound[m].args)
                          for m in members)
        return members if depthwise and operands_ok else set()

    def pad(self, expr: Any, axis: int, to: int, value: float = 0.0) -> Any:
        """``expr`` with ``axis`` padded to ``to`` by ``value``."""
        shape = static_shape(expr.ty)
        width = [0] * (2 * len(shape))
        width[2 * axis + 1] = to - shape[axis]
        return self.builder_.emit(relax.op.nn.pad(expr, width, pad_value=value))

    def visit_var_binding_(self, binding: Any) -> None:
        value, out = binding.value, self.padded.get(binding.var)
        conv = _conv(value)
        source = self.padded.get(value.args[0]) if conv is not None else None
        if out is None and source is None:
            return super().visit_var_binding_(binding)
        args = [self.visit_expr(a) for a in value.args]
        if conv is None:
            for i, old in enumerate(value.args):
                shape = static_shape(old.ty)
                if old not in self.padded and shape and shape[-1] == out[0] > 1:
                    divisor = op_name(value) == "relax.divide" and i == 1  # (a zero divisor would make NaNs)
                    args[i] = self.pad(args[i], len(shape) - 1, out[1], 1.0 if divisor else 0.0)
            new = relax.Call(value.op, args, value.attrs)
        else:
            a, weight, groups = value.attrs, args[1], 1
            if source is not None and a.groups > 1:  # the depthwise convolution
                weight, groups = self.pad(weight, 3, source[1]), source[1]
            else:
                weight = self.pad(weight, 2, source[1]) if source is not None else weight
                weight = self.pad(weight, 3, out[1]) if out is not None else weight
            new = relax.op.nn.conv2d(args[0], weight, strides=a.strides, padding=a.padding, dilation=a.dilation,
                                     groups=groups, data_layout="NHWC", kernel_layout="HWIO", out_layout="NHWC",
                                     out_dtype=a.out_dtype)
        self.set_var_remap(binding.var, self.builder_.emit(new, name_hint=binding.var.name))


def pad_window_channels(lanes: int, half_rate: bool = False) -> Any:
    """The pass (see the module's docstring) for vectors of ``lanes`` channels; where half vectors
    run at full rate (``half_rate``: Zen 4), to whole half vectors (HALF_VECTORS)."""
    if half_rate:
        if not HALF_VECTORS:
            return tvm.transform.Sequential([], name="PadWindowChannels")
        lanes //= 2

    @tvm.ir.transform.module_pass(opt_level=0, name="PadWindowChannels")
    def run(mod: Any, ctx: Any) -> Any:
        for gv, func in list(mod.functions.items()):
            if isinstance(func, relax.Function) and isinstance(func.body, relax.SeqExpr):
                mutator_ = _Pad(mod, lanes)
                mutator_.prepare(func)
                if mutator_.padded:
                    mod[gv] = mutator_.visit_expr(func)
        return mod

    return run
