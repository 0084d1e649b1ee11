"""PackWeights: NHWC convolutions and dense layers read their weights in packed layouts,
``[O/block, KH, KW, I, block]`` and ``[N/block, K, block]``.

In HWIO (or a transposed dense weight, ``[K, N]``) the weights of one output-channel tile
(``block`` channels, the CPU contraction rule's register tile) are 2 cache lines per input
channel, ``O * 4`` bytes apart: 2 KB for 512 channels, 12 KB for BERT's 3072, which maps every
line of the panel onto the same few L1 sets, so the deep layers of a ResNet ran at half the
speed of the shallow ones. Packed, a tile's panel is one contiguous stream. Dense weights are
packed only when they are weight parameters (or a transpose of one): packing an activation
would cost a copy on every call. The packing is a weight-only ``layout_transform``, which
LiftTransformParams moves to load time. Grouped convolutions keep HWIO; channel counts that are
not a multiple of ``block`` take blocks of three vectors where those divide them (``odd_vector_block``),
else are padded with zero channels and sliced off the output.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from tvm import relax, te, topi
from tvm.relax.expr_functor import PyExprMutator, mutator

from tvmbench.compile import amx
from tvmbench.compile.ir import (
    TECache,
    bindings,
    builder_pass,
    from_weights,
    numel,
    op_name,
    out_dtype,
    static_shape,
    weight_params,
)
from tvmbench.compile.passes import fuse_expansion
from tvmbench.compile.passes.reshape_last import elementwise_before_reshape
from tvmbench.compile.tiles import (
    half_vectors_full_rate,
    long_pair_rows,
    long_pair_vectors,
    sixteen_registers,
    weight_block,
)
from tvmbench.compile.tir import fuse_expansion_bytes
from tvmbench.targets import ResolvedTarget


def packed_conv(x: Any, wp: Any, strides: list[int], pad: list[int], dilation: list[int], out_dtype: str,
                nchw: bool = False, window: list[int] | None = None, columns: int | None = None) -> Any:
    """The NHWC convolution over a packed ``[O/block, KH, KW, I, block]`` weight, or a bf16 one
    packed in pairs of input channels, ``[O/block, KH, KW, I/2, block, 2]`` (TE); with
    ``nchw``, the input is read in NCHW (a stem's, see ``NCHW_STEM_CHANNELS``), the output NHWC,
    and a bf16 weight is packed in pairs of neighbouring window columns, ``[O/block, I, KH, KW/2,
    block, 2]`` (``column_pairs``), the fp32 input rounded to bf16 as it is padded.
    ``window`` (unpadded only): ``[top, left, height, width]``, the region of ``x`` convolved (a
    slice the convolution reads in place, see ``_Pack.slice_source``). ``columns``: compute this
    many output columns (more than there are), the extra ones re-reading the last (the caller
    slices them off)."""
    h, w = (int(v) for v in (x.shape[2:4] if nchw else x.shape[1:3]))
    top_row, left_col = 0, 0
    if window is not None:
        top_row, left_col, h, w = window
    pairs = len(wp.shape) == 6
    column_pairs = pairs and nchw
    if column_pairs:
        ob, ci, kh, kw, pb = (int(v) for v in wp.shape[:5])
        kw *= 2
    else:
        ob, kh, kw, ci, pb = (int(v) for v in wp.shape[:5])
        ci = 2 * ci if pairs else ci
    top, left, bottom, right = pad
    deeper = 0 if nchw else ci - int(x.shape[3])  # (channels beyond the input's, their weights zero: ``_Pack.deeper``)
    if any(pad) or (nchw and str(x.dtype) != str(wp.dtype)):
        before, after = ([0, 0, top, left], [0, 0, bottom, right]) if nchw else ([0, top, left, 0], [0, bottom, right, deeper])
        same = str(x.dtype) == str(wp.dtype)
        x = (_deeper_pad(x, before, after) if deeper else topi.nn.pad(x, before, after, name="pad")) if same \
            else _rounded_pad(x, before, after, wp.dtype)
    oh = (h + top + bottom - (kh - 1) * dilation[0] - 1) // strides[0] + 1
    ow = (w + left + right - (kw - 1) * dilation[1] - 1) // strides[1] + 1
    rh, rw, rc = te.reduce_axis((0, kh), "rh"), te.reduce_axis((0, kw), "rw"), te.reduce_axis((0, ci), "rc")

    def pixel(n: Any, y: Any, z: Any) -> Any:
        z = te.min(z, ow - 1) if columns else z
        yy = y * strides[0] + rh * dilation[0] + top_row
        zz = z * strides[1] + rw * dilation[1] + left_col
        return x[n, rc, yy, zz] if nchw else x[n, yy, zz, rc]

    def weight(o: Any) -> Any:
        if column_pairs:
            return wp[o // pb, rc, rh, rw // 2, o % pb, rw % 2]
        return wp[o // pb, rh, rw, rc // 2, o % pb, rc % 2] if pairs else wp[o // pb, rh, rw, rc, o % pb]

    return te.compute(
        (x.shape[0], oh, columns or ow, ob * pb),
        lambda n, y, z, o: te.sum(pixel(n, y, z).astype(out_dtype) * weight(o).astype(out_dtype),
                                  axis=[rc, rh, rw] if column_pairs else [rh, rw, rc]),
        name="conv2d_nhwc_packed")


def _deeper_pad(x: Any, before: list[int], after: list[int]) -> Any:
    """An NHWC ``x`` zero-padded in its rows and columns and given ``after[3]`` more channels that
    copy the last real ones (their weights are zero: ``_Pack.deeper``; zeros there would make a
    segment of constant bf16 vectors, which TVM's bf16 storage legalisation fails on)."""
    import tvm

    n, h, w, ci = (int(v) for v in x.shape)
    clamp = lambda v, hi: te.max(te.min(v, hi - 1), 0)  # noqa: E731  (in bounds where not inside too)

    def value(b: Any, y: Any, z: Any, c: Any) -> Any:
        yy, zz = y - before[1], z - before[2]
        inside = tvm.tirx.all(yy >= 0, yy < h, zz >= 0, zz < w)
        at = tvm.tirx.if_then_else(c < ci, c, c - after[3])
        return tvm.tirx.if_then_else(inside, x[b, clamp(yy, h), clamp(zz, w), at], tvm.tirx.const(0, x.dtype))

    return te.compute((n, h + before[1] + after[1], w + before[2] + after[2], ci + after[3]), value, name="pad")


def _rounded_pad(x: Any, before: list[int], after: list[int], dtype: str) -> Any:
    """``x`` zero-padded and cast to ``dtype`` in one pass (a bf16 stem's fp32 image)."""
    import tvm

    def value(*i: Any) -> Any:
        inside = [tvm.tirx.all(i[d] >= before[d], i[d] < before[d] + x.shape[d])
                  for d in range(len(before)) if before[d] or after[d]]
        v = x[tuple(i[d] - before[d] for d in range(len(before)))].astype(dtype)
        return tvm.tirx.if_then_else(tvm.tirx.all(*inside), v, tvm.tirx.const(0, dtype)) if inside else v

    return te.compute([x.shape[d] + before[d] + after[d] for d in range(len(before))], value, name="pad")


# A convolution over at most this many input channels whose input is a transpose from NCHW (the
# model's image, which ConvertLayout transposes for the stem) reads the NCHW tensor itself.
NCHW_STEM_CHANNELS = 4
# ... and so does a video model's stem over the frames of an NCDHW clip (``nchw_image``): S3D's
# 1x7x7 one, in bf16 then over pairs of window columns like an image's (0: it reads the clip
# transposed to NDHWC, in bf16 over its 3 channels padded to 4).
CLIP_STEMS = 1
# A convolution over a slice of a tensor's rows and columns reads the tensor in place (off: the
# slice is copied first; for A/Bs, ``benchmarks/rule_ab.py``).
SLICES_IN_PLACE = True
# Output channels that two-vector blocks do not divide but three do (``odd_vector_block``).
THREE_VECTOR_BLOCKS = True
# Output channels between one vector and one block (24 on AVX-512: three 8-lane vectors, which run
# at half the FMA rate where half vectors do not reach the peak) are packed as one block of two
# whole vectors, and those between one block and three vectors (40) as one block of three, padded
# with zero channels and sliced off the output like any channel count no block divides (``narrow``);
# before, they stayed in HWIO in 8-lane tiles (mnasnet1_0's and mobilenet_v2's projections to 24
# and 40 channels, at 48-49 % of the peak). Same-process A/Bs (Zen 5, session 55, `rule_ab.py M
# passes.pack_weights.NARROW_OUTPUTS 0` for the 24-channel half; both build orders where two):
# mnasnet1_0 1.011x / 1.021x, b3 at 193 px 1.012x, b8 1.015x; mobilenet_v2 1.012x, b8 1.020x;
# efficientnet_b0 1.008x; shufflenet_v2_x1_0 level; the 40-channel half over it: mnasnet1_0
# 1.012x / 1.000x, b3 at 193 px 1.027x / 1.021x, b8 1.034x; efficientnet_b0 1.004x,
# mobilenet_v3_large 1.001x.
NARROW_OUTPUTS = True
# An activation transposed for a product over at least this many rows is packed as the transpose
# writes it (``_Pack.transposed_activation``; 0: never). A Perceiver's cross-attention scores,
# 256 latents x 4096 keys of 512, ran at 33 % of the peak on the Zen 3 host, the transposed keys'
# rows 16 KB apart.
TRANSPOSED_ACTIVATIONS = 64
# (elementwise steps and views between the transpose and the product: the attention's scale)
_ON_THE_WAY = ("relax.reshape", "relax.expand_dims", "relax.broadcast_to", "relax.multiply", "relax.divide",
               "relax.astype")
# A product with a weight per batch (a mixture of experts' ``[E, K, N]``, a parameter or a
# transpose of one) reads each expert's weight packed as a dense layer's: unpacked, its rows are
# ``N * 4`` bytes apart, and on the Zen 3 host the experts' products ran at 35-45 % of the FMA
# peak.
BATCHED_WEIGHTS = True
# (an einsum's weight arrives through reshapes and transposes, all lifted to load time with it)
WEIGHT_VIEWS = ("relax.permute_dims", "relax.astype", "relax.reshape", "relax.expand_dims", "relax.squeeze")
# Batched products over computed columns that no 4-lane vector divides take zero columns
# (``_Pack.whole_columns``).
NARROW_COLUMNS = True
# So do dense layers of fewer outputs than a two-vector block that no 4-lane vector divides (a
# graph network's 7 classes over 2708 nodes, NeRF's 3 colours over 8192 points): unpacked, they
# ran one multiply-add at a time.
NARROW_DENSE = True
# A convolution with fewer output channels than this (the contraction rule's vector axis needs
# 4: ``rules.contraction.match``) is packed in one vector's block of zero-padded channels, sliced
# off the output. In HWIO no rule took it and it ran on the fallback schedule, one multiply-add at
# a time: RAFT's flow heads (128 or 256 -> 2 channels, 3x3) 0.87 ms a call, 12 calls an inference;
# FCOS's centerness head (256 -> 1) over its five pyramid levels.
FEW_OUTPUTS = 4
# Dense layers on 16 vector registers (AVX2) are packed in blocks of three vectors (24 fp32
# columns) where those divide the outputs and the rows are 4 or more (``dense_block``): the
# contraction rule then tiles them 3 vectors x 4 rows, 12 accumulators and 12 FMAs per 7 loads,
# against the 2 x 4 tile's 8 per 6 (two vectors reach 6 rows only where 6 divides the rows; four
# vectors 3 rows). Same-process A/Bs against blocks of two vectors (Zen 3, session 82,
# `benchmarks/rule_ab.py M passes.pack_weights.THREE_VECTOR_DENSE_16_REGS False`): bert-base
# 1.040x (its dense kernels 1.03-1.06x), GPT-2 1.025x, ViT-B/16 1.010x, T5-base 1.033x at batch
# 1; bert-base 1.09x and GPT-2 1.052x at batch 3 x 77 tokens, ViT-B/16 1.047x at batch 3,
# distilbert 1.054x at batch 8. A single row (VGG's classifier at batch 1) keeps its wide tile.
THREE_VECTOR_DENSE_16_REGS = True
# ... their rows computed in whole tiles of 4 where 4 does not divide them (the extra rows
# re-read the last one and are sliced off, as in ``whole_tiles``): bert-base at batch 3 x 77 tokens
# (231 rows, else 3 x 3 tiles) 1.014x [1.011-1.016].
THREE_VECTOR_ROWS_BY_4 = True
# ... and outputs that 24 does not divide padded with zero columns to whole blocks of 24 where at
# most 1 / THREE_VECTOR_PADDED of them are padding (0: never): bert-large's 1024 and 4096 outputs
# (0.8 % and 0.2 % padding) 1.034x [1.030-1.040]; GPT-2's LM head (50257 words, before padded to
# blocks of 32) 63.3 -> 53.6 ms in the model, which ran 1.048x [1.044-1.050].
THREE_VECTOR_PADDED = 64
# A dense layer padded to whole blocks (``pack_matmul``) takes blocks of twice the width: the
# contraction rule's widest tile, four vectors, spans two blocks, and over an odd count (GPT-2's
# LM head, 1571 blocks of 32) it took two vectors. Same-process A/Bs against 0 (Zen 4, session 69,
# `rule_ab.py gpt2 passes.pack_weights.EVEN_PADDED_BLOCKS 0`): bf16 1.043x (its head 1.1-1.2x
# alone), fp32 0.990x (1.016x / 1.005x in the two host states).
EVEN_PADDED_BLOCKS = 1
# On 16 vector registers a 1x1 convolution (stride 1, no padding) over rows that 4 does not
# divide (7-, 13-, 14-pixel rows) is computed as a dense layer over its pixels, flattened
# (a reshape, a view): the contraction rule tiles a convolution's row axis, one map row, and took
# 1 vector x 7 rows (7 FMAs per 8 loads) over 7x7 maps, where the dense layer's blocks of three
# vectors take 3 x 4 over all the batch's pixels (12 per 7; ``dense_block``). Its epilogue (bias,
# ReLU, a residual add) moves onto the 2-D output (``reshape_last._split``), so it stays in the
# dense kernel. Not for the 1x1 convolutions FuseExpansionIntoWindow may join with a depthwise
# window (``_joinable``), nor where ``dense_block`` gives blocks narrower than two vectors
# (shufflenet's 232 channels: blocks of 8, 0.87x). Same-process A/Bs against False (Zen 3,
# session 83, `rule_ab.py M passes.pack_weights.CONV_AS_DENSE False --block 3 --runs 100`):
# mnasnet1_0 1.087x, b8 1.064x, b3 193 px 1.056x; mobilenet_v2 1.069x, b8 1.035x, b3 193 px
# 1.032x; efficientnet_b0 1.139x, mobilenet_v3_large 1.038x, shufflenet_v2_x1_0 1.066x (b8
# 1.059x), squeezenet1_1 b8 160 px 1.066x, resnet50 1.044x, googlenet 1.034x; level (0.989-1.022x,
# intervals across 1): resnet50 b8, inception_v3, densenet121 (and b8), squeezenet1_1 at 224 px,
# regnet_y_800mf, googlenet b8, mnasnet1_0 b8 320 px. Slower: resnet50 b8 320 px 0.976x
# [0.964-0.997] (10x10 maps, where the convolution had 2 vectors x 5 rows), inception_v3 b8 0.988x
# [0.967-1.002] (`--block 1 --runs 40`): on 10x10 maps the dense layer's kernels took 31.8 and 19.6
# ms where the convolutions' 2 x 5 tiles took 30.1 and 19.1. So the row widths 5 or 6 divide stay
# convolutions (CONV_TILE_ROWS, session 84): A/Bs of (4, 5, 6) against (4,) level or ahead (resnet50
# b8 320 px 1.022x, mnasnet1_0 b3 193 px 1.015x, intervals across 1; inception_v3, mobilenet_v2).
CONV_AS_DENSE = True
# The row widths a 1x1 convolution keeps as a convolution under CONV_AS_DENSE: those a divisor
# here divides, where the contraction rule's own tile is already good (4 vectors x 4 rows, or
# 2 vectors x 5 or 6 rows).
CONV_TILE_ROWS: tuple[int, ...] = (4, 5, 6)
# ... and one whose outputs only half blocks divide (a classifier's 1000 classes) runs as a dense
# layer in blocks of three vectors padded (THREE_VECTOR_PADDED's 1008), where it stayed a
# convolution over padded channels: squeezenet1_1's classifier over 9x9 maps at batch 8 4.81 ->
# 3.51 ms in the model. Same-process A/Bs against False (Zen 3, session 84): squeezenet1_1 b8 160
# px 1.085x [1.072-1.099], 160 px 1.060x, 224 px 1.029x, b8 1.025x, b8 320 px 1.014x. Dense
# layers themselves keep their half blocks: with three padded mobile networks' layers of 24, 72
# or 120 outputs ran 1.03-1.09x slower alone (mnasnet1_0, mobilenet_v2 level end to end).
CONV_AS_DENSE_OVER_HALF_BLOCKS = True
# A bf16 1x1 convolution (stride 1, no padding; not on AMX tiles) over rows that no tile from 4
# to 8 divides (SqueezeNet's 13-pixel rows, Inception's 17) is computed as a dense layer over its
# pixels too where such a tile divides all its pixels (batch 8: 8 x 13 x 13) (0: a convolution
# over whole tiles of extra columns, ``whole_tiles``, sliced off: 13 columns as 14, SqueezeNet's
# classifier 10 % more products).
BF16_CONV_AS_DENSE = 1
# A bf16 convolution with fewer output channels than a block, a multiple of the dot product's 16
# lanes, is packed in a block of its own width (0: padded to the block with zero channels, sliced
# off; SqueezeNet's 16-channel squeezes computed 32).
BF16_ONE_VECTOR_BLOCKS = 1
# ... and where half-width vectors run at the full rate (Zen 4), one whose outputs are whole 8-lane
# half vectors but not whole 16-lane ones is packed in pairs of blocks of three half vectors where
# those divide (72, 120), else of one where at most BF16_HALF_BLOCK_VECTORS of them (40 -> 5 x 8,
# one tile across them), its tiles the 256-bit ``vdpbf16ps`` (``bf16.DOT_8x2``) (0: padded to the
# two-vector block and sliced off: mnasnet1_0's projections to 24 and 40 channels computed 32 and
# 64). Over more (mnasnet1_3's 56, 104 and 248: 7, 13 and 31 half vectors) the contraction rule
# tiled one half vector by 7 rows, and the model ran 0.918x [0.906-0.931] (same-process A/B).
BF16_HALF_BLOCKS = 1
BF16_HALF_BLOCK_VECTORS = 5


def odd_vector_block(channels: int, cblock: int, two_vectors: int, half_vectors: bool) -> int:
    """The packed block for ``channels`` output channels where the two-vector block
    (``two_vectors`` channels) does not divide them: three vectors where those do (144 = 9
    vectors of 16, RegNet's 432, 912 and 1008), else, where half-width vectors run at the full
    FMA rate (``tiles.half_vectors_full_rate``), three half vectors (72, 168, 408, 120 = 24 k),
    else ``cblock`` (padded with zero channels and sliced off, as before). Padding computed up to a
    third of such a layer for nothing (72 -> 96); the contraction rule tiles a three-vector block
    three vectors wide (7 rows x 3 = 21 accumulators). Same-process A/Bs against padding
    (docs/performance.md, "Three-vector blocks"): mnasnet1_0 1.04-1.05x (1.05x at batch 3 and 193
    px, level at batch 8), torchvision's mobilenet_v3_large 1.03x, regnet_x_1_6gf 1.03x for each
    of the two, regnet_y_800mf 1.01x; mobilenet_v2, efficientnet_b0, googlenet level."""
    three = two_vectors // 2 * 3
    if not THREE_VECTOR_BLOCKS or cblock != two_vectors or channels % cblock == 0:
        return cblock
    if channels % three == 0 or (NARROW_OUTPUTS and not half_vectors and cblock < channels < three):
        return three  # (40 channels padded to three vectors, not to two blocks: 48, not 64)
    if half_vectors and three % 2 == 0 and channels % (three // 2) == 0:
        return three // 2
    return cblock


def half_pair_block(channels: int, joined: bool, half_vectors: bool, amx_tiles: bool) -> int | None:
    """The block of bf16 pairs in half vectors for ``channels`` outputs that are whole 8-lane
    vectors, not 16-lane ones, where half vectors run at the full rate (``half_vectors``; not on
    ``amx_tiles``): three half vectors where those divide them, else one over a few
    (BF16_HALF_BLOCKS; a ``joined`` expansion, three only: ``bf16_dense.BF16_HALF_EXPANSIONS``);
    None elsewhere."""
    if not half_vectors or amx_tiles or channels % 8 or channels % 16 == 0:
        return None
    if channels % 24 == 0 and (joined or BF16_HALF_BLOCKS):
        return 24
    return 8 if BF16_HALF_BLOCKS and not joined and channels // 8 <= BF16_HALF_BLOCK_VECTORS else None


def whole_tiles(rows: int, fitted: bool = False, long: bool = False) -> int | None:
    """The rows to compute so that register tiles cover them whole, where no tile from 4 to 8 rows
    divides ``rows`` (else None: a tile divides them): in tiles of 8 rows, or with ``fitted`` in
    the tile of 4 to 8 rows that wastes least for its FMAs per load (two vectors: a 9-column map
    as 10 in tiles of 5, not 16 in tiles of 8). None too where a ``long`` tile of bf16 pairs may
    take them and one divides them (``tiles.long_pair_rows``: 13 columns as 13)."""
    if rows <= 8 or max(d for d in range(1, 9) if rows % d == 0) >= 4 or (long and long_pair_rows(rows)):
        return None
    if not fitted:
        return -(-rows // 8) * 8
    best = max(range(4, 9), key=lambda r: (r * 2 / (r + 2) * rows / (-(-rows // r) * r), r))
    return -(-rows // best) * best


def tile_columns(width: int) -> int:
    """The columns past ``width`` that AMX tiles cover by map rows (``_Pack.amx_columns``)."""
    if amx.tile_rows(width) is not None or width < amx.MIN_ROWS:
        return 0
    fitted = whole_tiles(width, fitted=True)
    padded = fitted if fitted and amx.tile_rows(fitted) else -(-width // amx.MAX_ROWS) * amx.MAX_ROWS
    return padded - width


def dense_block(n: int, m: int, block: int, sixteen_registers: bool, pairs: bool = False,
                over_half: bool = False) -> tuple[int, bool, bool]:
    """(columns per packed block, whether the weight is padded to whole blocks, whether the block
    is three vectors) for a dense layer of ``n`` outputs over ``m`` rows, ``block`` the two-vector
    block, on a target with 16 vector registers or not (``tiles.sixteen_registers``).

    A classifier's 1000 outputs are not a multiple of the tile: a narrower block (the rule then
    uses narrower vectors) still turns its weight rows into one stream. Where no block divides n
    (GPT-2's 50257-word LM head, a third of its FLOPs) the weight is padded with zero columns to
    whole blocks at load time, the kernel computes the padded width with full vectors, and the
    padding is sliced off its output (unpadded, the tail left the whole loop unvectorised: a
    scalar matmul). On 16 registers blocks of three vectors (THREE_VECTOR_DENSE_16_REGS) over 4
    rows or more, padded where little is wasted (THREE_VECTOR_PADDED)."""
    pb = next((b for b in (block, block // 2, block // 4) if b >= 4 and n % b == 0 and (not pairs or b % 16 == 0)),
              None)
    three = 3 * block // 2
    if THREE_VECTOR_DENSE_16_REGS and sixteen_registers and not pairs and (pb in (block, None) or over_half) and m >= 4:
        if n % three == 0:
            return three, False, True
        if THREE_VECTOR_PADDED and (-(-n // three) * three - n) * THREE_VECTOR_PADDED <= n:
            return three, True, True
    if pb is None:
        return (2 * block if EVEN_PADDED_BLOCKS else block), True, False
    return pb, False, False


def packed_batched_matmul(x: Any, wp: Any, out_dtype: str) -> Any:
    """``x[e] @ w[e]`` over a packed ``[E, N/block, K, block]`` weight (TE)."""
    _, nb, k, pb = (int(v) for v in wp.shape)
    r = te.reduce_axis((0, k), "rk")
    return te.compute((x.shape[0], x.shape[1], nb * pb),
                      lambda e, i, n: te.sum(x[e, i, r].astype(out_dtype) * wp[e, n // pb, r, n % pb].astype(out_dtype),
                                             axis=r),
                      name="batched_matmul_packed")


def packed_matmul(x: Any, wp: Any, out_dtype: str, rows: int | None = None) -> Any:
    """``x @ w`` over a packed ``[N/block, K, block]`` weight, or a bf16 one packed in pairs of
    reduction steps, ``[N/block, K/2, block, 2]`` (``compile/bf16.py``) (TE). ``rows``: compute
    this many rows (more than x has), reading x's last row for the extra ones; the caller slices
    them off."""
    pairs = len(wp.shape) == 4
    nb, k, pb = (int(v) for v in wp.shape[:3])
    r = te.reduce_axis((0, 2 * k if pairs else k), "rk")
    m = int(x.shape[-2]) if len(x.shape) >= 2 else None

    def row(i: Any) -> Any:
        return te.min(i, m - 1) if rows else i

    def weight(n: Any) -> Any:
        return wp[n // pb, r // 2, n % pb, r % 2] if pairs else wp[n // pb, r, n % pb]

    return te.compute(
        (*x.shape[:-2], rows or x.shape[-2], nb * pb) if len(x.shape) >= 2 else (nb * pb,),
        lambda *i: te.sum(x[(*i[:-2], row(i[-2]), r)].astype(out_dtype) * weight(i[-1]).astype(out_dtype), axis=r),
        name="matmul_packed")


@mutator
class _Pack(PyExprMutator):
    def __init__(self, mod: Any, block: int, conv_block: Callable[[int, bool], int] | None,
                 half_vectors: bool = False, sixteen_registers: bool = False, amx_tiles: bool = False) -> None:
        super().__init__(mod)
        self.amx = amx_tiles  # (bf16 dense layers on AMX tiles: rows padded with zeros, ``amx.padded_rows``)
        self.block, self.conv_block, self.half_vectors = block, conv_block, half_vectors
        self.sixteen_registers = sixteen_registers
        self.weights: set[Any] = set()
        self.joinable: set[Any] = set()  # 1x1 convolutions FuseExpansionIntoWindow may join (``_joinable``)
        self.joined: set[Any] = set()  # ... and the expansions it will join (``fuse_expansion.joined_expansions``)
        self.as_dense = 0  # 1x1 convolutions computed as dense layers (CONV_AS_DENSE)
        self.call_te = TECache(self.builder_)

    def visit_call_(self, call: Any) -> Any:
        # (the call as bound before the visit, which may rebuild it)
        joinable, joined = call in self.joinable, call in self.joined
        call = super().visit_call_(call)
        if op_name(call) == "relax.matmul":
            return self.pack_matmul(call)
        if op_name(call) == "relax.nn.conv2d":
            return self.pack_conv(call, joinable, joined)
        return call

    def pack_conv(self, call: Any, joinable: bool = False, joined: bool = False) -> Any:
        a = call.attrs
        x, w = call.args
        shape = [int(v) for v in w.ty.shape] if numel(w.ty) is not None else None
        out = static_shape(call.ty)
        cblock = self.block
        if self.conv_block and out and len(out) == 4 and shape and len(shape) == 4:
            cblock = self.conv_block(out[2] if out[2] > 1 else out[1], shape[0] == shape[1] == 1)
        if (a.data_layout != "NHWC" or a.kernel_layout != "HWIO" or a.out_layout != "NHWC" or a.groups != 1
                or shape is None or numel(x.ty) is None):
            return call
        source = nchw_image(x, self.lookup_binding) if shape[2] <= NCHW_STEM_CHANNELS else None
        source = None if source is None else stem_source(source, self.builder_.emit)
        if source is None and not joinable and self.pointwise_as_dense(a, shape, x, out):
            m = out[0] * out[1] * out[2]
            x2 = self.builder_.emit(relax.op.reshape(x, [m, shape[2]]))
            w2 = self.builder_.emit(relax.op.reshape(w, [shape[2], shape[3]]))
            flat = self.builder_.emit(self.dense(x2, w2, shape[3], out_dtype(call, x), conv=True))
            self.as_dense += 1
            return relax.op.reshape(flat, out)
        if source is not None and self.amx and amx.stem_rows(shape, str(w.ty.dtype), a):
            return self.stem_on_tiles(call, source, shape)
        if source is not None:  # a stem: packed even as a single block (equal to HWIO), to read NCHW
            cblock = min(cblock, shape[3])
        elif shape[3] < FEW_OUTPUTS:
            cblock = self.block // 2
        elif shape[3] < 2 * cblock and not self.narrow(shape[3], cblock) and str(w.ty.dtype) != "bfloat16":
            return call  # (a bf16 one is packed: Bf16Dense took it, and the dot product needs the pairs)
        in_place = SLICES_IN_PLACE and source is None and not any(int(p) for p in a.padding)
        window = self.slice_source(x) if in_place else None
        if window is not None:
            x, window = window
        # Output channels that no block divides (a classifier's 1000 as a 1x1 convolution,
        # SqueezeNet's last layer, a third of its time, ran at 40 % of the packed layers' speed):
        # zero channels pad the weights to whole blocks at load time and are sliced off the output.
        channels = shape[3]
        pairs = str(w.ty.dtype) == "bfloat16"  # (Bf16Dense's: the vdpbf16ps layout, whole 16-lane vectors)
        cblock = self.conv_block_for(shape, cblock, pairs, source is None, joined)
        # (a bf16 stem: pairs of window columns, an odd window padded with a zero column on the
        # right that reads one more column of padding)
        column_pairs = pairs and source is not None
        deeper = self.deeper(a, shape, cblock, out) if pairs and source is None and window is None else 0
        if deeper:  # (input channels to whole AMX steps, their weights zero, in the padded copy the kernel makes)
            w = self.builder_.emit(relax.op.nn.pad(w, [0, 0, 0, 0, 0, deeper, 0, 0]))
            shape = [*shape[:2], shape[2] + deeper, shape[3]]
        layout = ((lambda kh, kw, i, o: (o // cblock, i, kh, kw // 2, o % cblock, kw % 2)) if column_pairs
                  else (lambda kh, kw, i, o: (o // cblock, kh, kw, i // 2, o % cblock, i % 2)) if pairs
                  else (lambda kh, kw, i, o: (o // cblock, kh, kw, i, o % cblock)))
        odd_window = column_pairs and shape[1] % 2 == 1
        padding = [int(v) for v in a.padding]
        padding[3] += int(a.dilation[1]) if odd_window else 0
        padded = channels % cblock != 0 or odd_window
        packed = self.builder_.emit(relax.op.layout_transform(w, layout, pad_value=0.0 if padded else None))
        if pairs and source is None and window is None and self.flat_map(a, shape, cblock, out):
            if 1 in shape[:2]:  # (a window of one axis: no unit axis in the weights' reads)
                lined = [int(packed.ty.shape[0]), shape[0] * shape[1], shape[2] // 2, cblock, 2]
                packed = self.builder_.emit(relax.op.reshape(packed, lined))
            return self.call_te(flat_conv, x, packed, padding, shape[:2], channels, out_dtype(call, x),
                                primfunc_name_hint="conv2d_nhwc_packed")
        # (bf16 pairs: the dot product cannot run under a predicated last row tile, so whole
        # tiles over extra columns, sliced off)
        width = static_shape(call.ty)[2]
        # (or over 13 columns in tiles of 13 rows, where the tile is at most two vectors:
        # tiles.long_pair_rows)
        long = not self.amx and source is None and long_pair_vectors(-(-channels // cblock) * cblock)
        columns = whole_tiles(width, fitted=True, long=long) if pairs else None
        extra = (self.amx_columns(width) if pairs and source is None and window is None and amx.fits(shape[2], cblock)
                 and all(int(d) == 1 for d in a.dilation) else None)
        if extra is not None:  # (AMX tiles load their rows from memory: real columns of padding instead)
            padding[3] += extra * int(a.strides[1])
            columns = None
        out = self.call_te(packed_conv, x if source is None else source, packed, [int(v) for v in a.strides],
                           padding, [int(v) for v in a.dilation],
                           out_dtype(call, x), source is not None, window, columns,
                           primfunc_name_hint="conv2d_nhwc_packed")
        if columns or extra:
            out = relax.op.strided_slice(self.builder_.emit(out), axes=[2], begin=[0], end=[width])
        if padded:
            out = relax.op.strided_slice(self.builder_.emit(out), axes=[3], begin=[0], end=[channels])
        return out

    def conv_block_for(self, shape: list[int], cblock: int, pairs: bool, unstemmed: bool,
                       joined: bool = False) -> int:
        """A convolution's packed block of output channels (weights ``shape``, HWIO), from the
        rule's ``cblock``: three vectors where those divide (``odd_vector_block``); over bf16
        pairs whole 16-lane vectors, half vectors where those run at the full rate
        (``half_pair_block``; ``joined``: an expansion ExpandWindow will compute), one block of
        fewer channels (BF16_ONE_VECTOR_BLOCKS), or on AMX tiles their 32 columns
        (``unstemmed``: not a stem over an NCHW image)."""
        channels = shape[3]
        cblock = odd_vector_block(channels, cblock, self.block, self.half_vectors)
        half = half_pair_block(channels, joined, self.half_vectors, self.amx) if pairs and unstemmed else None
        if half:
            return half
        if pairs and cblock % 16:
            cblock = self.block
        if pairs and BF16_ONE_VECTOR_BLOCKS and channels < cblock and channels % 16 == 0 and not self.amx:
            cblock = channels  # (SqueezeNet's 16-channel squeezes: one dot-product vector, not 32 padded)
        if pairs and self.amx and amx.PAD_OUTPUTS and unstemmed and cblock not in amx.BLOCKS \
                and amx.channel_steps(shape[2]) is not None:
            cblock = amx.PACK  # (AMX tiles take 32 columns: zero channels to whole blocks, sliced off)
        return cblock

    def stem_on_tiles(self, call: Any, image: Any, shape: list[int]) -> Any:
        """A bf16 stem on AMX tiles, a window row per product (``amx.stem_rows``): the image as
        ``stem_rows_image`` lays it out, the weights ``[O/32, KH, 16, 32, 2]`` (each window row's
        columns and 4 channels, zero past the window and the image's channels, in pairs)."""
        a, w, out = call.attrs, call.args[1], static_shape(call.ty)
        kh, kw, ci, co = shape
        strides, (top, left, bottom, right) = [int(v) for v in a.strides], [int(v) for v in a.padding]
        columns = out[2] + (self.amx_columns(out[2]) or 0)
        wide = (columns - 1) * strides[1] + amx.STEM_ROW // amx.STEM_CHANNELS  # (image columns the tiles read)
        right = max(right, wide - int(image.ty.shape[3]) - left)
        padded = relax.op.nn.pad(w, [0, 0, 0, amx.STEM_ROW // amx.STEM_CHANNELS - kw, 0, amx.STEM_CHANNELS - ci, 0, 0])
        rows = self.builder_.emit(relax.op.reshape(self.builder_.emit(padded), [kh, amx.STEM_ROW, co]))
        packed = self.builder_.emit(relax.op.layout_transform(
            rows, lambda r, k, o: (o // amx.PACK, r, k // 2, o % amx.PACK, k % 2), pad_value=0.0 if co % amx.PACK else None))
        x4 = self.builder_.emit(self.call_te(stem_rows_image, image, [top, left, bottom, right], str(w.ty.dtype),
                                             primfunc_name_hint="stem_image"))
        x4 = self.builder_.emit(relax.op.reshape(x4, [out[0], int(x4.ty.shape[1]), -1]))
        conv = self.builder_.emit(self.call_te(stem_rows_conv, x4, packed, strides, (out[1], columns),
                                               out_dtype(call, image), primfunc_name_hint="conv2d_nhwc_packed"))
        return relax.op.strided_slice(conv, axes=[2, 3], begin=[0, 0], end=[out[2], co]) \
            if (columns, co % amx.PACK) != (out[2], 0) else conv

    def amx_columns(self, width: int) -> int | None:
        """On AMX tiles, the output columns a bf16 convolution computes beyond ``width`` so that A
        tiles cover its rows whole (0: none; None: not on AMX tiles): over columns of padding, not
        re-reads of the last column (``whole_tiles``), which a tile's rows would load out of bounds."""
        return tile_columns(width) if self.amx else None

    def deeper(self, a: Any, shape: list[int], cblock: int, out: list[int] | None) -> int:
        """Input channels a bf16 convolution on AMX tiles reads beyond its own, their weights zero
        (``amx.PAD_DEPTH``): up to whole steps of ``amx.STEP`` where its channels take half steps, it
        copies its input into a padded buffer anyway (padding, or a flattened map) and whole steps
        take fewer products."""
        ci = shape[2]
        if not (self.amx and amx.PAD_DEPTH and cblock in amx.BLOCKS and ci > amx.HALF_STEP
                and amx.channel_steps(ci) == (amx.HALF_STEP, ci // amx.HALF_STEP)):
            return 0
        extra = -ci % amx.STEP
        copied = any(int(p) for p in a.padding) or self.flat_map(a, [*shape[:2], ci + extra, shape[3]], cblock, out)
        return extra if copied and shape[0] * shape[1] > 1 else 0

    def flat_map(self, a: Any, shape: list[int], cblock: int, out: list[int] | None) -> bool:
        """Whether a bf16 convolution runs over its padded map flattened (``amx.FLAT_MAPS``): on
        AMX tiles, stride 1, undilated, a window over ``amx.FLAT_MIN_DEPTH`` inputs, where by map
        rows (``amx_columns``) each pair of weight tiles would serve one short A tile (fewer than
        ``amx.FLAT_BELOW_ROWS`` rows, one tile per row and no second map row or image to pair), or
        the rows would be computed over added columns, sliced off by a pass of their own."""
        kh, kw, ci, _ = shape
        if not (self.amx and amx.FLAT_MAPS and out and cblock in amx.BLOCKS and amx.channel_steps(ci)):
            return False
        if any(int(v) != 1 for v in [*a.strides, *a.dilation]) or kh * kw == 1 or kh * kw * ci < amx.FLAT_MIN_DEPTH:
            return False
        extra = self.amx_columns(out[2])
        rows = amx.tile_rows(out[2] + extra)
        if rows is None or extra:
            return True
        unpaired = out[2] // rows % 2 == 1 and out[0] % 2 == 1 and out[1] % 2 == 1
        return unpaired and rows < amx.FLAT_BELOW_ROWS

    def pointwise_as_dense(self, a: Any, shape: list[int], x: Any, out: list[int] | None) -> bool:
        """Whether a 1x1 convolution is computed as a dense layer over its pixels, flattened
        (CONV_AS_DENSE): stride 1, no padding, fp32, on 16 registers over rows no CONV_TILE_ROWS divides;
        bf16 without AMX over rows no tile from 4 to 8 divides (BF16_CONV_AS_DENSE)."""
        if not CONV_AS_DENSE or shape[0] != 1 or shape[1] != 1 or out is None:
            return False
        if any(int(v) != 1 for v in [*a.strides, *a.dilation]) or any(int(p) for p in a.padding):
            return False
        if str(x.ty.dtype) == "bfloat16":
            return (bool(BF16_CONV_AS_DENSE) and not self.amx and whole_tiles(out[2], fitted=True) is not None
                    and whole_tiles(out[0] * out[1] * out[2]) is None)
        if str(x.ty.dtype) != "float32":
            return False
        if not self.sixteen_registers or any(out[2] % r == 0 for r in CONV_TILE_ROWS) or shape[3] < 2 * self.block:
            return False
        return dense_block(shape[3], out[0] * out[1] * out[2], self.block, True,
                           over_half=CONV_AS_DENSE_OVER_HALF_BLOCKS)[0] >= self.block

    def narrow(self, channels: int, cblock: int) -> bool:
        """Whether ``channels`` output channels, fewer than two blocks, are packed all the same
        (NARROW_OUTPUTS): more than one vector, no whole block, at most three vectors."""
        return (NARROW_OUTPUTS and not self.half_vectors and cblock // 2 < channels < cblock * 3 // 2
                and channels != cblock)

    def slice_source(self, x: Any) -> tuple[Any, list[int]] | None:
        """``(tensor, [top, left, height, width])`` when ``x`` is a unit-stride slice of an NHWC
        tensor along its rows and columns, else None. DilatedBands gives each band's convolution
        the region it reads as such a slice; copied, the slices of DeepLabV3's 28x28x2048 map took
        12 ms of ResNet-101's 379 (the band convolutions themselves 45 ms)."""
        bound = self.lookup_binding(x) if isinstance(x, relax.Var) else None
        if op_name(bound) != "relax.strided_slice":
            return None
        source, shape, sliced = bound.args[0], static_shape(bound.args[0].ty), static_shape(x.ty)
        fields = [_ints(a) for a in bound.args[1:]]
        if shape is None or sliced is None or len(shape) != 4 or any(f is None for f in fields):
            return None
        axes, begin = fields[0], fields[1]
        strides = fields[3] if len(fields) > 3 else [1] * len(axes)
        if any(a not in (1, 2) for a in axes) or any(s != 1 for s in strides) or any(b < 0 for b in begin):
            return None
        start = dict(zip(axes, begin, strict=True))
        return source, [start.get(1, 0), start.get(2, 0), sliced[1], sliced[2]]

    def pack_matmul(self, call: Any) -> Any:
        x, w = call.args
        block = self.block
        shape = [int(v) for v in w.ty.shape] if numel(w.ty) is not None else None
        if shape is not None and len(shape) == 3 and shape[-1] % block == 0 and BATCHED_WEIGHTS \
                and len(static_shape(x.ty) or []) == 3 and int(x.ty.shape[0]) == shape[0] and str(w.ty.dtype) == "float32" \
                and from_weights(self, w, self.weights, WEIGHT_VIEWS):
            return self.batched(x, w, shape, out_dtype(call, x))
        if shape is not None and len(shape) == 3 and shape[0] == 1 and self.transposed_activation(x, w, shape[1:]):
            w, shape = self.builder_.emit(relax.op.reshape(w, shape[1:])), shape[1:]  # (one batch of one)
        elif shape is not None and len(shape) > 2 and numel(x.ty) is not None and NARROW_COLUMNS:
            return self.whole_columns(call, shape)
        if shape is not None and len(shape) == 2 and shape[1] < 2 * block and numel(x.ty) is not None and NARROW_DENSE:
            return self.whole_columns(call, shape)
        if (shape is None or len(shape) != 2 or numel(x.ty) is None or len(x.ty.shape) < 2
                or shape[1] < 2 * block):
            return call
        if not from_weights(self, w, self.weights) and not self.transposed_activation(x, w, shape):
            return call
        return self.dense(x, w, shape[1], out_dtype(call, x))

    def transposed_activation(self, x: Any, w: Any, shape: list[int]) -> bool:
        """Whether ``w`` is an activation written transposed for this product (a cross-attention's
        keys, ``k.T``, where the attention is not joined), over enough rows to reuse it
        (TRANSPOSED_ACTIVATIONS): the transpose writes it packed instead, at the same cost."""
        bound = self.lookup_binding(w) if isinstance(w, relax.Var) else None
        while op_name(bound) in _ON_THE_WAY and isinstance(bound.args[0], relax.Var):
            bound = self.lookup_binding(bound.args[0])
        rows = static_shape(x.ty)
        return (bool(TRANSPOSED_ACTIVATIONS) and op_name(bound) == "relax.permute_dims" and rows is not None
                and rows[-2] >= TRANSPOSED_ACTIVATIONS and str(w.ty.dtype) == "float32"
                and shape[1] % self.block == 0)

    def batched(self, x: Any, w: Any, shape: list[int], dtype: str) -> Any:
        """``x @ w`` over a weight per batch (a mixture of experts' ``[E, K, N]``), each packed in
        two-vector blocks as a dense layer's (BATCHED_WEIGHTS)."""
        block = self.block
        packed = self.builder_.emit(relax.op.layout_transform(w, lambda e, k, n: (e, n // block, k, n % block)))
        return self.call_te(packed_batched_matmul, x, packed, dtype, primfunc_name_hint="batched_matmul_packed")

    def whole_columns(self, call: Any, shape: list[int]) -> Any:
        """A product whose columns no vector of 4 lanes or more divides (MViT's batched
        relative-position products, ``[56, 448, 96] x [56, 96, 7]`` and ``x 14``; NARROW_DENSE's
        layers): the second
        operand padded with zero columns to a multiple of 4, the extra columns sliced off. With 7
        or 14 columns the contraction rule found no vector width, and they ran on the fallback
        schedule one multiply-add at a time."""
        n = shape[-1]
        if n % 4 == 0 or n >= 2 * self.block or str(call.args[1].ty.dtype) != "float32":
            return call
        x, w = call.args
        padded = self.builder_.emit(relax.op.nn.pad(w, [0, 0] * (len(shape) - 1) + [0, -n % 4]))
        out = self.builder_.emit(relax.op.matmul(x, padded, out_dtype=call.attrs.out_dtype))
        rank = len(static_shape(call.ty))
        return relax.op.strided_slice(out, axes=[rank - 1], begin=[0], end=[n])

    def dense(self, x: Any, w: Any, n: int, dtype: str, conv: bool = False) -> Any:
        """``x @ w`` (``w``: ``[K, n]``) over the weight packed in ``dense_block``'s blocks
        (``conv``: a 1x1 convolution's, CONV_AS_DENSE)."""
        pairs = str(w.ty.dtype) == "bfloat16"  # (Bf16Dense's: the vdpbf16ps layout, whole 16-lane vectors)
        m = int(x.ty.shape[-2])
        pb, padded, three = dense_block(n, m, self.block, self.sixteen_registers, pairs,
                                        conv and CONV_AS_DENSE_OVER_HALF_BLOCKS)
        layout = (lambda k, n: (n // pb, k // 2, n % pb, k % 2)) if pairs else (lambda k, n: (n // pb, k, n % pb))
        packed = self.builder_.emit(relax.op.layout_transform(w, layout, pad_value=0.0 if padded else None))
        # Rows with no divisor from 4 to 8 (ViT's 197 tokens) would leave a predicated last row
        # tile, and the predicate sits in every tile's inner loop (30 % slower at 197 rows
        # than at 200): whole tiles are computed, the extra rows re-reading the last row
        # (no bounds check, no copy), and sliced off.
        rows = whole_tiles(m)
        if three and THREE_VECTOR_ROWS_BY_4 and m > 4 and m % 4:
            rows = -(-m // 4) * 4
        rank = len(x.ty.shape)
        on_tiles = pairs and self.amx and amx.fits(int(w.ty.shape[0]), pb)
        tiles = amx.padded_rows(m, pairs=True) if on_tiles else None
        if on_tiles:  # (AMX tiles load their rows from memory: extra rows are zeros, not a re-read)
            rows = None
        if tiles:
            x = self.builder_.emit(relax.op.nn.pad(x, [0, 0] * (rank - 2) + [0, tiles - m, 0, 0]))
        # (a 1x1 convolution's is named for it: profiles and ``explain`` pair it with the peers' convolution)
        out = self.call_te(packed_matmul, x, packed, dtype, rows,
                           primfunc_name_hint="conv2d_1x1_matmul_packed" if conv else "matmul_packed")
        if rows or tiles:
            out = relax.op.strided_slice(self.builder_.emit(out), axes=[rank - 2], begin=[0], end=[m])
        if padded:
            out = relax.op.strided_slice(self.builder_.emit(out), axes=[rank - 1], begin=[0], end=[n])
        return out


def flat_rows(n: int, oh: int, ow: int, wide: int, image: int) -> int:
    """The rows ``flat_conv`` computes: up to its last output pixel, in whole pairs of A tiles."""
    last = (n - 1) * image + (oh - 1) * wide + ow
    return -(-last // (2 * amx.MAX_ROWS)) * 2 * amx.MAX_ROWS


def flat_conv(x: Any, wp: Any, pad: list[int], window: list[int], channels: int, out_dtype: str) -> Any:
    """A stride-1 NHWC convolution over bf16 weights packed in pairs (``packed_conv``'s) computed
    over the padded input flattened to ``[pixels, channels]`` (``amx.FLAT_MAPS``, TE): output row
    ``p`` reads input rows ``p + ky * W' + kx`` (``W'``: the padded width), the rows that are
    padding columns (and the padding rows between images) computed and skipped by the last stage,
    which also drops padded output channels (``channels``). A ``window`` (KH, KW) with a unit axis
    (1x7, 7x1) has weights ``[O/32, KH * KW, I/2, 32, 2]``: no unit axis in the reads, which the
    tile's description has not."""
    from tvm import tirx

    n, h, w, ci = (int(v) for v in x.shape)
    ob, (half, pb), (kh, kw) = int(wp.shape[0]), (int(v) for v in wp.shape[-3:-1]), window
    # (channels beyond the input's, ``_Pack.deeper``: their weights are zero, so they copy the last
    # real ones, a vector's worth back, rather than zeros: a segment of constant bf16 vectors, once
    # partitioned, fails TVM's bf16 storage legalisation)
    deeper = 2 * half > ci
    top, left, bottom, right = pad
    wide, tall = w + left + right, h + top + bottom
    image, oh, ow = tall * wide, tall - kh + 1, wide - kw + 1
    rows = flat_rows(n, oh, ow, wide, image)
    clamp = lambda v, hi: te.max(te.min(v, hi - 1), 0)  # noqa: E731  (in bounds where not inside too)

    def value(q: Any, c: Any) -> Any:
        b, y, z = q // image, q % image // wide - top, q % wide - left
        inside = tirx.all(b < n, y >= 0, y < h, z >= 0, z < w)
        at = tirx.if_then_else(c < ci, c, c - (2 * half - ci)) if deeper else c
        return tirx.if_then_else(inside, x[clamp(b, n), clamp(y, h), clamp(z, w), at], tirx.const(0, x.dtype))

    flat = te.compute((rows + (kh - 1) * wide + kw - 1, 2 * half), value, name="pad")
    rc = te.reduce_axis((0, 2 * half), "rc")
    if kh > 1 and kw > 1:
        rh, rw = te.reduce_axis((0, kh), "rh"), te.reduce_axis((0, kw), "rw")
        axes, offset, taps = [rh, rw, rc], lambda: rh * wide + rw, lambda o: (o // pb, rh, rw)
    else:
        rt = te.reduce_axis((0, kh * kw), "rt")
        axes, offset, taps = [rt, rc], lambda: rt * (wide if kh > 1 else 1), lambda o: (o // pb, rt)
    conv = te.compute(
        (rows, ob * pb),
        lambda p, o: te.sum(flat[p + offset(), rc].astype(out_dtype)
                            * wp[(*taps(o), rc // 2, o % pb, rc % 2)].astype(out_dtype), axis=axes),
        name="conv2d_nhwc_packed")
    return te.compute((n, oh, ow, channels), lambda b, y, z, o: conv[b * image + y * wide + z, o], name="flat_map")


def stem_rows_image(x: Any, pad: list[int], dtype: str) -> Any:
    """An NCHW image as ``[N, H', W', 4, 1]`` in ``dtype`` (TE; the caller views it as ``[N, H',
    W' * 4]``): padded, each pixel's channels side by side, so that a window row's columns and
    channels are ``amx.STEM_ROW`` neighbouring values (``stem_rows_conv``)."""
    from tvm import tirx

    n, c, h, w = (int(v) for v in x.shape)
    top, left, bottom, right = pad
    lanes = amx.STEM_CHANNELS

    def value(b: Any, y: Any, z: Any, ch: Any, _: Any) -> Any:
        # (the added channels repeat the last: their weights are zero)
        yy, zz = y - top, z - left
        inside = tirx.all(yy >= 0, yy < h, zz >= 0, zz < w)
        clamp = lambda v, hi: te.max(te.min(v, hi - 1), 0)  # noqa: E731  (in bounds where not inside too)
        return tirx.if_then_else(inside, x[b, clamp(ch, c), clamp(yy, h), clamp(zz, w)].astype(dtype),
                                 tirx.const(0, dtype))

    # (a unit innermost axis: not vectorised, since TVM's bf16 vectors of a gather do not compile)
    return te.compute((n, h + top + bottom, w + left + right, lanes, 1), value, name="stem_image")


def stem_rows_conv(x4: Any, wp: Any, strides: list[int], out_hw: tuple[int, int], out_dtype: str) -> Any:
    """The stem's convolution over ``stem_rows_image``'s layout and ``[O/32, KH, 16, 32, 2]``
    weights (TE): each output pixel's window row is ``amx.STEM_ROW`` values from ``x4``'s last
    axis, rows ``strides[1] * 4`` values apart."""
    ob, kh, pairs, pb = (int(v) for v in wp.shape[:4])
    rh, rk = te.reduce_axis((0, kh), "rh"), te.reduce_axis((0, 2 * pairs), "rk")
    step = strides[1] * amx.STEM_CHANNELS
    return te.compute(
        (int(x4.shape[0]), *out_hw, ob * pb),
        lambda n, y, z, o: te.sum(x4[n, y * strides[0] + rh, z * step + rk].astype(out_dtype)
                                  * wp[o // pb, rh, rk // 2, o % pb, rk % 2].astype(out_dtype), axis=[rh, rk]),
        name="conv2d_nhwc_packed")


def _joinable(func: Any) -> set[Any]:
    """The 1x1 convolutions of ``func`` that FuseExpansionIntoWindow may join with a depthwise
    window, which stay convolutions: expansions that feed one (``fuse_expansion.joined_expansions``),
    projections that one feeds, through cheap elementwise steps, over maps of at least
    ``fuse_expansion.PROJECTION_MIN_PIXELS``."""
    found = fuse_expansion.joined_expansions(func, 0)
    bound = {b.var: b.value for b in bindings(func) if isinstance(b, relax.VarBinding)}
    for value in bound.values():
        shape = static_shape(value.args[1].ty) if op_name(value) == "relax.nn.conv2d" else None
        if shape is None or shape[:2] != [1, 1] or int(value.attrs.groups) != 1:
            continue
        cur = value.args[0]
        while isinstance(cur, relax.Var) and op_name(bound.get(cur)) in fuse_expansion.CHEAP:
            cur = bound[cur].args[0]
        window = bound.get(cur) if isinstance(cur, relax.Var) else None
        if op_name(window) == "relax.nn.conv2d" and int(window.attrs.groups) > 1 \
                and fuse_expansion.map_pixels(window) >= fuse_expansion.PROJECTION_MIN_PIXELS:
            found.add(value)
    return found


def nchw_image(x: Any, lookup: Callable[[Any], Any]) -> Any | None:
    """The NCHW tensor ``x`` is a transpose of (``permute_dims`` to NHWC), or a bf16 rounding of
    one (Bf16Dense's of a stem's input), else None; ``lookup``: a mutator's ``lookup_binding``.
    A video's frames as images (Conv3dAsConv2d's ``[N * T, H, W, C]`` of an NCDHW clip transposed
    to NDHWC, rounded before or after the reshape): the NCDHW clip (``stem_source`` makes it NCHW
    images)."""

    def unrounded(expr: Any) -> Any:
        bound = lookup(expr) if isinstance(expr, relax.Var) else None
        if op_name(bound) == "relax.astype" and str(bound.attrs.dtype) == "bfloat16" and isinstance(bound.args[0], relax.Var):
            return lookup(bound.args[0])
        return bound

    bound, axes = unrounded(x), [0, 2, 3, 1]
    if CLIP_STEMS and op_name(bound) == "relax.reshape":  # (a clip's frames)
        shape = static_shape(bound.args[0].ty)
        if shape is None or len(shape) != 5 or static_shape(bound.ty) != [shape[0] * shape[1], *shape[2:]]:
            return None
        bound, axes = unrounded(bound.args[0]), [0, 2, 3, 4, 1]
    if op_name(bound) != "relax.permute_dims" or [int(v) for v in bound.attrs.axes] != axes:
        return None
    return bound.args[0]


def stem_source(image: Any, emit: Callable[[Any], Any]) -> Any:
    """``nchw_image``'s tensor as NCHW images: a clip ``[N, C, T, H, W]`` as ``[N * T, C, H, W]``
    (a transpose of its frames, which the stem's padding and rounding join), an image as it is."""
    shape = static_shape(image.ty)
    if len(shape) != 5:
        return image
    n, c, t, h, w = shape
    return emit(relax.op.reshape(emit(relax.op.permute_dims(image, [0, 2, 1, 3, 4])), [n * t, c, h, w]))


def _ints(expr: Any) -> list[int] | None:
    """A tuple of static integers (a slice's axes, bounds or strides), else None."""
    try:
        return [int(getattr(f, "value", f)) for f in expr.fields]
    except (AttributeError, TypeError):
        return None


def pack_weights(target: ResolvedTarget) -> Any:
    """The pass, for ``target``: its block of two vectors (``tiles.weight_block``), a
    convolution's block from its output rows (the register tile's row axis) and whether it is 1x1
    where it depends on them, half vectors where they run at the full rate, three-vector dense
    blocks on 16 registers."""
    tvm_target = target.tvm()

    def conv_block(rows: int, dot: bool) -> int:
        return weight_block(target, rows, dot)

    def set_weights(mutator_: Any, func: Any) -> None:
        mutator_.weights = weight_params(func)
        mutator_.joinable = _joinable(func) if CONV_AS_DENSE else set()
        mutator_.joined = fuse_expansion.joined_expansions(func, fuse_expansion_bytes(target.l2_bytes))

    def sink(mutator_: Any, mod: Any) -> Any:  # (CONV_AS_DENSE's epilogues onto the dense layer's 2-D output)
        return elementwise_before_reshape(splits=True)(mod) if mutator_.as_dense else mod

    return builder_pass(lambda mod: _Pack(mod, weight_block(target), conv_block, half_vectors_full_rate(tvm_target),
                                          sixteen_registers(tvm_target), amx.usable(tvm_target)), "PackWeights",
                        before=set_weights, after=sink)
