"""GroupNormByChannel: a group norm as per-channel sums, a per-group statistic, and one
elementwise scale and shift.

TVM legalizes ``group_norm`` into one fused function that reduces over each group's channels
and pixels, then normalises. Channels last (after ConvertLayout), each group's four channels
are strided in every pixel, no CPU rule takes that reduction, and DLight's runs it with a scalar
chain per group: a diffusion U-Net's residual block (128 channels in 32 groups, 32x32) spent
2.6 ms per group norm, 57 % of the model, where ONNX Runtime ran the whole model in 7.6 ms.
Channels first, a group's channels and pixels are one contiguous run the row rule cannot see as
one row.

Written as the statistics PyTorch computes, in steps the rules schedule well:

1. ``sum(x)`` and ``sum(x * x)`` over the spatial axes, per channel (channels last: a reduction
   whose output's channels are contiguous in its input, like a global pooling; channels first: a
   row reduction over each channel's pixels);
2. the per-group mean and variance from ``[N, G, C/G]`` of those (a few hundred floats);
3. ``x * scale[c] + shift[c]`` with ``scale = gamma * rsqrt(var + eps)`` and ``shift = beta -
   mean * scale`` broadcast per channel, one elementwise pass that fuses with what follows (the
   U-Net's SiLU).

The variance is ``E[x^2] - E[x]^2``, as TVM's own legalization computes it. An instance norm
channels first (a group per channel: each group one contiguous row) stays as it is: RowReduction
computes it in one pass per row, which three passes lose to (a speech front end 0.85x).
"""

from __future__ import annotations

import math
from typing import Any

from tvm import relax

from tvmbench.compile.ir import op_rewrite_pass, static_shape

# Off: group norms stay as TVM legalizes them (for A/Bs: ``benchmarks/rule_ab.py``).
ENABLED = True
# Off: instance norms stay as TVM legalizes them.
INSTANCE_AS_GROUP = True


def by_channel(call: Any) -> Any | None:
    """The rewrite of one ``group_norm`` call, or None when it does not apply (a symbolic shape,
    a float type other than float32, axes beyond batch, channel and spatial)."""
    attrs = call.attrs
    x, gamma, beta = call.args
    shape = static_shape(x.ty)
    if shape is None or str(x.ty.dtype) != "float32" or not (attrs.center and attrs.scale):
        return None
    rank, channel, groups = len(shape), int(attrs.channel_axis) % len(shape), int(attrs.num_groups)
    spatial = sorted(int(a) % rank for a in attrs.axes)
    if channel == 0 or sorted([0, channel, *spatial]) != list(range(rank)) or shape[channel] % groups:
        return None
    if channel < min(spatial) and groups == shape[channel]:
        return None  # (an instance norm channels first: one row per channel, which RowReduction takes whole)
    n, c = shape[0], shape[channel]
    f32 = lambda v: relax.const(v, "float32")  # noqa: E731
    count = f32(float(math.prod(shape[a] for a in spatial) * (c // groups)))

    def group_sum(t: Any) -> Any:  # [N, C] -> [N, G, 1]
        return relax.op.sum(relax.op.reshape(relax.op.sum(t, spatial), [n, groups, c // groups]), [2], keepdims=True)

    mean = relax.op.divide(group_sum(x), count)
    var = relax.op.subtract(relax.op.divide(group_sum(relax.op.multiply(x, x)), count), relax.op.multiply(mean, mean))
    rstd = relax.op.rsqrt(relax.op.add(var, f32(float(attrs.epsilon))))
    scale = relax.op.multiply(relax.op.reshape(relax.op.broadcast_to(rstd, [n, groups, c // groups]), [n, c]), gamma)
    shift = relax.op.subtract(beta, relax.op.multiply(
        relax.op.reshape(relax.op.broadcast_to(mean, [n, groups, c // groups]), [n, c]), scale))
    per_channel = [n if a == 0 else c if a == channel else 1 for a in range(rank)]
    return relax.op.add(relax.op.multiply(x, relax.op.reshape(scale, per_channel)), relax.op.reshape(shift, per_channel))


def instance_as_group_norm(call: Any) -> Any | None:
    """An ``instance_norm`` as the ``group_norm`` of one channel a group (over the same axes, less
    a batch axis of 1: torch.export folds the batch into the channels and normalises [1, N * C, ...]
    over axes 0, 2, 3, ...). TVM's own legalization of an instance norm is a reduction no rule
    schedules: a 3-d U-Net's first one (16 channels of 64^3) took 330 ms, against a few ms as a
    group norm, which ConvertLayout also moves to channels last with the convolutions around it."""
    attrs = call.attrs
    x, gamma, beta = call.args
    shape = static_shape(x.ty)
    if shape is None:
        return None
    channel = int(attrs.channel_axis) % len(shape)
    axes = [a for a in (int(v) % len(shape) for v in attrs.axes) if not (a == 0 and shape[0] == 1)]
    if 0 in axes or channel != 1:
        return None
    return relax.op.nn.group_norm(x, gamma, beta, shape[channel], channel, axes, float(attrs.epsilon),
                                  bool(attrs.center), bool(attrs.scale))


def instance_norms_as_group_norms() -> Any:
    """The rewrite of ``instance_as_group_norm``, before ConvertLayout."""
    return op_rewrite_pass("relax.nn.instance_norm", instance_as_group_norm, "InstanceAsGroupNorm",
                           lambda: INSTANCE_AS_GROUP)


def group_norm_by_channel() -> Any:
    """The pass (see the module's docstring); after ConvertLayout, which decides the layout."""
    return op_rewrite_pass("relax.nn.group_norm", by_channel, "GroupNormByChannel", lambda: ENABLED)
