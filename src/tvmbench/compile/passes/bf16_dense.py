"""Bf16Dense: dense layers and convolutions read their input and weights as bf16 and accumulate
in fp32 (``--precision bf16``, on CPUs with AVX-512 BF16; ``compile/bf16.py`` says why and how).

It acts on a module :func:`mark` marked (``apply_precision``), in stage 1 just before
PackWeights: after batch norms are folded into the convolutions' fp32 weights and after
WinogradConv3x3 took the 3x3 convolutions it computes faster (their products round their
operands themselves: ``winograd.BF16_PRODUCT``). A ``matmul`` by a weight parameter (or a transpose
of one: what the importers give a dense layer) becomes ``matmul(astype(x, bf16), astype(w,
bf16), out_dtype=float32)``, an NHWC convolution over HWIO weights (not grouped) likewise. The weight's
``astype`` depends on weights only, so LiftTransformParams rounds the weights once at load time;
the input's is an elementwise step FuseOps joins to its producer where it can (a layer norm
writes its output in bf16 beside the fp32 one the residual reads). One ``astype`` serves every
dense layer reading the same input (a layer's query, key and value projections). An attention's
own two products read bf16 too on targets without AMX (``passes/bf16_attention.py``, applied by
this pass after the rest), and so do grouped convolutions, which GroupedConvNHWC (before this
pass) writes over bf16 pairs itself (``passes/grouped_conv.py``, ``passes/winograd.py``'s grouped
products). Everything else (norms, activations, softmax, depthwise convolutions) stays fp32.
A layer whose reduction (its input channels) is odd (a stem's pairs are of window columns
instead: ``BF16_STEMS``), a dense layer with fewer outputs than PackWeights packs
(``min_outputs``) and a convolution with fewer than ``MIN_CONV_VECTORS`` vectors of them
(``MIN_CONV_VECTORS_AMX`` where AMX's tiles take the products)
stay fp32: the packed pairs need an even depth and whole vectors. So does an inverted-residual
block's expansion that FuseExpansionIntoWindow joins into its depthwise convolution
(``fuse_expansion.joined_expansions``) where its outputs are not whole vectors of the dot
product's 16 lanes (nor, on Zen 4, blocks of three 8-lane ones: ``BF16_HALF_EXPANSIONS``), or on
AMX (``BF16_JOINED_EXPANSIONS``). A CNN's feature map over L2 that a bf16 convolution and
residual adds read is stored once, in bf16, as OpenVINO stores activations (``_residual_casts``),
and so is a map over L2 that only a depthwise convolution reads, which widens it (``_window_casts``),
and a squeeze-excitation's map, which its mean and its product by the excitation widen
(``passes/bf16_excitation.py``, applied by this pass after the rest).
"""

from __future__ import annotations

from typing import Any

import numpy as np
from tvm import relax
from tvm.relax.expr_functor import PyExprMutator, mutator

from tvmbench.compile import amx, bf16
from tvmbench.compile.ir import (
    bindings,
    builder_pass,
    cast_before_reshapes,
    from_weights,
    op_name,
    static_shape,
    use_counts,
    users_of,
    weight_only,
    weight_params,
)
from tvmbench.compile.passes.bf16_attention import bf16_attention
from tvmbench.compile.passes.bf16_excitation import bf16_excitation
from tvmbench.compile.passes.fuse_expansion import CHEAP, joined_expansions
from tvmbench.compile.passes.pack_weights import NCHW_STEM_CHANNELS, half_pair_block, nchw_image
from tvmbench.compile.tiles import half_vectors_full_rate, vector_lanes, weight_block
from tvmbench.compile.tir import fuse_expansion_bytes
from tvmbench.targets import ResolvedTarget

