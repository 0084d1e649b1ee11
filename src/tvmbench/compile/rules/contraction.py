"""Contraction: register-tiled reductions (matmul, batch matmul, convolution, pooling, means).

A function whose one reduction block writes an output whose innermost axis is contiguous in every
operand that uses it: NN matmul and batch-matmul, NHWC convolution (weights in HWIO or packed, so
output channels are contiguous), depthwise convolution, pooling, global means. The output is
computed in register tiles of ``rows x (vectors * lanes)`` accumulators, with the whole reduction
running inside the tile (the classic outer-product micro-kernel: per reduction step, ``vectors``
contiguous loads and ``rows`` broadcasts feed ``rows * vectors`` FMAs). Tiles are distributed over
cores. The elementwise epilogue (bias, batch-norm scale/shift, residual add, ReLU) is computed
from the accumulators as they are written back, so it costs no extra pass over memory.

``apply`` reads as its steps: match, pad the vector axis (when no vector width divides it),
inline producers, fold the epilogue, choose the tile, tile, write back.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import tvm

from tvmbench.compile import bf16, tiles
from tvmbench.compile.codegen import stack_spills
from tvmbench.compile.knobs import knob, overridden, unrecorded
from tvmbench.compile.names import WINOGRAD_PRODUCT
from tvmbench.compile.passes.prefetch import mark as mark_prefetch
from tvmbench.compile.passes.window_rows import mark as mark_window_rows
from tvmbench.compile.rules.base import Rule, normalized, schedule_injective_block, unroll_steps
from tvmbench.compile.tiles import (
    accumulator_budget,
    half_vectors_full_rate,
    register_tile,
    vector_lanes,
    vector_width,
)
from tvmbench.compile.tir import (
    as_int,
    buffer_shape,
    coefficient,
    dtype_bits,
    is_copy,
    packed_block,
    pair_step,
    uses,
)
from tvmbench.targets import cpu_l2_bytes, has_feature, near_l3

# Reductions this short (a pooling or depthwise window) read their padding inline, whatever the
# input's size when INLINE_PAD_BYTES is None (else only up to it, or when strided).
SHORT_REDUCTION = 49
INLINE_PAD_BYTES: int | None = None
# A longer reduction (up to SPARSE_WINDOW taps) also reads its producer inline when each of the
# producer's elements feeds at most SPARSE_FMAS_PER_INPUT multiply-adds: a grouped 3x3 convolution
# over groups of 8 or 16 channels (RegNet; 16-125 per input), a strided 1x1 convolution of a
# residual sum (resnet18's, 32). There the copy is a pass over memory for little arithmetic.
# Alone, a 288-tap window (ResNeXt's 32-channel groups) lost 1.6x inline and squeezenet1_1's 3x3
# over 16 channels (536 per input) 8-11 %; hence both bounds. In the models, with ROW_TIE_INNER
# (docs/performance.md, "RegNet's narrow groups"): regnet_x_400mf 1.14x and regnet_y_400mf 1.12x
# at batch 3 and 193 px, regnet_x_800mf 1.08-1.11x (1.09x at batch 8), regnet_y_400mf 1.05-1.07x
# (1.03x at batch 8), regnet_y_800mf 1.06x, regnet_y_1_6gf 1.05x, regnet_x_400mf 1.02x; ResNeXt,
# regnet_x_8gf (120-channel groups), resnet18 and resnet34 level. Capping the producer at 1 MB
# (where inline reads ran slower alone, from cold caches) cost regnet_x_800mf 7 % and
# regnet_y_400mf at batch 8 5 % in the models: no cap.
SPARSE_WINDOW = 144
SPARSE_FMAS_PER_INPUT = 160
# ... but not on 16 vector registers (AVX2), where the bounds check inside the tile cost more than
# the copy: on the Zen 3 host (session 80) resnext50's stride-1 grouped 3x3 over 16-channel groups
# at 14x14 took 415-426 us alone inline, 185 us after its copy (at stride 2 271 against 243).
# Same-process A/Bs against inline reads (`rule_ab.py M rules.contraction.SPARSE_INLINE_16_REGS
# True`): resnext50_32x4d 1.048x, regnet_x_400mf 1.047x, regnet_y_400mf 1.035x (and regnet_y_800mf
# 1.046x with SPARSE_WINDOW 0); resnet18, resnet34, regnet_x_1_6gf level.
SPARSE_INLINE_16_REGS = False
# ... and so does, whatever the window, a padding of axes outside the tile (``_pads_outside_tile``).
OUTER_PADDING_INLINE = True
# Where two candidate row axes are equally long (a grouped convolution's output rows and columns,
# its group axis not being one: ``_row_axis``), the inner one (the columns) takes the rows: its
# input rows are close in memory instead of whole image rows apart. Alone, RegNet's grouped 3x3
# convolutions ran 3-25 % faster over columns with the copy kept, and the copy's speed no longer
# swung 2x with the number of groups (69-155 GFLOP/s over rows, 145-157 over columns, 56x56,
# stride 2); in the models regnet_y_1_6gf 1.05x, regnet_x_400mf 1.01x, the rest level.
ROW_TIE_INNER = True
# A vector axis of exactly three vectors gets three-vector tiles as well (``choose_tile``): a
# grouped convolution's group of three half vectors (passes/grouped_conv.py; its packed block is
# the whole axis, so no pack shows), and unpacked 24- and 48-channel outputs. With the grouped
# packing, same-process A/Bs (docs/performance.md, "Three-vector blocks"): regnet_x_1_6gf 1.080x,
# regnet_y_1_6gf 1.072x, regnet_y_3_2gf 1.060x / 1.061x, regnet_x_8gf 1.021x; alone, in the zoo
# (its 24- and 48-channel convolutions and pooling): mnasnet1_0, shufflenet_v2_x1_0,
# squeezenet1_1, googlenet, inception_v3 and mobilenet_v3_large 1.001-1.006x.
THREE_VECTOR_AXIS = True
# ... and a vector axis that no tile offered above divides but one vector (an odd count: 5, 9,
# 15 vectors) is offered tiles of each of its divisors up to ODD_AXIS_VECTORS vectors where it
# multiplies two operands (``choose_tile``): mnasnet's 40-channel 1x1 convolutions (five 8-lane
# vectors) ran one vector over 5 rows, 5 accumulators, a third of the FMA rate. Alone (Zen 5,
# 2 threads): 138 -> 100 us (batch 3, 193 px), 35 -> 29 us (batch 1), its classifier at batch 3
# (1000 = 125 8-lane vectors, as 5) 116 -> 91 us; googlenet's pooling over 33 vectors level
# (7.0 against 7.4 us), so pooling keeps its tile. Each divisor, not only the largest: regnet_y_32gf's
# groups of 232 channels (15 vectors padded) ran 5 vectors x 2 rows, 4068 us alone against 2727 as
# 3 x 7 (Zen 5); in the model 1.086x (efficientnet_b0 1.023x, mnasnet1_0 and inception_v3 level).
# 0 turns it off.
ODD_AXIS_VECTORS = 7
# ... and where still only one-vector tiles divide it (a prime count of vectors: RegNet's groups of
# 168 channels, padded to 176 = 11 vectors), a product's tile goes up to ONE_VECTOR_ROWS rows
# instead of ``tiles.max_rows``: 7 rows x 1 vector holds 7 accumulators, too few to hide the FMA
# latency. Alone (Zen 5, regnet_x_32gf's grouped 3x3 over 28x28, 4 groups): 4284 us at 7 rows,
# 3781 at 14; in the model 1.053x (before its groups were padded to 12 vectors, grouped_conv.py),
# regnet_x_400mf's groups of 16 1.036x / 1.030x. Full vectors only: regnet_y_400mf's groups of 8
# (half vectors) ran their strided convolutions 2.3x slower at 14 rows. 0 turns it off.
ONE_VECTOR_ROWS = 16
# A single-row tile (a matrix-vector product: a classifier at batch 1) takes the widest vector
# count offered, not the first: over an odd count of vectors the first is one (1000 classes are
# 125 8-lane vectors; the divisors above come after it), a single chain of dependent FMAs. Alone
# (Zen 3, AVX2, mobilenet_v2's classifier, 1280 -> 1000): 228 us as 1 vector, 184 us as 5.
SINGLE_ROW_WIDEST = True
# ... and one vector over that many rows replaces a tile of fewer than FEW_ROWS rows whose weight
# panel is larger than PANEL_L1_BYTES (``_rows_for_l2``; 0 turns it off).
FEW_ROWS = 4
PANEL_L1_BYTES = 32 << 10
# ... only where the reduction runs over more than one loop (a window: the measured case above);
# a matrix product's or 1x1 convolution's single reduction keeps its tile. bert-base's dense
# layers at batch 3 and 77 tokens (231 rows, 4 vectors x 3 rows) ran 1.3-2.3x slower alone as
# one vector x 11 rows (Zen 3, session 81; ``tiles.WHOLE_ROWS_UNDER_4``).
FEW_ROWS_WINDOWS_ONLY = True
# A tile whose weight panel is larger than PANEL_L2_BYTES (one core's L2 on the Zen 4/5 and
# Skylake-SP hosts) takes only vectors whose panel fits (``_vectors_for_l2``; 0 turns it off).
PANEL_L2_BYTES = 1 << 20
# The epilogue of a matmul computed over padded rows and sliced (``pack_weights``: DINOv2's 257
# tokens in tiles of 6 rows over 264) runs after each tile, bounded to the real rows, instead of
# as a second pass over the whole output (``write_back``).
TILE_SLICES = True
# ... and so does one over a slice of the vector axis, the output channels of a convolution
# computed padded to whole vectors (``pack_weights``: mnasnet's 40 and 80 channels; RegNet's
# groups of 56, 120 and 168, ``grouped_conv.py``), in vectors of the widest width of at least
# CHANNEL_SLICE_LANES that divides the slice: the predicate then holds per vector, not per lane.
# The padded output was written whole, then read back by a pass of its own. Alone (Zen 5,
# ``kernels_alone.py``): mobilenet_v3_large's 1x1 convolutions 5-18 % faster, mnasnet1_0's
# 24 -> 80 over 56x56 46 -> 34 us. Such a tile's reduction is not unrolled whole
# (``tile_loops``): LLVM then kept all 168 broadcasts of that convolution on the stack (88 us).
CHANNEL_SLICES = True
CHANNEL_SLICE_LANES = 8
# An epilogue that broadcasts the reduction's output over a larger tensor (a squeeze-excitation's
# second 1x1 convolution, its sigmoid, then the product with the block's feature map, which
# FuseOps joins to the convolution's kernel) computes the elementwise steps before the broadcast
# in the write-back, once per output, and only the steps from the broadcast on over the larger
# tensor (``fold_epilogue``; 0: all of them there, inlined into the last). The sigmoid (a fast
# exponential and a division) had been computed once per element of the feature map instead of
# once per channel and image: such kernels 1.1-1.8x faster in fp32, 1.6-3.8x in bf16. Same-process
# A/Bs of 0 (Zen 4, session 105, `rule_ab.py M rules.contraction.SMALL_EPILOGUE 0 --runs 40
# --block 2`): efficientnet_b0 b1 1.011x, b8 1.010x, bf16 b8 1.062x, bf16 b1 1.029x;
# regnet_y_3_2gf b8 1.015x, bf16 b8 1.020x; efficientnet_v2_s 1.009x, bf16 b8 1.010x; maxvit_t
# 1.008x; regnet_y_400mf b8 1.003x; mobilenet_v3_large b8 (a hard sigmoid) 1.000x. No zoo model
# has such an epilogue.
SMALL_EPILOGUE = 1
# When the operands that do not depend on the row axis (a convolution's weights, the second
# operand of a matmul) are smaller than this, the tiles run spatial-outer with the output-channel
# tiles inner: the weights stay in L2 and the input is read once, instead of once per channel tile
# (same-process A/Bs against channel-outer: resnet18 1.12x, mobilenet_v2 1.09x, resnet50 1.05x,
# bert-base 1.03x). Larger weights (deep ResNet layers, BERT's dense layers) keep channel-outer,
# where one tile's weight panel stays in cache while the smaller input is swept; so do weights of
# exactly this size, which cannot stay in a 1 MB L2 beside the input streaming through it
# (ResNet's 1x1 convolutions 1024 <-> 256 over 14x14: in the model 8 % faster channel-outer;
# resnet101 1.044x / 1.041x, resnet50 1.011x / 1.011x on the Zen 5 host, session 60). None: one
# core's L2 of the target (``Match.l2``), which those hosts had (1 MB); where L3 is far, a share of
# it (SPATIAL_OUTER_FAR_L3_SHARE, below). On the Zen 3 host's 512 KB L2 (session 80,
# same-process A/Bs against 1 MB): regnet_x_1_6gf 1.058x (408 -> 408 over 14x14, 666 KB: 399
# against 459 us alone), resnext50_32x4d 1.018x, inception_v3 1.012x, resnet50 1.006x; resnet18,
# convnext_tiny level; mobilenet_v2 0.985x / 0.993x and mnasnet1_0 1.001x / 0.992x (7x7 maps, where
# the two orders run level alone: reading 600-900 KB of weights once per 7-row tile was not worse).
SPATIAL_OUTER_WEIGHT_BYTES: int | None = None
# ... but a batched product's weights (one panel per position of Winograd's tiles, or per group)
# run spatial-outer up to this size whatever the L2: resnet18's 36 x 64 x 64 product (589 KB)
# alone on the Zen 3 host 347-372 us spatial-outer against 392 channel-outer, each position's
# panel read batch-first.
SPATIAL_OUTER_BATCHED_BYTES = 1 << 20
# Where L3 is far (Intel's server cores reach it over a mesh, at the memory's speed: ``near_l3``),
# weights run channel-outer from this share of L2: spatial-outer, each core reads every weight
# once per row tile, and what L2 does not keep beside the streaming input comes from far away;
# channel-outer, each core reads its half of the weights once. On the 2-vCPU Ice Lake-SP VM (1.25
# MB of L2, session 119; same-process A/Bs, ``benchmarks/rule_ab.py``), the threshold at 1 MB,
# 768, 640, 512 and 320 KB against 1.25 MB: mobilenet_v2 1.013x, 1.010x, 1.012x, 1.022x, 1.030x;
# efficientnet_b0 0.999x, 1.017x, 1.018x, 1.037x, 1.020x; resnet50 1.016x, 1.019x, 1.022x,
# 1.030x, 1.044x (mobilenet_v2's 1x1 convolutions over 7x7 maps, 614 KB and 1.2 MB of weights,
# 1.35-1.42x each in the model). Near-L3 targets keep their whole L2, as measured there.
SPATIAL_OUTER_FAR_L3_SHARE = 0.4
# Reductions this short (a 3x3 window, a 3x3x3 stem convolution) are unrolled whole: their loops
# of 3 cost more in branches and index arithmetic than the tile's FMAs.
UNROLL_REDUCTION = 27
# On 16 registers a predicated register tile (rows no tile divides) with its window unrolled
# whole keeps its accumulators in registers or stores them to the stack at the whim of LLVM's
# register allocation, and the same tile goes either way: squeezenet1_1's stem over 79-pixel rows
# (2 vectors x a predicated 4) stored 110 ymm registers to the stack unrolled and none with the
# window a loop (alone, Zen 3, session 84: 3.6 against 1.3 ms at batch 8), mobilenet_v2's over 97
# pixels none unrolled and 63 as a loop (405 against 930 us at batch 3, 193 px). So the window is
# a loop where that compiles to no vector store to the stack and unrolled to some
# (``codegen.stack_spills``). Not on fewer stores alone: mnasnet1_0's 5x5 depthwise windows over
# 13x13 maps stored 46 unrolled and 9 as a loop, and ran 174 against 211 us.
SPILLS_DECIDE_UNROLL = True
# A depthwise window too long to unroll whole (RepLKNet's 31x31, ConvMixer's 9x9, 1-d windows of
# 31-87 taps) has its innermost taps (along the tile's rows) unrolled, up to this many: a tile's
# neighbouring pixels then read the same input vectors at neighbouring taps, and LLVM loads each
# once for all of them (one input and one weight load per tile row of FMAs, not one input load
# per FMA). As a loop, every tap loaded the whole tile's inputs again: RepLKNet's 31x31 over 56x56x128
# ran load-bound at 64 % of the FMA peak, 4.67 ms alone; unrolled, 3.72 ms (session 125).
WINDOW_ROW_TAPS = 64
# ... and over whole tiles too where the window reads several input channels as well as taps (a
# stem's 3x3x3). On every AVX2 target LLVM stores 53-54 ymm registers to the stack for the 2 x 4
# tile of mobilenet_v2's, mnasnet1_0's and regnet_y_400mf's stems over 112-pixel rows with the
# window unrolled, none with it a loop; alone on the Zen 1 host (session 108) 438-469 -> 380-391
# us, and Droplet's records for mobilenet_v2's stem were the loop, 1.40x (Zen 3, session 79) and
# 1.38x (Zen 1) faster inside the model. The stems this leaves unrolled measured level or faster
# so (shufflenet_v2's 3 x 4 over 24 channels: 86 stores unrolled, 11 as a loop, unrolled 1.13x
# faster; squeezenet1_1's, none either way). Depthwise windows stay as they were (mixed, +-5 %).
SPILLS_DECIDE_CHANNEL_WINDOWS = True
# Four vectors x 3 whole rows on 16 registers (``tiles.WHOLE_ROWS_UNDER_4``, measured on dense
# layers over 231 rows) only for a single reduction loop (a dot product): a window's code spilled
# it in its inner loop (8 ymm stores per 48 FMAs). alexnet's 5x5 convolution over 39-pixel rows
# (320 px) took 4 x 3: alone (Zen 3, session 84) 107 ms at batch 8 against 56-61 as 2 x 3;
# same-process A/Bs against True (`rule_ab.py alexnet rules.contraction.WINDOW_WHOLE_ROWS_UNDER_4
# True --image-size 320`): batch 8 1.300x [1.253-1.375], batch 1 1.203x [1.149-1.224]. No other
# kernel of alexnet (224 px), squeezenet1_1 (b8 160 px), inception_v3, mnasnet1_0 (320 px), or of
# resnet50, densenet121, googlenet and vgg16 at batch 3, 193 px changes.
WINDOW_WHOLE_ROWS_UNDER_4 = False
# Steps of the innermost reduction loop (a matmul's K, a convolution's input channels) unrolled
# per loop iteration, where they divide it. The register tile's loop already had the ideal mix (16
# FMAs, 4 loads, 4 broadcasts per step), yet bert-base's dense layers ran 8-14 % faster alone
# unrolled by 4 (768 -> 3072 at 1024 rows: 15.9 -> 14.5 ms). Same-process A/Bs against no unroll
# (Xeon host): bert-base b1 1.098x, b8 1.091x, resnet50 b1 1.062x, b8 1.056x, resnet18 1.065x,
# googlenet 1.059x, vgg16 1.045x, densenet121 1.044x, mnasnet1_0 1.042x, squeezenet1_1 b8
# 1.031x, mobilenet_v2 1.026x, inception_v3 1.014x.
UNROLL_DEPTH = 4
# Channel-outer tiles over an input larger than ROW_BLOCK_BYTES go in blocks of ROW_BLOCK_ROWS
# rows (``_block_rows``). Timed alone on the Xeon host (bert-base at batch 8, 1024 rows), blocks
# of 256 rows beat 64, 128, 512 and one block on all three dense shapes: 12.4 against 14.5 ms
# (768 -> 3072), 13.5 against 13.8 (3072 -> 768), 3.32 against 3.50 (768 -> 768); 32 rows lost.
# In the model, bert-base's 3072 -> 768 layer (12 KB of input per row: 3 MB per block) ran
# 10 % slower in blocks (16.5 against 15.0 ms per call): a block's input must fit this.
ROW_BLOCK_BYTES = 512 << 10
ROW_BLOCK_ROWS = 256
ROW_BLOCK_MAX_BYTES = 1 << 20
# Channel-outer tiles that sweep more than REDUCTION_BLOCK_INPUT_BYTES of input per channel tile
# over a weight panel (depth x tile columns) larger than REDUCTION_PANEL_BYTES split the reduction
# in blocks whose panel is about that size (``_block_reduction``; 0 turns it off). Zen 5 host,
# same-process A/Bs (docs/performance.md, "The reduction in blocks"): ViT 1.022x / 1.036x (both
# build orders), at batch 8 1.036x; bert-base b8 1.009x, bert-large b8 0.991x, t5-base b8 0.999x,
# resnet50 b8 1.001x / 0.999x; models at batch 1 with smaller sweeps (BERTs, gpt2) keep one block.
# Blocking every panel over 64 KB, whatever the input, gained more on ViT (1.037-1.039x, b8
# 1.044-1.070x) but cost t5-base 1.1-1.3 %, gpt2 0.8-1.0 % and resnet50 at batch 8 0.9-2.3 %.
# Since unblocked tiles prefetch their next panel (PREFETCH_NEXT_PANEL, session 54), the 96 KB
# panels of 768-deep dense layers run faster whole (ViT b8's q/k/v alone 3744 against 3932 us in
# 384-deep blocks), while resnet50 b8's 128 KB ones (1024 deep) keep theirs: 112 KB, not 64
# (session 58: ViT b8 1.030x / 1.029x, b1 1.018x / 1.002x, bert-base at 512 tokens 1.010x, t5-base b8
# 1.011x, inception_v3 b8 1.003x, gpt2 b8 0.997x, bert-base b8 0.995x; at 128 KB resnet50 b8 0.992x).
REDUCTION_PANEL_BYTES = 112 << 10
REDUCTION_BLOCK_INPUT_BYTES = 2 << 20
# ... or, on a target whose L3 is far (``targets.near_l3``: Intel's server cores), that read more
# than REDUCTION_BLOCK_FAR_L3_L2 of one core's L2 (rows x depth: a strided convolution reads a part
# of its input): each core sweeps the input once per channel tile, and an input that shares L2
# with the panel comes from L3 each time, at the memory's speed there. 2-vCPU Xeon VM (2 MB L2):
# bert-large's 4096 -> 1024 layers (2 MB of input, a 1 MB panel) 7.07 -> 3.60 ms per call in the
# model; same-process A/Bs against the old rule: bert-large 1.112x / 1.213x (both build orders),
# gpt2 1.017x, bert-base 1.010x, t5-base 1.008x, distilbert 1.006x.
REDUCTION_BLOCK_FAR_L3_L2 = 0.5
# ... and a window's reduction (a 3x3 convolution: its channels in blocks, the taps inside) whose
# panel is larger than WINDOW_BLOCKS (one core's L2), whatever the input it sweeps (0: never), in
# blocks of at most WINDOW_BLOCK_CHANNELS channels, where its tiles have fewer than
# WINDOW_BLOCK_ROWS rows: whole, such a panel comes from L3 for every row tile at 128 / rows bytes
# a cycle. DeepLabV3's ASPP bands (2048 channels x 4-9 taps, tiles of 4-6 rows) alone on the
# Zen 5 host: 1.1-1.3x faster in blocks of 256 (847-1326 against 1118-1593 us), 128 and 512
# slower than 256, 64 no faster than none; in the model 1.040x / 1.033x (both build orders),
# FCN-ResNet50 1.011x, DeepLabV3-ResNet101 1.022x. wide_resnet50_2's 7x7 maps (tiles of 7 rows,
# prefetching the next panel) ran 13 % slower in blocks.
WINDOW_BLOCKS = 1 << 20
WINDOW_BLOCK_CHANNELS = 256
WINDOW_BLOCK_ROWS = 7
# Channel-outer tiles over one packed weight panel per channel tile prefetch the next tile's panel
# while they compute (``passes/prefetch.py``; 0 turns it off). Zen 5 host, alone (bert-base's
# dense layers, weights from memory): 7.6 % (768 -> 3072 + GELU), 3.6 % (3072 -> 768), 5-6 %
# (768 -> 768) faster; in the models docs/performance.md, "The next weight panel prefetched".
PREFETCH_NEXT_PANEL = 1
# ... and so do bf16 tiles (``--precision bf16``), whose weights are packed in pairs of steps,
# ``[N/block, K/2, block, 2]`` (0: only fp32 ones, as before session 98). Zen 5 host, same-process
# A/Bs in bf16, blocks of 10: bert-base 1.114x / 1.110x (both build orders), t5-base 1.126x,
# vgg16 1.052x, resnet50 1.046x, ViT 1.022x, inception_v3 1.019x; densenet161, mobilenet_v2 and
# resnet50 at batch 8 level.
PREFETCH_PAIRS = 1
# A row axis shorter than this, whole in the tile, gets rows of the next-outer axis stacked on
# it, up to MAX_STACKED_ROWS rows in all (``_stack``). Only stacks that divide the height: on
# resnet50's 5x5 maps at 160 px a predicated stack of 2 (10 rows, 3 sweeps) ran its kernels
# 0-35 % slower alone than one row of 5.
STACK_ROWS_BELOW = 8
MAX_STACKED_ROWS = 12
# ... and a crossed stack (``_crossed``: a grouped convolution's ``groups`` form, rows over a
# group's output channels, stacked over output columns) too (0: not stacked), in one vector where
# that stacks more columns (CROSSED_ONE_VECTOR; 0: the vectors register_tile chose).
CROSSED_STACKS = 1
CROSSED_ONE_VECTOR = 1
# A bf16 pair operand's padding copy over an innermost axis narrower than a vector copies its
# unpadded innermost axes as one loop (1; 0: the innermost axis alone): ``_fuse_unpadded_tail``.
FUSE_UNPADDED_TAIL = 1
# ... and so does one whose innermost axis is at most this many elements (a RegNet group of 16
# channels: the copy was one 32-byte run per group and pixel, its index arithmetic per run).
FUSE_TAIL_WIDTH = 16
# A single-row tile (a GEMV: a classifier at batch 1) may span two packed weight blocks, so each
# thread streams two weight panels at once: alone, alexnet's 9216 -> 4096 layer read its 151 MB
# from memory at 29.5 against 28.1 GB/s; in the models (same-process A/Bs, both build orders)
# vgg16 1.042x / 1.016x, alexnet 1.04x / 1.00x (its A/A: 1.022x / 0.989x), resnet50 and
# mobilenet_v2 level.
SPAN_PACKS = True
# ... and so may a tile of several rows over weights larger than SPATIAL_OUTER_WEIGHT_BYTES, four
# vectors wide where the row axis splits into whole tiles of at most 6 rows (``_wide_tile``):
# twice the FMAs per input broadcast and two weight streams. Same-process A/Bs, both build orders
# (Xeon host): resnet50 160 px 1.086x / 1.096x, resnet18 160 px 1.071x / 1.050x, inception_v3
# 160 px 1.037x / 1.027x, bert-base b1 1.040x / 1.021x; level at 224 px (resnet50 1.005x,
# mobilenet_v2 0.996x, googlenet 1.000x, vgg16 1.001x / 0.985x) and at batch 8.
SPAN_ALL = True
# ... and so may a tile of bf16 pairs over any weights (``--precision bf16``): a tile of two
# vectors over the few rows a map's width allows (5 of 55) holds 10 accumulators, too few for
# vdpbf16ps's latency; four vectors hold 20.
SPAN_PAIRS = 1
# A bf16 pair operand's padding copy that stays a stage of its own is computed under the tile
# loop (``_pad_under_tile``), so each tile copies the window its rows read into a buffer on the
# stack and no pass over memory writes and reads a padded input: where the window is strided
# (the copy at least PAD_UNDER_TILE_INPUTS inputs per output) and no two tiles read the same
# window (a RegNet or ResNeXt group's output channels in one tile). Alone (Zen 4, regnet_y_3_2gf
# at batch 8, its 3x3 grouped convolutions): stride 2 over 56x56 2.35 -> 1.86 ms, over 112x112
# 3.51 -> 2.54 ms. At most PAD_UNDER_TILE_BYTES a tile (0: off).
PAD_UNDER_TILE_BYTES = 16 << 10
PAD_UNDER_TILE_INPUTS = 2
# A cast producing a bf16 pair operand stays a stage of its own (``inline_producers``): inlined,
# the dot product's tensorize failed on the fp32 buffer it then read, and the kernel fell to
# DLight's Reduction rule without it (the image of a stem with no padding to cast it: ConvNeXt's
# 4x4 and a ViT's 16x16 patch embeddings). 0: inlined, for A/Bs.
BF16_CAST_STAGE = 1
# A depthwise convolution whose window is unrolled holds the window's weights in registers across
# its tile (one vector per tap and tile vector): 3x3 over two vectors is 18 registers, which
# leaves room for 6 rows of accumulators of the 32, not 8 (``_window_registers``). Alone (Zen 4,
# mnasnet1_0 at batch 8, the 3x3 depthwise over 112x112x32): 2 vectors x 8 rows 1.25-1.33 ms,
# x 4 rows 0.83-0.88 ms. 32-register targets only (measured on AVX-512; NEON has 32 too); 0 turns
# it off. Rows stacked on a short map (``_stack``) count against what the weights leave.
DEPTHWISE_REGISTERS = 32
# ... unless the tile they leave has fewer rows than this (or than the whole map row, if shorter): a 5x5 window
# (25 registers per vector) over a 7-pixel row left a tile of one pixel, two vectors (50 weight
# registers of 32: spills, and a bounds check per tap), 0.15-0.27 ms for mnasnet1_0's 5x5 depthwise
# over 7x7x1152 at batch 3 alone, against 0.061-0.072 ms with the weights loaded per tap and a whole map
# row per tile. Over 13x13 the held window's tile of 5 rows stays (dropping it there doubled that
# kernel). docs/performance.md, "A 5x5 depthwise window over a 7-pixel row".
HELD_WINDOW_MIN_ROWS = 4
# On 16 registers, a tile of one vector over a whole map row takes two vectors where they hold at
# most this many accumulators: 7-pixel rows (the last stage of most CNNs at 224 and 193 px), where
# the 12-accumulator budget leaves one vector x 7 (7 FMAs per 8 loads) or a predicated tile that
# computes 12 rows for 7. Two vectors x 7 hold 14 accumulators, the weights read by the FMAs
# from memory. Alone (Zen 1, session 111): mnasnet1_0's 192 -> 1152 1x1 over 7x7 at batch 3
# 1167 -> 1018 us, resnet50's 1024 -> 2048 one 3618 -> 3066 us and its 3x3 over 7x7x512 4119 ->
# 3868 us. (The budget raised to 14 for every tile made resnet50 1.13x slower; depthwise
# windows, which load their weights per tap either way, ran 1.35x slower: mobilenet_v2's over
# 7x7x960.) 0: off.
WHOLE_ROW_ACCUMULATORS_16_REGS = 14
# On 16 registers (AVX2) a depthwise tile whose rows would be predicated (or fewer than 4) takes
# one vector over whole rows where there are whole rows of 4 or more: every FMA of a depthwise
# reads its own input vector, so a second vector only adds accumulators, and FMAs per load follow
# the rows alone (rows / (rows + 1)), which the predicate then taxes. Alone on the Zen 3 VM (session 79, 14-pixel
# rows): mobilenet_v2's 3x3 over 14x14x576 as 1 x 7 instead of 2 x a predicated 5 28.2 -> 24.6 us,
# x384 20.2 -> 17.5, shufflenet_v2's 3 x 3 over 14x14x120 13.6 -> 12.3 and 13.7 -> 11.1, mnasnet1_0's
# 3x3 over 14x14x576 51.1 -> 44.6, its 5x5 over 14x14x480 101.9 -> 67.6. (Over 28-pixel rows,
# where 4 rows are whole, 1 x 7 against 2 x 4 or 3 x 4 ran 0.9-1.0x for 3x3 windows: unchanged.)
# End to end these kernels are under 1 % of the models, below the A/Bs' resolution (`rule_ab.py M
# rules.contraction.DEPTHWISE_WHOLE_ROWS_16_REGS False --block 5 --runs 300`): mobilenet_v2 1.009
# [0.993-1.012], mnasnet1_0 0.986 [0.977-1.010] (1.000 at batch 8), shufflenet_v2_x1_0 1.003.
# Kept for the kernels; 32-register targets are unchanged.
DEPTHWISE_WHOLE_ROWS_16_REGS = True
# A batched contraction whose batch axis indexes the weights (the Winograd product: the tile
# position) may fuse its row tiles outside the batch, so each core takes a range of rows (Winograd
# tiles) for every position, the tiles its input transform wrote and its output transform reads,
# instead of half the positions of every tile: on the EPYC VM's far host state (the two vCPUs on
# two core complexes) the other half crosses between the complexes. 0 (the default): batch
# outermost; 1: rows first where the tiles run spatial-outer; 2: and spatial-outer forced on every
# batched product (each core then reads every position's weights). Same-process A/Bs with the
# host-state probe (session 35, Zen 4 VM; docs/performance.md, "Which side of the cores"): 1 gave
# resnet18 1.035-1.061x in the far state but resnet18 at batch 8 0.956x in the near one; 2 gave
# resnet18 1.080x far and 1.010-1.013x near, densenet121 1.015x, googlenet 1.018x, but vgg16 0.945x,
# inception_v3 0.984x and resnet18 at batch 8 0.956x, where the weights are large against the rows.
# Off: ROW_CHUNKS tells those apart.
ROWS_BEFORE_BATCH = 0
# ... and a batched product whose rows' data (the input and output, which the transforms on
# either side split by tiles) outweighs its weights by ROW_CHUNK_BYTES_PER_WEIGHT_BYTE splits its
# row tiles into ROW_CHUNKS contiguous ranges outside the batch (``_row_chunks``): the parallel
# loop's static halves then give each core the tiles its input transform wrote and its output
# transform reads, and inside a range each position's weights serve all its rows (what
# ROWS_BEFORE_BATCH lost at batch 8). Each core then reads every position's weights. Same-process
# A/Bs (session 73, Zen 4 VM, by the host-state probe): in the far state resnet18 1.048-1.061x
# (bf16 1.047-1.067x), resnet34 1.039-1.046x (bf16 1.080x), resnet50 bf16 1.014x, inception_v3
# 1.013x, vgg16 1.008x, googlenet 0.988x; in the near state (one L3) resnet18 0.993-1.004x (bf16
# 0.970-1.009x), resnet34 0.990x, densenet121 level. 0 turns it off.
ROW_CHUNKS = 2
ROW_CHUNK_BYTES_PER_WEIGHT_BYTE = 1.0
# In channel-outer order (weights over SPATIAL_OUTER_WEIGHT_BYTES), the axes of independent
# contractions (``_batch_axes``: a grouped convolution's group, the Winograd product's position)
# go outside the channel tiles, so a group's tiles run together and its weight panel serves them
# all (and ``passes/prefetch.py`` can fetch the group's next panel): the NHWC output put the group
# axis inside the image rows, and each row of tiles cycled through every group's weights
# (regnet_y_128gf's 14x14 grouped convolution: 11 panels of 331 KB per channel tile, more than
# L2, once per image row). Spatial-outer tiles keep the groups inside the rows: their weights
# fit, and a group at a time read a large input once per group (regnet_x_3_2gf's first grouped
# convolution at batch 8, 2 groups over 112x112: 15 % slower alone).
BATCH_FIRST = True
# ... but where a group's input channels are not whole cache lines of this many bytes (RegNet's
# groups of 8 or 24 fp32 channels, 16 bf16: neighbouring groups share lines), the spatial-outer
# tiles compute a column tile's groups in turn (``_groups_inside_rows``) instead of each group's
# tiles along the image row one after another: each line's parts are read together, where that
# order read a line once per group that shares it, minutes apart at batch 8 (once evicted, from
# L3 or memory: regnet_y_400mf's first grouped convolution, 32 of each 64-byte line a group, ran
# 0.69 ms alone, 2.8 ms with all operands flushed, 3.3 ms in the model). Same-process A/Bs against
# 0 (session 106, Zen 4; `rule_ab.py M rules.contraction.GROUPS_INSIDE_ROWS 0 --runs 40|60
# --block 2`): regnet_y_400mf b8 1.035x (its stride-2 kernels 1.4x) / 0.990x (ab, kernels 1.03x),
# bf16 b8 1.006x / 1.008x; regnet_y_3_2gf b8 1.014x, bf16 1.008x; regnet_y_1_6gf 1.020x,
# regnet_x_1_6gf 1.012x; regnet_y_800mf bf16 b8 0.991x / 1.004x. 0: off.
GROUPS_INSIDE_ROWS = 64
# ... and a bf16 one's groups then run one after another inside each parallel iteration (a column
# tile), whose padded window (``_pad_under_tile``) is then copied once for all its groups: whole
# pixels, each input row's part one contiguous run, where each group's copy took 16 of every
# 208 bytes (regnet_y_400mf's 13 groups of 8 bf16 channels) and the hardware prefetchers
# followed neither. Only where that copy fits PAD_UNDER_TILE_BYTES (else the kernel is scheduled
# again without: the groups in turn read the padded input from memory, 1.3-1.7x slower kernels).
# Alone (flushed caches) regnet_y_400mf's stride-2 ones 1.47-1.76x; same-process A/Bs against 0
# (session 106, Zen 4, bf16, `rule_ab.py M rules.contraction.GROUPS_SERIAL 1 --runs 40 --block 2`,
# A = on): regnet_y_400mf b8 1.040x / 1.025x (ba), b1 1.037x; regnet_y_800mf b8 1.011x;
# regnet_y_1_6gf b8, regnet_y_3_2gf b8 and regnet_x_400mf b8 level (0.995-1.003x). 0: off.
GROUPS_SERIAL = 1
# ... and so does an fp32 one, whose padding the tiles otherwise read inline (SPARSE_WINDOW):
# its padding stage is kept for the copy (``_serial_copy``) where its window takes at most this
# many bytes (fp32 windows are twice bf16's; regnet_y_400mf's 56 -> 28 one 18.7 KB). Alone,
# regnet_y_400mf's 56 -> 28 kernel at batch 8 with flushed caches 3.08 -> 1.12 ms, the 112 -> 56
# one 4.4 -> 2.7 ms. Same-process A/Bs against 0 (session 106, Zen 4, `rule_ab.py M
# rules.contraction.SERIAL_FP32 0 --runs 40 --block 2`, B = on): regnet_y_400mf b8 1.047x (its
# two strided grouped kernels 1.60x and 1.29x), b1 0.987x [0.980-1.007]; regnet_x_1_6gf 1.015x;
# regnet_y_3_2gf 1.011x; regnet_y_1_6gf 1.003x. Grouped kernels only (``_batch_axes``): a stem's
# 3 channels are no whole line either. 0: off.
SERIAL_FP32 = 32 << 10


@dataclass
class Match:
    """What the matcher found in one function: its schedule, the reduction block and its axes.
    ``block`` and ``out`` are the reduction block and its output as matched, before any step."""

    sch: Any
    infos: list[Any]
    main: Any  # the reduction's BlockInfo
    block: Any
    out: Any
    lanes: int
    kinds: str
    extents: list[int]
    n_axis: int  # the output's innermost axis: the vector axis
    m_axis: int | None  # the register tile's row axis
    packs: list[int]  # block sizes of packed operands (``w[n // P, ..., n % P]``)
    pairs: bool = False  # bf16 weights packed in pairs of reduction steps: one vdpbf16ps per vector and pair
    block_rows: bool = True  # rows in blocks where the input outgrows L2 (``_block_rows``)
    l2: int = 1 << 20  # one core's L2 of the target (``targets.cpu_l2_bytes``)
    near_l3: bool = True  # the target's L3 streams at a good part of L2's speed (``targets.near_l3``)
    dot_loop: Any = None  # (pairs) the lanes loop, with the pair inside it, that the dot product replaces
    unroll_default: bool | None = None  # the window's unrolling decided by the caller (SPILLS_DECIDE_UNROLL)
    spills_decide: bool = False  # (set by ``tile_loops``) an unrolled window over a predicated tile or over channels
    row_taps: bool = True  # WINDOW_ROW_TAPS allowed
    taps_decide: bool = False  # (set by ``tile_loops``) taps unrolled along the rows over inline padding
    rows_fused: bool = False  # (set by ``_block_rows``) blocks of rows over several fused axes
    after: Any = None  # (set by ``fold_epilogue``) the epilogue's steps from a broadcast on, a pass of their own
    groups_inside: int = 0  # (set by ``_tile_order``) GROUPS_INSIDE_ROWS: the group loops and the channel tile's, innermost
    serial_groups: bool = True  # GROUPS_SERIAL allowed
    copy_loop: Any = None  # (set by ``tile_loops``) GROUPS_SERIAL: the parallel loop over column tiles

    def window(self) -> int:
        return int(np.prod([e for e, k in zip(self.extents, self.kinds, strict=True) if k == "R"]))


@dataclass
class Tile:
    vectors: int
    rows: int
    width: int  # lanes of one vector of the tile
    stack: int = 1  # rows of the next-outer output axis in the tile (``_stack``): rows x stack in all


class Contraction(Rule):
    """Register-tiled reductions (matmul/conv/pool)."""

    reductions = (1, 1)

    def schedule(self, func: Any, target: Any, block_rows: bool = True, unroll: bool | None = None,
                 serial: bool = True, taps: bool = True) -> Any:
        found = match(func, target)
        if found is None:
            return None
        found.block_rows, found.unroll_default, found.serial_groups, found.row_taps = block_rows, unroll, serial, taps
        found, einsum_padded = pad_vector_axis(found, func, target)
        if found is None:
            return None
        inline_producers(found, einsum_padded, accumulator_budget(target) > tiles.MAX_ACCUMULATORS_16_REGS)
        epilogue = fold_epilogue(found)
        if epilogue is False:
            return None
        tile = choose_tile(found, target)
        if tile is None:
            return None
        sliced = _slice_form(found, epilogue, tile.width)
        tile_loop, reduce_loops = tile_loops(found, tile, sliced)
        write_back(found, tile, tile_loop, reduce_loops, epilogue, sliced)
        if len(reduce_loops) > 1 and _depthwise_tile(found):  # (the window's rows in the padding skipped)
            mark_window_rows(found.sch, found.main.block_rv, reduce_loops[0])
        if found.copy_loop is not None and not found.pairs:  # (SERIAL_FP32)
            windowed = _pad_under_tile(found, tile, tile_loop, SERIAL_FP32)
            if windowed is None:
                return self.schedule(func, target, block_rows, unroll, serial=False, taps=taps)
            found.sch.set_scope(windowed, 0, "local")
        if found.pairs:
            windowed = _pad_under_tile(found, tile, tile_loop)
            if found.copy_loop is not None and windowed is None:  # (GROUPS_SERIAL: no copy, no gain)
                return self.schedule(func, target, block_rows, unroll, serial=False, taps=taps)
            bf16.register()
            try:  # (under whole row tiles, passes/pack_weights.whole_tiles: no predicate in the dot product)
                found.sch.tensorize(found.dot_loop, bf16.DOT_16x2_BOTH if _both_vectors(found)
                                    else bf16.DOT_16x2 if tile.width == bf16.LANES else bf16.DOT_8x2)
            except (RuntimeError, tvm.error.InternalError):
                if not block_rows:
                    raise
                # Row blocks over an odd number of row tiles fuse the tile loops into bindings
                # the dot product's block cannot be cut out of (inception_v3's 17x17 maps): again
                # without them.
                return self.schedule(func, target, block_rows=False, serial=serial)
            found.sch.annotate(tile_loop, "pragma_import_llvm", bf16.LLVM_IR)
            if windowed is not None:
                found.sch.set_scope(windowed, 0, "local")
        if found.taps_decide and stack_spills(found.sch.mod["main"], target):
            return self.schedule(func, target, block_rows, unroll, serial, taps=False)
        if found.spills_decide and accumulator_budget(target) <= tiles.MAX_ACCUMULATORS_16_REGS:
            return self._looped_if_unrolled_spills(func, target, block_rows, found.sch)
        return found.sch

    def _looped_if_unrolled_spills(self, func: Any, target: Any, block_rows: bool, unrolled: Any) -> Any:
        """``unrolled``, or the same schedule with the window a loop where that compiles to no
        vector store to the stack and ``unrolled`` to some (SPILLS_DECIDE_UNROLL; rebuilt so its
        knobs are recorded)."""
        with unrecorded():
            looped = self.schedule(func, target, block_rows, unroll=False)
        if looped is None or stack_spills(looped.mod["main"], target) or not stack_spills(unrolled.mod["main"], target):
            return unrolled
        return self.schedule(func, target, block_rows, unroll=False)


def match(func: Any, target: Any) -> Match | None:
    """One reduction block of spatial and reduction axes only, static extents, and every operand
    either independent of the output's innermost axis or reading it contiguously (or packed)."""
    found = normalized(func)
    if found is None:
        return None
    sch, infos = found
    reductions = [b for b in infos if not b.is_injective()]
    if len(reductions) != 1 or any(k not in "SR" for k in reductions[0].dom_kind()):
        return None
    main = reductions[0]
    block = sch.get(main.block_rv)
    if len(block.writes) != 1:
        return None
    out = block.writes[0].source
    kinds = main.dom_kind()
    extents = [as_int(e) for e in main.dom()]
    if any(e is None for e in extents):
        return None  # dynamic shapes: leave to DLight/MetaSchedule
    n_axis = _spatial_axis(block, kinds, len(block.writes[0].region) - 1)
    if n_axis is None or extents[n_axis] < 4:
        return None
    packs = _contiguous_packs(block, block.iter_vars[n_axis].var)
    if packs is None:
        return None
    steps = [v for v in (pair_step(r) for r in block.reads) if v is not None]
    pairs = bool(steps)
    if pairs:  # (the pairs must be of the innermost reduction's steps: its loop is split in two)
        last = max(i for i, k in enumerate(kinds) if k == "R")
        if (not all(v.same_as(block.iter_vars[last].var) for v in steps) or extents[last] % 2
                or out.dtype != "float32" or not bf16.has_bf16_dot(target)):
            return None
    return Match(sch, infos, main, block, out, vector_lanes(target, dtype_bits(out.dtype)), kinds, extents,
                 n_axis, _row_axis(block, kinds, extents, n_axis), packs, pairs, l2=cpu_l2_bytes(target),
                 near_l3=near_l3(target))


