"""Winograd convolution for 3x3, stride-1 convolutions on CPU: F(m x m, 3 x 3), dilated ones too.

A direct 3x3 convolution costs 9 multiply-adds per output and input channel. Winograd's minimal
filtering computes an ``m x m`` output tile from an ``(m+2) x (m+2)`` input tile with
``(m+2)^2`` multiplies per channel pair instead of ``9 m^2``: 2.25x fewer for m = 2, 4x fewer for
m = 4. The work splits into three kernels:

1. input transform: every input tile ``d`` becomes ``B^T d B`` (adds and a few multiplies by
   small constants), laid out ``[(m+2)^2, tiles, Ci]``;
2. ``(m+2)^2`` independent matrix products ``[tiles, Ci] x [Ci, Co]``: a batch matmul, the
   Contraction rule's register-tiled kernel, on weights ``G g G^T`` transformed (and packed per
   output-channel tile) once at load time by LiftTransformParams;
3. output transform ``A^T M A`` back to NHWC, with the convolution's epilogue (bias, residual
   add, ReLU) fused into its write-back.

ResNets spend about half their arithmetic in 3x3 stride-1 convolutions; ONNX Runtime and
OpenVINO run them as direct convolutions on x86, so this is where TVM can do less work than its
peers rather than the same work faster. The price is numerical: the transforms scale values by
up to ~10 (m = 4), which costs about one decimal digit of fp32 accuracy, well inside the
output check's tolerance; m = 6 would cost three and is not offered.

A convolution dilated by ``d`` reads, for an output row, input rows ``d`` apart with the same
residue mod ``d``: it is ``d`` undilated convolutions, one per residue, each over a map ``d``
times shorter. Its tiles are those of each residue's map (``_tile_rows``), every d-th row, so
nothing is copied: DeepLabV3's dilated ResNet stages (3x3 over 28x28 maps dilated by 2: 14x14
per residue, 2x2 tiles) ran DeepLabV3-ResNet101 1.166x and -ResNet50 1.094x faster (Zen 5,
same-process A/Bs); OpenVINO and ONNX Runtime run them direct.

The transform matrices are Cook-Toom's (TVM's ``topi.nn.winograd_util``). The transforms are
written as explicit sums with the zero coefficients left out, selected by the tile position; the
``Winograd`` rule (``rules/winograd.py``) unrolls the position loops so that every selection resolves at
compile time and each unrolled body is one straight sum over vectors of channels.
"""

from __future__ import annotations

import functools
from typing import Any

import numpy as np

from tvmbench.compile import amx
from tvmbench.compile.ir import TECache, builder_pass, out_dtype, static_shape
from tvmbench.compile.names import WINOGRAD_DILATION as DILATION
from tvmbench.compile.names import WINOGRAD_INPUT, WINOGRAD_OUTPUT, WINOGRAD_PAD, WINOGRAD_PRODUCT
from tvmbench.compile.passes.grouped_conv import pack_block, padded_group
from tvmbench.compile.passes.pack_weights import whole_tiles
from tvmbench.compile.tiles import half_vectors_full_rate, long_pair_vectors, vector_lanes, weight_block
from tvmbench.targets import ResolvedTarget

