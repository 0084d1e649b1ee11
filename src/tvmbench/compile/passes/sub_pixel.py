"""SubPixelConvTranspose: a transposed convolution as one ordinary convolution and a pixel shuffle.

TVM 0.27 lowers ``conv2d_transpose`` by dilating the input with ``stride - 1`` zeros between
pixels and convolving it with the flipped kernel: for stride 2 three quarters of the
multiply-adds are with zeros, and the result is a loop nest none of the CPU rules takes (a
U-Net's 2x2 up-convolution ran 7-11x slower than ONNX Runtime's). It is also legal in NCHW only.

With stride ``s``, the output pixels of each phase ``(o + pad) mod s`` take a fixed subset of
the kernel taps (``t = r + s m``) from consecutive input pixels; so the ``s * s`` phases are
``s * s`` groups of output channels of one stride-1 convolution of the undilated input, with the
kernel padded to ``kr = ceil(k / s)`` taps per phase and flipped, padded by ``kr - 1`` (the
"sub-pixel convolution"). A pixel shuffle interleaves the phases and a slice removes the padding.
The convolution is ordinary: ConvertLayout makes it NHWC and the Contraction rule tiles it (a
2x2 stride-2 up-convolution becomes a 1x1 convolution, a matmul). The weight rearrangement is
weight-only and moves to ``main_transform_params`` (run once at load).

A transposed convolution of a single pixel (a GAN generator's first layer: a code to a 4x4 map)
is a matrix product of the code with the kernel: as a convolution all but one of each output's
``kh * kw`` taps would multiply padding (16x the work for DCGAN's first layer).

Where the kernel is larger than the stride (DCGAN's 4x4 stride-2 padding-1 layers) the one
convolution computes ``(h + 1) x (w + 1)`` positions per phase of which each phase keeps ``h x w``
(on a 4x4 map, 56 % more multiply-adds than the layer has). Where every phase keeps as many pixels
and is at least ``PHASE_CHANNELS`` wide, each phase is its own convolution of exactly the pixels it
keeps (its own padding), and the phases are interleaved without a slice (``_per_phase``).

Groups of one and dilation one only; other transposed convolutions stay as they are.
"""

from __future__ import annotations

from typing import Any

from tvm import relax

from tvmbench.compile.ir import op_rewrite_pass, static_shape

# Off: transposed convolutions stay as TVM lowers them (for A/Bs: ``benchmarks/rule_ab.py``).
ENABLED = True
# A phase convolution narrower than this fills the vectors badly (DCGAN's last layer: 3 channels a
# phase); such layers keep the one convolution and its slice.
PHASE_CHANNELS = 32


def _phase_weights(w: Any, ci: int, co: int, k: tuple[int, int], s: tuple[int, int], kr: tuple[int, int]) -> Any:
    """``[Ci, Co, kh, kw]`` (IOHW) -> ``[Co * sh * sw, Ci, krh, krw]``: the output channel
    ``(c, rh, rw)`` holds taps ``t = r + s * m`` with ``m`` reversed (a correlation)."""
    pad = [(0, 0), (0, 0), (0, kr[0] * s[0] - k[0]), (0, kr[1] * s[1] - k[1])]
    if any(p for _, p in pad):
        w = relax.op.nn.pad(w, [v for pair in pad for v in pair])
    w = relax.op.reshape(w, [ci, co, kr[0], s[0], kr[1], s[1]])
    w = relax.op.flip(relax.op.flip(w, 2), 4)
    w = relax.op.permute_dims(w, [1, 3, 5, 0, 2, 4])
    return relax.op.reshape(w, [co * s[0] * s[1], ci, kr[0], kr[1]])


def _one_pixel(x: Any, w: Any, n: int, ci: int, co: int, k: tuple[int, int], pad: tuple[int, int]) -> Any:
    """A transposed convolution of a 1x1 input: ``[N, Ci] @ [Ci, Co * kh * kw]``, the padding
    cropped from the ``kh x kw`` result (no output padding)."""
    y = relax.op.matmul(relax.op.reshape(x, [n, ci]), relax.op.reshape(w, [ci, co * k[0] * k[1]]))
    y = relax.op.reshape(y, [n, co, k[0], k[1]])
    if pad == (0, 0):
        return y
    return relax.op.strided_slice(y, [2, 3], [pad[0], pad[1]], [k[0] - pad[0], k[1] - pad[1]])