ATTR = "tvmbench_precision"
# An input is cast before the reshapes leading to it (``round_input``; 0: after them).
CAST_BEFORE_RESHAPES = 1
# ... and a concatenation that only the cast reads is made of its parts cast (1; 0: cast after):
# each part's producer then writes bf16 and the concatenation copies half the bytes (SqueezeNet's
# fire modules: two expand convolutions' fp32 outputs concatenated, then cast, a kernel of its own).
CAST_BEFORE_CONCATS = 1
# A convolution over this many vectors of outputs or more reads bf16 (PackWeights packs it in whole
# blocks: its dot product needs the pairs); 0: as many as a dense layer (``min_outputs``, four
# vectors on AVX-512). Same-process A/Bs of 0 against 2 (Zen 4, `rule_ab.py M
# passes.bf16_dense.MIN_CONV_VECTORS 0 --precision bf16`, session 68; both build orders where two):
# squeezenet1_1 1.024x / 1.025x (its squeezes to 32 and 48 channels), mobilenet_v2 1.028x /
# 1.034x, densenet121 1.028x (its 3x3s to 32 channels), googlenet 1.009x, inception_v3 1.008x,
# torchvision's efficientnet_b0 1.012x, mnasnet1_0 1.002x, shufflenet_v2_x1_0 1.003x. One vector
# (16 outputs) against two: mobilenet_v2 0.990x (ba; far state 0.942x ab), efficientnet_b0
# 0.997x, mnasnet1_0 1.012x, squeezenet1_1 1.001x: two on Zen 4, then. Elsewhere one: on Zen 5
# (session 94, `rule_ab.py M passes.bf16_dense.MIN_CONV_VECTORS 1 --precision bf16 --block 2`,
# one against two) squeezenet1_1 b8 1.087x / 1.151x (ab / ba; its
# squeezes to 16 channels read bf16, so the fire modules' concatenations and the pools over them
# are bf16 too), b1 1.018x; efficientnet_b0 b8 1.056x; mobilenet_v2 b8 1.031x, b1 1.021x;
# mnasnet1_0 b8 1.021x; googlenet b8 1.007x.
# One on Zen 4 too since session 102: after the Zen 5 sessions' work on such convolutions, same-
# process A/Bs there of one against two (`rule_ab.py M passes.bf16_dense.MIN_CONV_VECTORS_ZEN4 1
# --precision bf16`, the constant since removed): squeezenet1_1 b8 1.032x / 1.131x (ab / ba), b1
# 1.032x; mobilenet_v2 b8 1.078x, b1 1.014x; mnasnet1_0 b8 1.019x; efficientnet_b0 b8 1.061x
# [0.959-1.182]; googlenet b8 1.002x.
MIN_CONV_VECTORS = 1
# ... and on a CPU with AMX tiles (their products are 16 outputs wide: one vector of them is a
# whole tile). On the Intel Xeon VM (session 92, same-process A/Bs, `rule_ab.py M
# passes.bf16_dense.MIN_CONV_VECTORS_AMX 2 --precision bf16 --runs 200 --block 5`, the value
# against 2): squeezenet1_1 1.19x (its squeezes to 16 channels; the first max pool then pools
# bf16), mobilenet_v2 1.09x (its projections to 16 channels).
MIN_CONV_VECTORS_AMX = 1
# A 1x1 expansion that FuseExpansionIntoWindow would join into its depthwise window stays fp32
# (``fuse_expansion.joined_expansions``). In bf16 such an expansion ran alone (ExpandWindow
# computed in fp32 and did not take a bf16 one, until session 94) and wrote its fp32 output to memory:
# mobilenet_v2's first (16 -> 96 channels at 112x112, a reduction of 16) at 22 % of its bound,
# 0.45 ms, where the fp32 build's joined kernel did expansion and window together in the same
# time. Left in fp32 they join again: same-process A/Bs on Zen 4 (``rule_ab.py M
# passes.bf16_dense.KEEP_JOINED_EXPANSIONS 0 --precision bf16 --probe``, session 68):
# mobilenet_v2 1.085x / 1.101x (built ab / ba; 1.14x / 1.21x in the host's far state), at batch 8
# 1.067x; torchvision's mobilenet_v3_large 1.059x; mnasnet1_0 1.008x, at batch 8 1.019x.
KEEP_JOINED_EXPANSIONS = 1
# ... unless its outputs are whole vectors of the dot product's 16 lanes and the target has no
# AMX tiles (whose CPUs issue the dot product at half their FMAs' rate): then it reads bf16 inside
# the joined kernel too (ExpandWindow's tiles of ``vdpbf16ps``; 0: fp32 as above). mobilenet_v2's
# joined kernels had run at 66-78 % of the fp32 peak, 63 % of its time at batch 8. Same-process
# A/Bs of 0 (Zen 5, `rule_ab.py M passes.bf16_dense.BF16_JOINED_EXPANSIONS 0 --precision bf16
# --block 2`, session 94): mobilenet_v2 b8 1.256x, b1 1.079x; mnasnet1_0 b8 1.251x, b1 1.022x.
BF16_JOINED_EXPANSIONS = 1
# ... and where half-width vectors run at the full rate (Zen 4, ``tiles.half_vectors_full_rate``)
# also where its outputs are whole blocks of three half vectors (72, 120: PackWeights packs them in
# pairs of 24 channels, ExpandWindow's tiles of 256-bit ``vdpbf16ps``, ``bf16.DOT_8x2``; 0: fp32
# as above). mnasnet1_0's joined 24 -> 72 and 40 -> 120 blocks at batch 8 in bf16 ran in fp32 at
# 49-56 % of its peak, 23 % of the model's time.
BF16_HALF_EXPANSIONS = 1
# A CNN's feature map that a bf16 convolution reads and a residual ``add`` reads too is stored
# once, in bf16 (``_residual_casts``), as OpenVINO stores every activation between layers, where
# its fp32 bytes are over L2 (1; 2: at any size; 0: never). Same-process A/Bs of 0 (Zen 4, session
# 69, `rule_ab.py M passes.bf16_dense.BF16_RESIDUALS 0 --precision bf16 --probe`, at any size):
# resnet50 1.043x (ab), 1.038x / 1.061x in the two host states (ba), resnet101 1.016x, resnet18
# 0.986x (its 7x7 maps only); 2 against 1: resnet50 1.008x, resnet101 0.998x. On the Xeon VM
# (2 MB of L2: resnet50's 28x28x512 maps, 1.6 MB, under it and so left fp32 by 1, each with a
# cast kernel of its own) 2 against 1 (session 89, `--runs 150 --block 5`): resnet50 1.078x,
# resnet101 1.101x, resnet152 1.106x, resnet18 1.072x, resnet34 1.058x, mobilenet_v2 1.012x.
BF16_RESIDUALS = 2
# ... and where its other readers are average pools too, as well as or instead of adds (1; 0:
# adds only): Inception's blocks read their input with three convolutions and a 3x3 average pool
# (``branch_pool``), which kept the block's input in fp32, and a max pool before such a block
# (inception_v3's second stem pool, 35x35x192) pooled fp32 for it (``_pooled_casts`` takes a
# pool only a cast reads). The average pool sums the widened bf16 values in fp32.
BF16_POOL_READERS = 1
# A residual ``add`` operand that a bf16 convolution (and its bias) computes and nothing else
# reads (of a ResNet block with a downsample, the path computed first) is rounded to bf16 there
# and widened by the add (``_rounded_branches``; 0: it stays fp32), as OpenVINO stores every
# activation: at batch 8 resnet50's first block wrote 25.7 MB of fp32 for the downsample's kernel
# to read and add.
BF16_BRANCHES = 1
# A network's stem (a convolution over the few channels of an NCHW image, PackWeights'
# ``NCHW_STEM_CHANNELS``) with at least this many vectors of outputs reads bf16 too, in pairs of
# neighbouring window columns (its 3 channels give no pairs of channels; an odd window is padded
# with a zero column): four vectors, the tile that pays for the padding (contraction.SPAN_PAIRS).
# 0: stems stay fp32.
BF16_STEMS = 4
# ... and a window of at most this many rows and columns (the CNN stems measured, 3x3, 4x4 and
# 7x7): a ViT's 16x16 patch embedding in column pairs made google/vit-base-patch16-224 0.585x
# (same-process A/B, session 71): with no padding to cast its image, the cast was inlined and the
# dot product's tensorize failed (DLight's Reduction rule took it, without the dot product). With
# the cast a stage of its own (``rules.contraction.BF16_CAST_STAGE``, session 72) 16 is level with
# 7 (0.998x): the patch embedding is too small a part of a ViT to gain. 11: AlexNet's 11x11 stem
# (stride 4, 12 columns with the zero one) in bf16, same-process A/Bs against 7 (Zen 5, session
# 95, `rule_ab.py alexnet passes.bf16_dense.BF16_STEM_WINDOW 11 --precision bf16`): batch 8
# 1.072x [1.064-1.089] / 1.081x (both build orders), batch 1 1.039x.
BF16_STEM_WINDOW = 11
# A max pool whose output only a bf16 cast reads pools the bf16 copy of its input instead
# (``_pooled_casts``; 0: pools stay fp32). Rounding is monotonic, so the maximum of the rounded
# values is the rounded maximum: the same numbers, and the producer (a stem's convolution and
# ReLU) writes half the bytes.
BF16_POOLS = 1
# A depthwise convolution (fp32: no pairs of channels) whose input over ``min_bytes`` it alone
# reads reads that input's bf16 copy, widened in its own kernel (``_window_casts``; 0: fp32), as
# OpenVINO stores activations: the producer (a stem) writes half the bytes and the window, bound
# by memory, reads half. mobilenet_v2's first depthwise over its stem's 112x112x32 at batch 8
# read 12.8 MB at 41 GB/s (0.47 ms, 30 % of its bound). Not an expansion's output that
# FuseExpansionIntoWindow joins into the window (``fuse_expansion.joined_expansions``).
BF16_WINDOW_INPUTS = 1