def _both_vectors(found: Match) -> bool:
    """Whether both bf16 pair operands run along the vector axis (``bf16.DOT_16x2_BOTH``: a
    grouped convolution's ``groups`` form), not one of them broadcast."""
    n_var = found.block.iter_vars[found.n_axis].var
    return sum(1 for r in found.block.reads
               if pair_step(r) is not None and any(uses(x.min, n_var) for x in r.region)) > 1


def _spatial_axis(block: Any, kinds: str, dim: int) -> int | None:
    """The spatial iterator that indexes dimension ``dim`` of the output, if one does alone."""
    r = block.writes[0].region[dim]
    for i, iv in enumerate(block.iter_vars):
        if kinds[i] == "S" and r.min.same_as(iv.var):
            return i
    return None


def _row_axis(block: Any, kinds: str, extents: list[int], n_axis: int) -> int | None:
    """The row axis: the output's next-to-innermost spatial axis, else the longest other one,
    taking the first along which a vector operand stays the same (its vector, loaded once per
    reduction step, then serves every row). A grouped convolution's group axis is not one:
    its weights change with the group, so rows over it would reload every vector; of its output
    rows and columns, equally long, the columns (ROW_TIE_INNER)."""
    rank = len(block.writes[0].region)
    m_axis = _spatial_axis(block, kinds, rank - 2) if rank >= 2 else None
    first = [m_axis] if m_axis is not None and extents[m_axis] > 1 else []
    others = sorted((i for i, k in enumerate(kinds) if k == "S" and i not in (n_axis, m_axis) and extents[i] > 1),
                    key=lambda i: (-extents[i], -i if ROW_TIE_INNER else i))
    candidates = first + others
    n_var = block.iter_vars[n_axis].var
    vector_reads = [r for r in block.reads if any(uses(x.min, n_var) for x in r.region)]
    for axis in candidates:
        m_var = block.iter_vars[axis].var
        if any(not any(uses(x.min, m_var) for x in r.region) for r in vector_reads):
            return axis
    return candidates[0] if candidates else None