def _phase_ranges(size: int, out: int, pad: int, s: int, kr: int) -> list[tuple[int, int, int]] | None:
    """Per phase ``r`` of one axis: (first output pixel mod ``s``, input padding before, after)
    for a convolution giving exactly the phase's outputs, or None when the phases keep different
    counts or the input would need cropping. The full correlation's ``q``-th output (input padded
    by ``kr - 1``) is output pixel ``q * s + r - pad`` and reads input rows ``q - kr + 1 .. q``."""
    ranges, counts = [], set()
    for r in range(s):
        first, end = -(-(pad - r) // s), -(-(out + pad - r) // s)
        low, high = first - kr + 1, end
        if low > 0 or high < size:
            return None
        counts.add(end - first)
        ranges.append((first * s + r - pad, -low, high - size))
    return ranges if len(counts) == 1 else None


def _per_phase(x: Any, phase_w: Any, shape: tuple[int, ...], s: tuple[int, int], kr: tuple[int, int],
               ranges: tuple[list[tuple[int, int, int]], list[tuple[int, int, int]]]) -> Any:
    """One convolution per phase (its weights sliced from the phases' ``phase_w``, weight-only),
    concatenated in output order and interleaved: ``shape`` is (N, Ci, Co, out_h, out_w)."""
    n, ci, co, out_h, out_w = shape
    w6 = relax.op.reshape(phase_w, [co, s[0], s[1], ci, kr[0], kr[1]])
    order = [(rh, rw) for rh in sorted(range(s[0]), key=lambda r: ranges[0][r][0])
             for rw in sorted(range(s[1]), key=lambda r: ranges[1][r][0])]
    phases = []
    for rh, rw in order:
        w = relax.op.strided_slice(w6, [1, 2], [rh, rw], [rh + 1, rw + 1])
        (_, top, bottom), (_, left, right) = ranges[0][rh], ranges[1][rw]
        phases.append(relax.op.nn.conv2d(x, relax.op.reshape(w, [co, ci, kr[0], kr[1]]),
                                         padding=[top, left, bottom, right]))
    y = relax.op.reshape(relax.op.concat(phases, axis=1), [n, s[0], s[1], co, out_h // s[0], out_w // s[1]])
    return relax.op.reshape(relax.op.permute_dims(y, [0, 3, 4, 1, 5, 2]), [n, co, out_h, out_w])


def sub_pixel(call: Any) -> Any | None:
    """The rewrite of one ``conv2d_transpose`` call, or None when it does not apply."""
    attrs = call.attrs
    x, w = call.args
    xs, ws = static_shape(x.ty), static_shape(w.ty)
    if (xs is None or ws is None or len(xs) != 4 or int(attrs.groups) != 1
            or any(int(d) != 1 for d in attrs.dilation) or str(attrs.data_layout) != "NCHW"
            or str(attrs.kernel_layout) != "IOHW" or str(attrs.out_layout) != "NCHW"):
        return None
    n, ci, h, wd = xs
    co, k = ws[1], (ws[2], ws[3])
    s = tuple(int(v) for v in attrs.strides)
    top, left, bottom, right = (int(v) for v in attrs.padding)
    out_h, out_w = static_shape(call.ty)[2:]
    if (h, wd) == (1, 1) and (top, left) == (bottom, right) and (out_h, out_w) == (k[0] - 2 * top, k[1] - 2 * left):
        return _one_pixel(x, w, n, ci, co, k, (top, left))
    kr = (-(-k[0] // s[0]), -(-k[1] // s[1]))
    # Padding: kr - 1 before (the full correlation); after, as much as the output still needs
    # (each phase's q-th output is the output pixel q * s + r - pad, nothing past the input).
    qh, qw = -(-(out_h + top) // s[0]), -(-(out_w + left) // s[1])
    pad_h, pad_w = max(qh - h, 0), max(qw - wd, 0)
    ranges = (_phase_ranges(h, out_h, top, s[0], kr[0]), _phase_ranges(wd, out_w, left, s[1], kr[1]))
    if (ranges[0] and ranges[1] and co >= PHASE_CHANNELS
            and (out_h // s[0]) * (out_w // s[1]) < (h + pad_h) * (wd + pad_w)):
        return _per_phase(x, _phase_weights(w, ci, co, k, s, kr), (n, ci, co, out_h, out_w), s, kr, ranges)
    y = relax.op.nn.conv2d(x, _phase_weights(w, ci, co, k, s, kr), padding=[kr[0] - 1, kr[1] - 1, pad_h, pad_w])
    qh, qw = h + pad_h, wd + pad_w
    y = relax.op.reshape(y, [n, co, s[0], s[1], qh, qw])
    y = relax.op.permute_dims(y, [0, 1, 4, 2, 5, 3])
    y = relax.op.reshape(y, [n, co, qh * s[0], qw * s[1]])
    return relax.op.strided_slice(y, [2, 3], [top, left], [top + out_h, left + out_w])


def sub_pixel_conv_transpose() -> Any:
    """The pass (see the module's docstring); before ConvertLayout."""
    return op_rewrite_pass("relax.nn.conv2d_transpose", sub_pixel, "SubPixelConvTranspose", lambda: ENABLED)