def mark(mod: Any) -> Any:
    """``mod`` marked for this pass (the mark is part of the compile cache's key)."""
    return mod.with_attr(ATTR, "bf16")


def marked(mod: Any) -> bool:
    return bool(mod.attrs) and ATTR in mod.attrs and str(mod.attrs[ATTR]) == "bf16"


@mutator
class _Bf16Dense(PyExprMutator):
    def __init__(self, mod: Any, min_outputs: int, lanes: int, amx_tiles: bool) -> None:
        super().__init__(mod)
        self.min_outputs, self.lanes = min_outputs, lanes
        self.conv_vectors = MIN_CONV_VECTORS_AMX if amx_tiles else MIN_CONV_VECTORS
        self.weights: set[Any] = set()
        self.fp32: set[Any] = set()  # calls left in fp32 (``fuse_expansion.joined_expansions``)
        self.rounded: dict[Any, Any] = {}  # input -> its bf16 copy
        self.uses: dict[Any, int] = {}

    def visit_call_(self, call: Any) -> Any:
        if call in self.fp32:
            return super().visit_call_(call)
        call = super().visit_call_(call)
        name = op_name(call)
        if name not in ("relax.matmul", "relax.nn.conv2d") or len(call.args) != 2:
            return call
        x, w = call.args
        shape, x_shape = static_shape(w.ty), static_shape(x.ty)
        if shape is None or x_shape is None or str(x.ty.dtype) != "float32" or str(w.ty.dtype) != "float32":
            return call
        # (a dense layer's weight as PackWeights packs it; a convolution's may be computed from
        # weights: batch norms folded in)
        if not (from_weights(self, w, self.weights) if name == "relax.matmul"
                else weight_only(w, self.lookup_binding, self.weights)):
            return call
        if name == "relax.matmul":
            depth, outputs = (shape[0], shape[1]) if len(shape) == 2 and len(x_shape) >= 2 else (1, 0)
        else:
            a = call.attrs
            if (a.data_layout != "NHWC" or a.kernel_layout != "HWIO" or a.out_layout != "NHWC" or int(a.groups) != 1
                    or len(shape) != 4):
                return call
            depth, outputs = shape[2], shape[3]
        fewest = self.conv_vectors * self.lanes if self.conv_vectors and name == "relax.nn.conv2d" else self.min_outputs
        stem = (BF16_STEMS and name == "relax.nn.conv2d" and depth <= NCHW_STEM_CHANNELS
                and outputs >= BF16_STEMS * self.lanes and max(shape[:2]) <= BF16_STEM_WINDOW
                and nchw_image(x, self.lookup_binding) is not None)
        if (depth % 2 and not stem) or outputs < fewest:
            return call
        xb = self.round_input(x)
        wb = self.builder_.emit(relax.op.astype(w, "bfloat16"))
        if name == "relax.matmul":
            return relax.op.matmul(xb, wb, out_dtype="float32")
        a = call.attrs
        return relax.op.nn.conv2d(xb, wb, a.strides, a.padding, a.dilation, 1, "NHWC", "HWIO", "NHWC",
                                  "float32")

    def _concat_of_casts(self, x: Any) -> Any | None:
        """``x`` in bf16 as the concatenation of its parts in bf16 (``_concat_parts``; each part's
        copy kept for other readers, ``round_input``), or None."""
        found = _concat_parts(self, x)
        if found is None:
            return None
        parts, axis = found
        return relax.op.concat([self.round_input(p) for p in parts], axis=axis)

    def round_input(self, x: Any) -> Any:
        """``x`` in bf16, cast before the reshapes that lead to it (CAST_BEFORE_RESHAPES): the
        cast then follows the value's producer and joins its kernel's epilogue (T5's feed-forward
        ReLU, moved into its dense layer by ElementwiseBeforeReshape, was followed by two reshapes
        and a cast in a kernel of its own), and one cast serves every reshape of it."""
        if x in self.rounded:
            return self.rounded[x]

        def cast(source: Any) -> Any:
            if source not in self.rounded:
                joined = self._concat_of_casts(source)
                self.rounded[source] = self.builder_.emit(relax.op.astype(source, "bfloat16") if joined is None
                                                          else joined)
            return self.rounded[source]

        out = cast_before_reshapes(self, x, cast, bool(CAST_BEFORE_RESHAPES))
        self.rounded[x] = out
        return out