# Output tile edge m: 4 (4x fewer multiplies, 2.25x more data through the product) or 2 (2.25x
# fewer, 4x more data); 0 turns the rewrite off.
_TILE = 4
# Convolutions with fewer input or output channels keep the direct kernel: the transforms cost
# about (m+2)^2 (Ci + Co) operations per tile against (m+2)^2 Ci Co multiply-adds for the
# product, so with few channels they are not paid back.
_MIN_CHANNELS = 32
# ... and where the output channels are whole vectors, from this many (the product's register tile
# then has no partial vector). Same-process A/Bs against 32 (session 126, Zen 4): a 3-d U-Net's
# full-size convolutions (16 outputs over 48 and 96 frame-channels) 1.275x, squeezenet1_1's
# 16 -> 64 expands 1.125x, ssd300_vgg16 level; with any channels from 16 (before the vectors were
# asked for) yolov8n 1.013x, googlenet 1.015x, raft_small level, and efficientnet_v2_s, whose
# 24 -> 24 convolutions are not whole vectors of 16, lost 2 %. On AVX2 they are whole 8-lane
# vectors and taken: efficientnet_v2_s level there (session 127, Zen 3: 1.018x [0.994-1.033]).
_MIN_WHOLE_VECTOR_CHANNELS = 16
# Output maps smaller than this (edge) keep the direct kernel: the tiles overhang the map (7x7
# in 2x2 tiles computes 8x8) and the transformed weights, (m+2)^2 / 9 times the size of the
# originals, must be streamed from memory for a handful of tiles. 8 on the first (Intel) host,
# where the 7x7 maps measured 2.3 % slower; on Zen 5 (same-process A/Bs, session 64) the 7x7
# maps as Winograd ran resnet18 1.040x (b8 1.095x), resnet34 1.028x (b8 1.088x), the bottleneck
# ResNets, DenseNet, GoogLeNet and RegNet level (0.995-1.017x).
_MIN_OUTPUT_EDGE = 7
_SMALL_MAP_TILE = 2
_SMALL_MAP_EDGE = 16
# Dilated convolutions too (DeepLabV3's and FCN's dilated ResNet stages), as one undilated
# convolution per residue of the rows and columns mod the dilation, each over a map that many
# times smaller (its edges decide the tile and the minimum above).
DILATED = True
# Grouped convolutions too, where each group has at least GROUP_MIN_CHANNELS input and output
# channels (RegNet's groups of 48 to 528): the product is then a batch over the tile positions and
# the groups (``_grouped_product``). Off: they stay direct (``passes/grouped_conv.py``). Same-
# process A/Bs (Zen 5): regnet_x_32gf 1.201x, regnet_x_8gf 1.185x, regnet_y_32gf 1.162x,
# regnet_y_16gf 1.082x, regnet_x_3_2gf (groups of 48) 1.073x, regnet_y_8gf 1.059x; ResNeXt-101
# 32x8d's groups of 32 over 14x14 0.956x (a 32-long reduction pays less for the transforms than
# the direct grouped kernel's), hence the minimum.
GROUPED = True
GROUP_MIN_CHANNELS = 48
# 3-d convolutions (Conv3dAsConv2d: the ``kt`` frames a 3x3x3 one reads, side by side as channels)
# transform each input frame once and sum over the frames in the product (``time_frames``,
# ``_frames_product``); 0: the concatenated frames are transformed, each frame ``kt`` times.
FRAMES_ONCE = True