def _contiguous_packs(block: Any, n_var: Any) -> list[int] | None:
    """Every operand must either not depend on the vector axis (broadcast) or read it contiguously
    in its innermost dimension; anything else (a transposed operand, a row reduction) is a gather:
    None. A packed operand (``w[n // P, ..., n % P]``, see passes/pack_weights.py) is contiguous
    within each tile when the tile divides P; the Ps are returned."""
    packs = []
    for read in block.reads:
        region = read.region[:-1] if pair_step(read) is not None else read.region
        for d, r in enumerate(region):
            last = d == len(region) - 1
            c = coefficient(r.min, n_var)
            if c is None:
                size = packed_block(r.min, n_var, last)
                if size is None:
                    return None
                packs.append(size)
            elif (not last and c != 0) or (last and c not in (0, 1)):
                return None
    return packs


def padding(extents: list[int], n_axis: int, lanes: int) -> list[int] | None:
    """Padded extents that give the vector axis whole vectors, or None when it already divides
    by 4 (a row axis without a good divisor costs only a predicated last tile, no padding).

    Attention over 197 tokens (ViT) multiplies by a ``[64, 197]`` operand: with no vector width
    dividing 197 the tile could not be vectorised at all, and ran at a tenth of the machine's
    speed. Padding the operands to 208 columns costs a copy of them and 6 % more arithmetic.
    """
    n = extents[n_axis]
    padded = list(extents)
    if n > lanes and n % 4:
        padded[n_axis] = -(-n // lanes) * lanes
    return padded if padded != extents else None


def pad_vector_axis(found: Match, func: Any, target: Any) -> tuple[Match | None, bool]:
    """The match to schedule, and whether its operands were padded (``padding``). Only a plain
    einsum (operands indexed by the loop variables) can be padded: its operands get padded
    copies, the output a padded buffer sliced into the real one; a convolution keeps a tail."""
    padded = padding(found.extents, found.n_axis, found.lanes) if not found.packs else None
    if padded is None:
        return found, False
    try:
        found.sch.pad_einsum(found.main.block_rv, padded)
    except Exception:
        return match(func, target), False  # the schedule was touched: start again, unpadded
    return match(found.sch.mod["main"], target), True


def inline_producers(found: Match, einsum_padded: bool, registers32: bool = True) -> None:
    """A plain copy (the "padding" of a 1x1 convolution) is inlined: it would only cost a pass
    over memory. Real padding stays a separate parallel loop nest, so the tile's loads carry no
    bounds check, except under a short reduction (pooling, depthwise convolution: a 3x3 window
    per output) with a strided or cache-sized input: there the copy is a pass over memory for 9
    operations per output (for stride 2, over 4 inputs per output), and a bounds check per load
    is the cheaper of the two (mobilenet_v2's stride-2 depthwise convolutions 1.4-2.3x faster).
    Stride-1 windows over inputs larger than 1 MB kept the copy until whole-model A/Bs showed the
    inline read as fast or faster at every point tried (docs/performance.md). A longer window
    whose producer feeds few multiply-adds per element reads it inline too (SPARSE_WINDOW), on
    targets of 32 vector registers (``registers32``) or with SPARSE_INLINE_16_REGS."""
    sch = found.sch
    out_elems = int(np.prod([e for e, k in zip(found.extents, found.kinds, strict=True) if k == "S"]))
    for info in found.infos[: found.infos.index(found.main)]:
        if not info.is_injective():
            continue
        produced = sch.get(info.block_rv).writes[0].source
        in_elems = int(np.prod([as_int(d) or 0 for d in produced.shape]))
        short = found.window() <= SHORT_REDUCTION and (
            INLINE_PAD_BYTES is None or in_elems * dtype_bits(produced.dtype) // 8 <= INLINE_PAD_BYTES
            or in_elems >= 3 * out_elems)
        sparse = (registers32 or SPARSE_INLINE_16_REGS) and found.window() <= SPARSE_WINDOW \
            and out_elems * found.window() <= SPARSE_FMAS_PER_INPUT * in_elems
        sparse = sparse or (OUTER_PADDING_INLINE and _pads_outside_tile(found, info))
        # (pad_einsum's padded operands are left alone: their bounds check is on the vector axis.)
        # (bf16 pairs: the dot product reads its operand buffer itself, no padding condition, and
        # in bf16: a cast stays a stage of its own, the image of a stem that no padding casts)
        block = sch.get(info.block_rv)
        cast = BF16_CAST_STAGE and any(r.source.dtype != produced.dtype for r in block.reads)
        copied = _serial_copy(found) and not is_copy(block)
        if (is_copy(block) and not (found.pairs and cast)) or (
                (short or sparse) and not einsum_padded and not found.pairs and not copied):
            try:
                sch.compute_inline(info.block_rv)
                continue
            except Exception:
                pass
        if found.pairs and FUSE_UNPADDED_TAIL:
            _fuse_unpadded_tail(sch, info.block_rv, found.lanes)
        schedule_injective_block(sch, info.block_rv, found.lanes)


def _serial_copy(found: Match) -> bool:
    """Whether an fp32 kernel's padding stage is kept for GROUPS_SERIAL's window copy (SERIAL_FP32):
    spatial-outer tiles (weights that fit) over groups that take turns (``_groups_inside_rows``)."""
    return bool(SERIAL_FP32 and GROUPS_SERIAL and found.serial_groups and not found.pairs
                and found.m_axis is not None and _batch_axes(found) and _groups_inside_rows(found)
                and _weights_fit(found))


def _fuse_unpadded_tail(sch: Any, block_rv: Any, lanes: int) -> None:
    """A bf16 pair operand's padding copy whose innermost axis is narrower than ``lanes`` (or at
    most FUSE_TAIL_WIDTH) and unpadded along with the axes before it (a grouped convolution's
    ``[.., Ci/2, G, 2]`` input, a RegNet's ``[.., G, 16]``) copies those as one loop, vectorised:
    over the pair's 2 alone the copy ran one element at a time, 3x the convolution's time
    (resnext50_32x4d); over a group's 16 channels one short run per group and pixel
    (regnet_x_400mf at batch 8 1.03x, its stride-1 grouped kernels 1.07-1.12x). (Wider innermost
    axes keep their loops: groups of 24 fused read 0.98-1.03x a kernel, regnet_y_3_2gf at batch
    8 0.990x; inception_v3's 7x1 convolutions' copies fused measured level, 1.009x and 0.987x.)"""
    block = sch.get(block_rv)
    if len(block.reads) != 1 or len(block.writes) != 1:
        return
    out, src = block.writes[0].source.shape, block.reads[0].source.shape
    if len(out) != len(src) or (as_int(out[-1]) or lanes) > max(lanes - 1, FUSE_TAIL_WIDTH):
        return
    tail = 0
    while tail < len(out) - 1 and as_int(out[-1 - tail]) == as_int(src[-1 - tail]):
        tail += 1
    loops = sch.get_loops(block_rv)[-tail:] if tail > 1 else []
    if len(loops) == tail > 1 and [as_int(sch.get(lp).extent) for lp in loops] == [as_int(d) for d in out[-tail:]]:
        sch.fuse(*loops)


def _pad_under_tile(found: Match, tile: Tile, tile_loop: Any, limit: int | None = None) -> Any:
    """A bf16 pair operand's padding stage computed under ``tile_loop`` (PAD_UNDER_TILE_BYTES, or
    ``limit``; under ``found.copy_loop`` where the groups run in turn inside it: GROUPS_SERIAL, and
    for an fp32 kernel's kept padding SERIAL_FP32), its
    buffer marked "local" for the stack (``passes/stack_buffers.py``): each tile copies the
    window its rows read (rows overlap by the window less the stride), where the stage alone was
    a pass writing the whole padded input and one more reading it, the larger the stride the more
    of the copy per multiply-add: strided windows only (PAD_UNDER_TILE_INPUTS), and not where
    tiles would copy the same window (``_window_repeats``: resnext50_32x4d's stride-1 28x28x128,
    whose tiles over a group's 8 output channels each copied it, 0.68-0.70x). Over a stride of 1
    the copies' overlap (a 3x3 window over 7-pixel rows: 27 inputs copied for 7 outputs) costs
    about what the pass does: the same-process A/Bs' kernels read 0.87-1.13x, both ways in one
    model (regnet_y_3_2gf's at batch 8 0.87-0.97x, regnet_x_1_6gf's 1.05x). Returns the stage's
    block (its scope is set once the dot product is tensorized, which matches global buffers
    only), else None."""
    if not PAD_UNDER_TILE_BYTES:
        return None
    sch = found.sch
    for info in found.infos[: found.infos.index(found.main)]:
        try:
            block = sch.get(info.block_rv)
        except Exception:  # (inlined)
            continue
        produced = block.writes[0].source
        if len(block.reads) != 1 or is_copy(block) or \
                not any(r.source.same_as(produced) for r in sch.get(found.main.block_rv).reads):
            continue
        in_elems = int(np.prod([as_int(d) or 0 for d in produced.shape]))
        out_elems = int(np.prod([e for e, k in zip(found.extents, found.kinds, strict=True) if k == "S"]))
        if in_elems < PAD_UNDER_TILE_INPUTS * out_elems or _window_repeats(found, tile, produced):
            return None
        trial = sch.copy()  # (the window's size is known once computed there)
        trial.compute_at(info.block_rv, found.copy_loop or tile_loop)
        window = [as_int(trial.get(loop).extent) or 0 for loop in trial.get_loops(info.block_rv)[1:]]
        if int(np.prod(window)) * dtype_bits(produced.dtype) // 8 > (limit or PAD_UNDER_TILE_BYTES) \
                or not knob("pad_under_tile", True, (False, True)):
            return None
        sch.compute_at(info.block_rv, found.copy_loop or tile_loop)
        sch.vectorize(sch.get_loops(info.block_rv)[-1])
        return info.block_rv
    return None


def _window_repeats(found: Match, tile: Tile, produced: Any) -> bool:
    """Whether tiles that read the same window of ``produced`` would each copy it: an output axis
    the window does not depend on (a group's output channels beside a vector over the groups,
    ResNeXt's ``[N, H, W, Co, G]``) split over several tiles."""
    access = next((r for r in found.block.reads if r.source.same_as(produced)), None)
    if access is None:
        return True
    for i, (kind, extent) in enumerate(zip(found.kinds, found.extents, strict=True)):
        var = found.block.iter_vars[i].var
        if kind != "S" or extent == 1 or any(uses(r.min, var) for r in access.region):
            continue
        if not ((i == found.n_axis and extent <= tile.vectors * tile.width)
                or (i == found.m_axis and extent <= tile.rows)):
            return True
    return False


def _pads_outside_tile(found: Match, info: Any) -> bool:
    """Whether a producer pads only axes of the input that neither the tile's rows nor its vectors
    index (a temporal convolution's frames, ``passes/conv3d.py``): its bounds check then holds
    for a whole tile and a whole tap of the reduction, where the copy is a pass over memory (S3D's
    first temporal convolution: 70 MB padded by 6 of 22 frames)."""
    block = found.sch.get(info.block_rv)
    produced = block.writes[0].source
    if len(block.reads) != 1 or len(block.reads[0].source.shape) != len(produced.shape) or found.m_axis is None:
        return False
    padded = [i for i, (a, b) in enumerate(zip(produced.shape, block.reads[0].source.shape, strict=True))
              if as_int(a) != as_int(b)]
    access = next((r for r in found.block.reads if r.source.same_as(produced)), None)
    if not padded or access is None:
        return False
    tile_vars = [found.block.iter_vars[a].var for a in (found.m_axis, found.n_axis)]
    return not any(uses(access.region[i].min, v) for i in padded for v in tile_vars)


def fold_epilogue(found: Match) -> Any:
    """The chain of elementwise consumers folded into one block reading the reduction: that
    block, None when there is none, False when a consumer is not elementwise (no match). Each
    block is inlined into the ones that read it, leaving the last: a value used twice (GELU's
    ``x * f(x)``) cannot be reverse-inlined into a single consumer. Where a consumer writes more
    elements than the reduction (a broadcast, SMALL_EPILOGUE), the chain before it is folded
    into the block returned, and the chain from it on into ``found.after``, a pass of its own
    (``write_back``) reading that block's output."""
    consumers = found.infos[found.infos.index(found.main) + 1:]
    if any(not c.is_injective() for c in consumers):
        return False
    grows = _first_growing(found, consumers) if SMALL_EPILOGUE else None
    if grows:
        for info in consumers[:grows - 1] + consumers[grows:-1]:
            found.sch.compute_inline(info.block_rv)
        found.after = consumers[-1].block_rv
        return consumers[grows - 1].block_rv
    for info in consumers[:-1]:
        found.sch.compute_inline(info.block_rv)
    return consumers[-1].block_rv if consumers else None


def _first_growing(found: Match, consumers: list[Any]) -> int | None:
    """The index of the first of ``consumers`` that writes more elements than the reduction's
    output, or None."""
    size = int(np.prod(buffer_shape(found.out) or [0]))
    for i, info in enumerate(consumers):
        shape = buffer_shape(found.sch.get(info.block_rv).writes[0].source)
        if size and shape is not None and int(np.prod(shape)) > size:
            return i
    return None


def choose_tile(found: Match, target: Any) -> Tile | None:
    """The register tile (``tiles.register_tile``): vectors that divide the vector axis and every
    packed block (or span two whole blocks: SPAN_PACKS, SPAN_ALL), rows over the row axis, map
    rows stacked on a short row axis (``_stack``)."""
    extents, m_axis = found.extents, found.m_axis
    width = vector_width(extents[found.n_axis], found.lanes)
    # (pairs: the dot product's 16 lanes, or 8 where half vectors run at the full rate: bf16.DOT_8x2)
    if found.pairs and width != bf16.LANES and not (width == bf16.LANES // 2 and half_vectors_full_rate(target)
                                                     and not _both_vectors(found)):
        return None
    n_vectors_total = extents[found.n_axis] // width
    most_rows = tiles.max_rows(target, None if m_axis is None else extents[m_axis])
    rows_wanted = 1 if m_axis is None else min(most_rows, extents[m_axis])
    budget = accumulator_budget(target)
    reserved = _window_registers(found, budget)
    if reserved:
        budget = DEPTHWISE_REGISTERS - 2  # (the input is read by the FMAs themselves; 2 spare)
    long = (found.pairs and m_axis is not None and not reserved and budget >= tiles.MAX_ACCUMULATORS
            and tiles.long_pair_rows(extents[m_axis]))
    if long:  # (13 rows, which PackWeights left unpadded for it: pack_weights.whole_tiles)
        most_rows = rows_wanted = long
        budget = max(budget, 2 * long)
    span = rows_wanted == 1 or _wide_tile(found) or bool(SPAN_PAIRS and found.pairs)
    # (three vectors where the weights are packed in blocks of three, pack_weights.odd_vector_block,
    # or the vector axis is three vectors: a grouped convolution's group of three, grouped_conv.py)
    three = 3 * width in found.packs or (THREE_VECTOR_AXIS and n_vectors_total == 3)
    offered = ((4, 2, 1) if span else (2, 1)) + ((3,) if three else ())
    if not any(n_vectors_total % v == 0 for v in offered if v > 1) and _multiplies(found):
        offered += tuple(v for v in range(3, ODD_AXIS_VECTORS + 1) if n_vectors_total % v == 0 and v not in offered)
    choices = [v for v in offered
               if n_vectors_total % v == 0 and all(_tiles_pack(p, v * width, width, span) for p in found.packs)
               and (not long or v * long <= budget)]  # (a long tile has no predicated form: whole rows)
    if choices == [1] and width == found.lanes and _multiplies(found) and ONE_VECTOR_ROWS and not reserved:
        most_rows = max(most_rows, ONE_VECTOR_ROWS)
    dot = sum(1 for e, k in zip(extents, found.kinds, strict=True) if k == "R" and e > 1) == 1
    if rows_wanted > 1 and 4 in choices:
        rows4, predicated = tiles.row_tile(extents[m_axis], min(budget // 4, most_rows), 4,
                                           under_4=dot or WINDOW_WHOLE_ROWS_UNDER_4)
        rows2, predicated2 = tiles.row_tile(extents[m_axis], min(budget // 2, most_rows))
        if predicated or (_batched_weights(found) and rows4 < rows2) \
                or (tiles.two_vector_ties(target) and 4 * rows4 <= 2 * rows2) \
                or (rows4 < 4 and rows2 >= 4 and not predicated2 and budget <= tiles.MAX_ACCUMULATORS_16_REGS):
            # (four vectors over whole row tiles, over as many rows for batched weights, over
            # more accumulators than two vectors hold where ties go to two: tiles.TWO_VECTOR_TIES,
            # and on 16 registers over 3 rows only where two vectors have no 4 whole rows:
            # tiles.WHOLE_ROWS_UNDER_4)
            choices.remove(4)
    if not choices:
        return None
    preferred = [1] if 1 in choices and _is_stem(found, dot, target) else choices
    if m_axis is None and SINGLE_ROW_WIDEST:
        preferred = [max(preferred)]
    cap = tiles.PREDICATED_WINDOW_ACCUMULATORS_16_REGS if 1 < found.window() <= UNROLL_REDUCTION else None
    vectors, rows = register_tile(None if m_axis is None else extents[m_axis], preferred, budget,
                                  tiles.predicated_percent(budget, dot), reserved, most_rows, cap, n_vectors_total)
    if reserved and rows < min(HELD_WINDOW_MIN_ROWS, extents[m_axis]):  # (the window's weights loaded per tap)
        reserved, budget = 0, accumulator_budget(target)
        vectors, rows = register_tile(extents[m_axis], preferred, budget,
                                      tiles.predicated_percent(budget, dot), 0, most_rows)
    if m_axis is not None and (extents[m_axis] % rows or rows < 4) and 1 in choices \
            and _whole_depthwise_rows(found, budget):
        one, predicated = tiles.row_tile(extents[m_axis], min(budget, most_rows), 1, most_rows)
        vectors, rows = (1, one) if not predicated and one >= 4 else (vectors, rows)
    if m_axis is not None and not reserved and _multiplies(found):
        vectors, rows = _vectors_for_l2(found, vectors, rows, choices, budget, most_rows, dot)
    if m_axis is not None and 1 in choices and not reserved and width == found.lanes and _multiplies(found):
        vectors, rows = _rows_for_l2(found, vectors, rows, extents[m_axis], budget, most_rows, dot)
        most_rows = max(most_rows, rows)
    if found.pairs and m_axis is not None and extents[m_axis] % rows and PAIRS_WHOLE_ROWS:
        vectors, rows = _whole_pair_rows(extents[m_axis], choices, budget - reserved, most_rows)
    if m_axis is not None and rows == extents[m_axis]:
        vectors = _whole_row_vectors(found, vectors, rows, choices, budget, reserved)
    # (tuning's knobs, compile/knobs.py: any vector count that divides, rows within the registers;
    # over bf16 pairs whole row tiles only)
    vectors = knob("vectors", vectors, choices)
    if m_axis is not None:
        rows = knob("rows", rows, [r for r in range(1, min(max(tiles.MAX_ROWS, most_rows), extents[m_axis]) + 1)
                                   if (r * vectors + reserved * vectors <= budget or r in (1, rows))
                                   and not (found.pairs and extents[m_axis] % r)])
    return Tile(vectors, rows, width, _stack(found, rows, vectors, budget - reserved * vectors))


# Over bf16 pairs, a tile that would leave a partial row tile becomes the whole-row tile of most
# accumulators (``_whole_pair_rows``).
PAIRS_WHOLE_ROWS = True


def _whole_pair_rows(rows_extent: int, choices: list[int], budget: int, most_rows: int) -> tuple[int, int]:
    """(vectors, rows) of a tile over bf16 pairs whose rows divide the row axis, the most
    accumulators first. The dot product has no predicated form, and PackWeights pads only a
    convolution's columns to whole tiles (``pack_weights.whole_tiles``): raft_small's Winograd
    product over 49 tiles and 80 channels (5 vectors) took 5 vectors x 4 rows, failed to
    tensorize and ran on the fallback schedule at 5 GFLOP/s, two thirds of the model's time."""
    cap = max(tiles.MAX_ROWS, most_rows)
    return max(((v, tiles.largest_divisor(rows_extent, min(cap, max(1, budget // v)))) for v in choices),
               key=lambda t: (t[0] * t[1], t[1]))


def _panel_bytes(found: Match, vectors: int) -> int:
    """Bytes of weights one tile of ``vectors`` reads over the whole reduction (depth x columns)."""
    depth = int(np.prod([e for e, k in zip(found.extents, found.kinds, strict=True) if k == "R"]))
    return depth * vectors * found.lanes * dtype_bits(found.out.dtype) // 8


def _vectors_for_l2(found: Match, vectors: int, rows: int, choices: list[int], budget: int,
                    most_rows: int, dot: bool) -> tuple[int, int]:
    """(vectors, rows) of the tile, from the vector counts whose weight panel fits PANEL_L2_BYTES
    where the chosen one's does not and that gives more rows. A channel-outer tile reads its
    panel once per row tile; a panel larger than L2 comes from L3 each time, ``vectors`` lines
    per step for ``rows x vectors`` FMAs: 128 / rows bytes a cycle at two FMAs a cycle, 32 for
    the 4 x 4 tile that DeepLabV3-ResNet50's dilated 3x3 convolution over 512 channels took (4608
    deep: a 1.2 MB panel, at 68 % of the peak). As 2 vectors x 7 rows (590 KB, from L2) it ran
    1.17-1.26x faster alone (Zen 5: 9097-9472 -> 7477-7746 us). Not for fewer rows or one
    vector (the same rows over fewer vectors ran level alone, one-vector tiles 1.2-1.4x slower),
    nor a matmul's single reduction loop, which goes in blocks instead (``_block_reduction``)."""
    if (not PANEL_L2_BYTES or sum(1 for k in found.kinds if k == "R") < 2
            or _panel_bytes(found, vectors) <= PANEL_L2_BYTES):
        return vectors, rows
    fit = [v for v in choices if 1 < v < vectors and _panel_bytes(found, v) <= PANEL_L2_BYTES]
    if not fit:
        return vectors, rows
    wider = register_tile(found.extents[found.m_axis], fit, budget,
                          tiles.predicated_percent(budget, dot), 0, most_rows)
    return wider if wider[1] > rows else (vectors, rows)


def _rows_for_l2(found: Match, vectors: int, rows: int, rows_extent: int, budget: int,
                 most_rows: int, dot: bool) -> tuple[int, int]:
    """(vectors, rows) of the tile, one vector over up to ONE_VECTOR_ROWS rows instead of a tile
    of fewer than FEW_ROWS rows whose weight panel (depth x tile columns) is larger than
    PANEL_L1_BYTES: each row tile reads that panel from L2, ``vectors`` 64-byte lines per step for
    ``rows x vectors`` FMAs, 128 / rows bytes a cycle at two FMAs a cycle, and at 2 rows the
    L2's 64 bytes a cycle bound the tile. regnet_y_16gf's grouped 3x3 convolutions (groups of 112
    channels: 7 vectors x 2 rows, 451 KB panels) ran at 66 % of the peak; alone (Zen 5) as one
    vector x 14 rows 18-21 % faster (1403 -> 1117 us over 14x14 maps, 1975 -> 1560 over 28x28)."""
    if not FEW_ROWS or vectors == 1 or rows >= FEW_ROWS or _panel_bytes(found, vectors) <= PANEL_L1_BYTES:
        return vectors, rows
    if FEW_ROWS_WINDOWS_ONLY and dot:  # (a single reduction loop: FEW_ROWS_WINDOWS_ONLY)
        return vectors, rows
    one = register_tile(rows_extent, [1], budget, None, 0, max(most_rows, ONE_VECTOR_ROWS))
    return one if one[1] >= 2 * FEW_ROWS else (vectors, rows)


def _multiplies(found: Match) -> bool:
    """Whether the reduction reads two operands (a product: each step an FMA), not one (pooling)."""
    return sum(1 for r in found.block.reads if not r.source.same_as(found.out)) >= 2


def _window_registers(found: Match, budget: int) -> int:
    """Registers per tile vector that a depthwise window's weights hold (its taps), when the
    window is unrolled and the target has DEPTHWISE_REGISTERS registers; else 0."""
    if not DEPTHWISE_REGISTERS or budget != tiles.MAX_ACCUMULATORS or found.m_axis is None:
        return 0
    if found.window() > UNROLL_REDUCTION:
        return 0
    return found.window() if _depthwise(found) else 0


def _whole_depthwise_rows(found: Match, budget: int) -> bool:
    """Whether a depthwise tile on 16 registers takes whole rows (DEPTHWISE_WHOLE_ROWS_16_REGS)."""
    return (DEPTHWISE_WHOLE_ROWS_16_REGS and budget == tiles.MAX_ACCUMULATORS_16_REGS
            and found.m_axis is not None and _depthwise(found))


def _tap_row_unrolled(found: Match, tile: Tile, taps: Any) -> bool:
    """Whether a depthwise window's innermost tap loop ``taps`` is unrolled whole (WINDOW_ROW_TAPS):
    it runs along the tile's rows, which are several. Over a window that reads its padding inline,
    each tap's load has its bounds check, and the unrolled taps can spill the registers (ConvNeXt's
    7x7 windows over 28x28 maps, 6 vectors to the stack: 1.5x slower alone) or not (ConvMixer's
    9x9 over 32x32: 1.26x faster): there ``schedule`` keeps them only where they compile without
    spills (``taps_decide``)."""
    extent = as_int(found.sch.get(taps).extent) or 0
    unrolled = (found.row_taps and 1 < extent <= WINDOW_ROW_TAPS and tile.rows > 1 and _depthwise_tile(found)
                and _slides_along_rows(found))
    found.taps_decide = unrolled and "if_then_else" in str(found.sch.get(found.main.block_rv).body)
    return unrolled


def _slides_along_rows(found: Match) -> bool:
    """Whether the innermost reduction variable and the row variable index one axis of an input
    together (``x[.., w + kw, ..]``): the window slides along the tile's rows."""
    reduce_vars = [v.var for v, k in zip(found.block.iter_vars, found.kinds, strict=True) if k == "R"]
    m_var = found.block.iter_vars[found.m_axis].var
    return any(uses(x.min, reduce_vars[-1]) and uses(x.min, m_var)
               for r in found.block.reads if not r.source.same_as(found.out) for x in r.region)


def _depthwise_tile(found: Match) -> bool:
    return found.m_axis is not None and not found.pairs and _depthwise(found)


def _depthwise(found: Match) -> bool:
    """Every operand reads along the vector axis (no broadcast input) and one of them (the
    weights) does not depend on the row axis. Pooling has no such operand."""
    n_var, m_var = found.block.iter_vars[found.n_axis].var, found.block.iter_vars[found.m_axis].var
    operands = [r for r in found.block.reads if not r.source.same_as(found.out)]
    if not operands or not all(any(uses(x.min, n_var) for x in r.region) for r in operands):
        return False
    return any(not any(uses(x.min, m_var) for x in r.region) for r in operands)


def _stack(found: Match, rows: int, vectors: int, budget: int) -> int:
    """Output rows (of the axis outside the row axis: a feature map's height) stacked in one
    register tile when the row axis is short and whole in the tile (a 3x3 or 4x4 map). One row of
    3 makes tiles of 3 rows x 2 vectors: 6 FMAs per 5 loads, and every channel tile sweeps its
    weights once per map row; stacking ``s`` rows gives ``s`` times fewer tiles with ``s`` times
    more FMAs per weight load. Timed alone (inception_v3 at 160 px, its 3x3 maps, 2 threads,
    rows of 3 against 3 x 3): its 1x1 and 1x3/3x1 convolutions 20-50 % faster (42.1 -> 21.2 us,
    113.7 -> 89.3 us), the 3x3 448 -> 384 one, whose 6 MB of weights come from memory, level
    (285 -> 302 us); in the model 1.021x and 1.007x (both build orders, batch 1), 1.016x at batch 8.
    A crossed stack (``_crossed``) may fill the accumulators, its rows up to ``tiles.MAX_ROWS``."""
    legal = _stack_choices(found, rows, vectors, budget)
    if legal is None:
        return 1
    height = found.extents[_stack_axis(found)]
    best = min(legal, key=lambda s: (-(-height // s), s)) if legal else 1
    return knob("row_stack", best, legal or [1])


def _stack_choices(found: Match, rows: int, vectors: int, budget: int) -> list[int] | None:
    """The stacks ``_stack`` may choose from (those that divide the height), None where it does
    not apply."""
    h_axis = _stack_axis(found)
    crossed = h_axis is not None and _crossed(found, h_axis)
    if h_axis is None or rows != found.extents[found.m_axis] or rows >= STACK_ROWS_BELOW + crossed:
        return None
    height, most = found.extents[h_axis], budget if crossed else MAX_STACKED_ROWS
    return [s for s in range(1, height + 1) if s * rows <= most and s * rows * vectors <= budget and height % s == 0]


def _stack_axis(found: Match) -> int | None:
    """The output's axis outside the row axis (a map's height), when the vector operands do not
    depend on it (their loads then serve its rows too), or the stack is crossed (``_crossed``)."""
    block, rank = found.block, len(found.block.writes[0].region)
    if found.m_axis is None or rank < 3:
        return None
    axis = _spatial_axis(block, found.kinds, rank - 3)
    if axis is None or axis in (found.m_axis, found.n_axis) or found.extents[axis] < 2:
        return None
    n_var, h_var = block.iter_vars[found.n_axis].var, block.iter_vars[axis].var
    for r in block.reads:
        if any(uses(x.min, n_var) for x in r.region) and any(uses(x.min, h_var) for x in r.region):
            return axis if CROSSED_STACKS and _crossed(found, axis) else None
    return axis


def _crossed(found: Match, h_axis: int) -> bool:
    """Whether every vector operand depends on the row axis or on the stacked axis, not both,
    and some on each: a grouped convolution's ``groups`` form (``passes/grouped_conv.py``), its
    output ``[N, OH, OW, Co, G]`` vectorised over the groups, rows over a group's output channels
    (its weights' loads) stacked over output columns (its input's loads). Each weight vector then
    serves the stacked columns and each input vector the rows."""
    block = found.block
    n_var, m_var, h_var = (block.iter_vars[i].var for i in (found.n_axis, found.m_axis, h_axis))
    vector = [r for r in block.reads if any(uses(x.min, n_var) for x in r.region)]
    on = [(any(uses(x.min, m_var) for x in r.region), any(uses(x.min, h_var) for x in r.region)) for r in vector]
    return (True, False) in on and (False, True) in on and (True, True) not in on


def _crossed_tile(found: Match, tile: Tile) -> bool:
    """Whether ``tile`` stacks crossed rows (``_crossed``): its tiles go spatial-outer, the cores
    splitting the map, not the groups. Channel-outer, the two cores took one 16-lane vector of
    resnext50_32x4d's 32 groups each and wrote the halves of the same cache lines of its bf16
    output: the kernel ran 7x slower (500 against 60-70 us) in some processes (false sharing)."""
    h_axis = _stack_axis(found) if tile.stack > 1 else None
    return h_axis is not None and _crossed(found, h_axis)


def _whole_row_vectors(found: Match, vectors: int, rows: int, choices: list[int], budget: int, reserved: int) -> int:
    """The vectors of a tile over a whole map row: one where a crossed stack then goes deeper
    (``_crossed_vectors``); two instead of one on 16 registers where they hold at most
    WHOLE_ROW_ACCUMULATORS_16_REGS accumulators, except for depthwise windows."""
    vectors = _crossed_vectors(found, vectors, rows, choices, budget, reserved)
    if vectors == 1 and 2 in choices and not reserved and budget == tiles.MAX_ACCUMULATORS_16_REGS \
            and budget < 2 * rows <= WHOLE_ROW_ACCUMULATORS_16_REGS and _multiplies(found) and not _depthwise(found):
        return 2
    return vectors


def _crossed_vectors(found: Match, vectors: int, rows: int, choices: list[int], budget: int, reserved: int) -> int:
    """One vector instead of ``vectors`` where that lets a crossed stack (``_crossed``) go
    deeper: a crossed tile's loads per FMA do not depend on its vectors (each vector loads
    its rows' weights and its columns' inputs), its weights' traffic falls with the stack.
    resnext50_32x4d's groups of 4 (56x56) and 8 (28x28), timed alone (fp32, Zen 5): 4 rows x 2
    vectors 93 us, with one vector 4 x 4 columns 59 us; 8 x 2 vectors 180 us, 8 x 2 columns of
    one 129 us (CROSSED_ONE_VECTOR)."""
    h_axis = _stack_axis(found)
    if not CROSSED_ONE_VECTOR or vectors == 1 or 1 not in choices or h_axis is None or not _crossed(found, h_axis):
        return vectors
    deepest = lambda v: max(_stack_choices(found, rows, v, budget - reserved * v) or [1])  # noqa: E731
    return 1 if deepest(1) > deepest(vectors) else vectors


def _wide_tile(found: Match) -> bool:
    """Whether a multi-row tile may be four vectors wide (two packed blocks of weights): over
    weights too large for spatial-outer tiles (``_spatial_outer_bytes``), which the channel-outer
    tiles stream."""
    return SPAN_ALL and operand_bytes(found, rows_dependent=False) >= _spatial_outer_bytes(found)


def _batched_weights(found: Match) -> bool:
    """Whether the weights differ along another output axis (Winograd's products: one weight
    matrix per tile point). Four vectors serve those only over as many rows as two would:
    googlenet's 14x14 product ran 13 % slower alone as 4 rows x 4 vectors than as 7 x 2, while
    resnet50's 5x5 ones at 160 px (5 rows either way) gained."""
    block, m_var = found.block, found.block.iter_vars[found.m_axis].var
    others = [iv.var for i, iv in enumerate(block.iter_vars)
              if found.kinds[i] == "S" and i not in (found.n_axis, found.m_axis)]
    return any(not r.source.same_as(found.out) and not any(uses(x.min, m_var) for x in r.region)
               and any(uses(x.min, v) for x in r.region for v in others) for r in block.reads)


def _tiles_pack(pack: int, tile: int, width: int, span: bool) -> bool:
    """Whether a tile of ``tile`` columns reads a packed operand (blocks of ``pack``) in whole
    vectors: it divides the block, or (``span``: a single row, or ``_wide_tile``) spans whole
    blocks."""
    return pack % tile == 0 or (SPAN_PACKS and span and tile % pack == 0 and pack % width == 0)


def _is_stem(found: Match, dot: bool, target: Any) -> bool:
    """On AVX-512, a convolution whose whole window (over its few input channels) is unrolled,
    reading an input that every output channel shares: a network's first layer (3x3 over 3
    channels). Its tile is one vector wide: the stems of mobilenet_v2, squeezenet1_1 and
    inception_v3 ran 1.7-1.8x faster alone with one vector than with two (0.53 against 0.92 ms,
    1.40 against 2.34, 1.13 against 2.01 at batch 8); in the model (same-process A/Bs, Xeon)
    squeezenet1_1 b8 1.108x, mobilenet_v2 1.028x, inception_v3 1.003x. AVX2 code lost (squeezenet
    b8 0.910x, mobilenet_v2 1.005x), and resnet50's 7x7 stem (not unrolled) is faster with two."""
    if dot or found.window() > UNROLL_REDUCTION or not has_feature(target, "avx512f"):
        return False
    n_var = found.block.iter_vars[found.n_axis].var
    return any(not r.source.same_as(found.out) and not any(uses(x.min, n_var) for x in r.region)
               for r in found.block.reads)


def tile_loops(found: Match, tile: Tile, sliced: str | None = None) -> tuple[Any, list[Any]]:
    """Split the vector and row axes into the register tile, order the tiles (``_tile_order``),
    fuse them into one parallel loop, unroll the tile (and a short reduction, but not before an
    epilogue over a slice of the channels: ``_slice_form``), vectorise the lanes. Returns the
    tile loop and the reduction loops."""
    sch, kinds, m_axis = found.sch, found.kinds, found.m_axis
    loops = sch.get_loops(found.main.block_rv)
    n_outer, n_vec_i, n_lane = sch.split(loops[found.n_axis], factors=[None, tile.vectors, tile.width])
    inner = []
    stacked = _stack_axis(found) if tile.stack > 1 else None
    if stacked is not None:
        h_outer, h_inner = sch.split(loops[stacked], factors=[None, tile.stack])
        inner.append(h_inner)
    m_outer = None
    if m_axis is not None:
        m_outer, m_inner = sch.split(loops[m_axis], factors=[None, tile.rows])
        inner.append(m_inner)
    others = [(i, h_outer if i == stacked else loops[i]) for i, k in enumerate(kinds)
              if k == "S" and i not in (found.n_axis, m_axis)]
    batch_loops, outer_spatial, channel_outer = _tile_order(found, tile, n_outer, m_outer, others)
    chunks = _row_chunks(found, tile, m_outer)
    if chunks:
        chunk, m_rest = sch.split(m_outer, factors=[chunks, None])
        outer_spatial = [m_rest if loop.same_as(m_outer) else loop for loop in outer_spatial]
        batch_loops = [chunk] + batch_loops
    reduce_loops = [loops[i] for i, k in enumerate(kinds) if k == "R"]
    pair = []
    if found.pairs:  # (the pair of reduction steps inside the lanes: one vdpbf16ps, compile/bf16.py)
        reduce_loops[-1], step = sch.split(reduce_loops[-1], factors=[None, 2])
        pair = [step]
        found.dot_loop = n_lane
    sch.reorder(*batch_loops, *outer_spatial, *reduce_loops, *inner, n_vec_i, n_lane, *pair)
    prefetch = None
    if channel_outer:
        row_tiles = int(np.prod([as_int(sch.get(loop).extent) or 1 for loop in outer_spatial[1:]]))
        batches = int(np.prod([as_int(sch.get(loop).extent) or 1 for loop in batch_loops]))
        if found.block_rows:
            outer_spatial = _block_rows(found, outer_spatial, tile.rows * tile.stack, batches)
        depth = len(reduce_loops)
        outer_spatial, reduce_loops = _block_reduction(found, tile, outer_spatial, n_outer, reduce_loops, batches)
        if len(reduce_loops) == depth:  # (in reduction blocks the sums wait in memory, and a call in
            # the loop would keep LLVM from holding them in registers: ViT's 3072 -> 768 1.36x slower)
            prefetch = _prefetch_marks(found, tile, outer_spatial, n_outer, row_tiles, bool(batch_loops), chunks or 1)
    serial = found.groups_inside if GROUPS_SERIAL and (found.pairs or _serial_copy(found)) \
        and found.serial_groups else 0
    if serial:
        found.copy_loop = sch.fuse(*batch_loops, *outer_spatial[:-serial])
        sch.parallel(found.copy_loop)
        tile_loop = sch.fuse(*outer_spatial[-serial:])
    else:
        tile_loop = sch.fuse(*batch_loops, *outer_spatial)
    if not serial and (as_int(sch.get(tile_loop).extent) or 0) > 1:
        sch.parallel(tile_loop)
    unroll_window = found.window() <= UNROLL_REDUCTION and sliced != "channels"
    if found.unroll_default is not None:
        unroll_window = found.unroll_default
    if found.window() <= 2 * UNROLL_REDUCTION + 10:  # a 7x7 window is a knob too, not a 5x5x3
        unroll_window = knob("unroll_window", unroll_window, (False, True))
    found.spills_decide = (SPILLS_DECIDE_UNROLL and unroll_window and found.unroll_default is None
                           and 1 < found.window() and not overridden("unroll_window") and found.m_axis is not None
                           and (found.extents[found.m_axis] % tile.rows != 0
                                or SPILLS_DECIDE_CHANNEL_WINDOWS and found.kinds.count("R") >= 3))
    for loop in inner + [n_vec_i] + (reduce_loops if unroll_window else []):
        sch.unroll(loop)
    if not unroll_window and reduce_loops and _tap_row_unrolled(found, tile, reduce_loops[-1]):
        sch.unroll(reduce_loops[-1])
    elif not unroll_window and reduce_loops:
        steps = unroll_steps(sch, reduce_loops[-1], UNROLL_DEPTH)
        reduce_loops = reduce_loops[:-1] + steps
        if prefetch is not None:
            mark_prefetch(sch, steps[0], *prefetch)
    if tile.width > 1 and not found.pairs:
        sch.vectorize(n_lane)
    return tile_loop, reduce_loops


def _tile_order(found: Match, tile: Tile, n_outer: Any, m_outer: Any | None,
                others: list[tuple[int, Any]]) -> tuple[list[Any], list[Any], bool]:
    """The order of the tiles: (batch loops, outermost; the other tile loops in order, the
    channel tiles' first or last; whether channel-outer). Spatial-outer (the channel tiles
    innermost) where the weights fit SPATIAL_OUTER_WEIGHT_BYTES or the rows are crossed
    (``_crossed_tile``), else channel-outer, and then a
    batch of independent contractions (``_batch_axes``: BATCH_FIRST) outside both, each batch's
    tiles together."""
    if m_outer is None:
        return [], [n_outer] + [loop for _, loop in others], False
    weight_batch = weight_batch_axes(found) if ROWS_BEFORE_BATCH else set()
    spatial = _weights_fit(found) or (ROWS_BEFORE_BATCH == 2 and bool(weight_batch)) or _crossed_tile(found, tile)
    # (one channel tile, a three-vector tile over 48 channels: both orders are the same loops)
    several = found.extents[found.n_axis] > tile.vectors * tile.width
    channel_outer = not knob("spatial_outer", spatial, (False, True) if several else (spatial,))
    batch = _batch_axes(found) if channel_outer and not ROWS_BEFORE_BATCH else set()
    batch = batch if batch and knob("batch_first", BATCH_FIRST, (False, True)) else set()
    batch_loops = [loop for i, loop in others if i in batch]
    others = [(i, loop) for i, loop in others if i not in batch]
    outer_spatial = [n_outer] + [loop for _, loop in others] + [m_outer]
    if not channel_outer and weight_batch:
        outer_spatial = ([loop for i, loop in others if i not in weight_batch] + [m_outer]
                         + [loop for i, loop in others if i in weight_batch] + [n_outer])
    elif not channel_outer:
        outer_spatial = outer_spatial[1:] + outer_spatial[:1]
        inside = _batch_axes(found) if _groups_inside_rows(found) else set()
        if inside:
            outer_spatial = ([loop for i, loop in others if i not in inside] + [m_outer]
                             + [loop for i, loop in others if i in inside] + [n_outer])
            found.groups_inside = len(inside) + 1
    return batch_loops, outer_spatial, channel_outer


def _groups_inside_rows(found: Match) -> bool:
    """Whether a spatial-outer grouped convolution's groups go inside its column tiles
    (GROUPS_INSIDE_ROWS): where a group's input channels are not whole cache lines, so that
    neighbouring groups share lines."""
    if not GROUPS_INSIDE_ROWS or sum(k == "R" for k in found.kinds) < 2:
        return False
    inputs = _operand_reads(found, rows_dependent=True)
    return any((as_int(r.source.shape[-1]) or 0) * dtype_bits(r.source.dtype) // 8 % GROUPS_INSIDE_ROWS
               for r in inputs)


def _row_chunks(found: Match, tile: Tile, m_outer: Any | None) -> int:
    """ROW_CHUNKS where a Winograd product (one batch axis: the tile positions; not a grouped
    convolution's, whose groups are a second) moves more row-side bytes (input and output) than
    weight bytes (ROW_CHUNK_BYTES_PER_WEIGHT_BYTE) and its rows divide into whole register tiles
    and those into the chunks; else 0 (knob ``row_chunks``). Over a partial last register tile
    the chunks' predicate stayed inside the tile: inception_v3's 32 -> 32 product over 1369
    Winograd tiles (7-row register tiles) ran 1.45x as long alone, on one thread."""
    if not ROW_CHUNKS or m_outer is None or found.block.name_hint != WINOGRAD_PRODUCT \
            or len(_batch_axes(found)) != 1:
        return 0
    row_tiles = as_int(found.sch.get(m_outer).extent) or 0
    if row_tiles < 2 * ROW_CHUNKS or row_tiles % ROW_CHUNKS or row_tiles * tile.rows != found.extents[found.m_axis]:
        return 0
    out_bytes = int(np.prod([as_int(d) or 0 for d in found.out.shape])) * dtype_bits(found.out.dtype) // 8
    rows_bytes = operand_bytes(found, rows_dependent=True) + out_bytes
    chunked = rows_bytes >= ROW_CHUNK_BYTES_PER_WEIGHT_BYTE * operand_bytes(found, rows_dependent=False)
    return knob("row_chunks", ROW_CHUNKS if chunked else 0, (0, ROW_CHUNKS))


def _prefetch_marks(found: Match, tile: Tile, outer_spatial: list[Any], n_outer: Any, row_tiles: int,
                    batched: bool, repeats: int = 1) -> tuple[Any, int, int, int, int, int, int] | None:
    """(weights, inner, packed blocks per tile, row tiles, channel tiles, batch, repeats) for ``passes/prefetch.mark``
    where a channel-outer tile reads one packed weight panel per channel tile
    (PREFETCH_NEXT_PANEL; knob ``prefetch``): one operand independent of the rows, packed with
    whole blocks per tile, indexed by no other loop but the batch loops outside (``batched``:
    a grouped convolution's weights, ``[G, Co/B, ...]``). ``outer_spatial``: the loops fused into
    the parallel loop after the batch loops, after any row or reduction blocks; ``inner``: their
    iterations per channel tile; ``batch``: their iterations per batch (0: none); ``repeats``: the
    row chunks outside the batch loops (``_row_chunks``)."""
    sch = found.sch
    weights = [r.source for r in _operand_reads(found, rows_dependent=False)]
    if len(weights) != 1 or len(weights[0].shape) < 3 \
            or weight_batch_axes(found) - (_batch_axes(found) if batched else set()):
        return None
    # (bf16 weights packed in pairs, ``[N/block, K/2, block, 2]``: the block is the next-to-last)
    lanes = as_int(weights[0].shape[-2 if found.pairs and PREFETCH_PAIRS else -1]) or 0
    columns = tile.vectors * tile.width
    if not lanes or lanes not in found.packs or columns % lanes or not knob("prefetch", PREFETCH_NEXT_PANEL, (0, 1)):
        return None
    extents = [as_int(sch.get(loop).extent) or 1 for loop in outer_spatial]
    at = next(i for i, loop in enumerate(outer_spatial) if loop.same_as(n_outer))
    batch = int(np.prod(extents)) if batched else 0
    return weights[0], int(np.prod(extents[at + 1:])), columns // lanes, row_tiles, extents[at], batch, repeats


def _block_rows(found: Match, outer_spatial: list[Any], rows: int, batches: int = 1) -> list[Any]:
    """Channel-outer tiles sweep every row of the input once per channel tile. An input larger
    than ROW_BLOCK_BYTES no longer stays in L2 across that sweep and comes from L3 or memory once
    per channel tile (bert-base at batch 8: 3-12 MB of activations read 24-96 times per dense
    layer). Then the rows go in blocks of about ROW_BLOCK_ROWS: per block, every channel tile
    sweeps the block's rows, so the weights are read once per block and the input block stays
    near. ``batches``: independent contractions outside these loops (``_tile_order``), each
    with its share of the input. Returns the loops to fuse, outermost first."""
    sch = found.sch
    tiles_ = int(np.prod([as_int(sch.get(loop).extent) or 1 for loop in outer_spatial[1:]]))
    block = knob("row_block", _row_block(found, tiles_, rows, batches),
                 [d for d in range(1, tiles_ + 1) if tiles_ % d == 0])
    if block >= tiles_:
        return outer_spatial
    row_loop = sch.fuse(*outer_spatial[1:]) if len(outer_spatial) > 2 else outer_spatial[1]
    found.rows_fused = len(outer_spatial) > 2
    row_block, row_in = sch.split(row_loop, factors=[None, block])
    sch.reorder(row_block, outer_spatial[0])
    return [row_block, outer_spatial[0], row_in]


def _row_block(found: Match, tiles_: int, rows: int, batches: int = 1) -> int:
    """Row tiles per block: all of them when the input fits ROW_BLOCK_BYTES, else the most that
    hold at most ROW_BLOCK_ROWS rows, when that is at least half as many (a row count without a
    good divisor keeps one block) and their input fits ROW_BLOCK_MAX_BYTES (a block that cannot
    stay in L2 saves nothing and reads the weights once more per block)."""
    input_bytes = operand_bytes(found, rows_dependent=True) // batches
    if input_bytes <= ROW_BLOCK_BYTES:
        return tiles_
    fit = max(ROW_BLOCK_ROWS // rows, 1)
    block = tiles.largest_divisor(tiles_, fit)
    if 2 * block < fit or input_bytes * block // tiles_ > ROW_BLOCK_MAX_BYTES:
        return tiles_
    return block


def _block_reduction(found: Match, tile: Tile, outer_spatial: list[Any], n_outer: Any,
                     reduce_loops: list[Any], batches: int = 1) -> tuple[Any, list[Any]]:
    """Channel-outer tiles read a weight panel of K x tile columns per row tile and sweep the
    input's rows once per channel tile. Where that sweep reads more input than the two cores' L2
    together (REDUCTION_BLOCK_INPUT_BYTES; 1 MB per core on the Zen 5 host where it was measured:
    ViT at batch 8, 1576 rows, 4.8-19 MB, which ``_block_rows`` cannot split, 197 row tiles being
    prime), or on a target whose L3 is far, more than a share of one core's L2
    (REDUCTION_BLOCK_FAR_L3_L2), and the panel is larger than REDUCTION_PANEL_BYTES,
    the reduction goes in blocks whose panel is about that size, each swept over the channel
    tile's rows: per block, a slice of the input and of the panel, and the rows' sums wait in a
    buffer between blocks. A window's reduction (taps x channels) goes in blocks of its channels,
    the taps inside, where its whole panel outgrows L2 under short row tiles (WINDOW_BLOCKS).
    Returns the loops to fuse into the parallel tile loop (those outside the channel tile's rows)
    and the reduction loops."""
    sch = found.sch
    extents = [as_int(sch.get(loop).extent) or 0 for loop in reduce_loops]
    if not extents or not REDUCTION_PANEL_BYTES or (len(extents) > 1 and not WINDOW_BLOCKS) or found.rows_fused:
        # (not in blocks of rows fused from several axes: the tile's write-back, then outside the
        # block's rows, covers a region TVM can only bound by whole images, and each task wrote
        # rows other tasks were still summing: alexnet's 5x5 convolution at 320 px, batch 2, under
        # `reduction_block` 16 was wrong by up to 180)
        return outer_spatial, reduce_loops
    depth, taps = extents[-1], int(np.prod(extents[:-1]))  # (blocks of the innermost: a window's channels)
    row_bytes = tile.vectors * tile.width * dtype_bits(found.out.dtype) // 8 * taps
    fit = REDUCTION_PANEL_BYTES // row_bytes if len(extents) == 1 else WINDOW_BLOCK_CHANNELS
    block = tiles.largest_divisor(depth, fit) if depth > fit else depth
    if 2 * block < fit:
        block = depth  # (no divisor near the panel's size)
    split = next(i for i, loop in enumerate(outer_spatial) if loop.same_as(n_outer)) + 1
    loop_extents = [as_int(sch.get(loop).extent) or 1 for loop in outer_spatial]

    def share(nbytes: int) -> int:  # (of the rows: those of one channel tile)
        return nbytes // batches * int(np.prod(loop_extents[split - 1:])) // int(np.prod(loop_extents))

    # (the input swept; where L3 is far, also as read: a strided convolution reads a part of it)
    fits = share(operand_bytes(found, rows_dependent=True)) <= REDUCTION_BLOCK_INPUT_BYTES and (
        found.near_l3 or share(_read_bytes(found, depth)) <= REDUCTION_BLOCK_FAR_L3_L2 * found.l2)
    if fits if len(extents) == 1 else \
            (row_bytes * depth <= WINDOW_BLOCKS or tile.rows * tile.stack >= WINDOW_BLOCK_ROWS):
        block = depth
    block = knob("reduction_block", block, [d for d in range(16, depth + 1) if depth % d == 0 and d % 4 == 0])
    if block >= depth:
        return outer_spatial, reduce_loops
    ko, ki = sch.split(reduce_loops[-1], factors=[None, block])
    sch.reorder(ko, *outer_spatial[split:])
    return outer_spatial[:split], [ko, *reduce_loops[:-1], ki]


def _read_bytes(found: Match, depth: int) -> int:
    """Bytes of input the rows read over a reduction of ``depth``: one depth-long row per output
    row (of a strided convolution's input buffer, a part)."""
    rows = int(np.prod([e for i, (e, k) in enumerate(zip(found.extents, found.kinds, strict=True))
                        if k == "S" and i != found.n_axis]))
    return rows * depth * max(dtype_bits(r.source.dtype) for r in _operand_reads(found, rows_dependent=True)) // 8


def _operand_reads(found: Match, rows_dependent: bool) -> list[Any]:
    """The reduction block's reads of the operands that depend on the row axis (the input) or do
    not (the weights)."""
    m_var = found.block.iter_vars[found.m_axis].var
    return [r for r in found.block.reads if not r.source.same_as(found.out)
            and any(uses(x.min, m_var) for x in r.region) == rows_dependent]


def operand_bytes(found: Match, rows_dependent: bool) -> int:
    """Bytes of the operands that depend on the row axis (the input) or do not (the weights)."""
    return sum(int(np.prod([as_int(d) or 0 for d in r.source.shape])) * dtype_bits(r.source.dtype) // 8
               for r in _operand_reads(found, rows_dependent))


def weight_batch_axes(found: Match) -> set[int]:
    """The spatial axes, other than the vector and row axes, that index the weights (the operands
    that do not depend on the row axis): a batched contraction's batch, such as the Winograd
    product's tile position."""
    if found.m_axis is None:
        return set()
    weights = _operand_reads(found, rows_dependent=False)
    return {i for i, k in enumerate(found.kinds) if k == "S" and i not in (found.n_axis, found.m_axis)
            and any(uses(x.min, found.block.iter_vars[i].var) for w in weights for x in w.region)}


def _batch_axes(found: Match) -> set[int]:
    """The weight batch axes (``weight_batch_axes``) that index the input as well: the axis of
    independent contractions, such as a grouped convolution's group. Not an axis that indexes the
    weights alone (the groups-inner form's output channel, over which the input is reused)."""
    inputs = _operand_reads(found, rows_dependent=True) if found.m_axis is not None else []
    return {i for i in weight_batch_axes(found)
            if inputs and all(any(uses(x.min, found.block.iter_vars[i].var) for x in r.region) for r in inputs)}


def _weights_fit(found: Match) -> bool:
    """Whether the operands that do not depend on the row axis are smaller than
    ``_spatial_outer_bytes``: then the output-channel tiles go innermost, and the input is read
    once."""
    weight_bytes = operand_bytes(found, rows_dependent=False)
    return bool(weight_bytes) and weight_bytes < _spatial_outer_bytes(found)


def _spatial_outer_bytes(found: Match) -> int:
    """The weight size from which tiles run channel-outer: one core's L2 (SPATIAL_OUTER_WEIGHT_BYTES;
    SPATIAL_OUTER_FAR_L3_SHARE of it where L3 is far), or SPATIAL_OUTER_BATCHED_BYTES for weights
    in panels per batch."""
    if weight_batch_axes(found):
        return max(SPATIAL_OUTER_BATCHED_BYTES, SPATIAL_OUTER_WEIGHT_BYTES or found.l2)
    if SPATIAL_OUTER_WEIGHT_BYTES:
        return SPATIAL_OUTER_WEIGHT_BYTES
    return found.l2 if found.near_l3 else int(SPATIAL_OUTER_FAR_L3_SHARE * found.l2)


def write_back(found: Match, tile: Tile, tile_loop: Any, reduce_loops: list[Any], epilogue: Any,
               sliced: str | None) -> None:
    """Accumulate in a tile-sized buffer (promoted to registers by LLVM), written back once with
    the epilogue applied; the initialisation split off and vectorised.

    Only an epilogue over the whole output joins the write-back: TVM inlines a slice of it (the
    padding cut off a padded matmul) without bounding the write-back's loops. An epilogue over
    a slice of the output follows each tile instead, reading the accumulators, bounded by a
    predicate (``sliced``: ``_slice_form``); any other runs as its own loop nest after."""
    sch, width = found.sch, tile.width
    writeback = sch.cache_write(found.main.block_rv, 0, "global")
    if epilogue is not None and sliced is None and buffer_shape(sch.get(epilogue).writes[0].source) == \
            buffer_shape(found.out):
        try:
            sch.reverse_compute_inline(epilogue)
        except Exception:
            schedule_injective_block(sch, epilogue, found.lanes)
        epilogue = None
    sch.reverse_compute_at(writeback, tile_loop, preserve_unit_loops=True)
    _vectorize_last(sch, writeback, width)
    if sliced is not None:
        try:
            sch.reverse_compute_at(epilogue, tile_loop, preserve_unit_loops=True)
            shape = buffer_shape(sch.get(epilogue).writes[0].source)
            _vectorize_last(sch, epilogue, width if sliced == "rows" else vector_width(shape[-1], width))
            sch.compute_inline(writeback)
            epilogue = None
        except Exception:
            pass
    if epilogue is not None:
        schedule_injective_block(sch, epilogue, found.lanes)
    if found.after is not None:
        schedule_injective_block(sch, found.after, found.lanes)
    if reduce_loops:
        init = sch.decompose_reduction(found.main.block_rv, reduce_loops[0])
        init_loops = sch.get_loops(init)
        if width > 1 and init_loops:
            sch.vectorize(init_loops[-1])


def _slice_form(found: Match, epilogue: Any, width: int) -> str | None:
    """Whether the epilogue, where it covers a slice of the output (not all of it), runs after
    each tile: ``"rows"`` for a slice of the rows (TILE_SLICES), ``"channels"`` for one of the
    vector axis (CHANNEL_SLICES) that vectors of 8 lanes or more divide, else None (a pass of
    its own, or the epilogue covers the whole output)."""
    if epilogue is None:
        return None
    shape, out = buffer_shape(found.sch.get(epilogue).writes[0].source), buffer_shape(found.out)
    if shape == out:
        return None
    if TILE_SLICES and _row_slice(shape, out):
        return "rows"
    if (_row_slice(shape, out, vector_axis=True) and vector_width(shape[-1], width) >= CHANNEL_SLICE_LANES
            and knob("channel_slices", CHANNEL_SLICES, (False, True))):
        return "channels"
    return None


def _vectorize_last(sch: Any, block: Any, width: int) -> None:
    """Vectorise a block's innermost loop by ``width`` (its outermost loop, the tile's, aside)."""
    loops = sch.get_loops(block)[1:]
    if loops and width > 1:
        _, vec = sch.split(loops[-1], factors=[None, width])
        sch.vectorize(vec)


def _row_slice(shape: Any, out: Any, vector_axis: bool = False) -> bool:
    """Whether an epilogue of ``shape`` can follow the tiles of an output of shape ``out``: it
    is no larger along any axis (a slice: each of its elements reads one of the output's, so the
    tiles cover it; a pad's border, which reads none, would be left unwritten) and keeps the
    vector axis whole unless ``vector_axis`` (its predicate then holds per vector only where
    the epilogue's vectors divide it: ``_slice_form``)."""
    return (shape is not None and out is not None and len(shape) == len(out)
            and (vector_axis or shape[-1] == out[-1])
            and all(a is not None and b is not None and a <= b for a, b in zip(shape, out, strict=True)))