def _concat_parts(mutator_: Any, x: Any) -> tuple[list[Any], int] | None:
    """(the parts, the axis) of ``x`` where it is a concatenation that nothing but its cast reads
    (CAST_BEFORE_CONCATS), else None."""
    bound = mutator_.lookup_binding(x) if CAST_BEFORE_CONCATS and isinstance(x, relax.Var) else None
    if op_name(bound) != "relax.concat" or mutator_.uses.get(x) != 1:
        return None
    parts = bound.args[0]
    if isinstance(parts, relax.Var):
        parts = mutator_.lookup_binding(parts)
    return (list(parts.fields), int(bound.attrs.axis)) if isinstance(parts, relax.Tuple) else None


def _widened_reader(value: Any) -> bool:
    """``value`` may read a feature map's bf16 copy, widened (``_residual_casts``): an ``add``, or
    an NHWC average pool (BF16_POOL_READERS)."""
    if op_name(value) == "relax.add":
        return True
    return (bool(BF16_POOL_READERS) and op_name(value) == "relax.nn.avg_pool2d"
            and str(value.attrs.layout) == "NHWC" and str(value.attrs.out_layout) == "NHWC")


def _residual_casts(func: Any, min_bytes: int) -> dict[Any, Any]:
    """A ResNet block's output feeds the next block's first convolution, which reads it as bf16
    (``round_input``), and the next block's residual ``add``, which read the fp32 one: its
    producer wrote both, or the fp32 one for the cast to read again. In bf16 the 1x1 convolutions
    that end resnet50's first stages took twice OpenVINO's time, their 3.2 MB fp32 outputs and
    residuals going to memory. For each such NHWC feature map (a 4-d fp32 value over ``min_bytes``
    whose users are its bf16 cast and ``add`` s or average pools after it, ``_widened_reader``),
    the cast's variable: those then read the bf16 one, widened (``_Bf16Residuals``), and the
    producer writes bf16 alone."""
    order = {b.var: i for i, b in enumerate(bindings(func)) if isinstance(b, relax.VarBinding)}
    bound = {b.var: b.value for b in bindings(func) if isinstance(b, relax.VarBinding)}
    users, uses = users_of(bound), use_counts(func)
    found = {}
    for var, value in bound.items():
        if op_name(value) != "relax.astype" or str(value.attrs.dtype) != "bfloat16":
            continue
        x = value.args[0]
        shape = static_shape(x.ty) if x in bound else None
        if (shape is None or len(shape) != 4 or str(x.ty.dtype) != "float32"
                or (BF16_RESIDUALS == 1 and 4 * int(np.prod(shape)) <= min_bytes)):
            continue
        others = [u for u in users.get(x, []) if u is not var]
        if (others and uses.get(x) == len(others) + 1
                and all(_widened_reader(bound[u]) and order[u] > order[var] for u in others)):
            found[x] = var
    return found


