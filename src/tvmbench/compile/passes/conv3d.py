"""Conv3dAsConv2d: a 3-d convolution as one 2-d convolution over the output's time steps.

Video models (torchvision's r3d_18, mc3_18, r2plus1d_18, s3d) are built of ``conv3d``, which no
tvmbench rule schedules: TVM's generic loop nest ran r3d_18 at 0.10x of ONNX Runtime. A 3-d
convolution with a ``kt x kh x kw`` kernel is, for each output time step ``t``, the sum over
``dt`` of 2-d convolutions of input frame ``t * st + dt * dilation_t - pt`` with the kernel's
slice ``dt``; putting those ``kt`` frames side by side as channels makes the sum one 2-d
convolution with ``kt * C`` input channels, and the output's time steps fold into the batch. So
each ``conv3d`` becomes: pad the time axis, ``kt`` strided slices of it, a concatenation (per
group, frame-major within a group's channels), a fold of time into the batch, ``conv2d`` (with
the weights permuted to match: a load-time transform), and the unfold. ConvertLayout first makes
the CPU build's 3-d convolutions NDHWC (``targets.layouts``), so the concatenation is along the
channels and the folds are views: in NCDHW, each convolution's output went back through two
transposes, and S3D's first one cost 37 ms of its 244. The convolution then takes PackWeights
and the Contraction rule like any other. ``kt = 1`` (R(2+1)D's spatial convolutions) is just the
fold.
"""

from __future__ import annotations

from typing import Any

from tvm import relax

from tvmbench.compile.ir import op_rewrite_pass, static_shape

# Off: 3-d convolutions stay as TVM lowers them (for A/Bs: ``benchmarks/rule_ab.py``).
ENABLED = True
# Temporal convolutions (``kt x 1 x 1``) as ``kt x 1`` ones over the time x space plane (``_temporal``).
TEMPORAL_IN_PLACE = True


def _frames(x: Any, kt: int, st: int, dil: int, pad: tuple[int, int], out_t: int) -> Any:
    """``[N, kt * C, To, H, W]``: for each kernel offset ``dt`` (major), the input frames output
    step ``t`` reads through it, the time axis zero-padded first. (A concat, not a stack:
    ConvertLayout fails on ``stack``.)"""
    if pad != (0, 0):
        x = relax.op.nn.pad(x, [0, 0, 0, 0, pad[0], pad[1], 0, 0, 0, 0])
    slices = [relax.op.strided_slice(x, [2], [dt * dil], [dt * dil + st * (out_t - 1) + 1], [st]) for dt in range(kt)]
    return relax.op.concat(slices, 1) if kt > 1 else slices[0]


def as_conv2d(call: Any) -> Any | None:
    """The rewrite of one ``conv3d`` call, or None when it does not apply."""
    attrs = call.attrs
    layouts = (str(attrs.data_layout), str(attrs.kernel_layout), str(attrs.out_layout))
    xs, ws, out = static_shape(call.args[0].ty), static_shape(call.args[1].ty), static_shape(call.ty)
    if xs is None or ws is None or out is None:
        return None
    if layouts == ("NDHWC", "DHWIO", "NDHWC"):
        return _channels_last(call, xs, ws, out)
    if layouts == ("NCDHW", "OIDHW", "NCDHW"):
        return _channels_first(call, xs, ws, out)
    return None


def _common(attrs: Any) -> tuple[int, list[int], int, int]:
    """Groups, padding (front, top, left, back, bottom, right), time stride and dilation."""
    return int(attrs.groups), [int(p) for p in attrs.padding], int(attrs.strides[0]), int(attrs.dilation[0])


