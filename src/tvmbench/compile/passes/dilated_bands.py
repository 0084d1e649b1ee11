"""DilatedBands: a dilated convolution computed band by band, each with only the taps that land
on the input.

DeepLabV3's ASPP convolves a 28x28 map (224 px input) with 3x3 kernels dilated by 12, 24 and 36,
padded as much: at dilation 36 every tap but the centre reads padding for every output pixel, at
24 an outer tap reaches the map for 4 of 28 rows. TVM computed all nine taps everywhere (7.4
GFLOP per convolution at 80 % of the peak: 115 ms of the model's 304, where ONNX Runtime took 222
for the whole). Along each axis the taps that land on the input form a contiguous range that
changes only at a few output rows; the output splits into bands (rows x columns) where the range
is fixed, and each band is one unpadded convolution of the input rows and columns it reads with
the kernel's valid taps (a slice of the weights: a load-time transform), the bands concatenated.
The three ASPP convolutions drop to 27 % of their arithmetic. Applied only where the bands remove
enough work (``MAX_KEPT``): an ordinary padded 3x3 convolution would only trade an edge row for
four more kernels. The slices are not copied: PackWeights' convolution reads its band's region
of the input in place (``pack_weights._Pack.slice_source``).
"""

from __future__ import annotations

from typing import Any

from tvm import relax

from tvmbench.compile.ir import op_rewrite_pass, static_shape

# Off: dilated convolutions compute every tap (for A/Bs: ``benchmarks/rule_ab.py``).
ENABLED = True
# Band only when at most this fraction of the convolution's multiply-adds remain. 0.85 bands a
# ResNet's last stage dilated by 4 over a 28x28 map (82 % kept: DeepLabV3-ResNet50 1.026x,
# FCN-ResNet50 1.014x against 0.7, same-process A/Bs); dilation 2 there (91 %) gained nothing more.
MAX_KEPT = 0.85


def _bands(out: int, size: int, taps: int, stride: int, dilation: int, pad: int) -> list[tuple[int, int, int, int]]:
    """``(first, end, first tap, end tap)`` per band of output positions along one axis: the
    positions whose valid taps (reading inside ``[0, size)``) are the same range."""
    bands: list[tuple[int, int, int, int]] = []
    for y in range(out):
        valid = [k for k in range(taps) if 0 <= y * stride + k * dilation - pad < size]
        key = (valid[0], valid[-1] + 1) if valid else (0, 0)
        if bands and bands[-1][2:] == key:
            bands[-1] = (bands[-1][0], y + 1, *key)
        else:
            bands.append((y, y + 1, *key))
    return bands


def _kept(bands: list[tuple[int, int, int, int]], taps: int, out: int) -> float:
    return sum((e - s) * (kb - ka) for s, e, ka, kb in bands) / (taps * out)


def banded(call: Any) -> Any | None:
    """The rewrite of one ``conv2d`` call, or None when it does not apply."""
    attrs = call.attrs
    x, w = call.args
    xs, ws, out = static_shape(x.ty), static_shape(w.ty), static_shape(call.ty)
    if (xs is None or ws is None or out is None or (str(attrs.data_layout), str(attrs.kernel_layout)) != ("NHWC", "HWIO")
            or int(attrs.groups) != 1 or max(int(d) for d in attrs.dilation) == 1):
        return None
    pad = [int(p) for p in attrs.padding]  # top, left, bottom, right
    axes = [_bands(out[1 + a], xs[1 + a], ws[a], int(attrs.strides[a]), int(attrs.dilation[a]), pad[a]) for a in (0, 1)]
    if any(ka == kb for bands in axes for *_, ka, kb in bands):
        return None  # an output band no tap reaches: left to TVM
    if _kept(axes[0], ws[0], out[1]) * _kept(axes[1], ws[1], out[2]) > MAX_KEPT:
        return None
    rows = [relax.op.concat([_band(x, w, attrs, rb, cb, pad) for cb in axes[1]], 2) if len(axes[1]) > 1
            else _band(x, w, attrs, rb, axes[1][0], pad) for rb in axes[0]]
    return relax.op.concat(rows, 1) if len(rows) > 1 else rows[0]


def _band(x: Any, w: Any, attrs: Any, rows: tuple[int, int, int, int], cols: tuple[int, int, int, int],
          pad: list[int]) -> Any:
    """One band's convolution: the input rows and columns its taps read, unpadded."""
    begin, end = [], []
    for a, (y0, y1, ka, kb) in enumerate((rows, cols)):
        s, d = int(attrs.strides[a]), int(attrs.dilation[a])
        begin.append(y0 * s + ka * d - pad[a])
        end.append((y1 - 1) * s + (kb - 1) * d - pad[a] + 1)
    part = relax.op.strided_slice(x, [1, 2], begin, end)
    kernel = relax.op.strided_slice(w, [0, 1], [rows[2], cols[2]], [rows[3], cols[3]])
    return relax.op.nn.conv2d(part, kernel, strides=attrs.strides, padding=(0, 0, 0, 0), dilation=attrs.dilation,
                              data_layout="NHWC", kernel_layout="HWIO", out_dtype=attrs.out_dtype)


def dilated_bands() -> Any:
    """The pass (see the module's docstring); after ConvertLayout (NHWC convolutions)."""
    return op_rewrite_pass("relax.nn.conv2d", banded, "DilatedBands", lambda: ENABLED)