def _rounded_branches(func: Any, min_bytes: int) -> set[Any]:
    """The operands of residual ``add`` s (two 4-d fp32 operands of one shape) that a bf16
    convolution computes, directly or through one more ``add`` (its bias), that nothing else
    reads, and whose other operand is computed after them: the kernel computing that one takes
    the ``add``, so this one goes to memory. Each is stored in bf16 (BF16_BRANCHES), where its
    fp32 bytes are over ``min_bytes`` under BF16_RESIDUALS 1. Not a bias (an operand computed
    from weights only): a squeeze-excite's 1x1 map has its bias's shape, and its rounded sum
    before the bias made a kernel that failed to build (torchvision's mobilenet_v3_large)."""
    order = {b.var: i for i, b in enumerate(bindings(func)) if isinstance(b, relax.VarBinding)}
    bound = {b.var: b.value for b in bindings(func) if isinstance(b, relax.VarBinding)}
    uses, weights = use_counts(func), weight_params(func)
    found = set()
    for value in bound.values():
        if op_name(value) != "relax.add" or len(value.args) != 2 or any(a not in order for a in value.args):
            continue
        first, later = sorted(value.args, key=order.__getitem__)
        shape = static_shape(first.ty)
        if (shape is None or len(shape) != 4 or shape != static_shape(later.ty) or uses.get(first) != 1
                or weight_only(later, bound.get, weights)
                or str(first.ty.dtype) != "float32" or (BF16_RESIDUALS == 1 and 4 * int(np.prod(shape)) <= min_bytes)):
            continue
        source = bound[first]
        if op_name(source) == "relax.add" and source.args[0] in bound:
            source = bound[source.args[0]]
        if op_name(source) == "relax.nn.conv2d" and str(source.args[0].ty.dtype) == "bfloat16":
            found.add(first)
    return found