def _channels_last(call: Any, xs: list[int], ws: list[int], out: list[int]) -> Any:
    """NDHWC (after ConvertLayout, the CPU build's form): the frames concatenate along the
    channels, time folds into the batch, and every step is a view or one copy: no transposes."""
    attrs, (x, w) = call.attrs, call.args
    (n, _, h, wd, c), (kt, kh, kw, cg, o), to = xs, ws, out[1]
    g, pad, st, dil = _common(attrs)
    if TEMPORAL_IN_PLACE and kt > 1 and _pointwise_in_space(kh, kw, attrs, pad):
        return _temporal(call, xs, ws, out)
    if pad[0] or pad[3]:
        x = relax.op.nn.pad(x, [0, 0, pad[0], pad[3], 0, 0, 0, 0, 0, 0])
    if kt == 1 and st == 1 and to == xs[1]:  # (every frame: no slice, so a stem sees the clip, nchw_image)
        slices = [x]
    else:
        slices = [relax.op.strided_slice(x, [1], [dt * dil], [dt * dil + st * (to - 1) + 1], [st]) for dt in range(kt)]
    frames = relax.op.concat(slices, 4) if kt > 1 else slices[0]  # [N, To, H, W, kt * C]
    if g > 1 and kt > 1:  # each group's channels together, frame-major within the group
        frames = relax.op.reshape(frames, [n * to * h * wd, kt, g, cg])
        frames = relax.op.permute_dims(frames, [0, 2, 1, 3])
    weight = relax.op.reshape(relax.op.permute_dims(w, [1, 2, 0, 3, 4]), [kh, kw, kt * cg, o])
    y = relax.op.nn.conv2d(relax.op.reshape(frames, [n * to, h, wd, kt * c]), weight,
                           strides=[int(s) for s in attrs.strides[1:]], padding=(pad[1], pad[2], pad[4], pad[5]),
                           dilation=[int(d) for d in attrs.dilation[1:]], groups=g, data_layout="NHWC",
                           kernel_layout="HWIO", out_dtype=attrs.out_dtype)
    return relax.op.reshape(y, out)


def _pointwise_in_space(kh: int, kw: int, attrs: Any, pad: list[int]) -> bool:
    """Whether a 3-d convolution is 1x1 in space, unstrided and unpadded there (a temporal one)."""
    return (kh, kw) == (1, 1) and [int(s) for s in attrs.strides[1:]] == [1, 1] and not any(pad[i] for i in (1, 2, 4, 5))


def _temporal(call: Any, xs: list[int], ws: list[int], out: list[int]) -> Any:
    """A ``kt x 1 x 1`` convolution in NDHWC as a 2-d one with a ``kt x 1`` kernel over the
    ``[T, H * W]`` plane (a view): it reads its frames in place, without the ``kt`` copies of the
    input the concatenation makes (S3D's first temporal convolution: a 7-frame copy of
    16 x 112 x 112 x 64 floats, 5-8 ms of its 85)."""
    attrs, (x, w) = call.attrs, call.args
    (n, t, h, wd, c), (kt, _, _, cg, o) = xs, ws
    g, pad, st, dil = _common(attrs)
    y = relax.op.nn.conv2d(relax.op.reshape(x, [n, t, h * wd, c]), relax.op.reshape(w, [kt, 1, cg, o]),
                           strides=[st, 1], padding=(pad[0], 0, pad[3], 0), dilation=[dil, 1], groups=g,
                           data_layout="NHWC", kernel_layout="HWIO", out_dtype=attrs.out_dtype)
    return relax.op.reshape(y, out)


def _channels_first(call: Any, xs: list[int], ws: list[int], out: list[int]) -> Any:
    """NCDHW (a build without ConvertLayout): frames, then transposes around the ``conv2d``."""
    attrs, (x, w) = call.attrs, call.args
    (n, _, _, h, wd), (o, cg, kt, kh, kw), to = xs, ws, out[2]
    g, pad, st, dil = _common(attrs)
    frames = _frames(x, kt, st, dil, (pad[0], pad[3]), to)  # [N, kt * C, To, H, W]
    frames = relax.op.reshape(frames, [n, kt, g, cg, to, h, wd])
    frames = relax.op.permute_dims(frames, [0, 4, 2, 1, 3, 5, 6])  # [N, To, G, kt, C/G, H, W]
    weight = relax.op.reshape(relax.op.permute_dims(w, [0, 2, 1, 3, 4]), [o, kt * cg, kh, kw])
    y = relax.op.nn.conv2d(relax.op.reshape(frames, [n * to, g * kt * cg, h, wd]), weight,
                           strides=[int(s) for s in attrs.strides[1:]], padding=(pad[1], pad[2], pad[4], pad[5]),
                           dilation=[int(d) for d in attrs.dilation[1:]], groups=g, out_dtype=attrs.out_dtype)
    y = relax.op.reshape(y, [n, to, o, out[3], out[4]])
    return relax.op.permute_dims(y, [0, 2, 1, 3, 4])


def conv3d_as_conv2d() -> Any:
    """The pass (see the module's docstring); after ConvertLayout, which makes CPU builds' 3-d
    convolutions (and the pools and elementwise ops between them) channels-last."""
    return op_rewrite_pass("relax.nn.conv3d", as_conv2d, "Conv3dAsConv2d", lambda: ENABLED)