@functools.cache
def transform_matrices(m: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(A^T [m, m+2], B^T [m+2, m+2], G [m+2, 3]) for F(m, 3), in float64."""
    from tvm.topi.nn.winograd_util import _cook_toom_convolution, _interpolation_points

    a, b, g = _cook_toom_convolution(_interpolation_points(m + 2), m, 3)
    return np.asarray(a).T, np.asarray(b).T, np.asarray(g)


def _combination(coefficients: np.ndarray, terms: list[Any]) -> Any:
    """sum(c * t) with zero coefficients left out and +-1 as an add or a subtract."""
    total = None
    for c, term in zip(coefficients, terms, strict=True):
        c = float(c)
        if c == 0.0:
            continue
        if abs(c) == 1.0:
            value, negative = term, c < 0
        else:
            value, negative = term * np.float32(c).item(), False
        if total is None:
            total = -value if negative else value
        else:
            total = total - value if negative else total + value
    assert total is not None, "a transform row with no coefficient"
    return total


def _select(index: Any, values: list[Any]) -> Any:
    """values[index] as a chain of selects (resolved once the index loop is unrolled)."""
    from tvm import tirx

    out = values[-1]
    for k in range(len(values) - 2, -1, -1):
        out = tirx.Select(index == k, values[k], out)
    return out


def _input_transform(x: Any, m: int, pad: list[int], tiles: tuple[int, int],
                     dilation: tuple[int, int] = (1, 1)) -> Any:
    """``V[(xi, nu), t, c]``: the ``(m+2) x (m+2)`` tile ``t`` of the padded input, transformed.
    Dilated by ``d``, a tile's rows are every d-th (``_tile_rows``)."""
    from tvm import te, topi

    _, bt, _ = transform_matrices(m)
    alpha = m + 2
    n, h, w, channels = (int(v) for v in x.shape)
    th, tw = tiles
    dh, dw = dilation
    top, left = pad[0], pad[1]
    xp = topi.nn.pad(x, [0, top, left, 0], [0, (th // dh * m + 2) * dh - h - top, (tw // dw * m + 2) * dw - w - left, 0],
                     name=WINOGRAD_PAD)

    def value(pos: Any, t: Any, c: Any) -> Any:
        b, y, z = t // (th * tw), t // tw % th, t % tw
        xi, nu = pos // alpha, pos % alpha

        def row(i: int) -> Any:  # (d B)[i, nu]: row i of the tile against column nu of B
            return _select(nu, [_combination(bt[col], [xp[b, _tile_rows(y, i, m, dh), _tile_rows(z, j, m, dw), c]
                                                       for j in range(alpha)]) for col in range(alpha)])

        rows = [row(i) for i in range(alpha)]
        return _select(xi, [_combination(bt[r], rows) for r in range(alpha)])

    return te.compute((alpha * alpha, n * th * tw, channels), value, name=WINOGRAD_INPUT)


def _tile_rows(tile: Any, i: Any, m: int, d: int) -> Any:
    """Row ``i`` of tile ``tile`` along an axis dilated by ``d`` (1: ``tile * m + i``). A dilated
    convolution is ``d`` undilated ones, one per residue of the row mod ``d`` (the rows it reads
    have the same residue): tile ``tile`` is the ``tile // d``-th of residue ``tile % d``."""
    if d == 1:
        return tile * m + i
    return (tile // d * m + i) * d + tile % d


def _output_transform(prod: Any, m: int, out_shape: tuple[int, int, int, int], tiles: tuple[int, int],
                      dilation: tuple[int, int] = (1, 1)) -> Any:
    """``Y[b, h, w, o]`` from the products ``M[(xi, nu), t, o]`` (or a 3-d convolution's ``M[(xi,
    nu), clip, step, t, o]``, ``_frames_product``, image ``b`` a clip's step): ``A^T M A`` of tile
    ``t``."""
    from tvm import te

    at, _, _ = transform_matrices(m)
    alpha = m + 2
    th, tw = tiles
    dh, dw = dilation

    def tile_of(y: Any, d: int) -> Any:  # (the inverse of _tile_rows)
        return y // m if d == 1 else y // d // m * d + y % d

    def value(b: Any, h: Any, w: Any, o: Any) -> Any:
        t = tile_of(h, dh) * tw + tile_of(w, dw)

        def read(pos: int) -> Any:  # (M [pos, tiles, o], or [pos, clips, steps, tiles of one image, o])
            if len(prod.shape) == 3:
                return prod[pos, b * th * tw + t, o]
            steps = int(prod.shape[2])
            return prod[pos, b // steps, b % steps, t, o]

        def column(xi: int) -> Any:  # (M A)[xi, w % m]
            return _select(w // dw % m, [_combination(at[j], [read(xi * alpha + nu) for nu in range(alpha)])
                                         for j in range(m)])

        columns = [column(xi) for xi in range(alpha)]
        return _select(h // dh % m, [_combination(at[i], columns) for i in range(m)])

    return te.compute(out_shape, value, name=WINOGRAD_OUTPUT, attrs={DILATION: [dh, dw]} if (dh, dw) != (1, 1) else None)


def _weight_transform(w: Any, g: Any, block: int) -> Any:
    """``U[(xi, nu), o // block, c, o % block] = (G w G^T)[xi, nu]``: the weights transformed and
    packed per output-channel tile, as the batch product reads them. Runs once, at load time."""
    from tvm import te

    alpha = int(g.shape[0])
    _, _, channels, outs = (int(v) for v in w.shape)
    rk, rl = te.reduce_axis((0, 3), "rk"), te.reduce_axis((0, 3), "rl")
    return te.compute(
        (alpha * alpha, outs // block, channels, block),
        lambda pos, ob, c, p: te.sum(g[pos // alpha, rk] * g[pos % alpha, rl] * w[rk, rl, c, ob * block + p],
                                     axis=[rk, rl]),
        name="winograd_weight")


def _grouped_weight_transform(w: Any, g: Any, block: int) -> Any:
    """``U[(xi, nu), grp, o // block, c, o % block]``: a grouped convolution's weights ``w [3, 3,
    Ci, G, Co]`` (each group's output channels padded to whole blocks) transformed per group and
    packed per output-channel tile. Runs once, at load time."""
    from tvm import te

    alpha = int(g.shape[0])
    _, _, channels, groups, outs = (int(v) for v in w.shape)
    rk, rl = te.reduce_axis((0, 3), "rk"), te.reduce_axis((0, 3), "rl")
    return te.compute(
        (alpha * alpha, groups, outs // block, channels, block),
        lambda pos, grp, ob, c, p: te.sum(g[pos // alpha, rk] * g[pos % alpha, rl] * w[rk, rl, c, grp, ob * block + p],
                                          axis=[rk, rl]),
        name="winograd_weight")


def _grouped_product(v: Any, u: Any, out_dtype: str, rows: int | None = None) -> Any:
    """``M[pos, t, grp, o] = sum_c V[pos, t, grp, c] U[pos, grp, o // block, c, o % block]``: one
    matrix product per tile position and group; with bf16 ``U`` packed in pairs of channels,
    ``[pos, grp, O/block, C/2, block, 2]``, and ``rows``, as ``_batch_product``."""
    from tvm import te

    pairs = len(u.shape) == 6
    _, groups, nb, channels, block = (int(d) for d in u.shape[:5])
    rc = te.reduce_axis((0, 2 * channels if pairs else channels), "rc")

    def weight(pos: Any, grp: Any, o: Any) -> Any:
        return (u[pos, grp, o // block, rc // 2, o % block, rc % 2] if pairs
                else u[pos, grp, o // block, rc, o % block])

    tiles = int(v.shape[1])
    return te.compute(
        (v.shape[0], rows or tiles, groups, nb * block),
        lambda pos, t, grp, o: te.sum(v[pos, te.min(t, tiles - 1) if rows else t, grp, rc].astype(out_dtype)
                                      * weight(pos, grp, o).astype(out_dtype), axis=rc),
        name=WINOGRAD_PRODUCT)


def _batch_product(v: Any, u: Any, out_dtype: str, rows: int | None = None) -> Any:
    """``M[pos, t, o] = sum_c V[pos, t, c] U[pos, o // block, c, o % block]``; with bf16 ``U``
    packed in pairs of channels, ``[pos, O/block, C/2, block, 2]`` (``--precision bf16``), the
    pair read the dot product's way (``compile/bf16.py``). ``rows``: compute this many tiles (more
    than there are), the extra ones re-reading the last: whole register tiles, which the dot
    product needs (the output transform reads only the real ones)."""
    from tvm import te

    pairs = len(u.shape) == 5
    _, nb, channels, block = (int(d) for d in u.shape[:4])
    rc = te.reduce_axis((0, 2 * channels if pairs else channels), "rc")

    def weight(pos: Any, o: Any) -> Any:
        return u[pos, o // block, rc // 2, o % block, rc % 2] if pairs else u[pos, o // block, rc, o % block]

    tiles = int(v.shape[1])
    return te.compute(
        (v.shape[0], rows or tiles, nb * block),
        lambda pos, t, o: te.sum(v[pos, te.min(t, tiles - 1) if rows else t, rc].astype(out_dtype)
                                 * weight(pos, o).astype(out_dtype), axis=rc),
        name=WINOGRAD_PRODUCT)


def _frames_product(v: Any, u: Any, out_dtype: str, kt: int, steps: int, rows: int | None = None) -> Any:
    """``M[pos, b, t, i, o] = sum_(dt, c) V[pos, b, t + dt, i, c] U[pos, o // block, dt * C + c, o %
    block]``: a 3-d convolution's product (``time_frames``) over each frame's transform ``V [pos,
    N, T, tiles, C]``, output step ``t`` reading frames ``t .. t + kt - 1``; ``U`` and ``rows`` as
    ``_batch_product``'s (``U``'s channels frame-major, as Conv3dAsConv2d orders them)."""
    from tvm import te

    pairs = len(u.shape) == 5
    _, nb, _, block = (int(d) for d in u.shape[:4])
    positions, images, _, tiles, channels = (int(d) for d in v.shape)
    rdt, rc = te.reduce_axis((0, kt), "rdt"), te.reduce_axis((0, channels), "rc")

    def weight(pos: Any, o: Any) -> Any:
        if pairs:
            return u[pos, o // block, rdt * (channels // 2) + rc // 2, o % block, rc % 2]
        return u[pos, o // block, rdt * channels + rc, o % block]

    return te.compute(
        (positions, images, steps, rows or tiles, nb * block),
        lambda pos, b, t, i, o: te.sum(v[pos, b, t + rdt, te.min(i, tiles - 1) if rows else i, rc].astype(out_dtype)
                                       * weight(pos, o).astype(out_dtype), axis=[rdt, rc]),
        name=WINOGRAD_PRODUCT)


def time_frames(lookup: Any, x: Any) -> tuple[Any, int] | None:
    """``(frames, kt)`` where ``x`` is Conv3dAsConv2d's input to a 2-d convolution: ``kt``
    consecutive frames of ``frames [N, T, H, W, C]`` (unstrided in time) side by side as channels,
    ``[N * To, H, W, kt * C]``; else None. ``lookup``: the mutator's binding lookup."""
    from tvm import relax

    def op(expr: Any, name: str) -> Any:
        bound = lookup(expr) if isinstance(expr, relax.Var) else None
        return bound if isinstance(bound, relax.Call) and getattr(bound.op, "name", "") == name else None

    def ints(arg: Any) -> list[int]:
        return [int(getattr(v, "value", v)) for v in (arg.fields if isinstance(arg, relax.Tuple) else arg)]

    reshape = op(x, "relax.reshape")
    cat = None if reshape is None else op(reshape.args[0], "relax.concat")
    if cat is None or int(cat.attrs.axis) != 4 or not isinstance(cat.args[0], relax.Tuple):
        return None
    slices = [op(f, "relax.strided_slice") for f in cat.args[0].fields]
    if any(s is None for s in slices) or not all(s.args[0].same_as(slices[0].args[0]) for s in slices):
        return None
    shape = static_shape(slices[0].ty)
    if shape is None or len(shape) != 5:
        return None
    n, steps, h, w, c = shape
    if static_shape(x.ty) != [n * steps, h, w, len(slices) * c]:  # (clips' steps as images, frames as channels)
        return None
    for dt, s in enumerate(slices):
        if (ints(s.args[1]), ints(s.args[2]), ints(s.args[3]), ints(s.args[4])) != ([1], [dt], [dt + steps], [1]):
            return None
    return slices[0].args[0], len(slices)


def plan(x_shape: list[int], w_shape: list[int], out_shape: list[int], strides: list[int],
         dilation: list[int], groups: int, tile: int | None = None, lanes: int = 0) -> tuple[int, int, int] | None:
    """(m, tile rows, tile columns) when an NHWC/HWIO convolution of these shapes is worth a
    Winograd rewrite, else None. ``lanes``: the target's fp32 vector width (0: unknown)."""
    m = _TILE if tile is None else tile
    dh, dw = (int(d) for d in dilation)
    if list(strides) != [1, 1] or (dh, dw) != (1, 1) and (not DILATED or groups != 1):
        return None
    if groups != 1 and (not GROUPED or len(w_shape) != 4 or w_shape[3] % groups):
        return None
    if len(w_shape) != 4 or w_shape[:2] != [3, 3] or len(out_shape) != 4 or len(x_shape) != 4:
        return None
    _, oh, ow, outs = out_shape
    sh, sw = -(-oh // dh), -(-ow // dw)  # (the edges of each residue's undilated map)
    if min(sh, sw) < _SMALL_MAP_EDGE and _TILE:
        m = _SMALL_MAP_TILE
    channels = w_shape[2]  # (a group's input channels, grouped)
    least = _MIN_CHANNELS if groups == 1 else max(_MIN_CHANNELS, GROUP_MIN_CHANNELS)
    if groups == 1 and lanes and outs % lanes == 0:
        least = min(least, _MIN_WHOLE_VECTOR_CHANNELS)
    if m not in (2, 4) or min(channels, outs // groups) < least or min(sh, sw) < _MIN_OUTPUT_EDGE:
        return None
    return m, dh * -(-sh // m), dw * -(-sw // m)


# Under --precision bf16, the products of the (non-grouped) Winograd convolutions over bf16 pairs:
# the input and the weights transformed in fp32, then rounded (0: the products stay fp32).
BF16_PRODUCT = 1
# ... and of the grouped ones (``_grouped``; not on AMX targets, whose rules take no grouped product).
BF16_GROUPED_PRODUCT = 1
# Under --precision bf16, Winograd takes the 3x3 convolutions at all (0: they stay direct, bf16).
BF16_WINOGRAD = 1
# ... and only those whose output map's edge is at least this; smaller maps stay direct, bf16: on a
# 7x7 map (F(2,3)) the transformed weights are 16/9 of the direct ones and the product's few rows
# reuse them little. Same-process A/Bs against 0 (`rule_ab.py M passes.winograd.BF16_MIN_EDGE 0
# --precision bf16 --block 4`, session 66; > 1: 14 faster): resnet34 1.06x / 1.13x (both build
# orders), resnet50 1.015x / 1.02x, resnet18 1.07x, densenet121 and googlenet level; 28 (14x14
# maps direct too) against 14: resnet34 0.87x in both orders, resnet50 level.
BF16_MIN_EDGE = 14
# ... and, where the input map's fp32 bytes are over L2, only those over at least this many input
# channels (per group); fewer stay direct, bf16. In bf16 the product runs up to twice fp32's rate
# and the transforms (fp32) do not; summing few channels, the product is short and the
# transforms' traffic, which goes past L2 on such a map, is the larger part (inception_v3's
# Conv2d_2a_3x3, 32 -> 32 at 147x147: a Winograd product of 2.2 ms and transforms of 1.2 against
# OpenVINO's direct 1.1 ms). On maps within L2 the transforms stay cheap: squeezenet1_1's 32 ->
# 128 at 27x27 direct lost 0.97-0.99x, googlenet's level. Measured in docs/performance.md
# (session 70).
BF16_MIN_CHANNELS = 48
# On CPUs with AMX, bf16 3x3 convolutions whose direct form goes on tiles (input channels in steps
# of 32 or 16, output channels in blocks of 32 or padded to them: amx.PAD_OUTPUTS) stay direct: a tile product runs at 16 times the FMA's
# rate, so Winograd's saving in multiplies is small against its transforms' traffic (fp32, through
# memory). Same-process A/Bs of Winograd off (`rule_ab.py M passes.winograd.BF16_WINOGRAD 0
# --precision bf16 --block 5`, session 87, Intel Xeon with AMX): resnet18 1.13x, resnet50 1.14x.
AMX_DIRECT = 1


def _direct_in_bf16(x_shape: list[int], w_shape: list[int], out_shape: list[int], l2_bytes: int,
                    amx_tiles: bool) -> bool:
    """Whether a 3x3 convolution stays direct under --precision bf16 (BF16_WINOGRAD,
    BF16_MIN_EDGE, BF16_MIN_CHANNELS, AMX_DIRECT)."""
    on_tiles = AMX_DIRECT and amx_tiles and amx.channel_steps(w_shape[2]) is not None and (
        w_shape[3] % amx.PACK == 0 or amx.PAD_OUTPUTS)
    return (not BF16_WINOGRAD or on_tiles or min(out_shape[1:3]) < BF16_MIN_EDGE
            or (w_shape[2] < BF16_MIN_CHANNELS and 4 * int(np.prod(x_shape)) > l2_bytes))


def winograd_conv3x3(target: ResolvedTarget) -> Any:
    """The Relax pass: NHWC/HWIO 3x3 stride-1 convolutions that ``plan`` accepts become the three
    Winograd kernels, with the weight transform left for LiftTransformParams."""
    import tvm
    from tvm.relax.expr_functor import PyExprMutator, mutator

    from tvmbench.compile.passes.bf16_dense import marked

    lanes, half = vector_lanes(target.tvm(), 32), half_vectors_full_rate(target.tvm())
    amx_tiles = amx.usable(target.tvm())

    @mutator
    class Rewrite(PyExprMutator):
        def __init__(self, mod: Any) -> None:
            super().__init__(mod)
            self.call_te = TECache(self.builder_)
            self.bf16 = marked(mod)  # (--precision bf16: the product over bf16 pairs, BF16_PRODUCT)

        def visit_call_(self, call: Any) -> Any:
            call = super().visit_call_(call)
            if not (isinstance(call.op, tvm.ir.Op) and call.op.name == "relax.nn.conv2d"):
                return call
            a = call.attrs
            x, w = call.args
            x_shape, w_shape, out_shape = static_shape(x.ty), static_shape(w.ty), static_shape(call.ty)
            if (a.data_layout != "NHWC" or a.kernel_layout != "HWIO" or a.out_layout != "NHWC"
                    or None in (x_shape, w_shape, out_shape)
                    or (self.bf16 and _direct_in_bf16(x_shape, w_shape, out_shape, target.l2_bytes, amx_tiles))):
                return call
            found = plan(x_shape, w_shape, out_shape, [int(v) for v in a.strides],
                         [int(v) for v in a.dilation], int(a.groups), lanes=lanes)
            if found is None:
                return call
            m, th, tw = found
            dtype = out_dtype(call, x)
            tiles = x_shape[0] * th * tw
            if int(a.groups) > 1:
                pairs = bool(self.bf16 and BF16_GROUPED_PRODUCT and not amx_tiles)
                return _grouped(self.builder_.emit, self.call_te, call, found, dtype, lanes, half, pairs)
            # The register tile's output-channel block, or half of it when the channels are not
            # a multiple of it (48 channels: one vector per tile instead of two).
            full = weight_block(target, tiles, True)
            block = next((b for b in (full, full // 2) if b >= 4 and w_shape[3] % b == 0), None)
            if block is None:
                return call
            # (not for AMX's bf16 products, which pad their rows instead: measured without AMX only)
            once = FRAMES_ONCE and [int(v) for v in a.dilation] == [1, 1] and not (amx_tiles and self.bf16)
            frames = time_frames(self.lookup_binding, x) if once else None
            return _ungrouped(self.builder_.emit, self.call_te, call, found, dtype, block,
                              bool(self.bf16 and BF16_PRODUCT), amx_tiles, frames)

    return builder_pass(Rewrite, "WinogradConv3x3")


def _ungrouped(emit: Any, call_te: Any, call: Any, found: tuple[int, int, int], dtype: str, block: int,
               bf16: bool, amx_tiles: bool, frames: tuple[Any, int] | None) -> Any:
    """An ungrouped convolution's Winograd kernels, its weights packed in ``block`` output
    channels; with ``bf16`` the product over bf16 pairs. ``frames`` (``time_frames``): the
    convolution is a 3-d one's, its input ``kt`` frames side by side as channels; each frame is
    then transformed once, not ``kt`` times, and the product reads the ``kt`` it sums."""
    from tvm import relax

    m, th, tw = found
    a, (x, w) = call.attrs, call.args
    x_shape, w_shape, out_shape = static_shape(x.ty), static_shape(w.ty), static_shape(call.ty)
    tiles = x_shape[0] * th * tw
    _, _, g = transform_matrices(m)
    u = emit(call_te(_weight_transform, w, relax.const(g.astype(str(w.ty.dtype))), block,
                     primfunc_name_hint="winograd_weight"))
    dilation = (int(a.dilation[0]), int(a.dilation[1]))
    source = x
    if frames is not None:  # (every frame of the 3-d convolution's input, each transformed once)
        n, steps, h, wd, c = static_shape(frames[0].ty)
        source = emit(relax.op.reshape(frames[0], [n * steps, h, wd, c]))
    v = emit(call_te(_input_transform, source, m, [int(p) for p in a.padding], (th, tw), dilation,
                     primfunc_name_hint=WINOGRAD_INPUT))
    if frames is not None:
        v = emit(relax.op.reshape(v, [(m + 2) ** 2, n, steps, th * tw, c]))
    rows = None
    if bf16 and (w_shape[2] if frames is None else c) % 2 == 0 and block % 16 == 0 and dtype == "float32":
        # (transformed in fp32, rounded after: the transforms' sums keep their precision)
        v = emit(relax.op.astype(v, "bfloat16"))
        u = emit(relax.op.layout_transform(emit(relax.op.astype(u, "bfloat16")),
                                           lambda pos, ob, c, p: (pos, ob, c // 2, p, c % 2)))
        # (or in tiles of 13 rows of one or two vectors: tiles.long_pair_vectors)
        rows = whole_tiles(tiles if frames is None else th * tw, fitted=True,
                           long=not amx_tiles and long_pair_vectors(w_shape[3]))
        if amx_tiles and amx.fits(w_shape[2], block):
            # (AMX tiles load their rows from memory: zero rows where no tile divides, never a re-read)
            padded = amx.padded_rows(tiles)
            v = emit(relax.op.nn.pad(v, [0, 0, 0, padded - tiles, 0, 0])) if padded else v
            rows = None
    if frames is None:
        prod = emit(call_te(_batch_product, v, u, dtype, rows, primfunc_name_hint=WINOGRAD_PRODUCT))
    else:
        steps_out = x_shape[0] // n
        prod = emit(call_te(_frames_product, v, u, dtype, frames[1], steps_out, rows,
                            primfunc_name_hint=WINOGRAD_PRODUCT))
    return call_te(_output_transform, prod, m, tuple(out_shape), (th, tw), dilation, primfunc_name_hint=WINOGRAD_OUTPUT)


def _grouped(emit: Any, call_te: Any, call: Any, found: tuple[int, int, int], dtype: str, lanes: int,
             half: bool, bf16: bool = False) -> Any:
    """A grouped convolution's Winograd kernels: its weights ``[3, 3, Ci, G * Co]`` as ``[3, 3,
    Ci, G, Co]``, each group's output channels padded to whole vectors as the direct grouped
    kernel pads them (``grouped_conv.padded_group``), the product over (position, group) pairs,
    and the padding sliced off after it, in its epilogue. With ``bf16`` the product reads bf16
    pairs of each group's channels where they pair and fill the dot product's vectors."""
    from tvm import relax

    m, th, tw = found
    a, (x, w) = call.attrs, call.args
    x_shape, w_shape = static_shape(x.ty), static_shape(w.ty)
    groups, ci = int(a.groups), w_shape[2]
    co = w_shape[3] // groups
    wide = padded_group(co, lanes, half)
    block = pack_block(wide, lanes, half) or wide
    _, _, g = transform_matrices(m)
    w5 = emit(relax.op.reshape(w, [3, 3, ci, groups, co]))
    if wide != co:
        w5 = emit(relax.op.nn.pad(w5, [0, 0, 0, 0, 0, 0, 0, 0, 0, wide - co]))
    u = emit(call_te(_grouped_weight_transform, w5, relax.const(g.astype(str(w.ty.dtype))), block,
                     primfunc_name_hint="winograd_weight"))
    v = emit(call_te(_input_transform, x, m, [int(p) for p in a.padding], (th, tw), primfunc_name_hint=WINOGRAD_INPUT))
    positions, tiles = (m + 2) ** 2, x_shape[0] * th * tw
    v = emit(relax.op.reshape(v, [positions, tiles, groups, ci]))
    rows = None
    if bf16 and ci % 2 == 0 and block % 16 == 0 and dtype == "float32":  # (as the ungrouped product's)
        v = emit(relax.op.astype(v, "bfloat16"))
        u = emit(relax.op.layout_transform(emit(relax.op.astype(u, "bfloat16")),
                                           lambda pos, grp, ob, c, p: (pos, grp, ob, c // 2, p, c % 2)))
        rows = whole_tiles(tiles, fitted=True, long=long_pair_vectors(wide))
    prod = emit(call_te(_grouped_product, v, u, dtype, rows, primfunc_name_hint=WINOGRAD_PRODUCT))
    if wide != co or rows:
        prod = emit(relax.op.strided_slice(prod, axes=[1, 3], begin=[0, 0], end=[tiles, co]))
    prod = emit(relax.op.reshape(prod, [positions, tiles, groups * co]))
    return call_te(_output_transform, prod, m, tuple(static_shape(call.ty)), (th, tw), primfunc_name_hint=WINOGRAD_OUTPUT)