@mutator
class _Bf16Residuals(PyExprMutator):
    """The residual ``add`` s (and average pools) of ``_residual_casts`` read their operand's
    bf16 copy, widened."""

    def __init__(self, mod: Any) -> None:
        super().__init__(mod)
        self.casts: dict[Any, Any] = {}
        self.branches: set[Any] = set()  # (``_rounded_branches``)

    def visit_call_(self, call: Any) -> Any:
        if not _widened_reader(call) or not any(a in self.casts or a in self.branches for a in call.args):
            return super().visit_call_(call)
        if op_name(call) == "relax.nn.avg_pool2d":  # (widened inside the pool's kernel: a cast
            # before a pool stays a kernel of its own)
            return self.builder_.call_te(_widened_pool, self.visit_expr(self.casts[call.args[0]]), "avg",
                                         *_pool_attrs(call), primfunc_name_hint="avg_pool2d")
        args = [self.builder_.emit(relax.op.astype(self.visit_expr(self.casts[a]), "float32")) if a in self.casts
                else self.visit_expr(a) for a in call.args]
        rounded = [i for i, a in enumerate(call.args) if a in self.branches]
        if rounded:  # (widened inside the add's kernel: a cast after the round would join the producer's)
            k = rounded[0]
            return self.builder_.call_te(_widened_add, args[1 - k], self.builder_.emit(
                relax.op.astype(args[k], "bfloat16")), primfunc_name_hint="add")
        return relax.op.add(*args)


def _pooled_casts(func: Any) -> dict[Any, tuple[Any, Any]]:
    """A stem's ReLU output (resnet18's 112x112x64, 3.2 MB in fp32) went to memory in fp32 for
    its max pool, which then cast its output for the next convolution (a kernel ``max_pool2d_cast``
    reading twice the bytes it needed). For each ``astype(max_pool2d(x), bf16)`` (NHWC) whose pool
    has no other user: the cast's variable -> (the pool, the bf16 copy of ``x`` to pool, or None
    to make one). Made only where ``x`` has such a copy bound earlier or no user but the pool, so
    no producer writes a copy it did not write before. Consumers first: a pool that reads a copy
    instead of ``x`` is one user fewer of ``x`` (googlenet's branch pools, over a stage's pool)."""
    order = {b.var: i for i, b in enumerate(bindings(func)) if isinstance(b, relax.VarBinding)}
    bound = {b.var: b.value for b in bindings(func) if isinstance(b, relax.VarBinding)}
    uses = use_counts(func)
    casts = {v.args[0]: var for var, v in bound.items()
             if op_name(v) == "relax.astype" and str(v.attrs.dtype) == "bfloat16"}
    found = {}
    for var in sorted((c for c in casts.values() if op_name(bound.get(bound[c].args[0])) == "relax.nn.max_pool2d"),
                      key=order.__getitem__, reverse=True):
        pooled = bound[var].args[0]
        pool = bound[pooled]
        if uses.get(pooled) != 1 or str(pool.attrs.layout) != "NHWC" or str(pool.attrs.out_layout) != "NHWC":
            continue
        x = pool.args[0]
        copy = casts.get(x)
        if copy is not None and order.get(copy, len(order)) < order[var]:
            found[var] = (pool, copy)
            uses[x] -= 1
        elif uses.get(x) == 1 and str(x.ty.dtype) == "float32":
            found[var] = (pool, None)
    return found


@mutator
class _Bf16Pools(PyExprMutator):
    """The casts of ``_pooled_casts`` become pools of the bf16 copy of the pools' input, and the
    depthwise convolutions of ``_window_casts`` convolutions of their input's bf16 copy."""

    def __init__(self, mod: Any) -> None:
        super().__init__(mod)
        self.pools: dict[Any, tuple[Any, Any]] = {}
        self.windows: set[Any] = set()  # (``_window_casts``)

    def visit_var_binding_(self, binding: Any) -> None:
        if binding.var in self.windows:
            conv = binding.value
            xb = self.builder_.emit(relax.op.astype(self.visit_expr(conv.args[0]), "bfloat16"))
            a = conv.attrs
            value = self.builder_.call_te(_widened_conv, xb, self.visit_expr(conv.args[1]), a.strides, a.padding,
                                          a.dilation, int(a.groups), primfunc_name_hint="conv2d")
            self.set_var_remap(binding.var, self.builder_.emit(value, name_hint=binding.var.name))
            return None
        if binding.var not in self.pools:
            return super().visit_var_binding_(binding)
        pool, copy = self.pools[binding.var]
        x = self.visit_expr(pool.args[0]) if copy is None else self.visit_expr(copy)
        xb = self.builder_.emit(relax.op.astype(x, "bfloat16")) if copy is None else x
        value = self.builder_.call_te(_widened_pool, xb, "max", *_pool_attrs(pool), primfunc_name_hint="max_pool2d")
        self.set_var_remap(binding.var, self.builder_.emit(value, name_hint=binding.var.name))


def _window_casts(func: Any, min_bytes: int) -> set[Any]:
    """The variables of the depthwise convolutions (NHWC, HWIO, one group per channel) whose 4-d
    fp32 input, over ``min_bytes``, a binding computes and nothing else reads (BF16_WINDOW_INPUTS),
    unless that input is, through cheap elementwise steps, an expansion FuseExpansionIntoWindow
    joins."""
    bound = {b.var: b.value for b in bindings(func) if isinstance(b, relax.VarBinding)}
    uses, expansions = use_counts(func), joined_expansions(func, min_bytes)
    found = set()
    for var, value in bound.items():
        x = value.args[0] if op_name(value) == "relax.nn.conv2d" else None
        shape = static_shape(x.ty) if x in bound else None
        if (shape is None or len(shape) != 4 or str(x.ty.dtype) != "float32" or uses.get(x) != 1
                or 4 * int(np.prod(shape)) <= min_bytes or shape[3] < 2 or int(value.attrs.groups) != shape[3]
                or (value.attrs.data_layout, value.attrs.kernel_layout, value.attrs.out_layout) != ("NHWC", "HWIO", "NHWC")):
            continue
        source = x
        while op_name(bound.get(source)) in CHEAP and isinstance(bound[source].args[0], relax.Var):
            source = bound[source].args[0]
        if bound.get(source) not in expansions:
            found.add(var)
    return found


def _widened_conv(x: Any, w: Any, strides: Any, padding: Any, dilation: Any, groups: int) -> Any:
    """An NHWC convolution of bf16 ``x`` widened to fp32 in the same kernel (``_window_casts``),
    as LegalizeOps writes a convolution (``topi.nn.conv``)."""
    from tvm import te, topi

    wide = te.compute(x.shape, lambda *i: x(*i).astype("float32"), name="widen")
    return topi.nn.conv(wide, w, strides, padding, dilation, groups, "NHWC", "HWIO", "float32")


def _widened_add(x: Any, rounded: Any) -> Any:
    """``x + rounded``, ``rounded`` bf16 widened to fp32 in the same kernel (``_rounded_branches``)."""
    from tvm import te

    return te.compute(x.shape, lambda *i: x(*i) + rounded(*i).astype("float32"), name="add")


def _pool_attrs(pool: Any) -> tuple[list[int], list[int], list[int], list[int], bool, bool]:
    """An NHWC pool's window, strides, dilation, padding, ceil mode and whether its average counts
    the padding, as ``_widened_pool`` takes them."""
    a = pool.attrs
    return ([int(k) for k in a.pool_size], [int(s) for s in a.strides], [int(d) for d in a.dilation],
            [int(p) for p in a.padding], bool(a.ceil_mode), bool(getattr(a, "count_include_pad", False)))


def _widened_pool(x: Any, kind: str, size: list[int], strides: list[int], dilation: list[int], padding: list[int],
                  ceil_mode: bool, count_include_pad: bool) -> Any:
    """An NHWC pool of bf16 ``x`` in fp32: a max pool's running maximum, rounded once at the end
    (an exact rounding: the maximum is one of the bf16 values), an average pool's sum, its fp32
    average the output. Pooled in bf16, every step of the window rounded the running maximum
    again, integer arithmetic on each vector (TVM's BF16ComputeLegalize), and the pool took
    0.041 ms where it reads 1.6 MB."""
    from tvm import te, topi

    wide = te.compute(x.shape, lambda *i: x(*i).astype("float32"), name="widen")
    pooled = topi.nn.pool2d(wide, size, strides, dilation, padding, kind, ceil_mode, "NHWC", count_include_pad)
    return pooled if kind == "avg" else te.compute(pooled.shape, lambda *i: pooled(*i).astype("bfloat16"), name="round")


def _fp32_expansions(func: Any, min_bytes: int, amx_tiles: bool, half_vectors: bool) -> set[Any]:
    """The expansions FuseExpansionIntoWindow will join that stay fp32 (KEEP_JOINED_EXPANSIONS,
    BF16_JOINED_EXPANSIONS, BF16_HALF_EXPANSIONS)."""
    joined = joined_expansions(func, min_bytes) if KEEP_JOINED_EXPANSIONS else set()
    if not BF16_JOINED_EXPANSIONS or amx_tiles:
        return joined
    return {c for c in joined if not bf16_expansion((static_shape(c.args[1].ty) or [0])[-1], half_vectors)}


def bf16_expansion(channels: int, half_vectors: bool) -> bool:
    """Whether a joined expansion of ``channels`` outputs reads bf16 pairs: whole 16-lane vectors,
    or, where half vectors run at the full rate, whole blocks of three 8-lane ones
    (BF16_HALF_EXPANSIONS, PackWeights' ``half_pair_block``)."""
    return channels % bf16.LANES == 0 or bool(BF16_HALF_EXPANSIONS and half_pair_block(channels, True, half_vectors, False))


def bf16_dense(target: ResolvedTarget) -> Any:
    """The pass (see the module's docstring) for ``target``; a module not :func:`mark` ed passes
    unchanged. Of the target: ``min_outputs``, the fewest output channels PackWeights packs (two
    of its blocks); ``min_bytes``, the size over which FuseExpansionIntoWindow joins an expansion;
    ``lanes``, its vectors' fp32 lanes; ``amx_tiles``, whether it has AMX's tile products
    (``MIN_CONV_VECTORS_AMX``); ``half_vectors``, whether its half-width vectors run at the full
    rate (BF16_HALF_EXPANSIONS)."""
    import tvm

    tvm_target = target.tvm()
    min_outputs, min_bytes = 2 * weight_block(target), fuse_expansion_bytes(target.l2_bytes)
    lanes, amx_tiles = vector_lanes(tvm_target, 32), amx.usable(tvm_target)
    half_vectors = half_vectors_full_rate(tvm_target)

    def set_weights(mutator_: Any, func: Any) -> None:
        mutator_.weights, mutator_.rounded, mutator_.uses = weight_params(func), {}, use_counts(func)
        mutator_.fp32 = _fp32_expansions(func, min_bytes, amx_tiles, half_vectors)

    def set_casts(mutator_: Any, func: Any) -> None:
        mutator_.casts = _residual_casts(func, min_bytes) if BF16_RESIDUALS else {}
        mutator_.branches = _rounded_branches(func, min_bytes) if BF16_RESIDUALS and BF16_BRANCHES else set()

    def set_pools(mutator_: Any, func: Any) -> None:
        mutator_.pools = _pooled_casts(func) if BF16_POOLS else {}
        mutator_.windows = _window_casts(func, min_bytes) if BF16_WINDOW_INPUTS else set()

    rewrite = builder_pass(lambda mod: _Bf16Dense(mod, min_outputs, lanes, amx_tiles), "Bf16Dense",
                           before=set_weights)
    residuals = builder_pass(_Bf16Residuals, "Bf16Residuals", before=set_casts)
    pools = builder_pass(_Bf16Pools, "Bf16Pools", before=set_pools)
    attention, excitation = bf16_attention(lanes), bf16_excitation()

    @tvm.ir.transform.module_pass(opt_level=0, name="Bf16DenseIfMarked")
    def pass_(mod: Any, ctx: Any) -> Any:
        if not marked(mod):
            return mod
        mod = excitation(pools(residuals(rewrite(mod))))
        return mod if amx_tiles else attention(mod)

    return pass_
