"""GroupedConv: NHWC grouped convolutions (1 < groups < input channels) with a vector axis.

TOPI's grouped NHWC convolution indexes one output-channel axis ``o`` and reads the input at
channel ``o // Co * Ci + rc``: no operand is contiguous along ``o`` in the way a register tile
needs, the Contraction rule does not match, and the fallback schedule ran ResNeXt's grouped
3x3 convolutions at about 3 % of the machine's peak. Written with the group as an axis of its
own, the same arithmetic has one:

- ``channels``: ``out[n, y, x, g, co] = sum x[n, y', x', g, ci] * w[g, co // B, kh, kw, ci,
  co % B]``, the vector over ``co`` (a group's output channels), the weights packed per group in
  blocks of B channels (``pack_block``, as ``pack_weights.py`` packs ungrouped ones: in HWIO a
  tile's weight rows were ``G * Co * 4`` bytes apart); the input does not depend on ``co`` and
  is broadcast. Best when a group has many output channels (RegNet's group widths of 8 to 264).
- ``groups``: ``out[n, y, x, co, g] = sum x[n, y', x', ci, g] * w[kh, kw, ci, co, g]``, the
  vector over ``g``: a depthwise convolution per (input, output) channel pair of a group, over
  an input whose channels were transposed from ``[G, Ci]`` to ``[Ci, G]`` order, with the
  output transposed back. No operand is broadcast (two loads per FMA). Best when there are many
  narrow groups (ResNeXt-50 32x4d: 32 groups of 4 to 32 channels). Where an ungrouped NHWC
  convolution (and its per-channel bias and ReLU) writes the input, it writes it in ``[Ci, G]``
  order itself, its output channels permuted in the weights at load time; where one reads the
  output (after the batch norm's shift and ReLU), its input channels are permuted instead of the
  output transposed back (PERMUTE_PRODUCER): ResNeXt's bottlenecks spent 4 % of their time in
  those two transposes (resnext50_32x4d 1.03-1.04x).

In the ``channels`` form, a group wider than one vector but not a whole number of them (RegNet's
24, 56, 120, 168, 232, 264) is padded with zero output channels to whole vectors, sliced off
after the convolution in the same kernel (``padded_group``): 120 channels ran in vectors of 8,
one per register tile (on AVX-512 a quarter of the FMA width of a tile of two full vectors), at
41 % of the peak, 37 % of regnet_x_8gf's time. Where half vectors run at the full FMA rate (Zen 4)
and three of them divide the group (24, 120, 168), it keeps its width instead, in three-vector
tiles (``three_vectors``): no padded channel computed. The form is the one whose vector axis fills more
lanes of the target's vectors, the channels counted padded (ties: ``channels``, which needs no
transposes). The weight pads, reshapes and transposes are weight-only, so LiftTransformParams
moves them to load time; the activation reshapes are free views. (Measured: docs/performance.md,
"Every torchvision classifier".)

Under ``--precision bf16`` (not on AMX targets) both forms read bf16 pairs of each group's input
channels, as ``pack_weights.py`` packs ungrouped convolutions: the ``channels`` form's weights
``[G, Co/B, KH, KW, Ci/2, B, 2]`` against the broadcast input pair (``bf16.DOT_16x2``), the
``groups`` form's input ``[N, H, W, Ci/2, G, 2]`` and weights ``[KH, KW, Ci/2, Co, G, 2]``, a pair
per lane in both (``bf16.DOT_16x2_BOTH``). Groups that fp32 keeps in three half vectors (Zen
4's 24) are padded to whole vectors of the dot product (BF16_PADDED_GROUPS); groups of 8 run it
in half vectors where those reach the full rate (BF16_HALF_GROUPS, ``bf16.DOT_8x2``).
(docs/performance.md, "Zen 5: grouped convolutions in bf16", "RegNet's groups of 24 channels in
bf16 on Zen 4", "Groups of 8 channels in bf16 half vectors".)
"""

from __future__ import annotations

from typing import Any

from tvm import relax, te, topi
from tvm.relax.expr_functor import PyExprMutator, mutator

from tvmbench.compile import amx
from tvmbench.compile.ir import TECache, builder_pass, op_name, out_dtype, static_shape, use_counts
from tvmbench.compile.passes.bf16_dense import marked
from tvmbench.compile.passes.pack_weights import whole_tiles
from tvmbench.compile.tiles import half_vectors_full_rate, long_pair_vectors, vector_lanes, vector_width
from tvmbench.targets import ResolvedTarget


def grouped_conv(x: Any, w: Any, strides: list[int], pad: list[int], dilation: list[int], dtype: str,
                 groups_inner: bool, columns: int | None = None) -> Any:
    """The grouped convolution over 5-D operands (TE): ``x [N, H, W, G, Ci]``, ``w [KH, KW, Ci,
    G, Co]`` (or packed, ``[G, Co/B, KH, KW, Ci, B]``, or in bf16 pairs of input channels,
    ``[G, Co/B, KH, KW, Ci/2, B, 2]``) giving ``[N, OH, OW, G, Co]``, or with ``groups_inner``
    ``x [N, H, W, Ci, G]``, ``w [KH, KW, Ci, Co, G]`` (in bf16 pairs: ``x [N, H, W, Ci/2, G, 2]``,
    ``w [KH, KW, Ci/2, Co, G, 2]``) giving ``[N, OH, OW, Co, G]``. ``columns``: compute this many
    output columns, the extra ones re-reading the last (whole register tiles, which the bf16 dot
    product needs; the caller slices them off)."""
    h, wd = int(x.shape[1]), int(x.shape[2])
    packed, pairs = not groups_inner and len(w.shape) >= 6, len(w.shape) == (6 if groups_inner else 7)
    kh, kw, ci = (int(v) for v in (w.shape[2:5] if packed else w.shape[:3]))
    ci = 2 * ci if pairs else ci
    top, left, bottom, right = pad
    if any(pad):
        rest = [0] * (len(x.shape) - 3)
        x = topi.nn.pad(x, [0, top, left, *rest], [0, bottom, right, *rest], name="pad")
    oh = (h + top + bottom - (kh - 1) * dilation[0] - 1) // strides[0] + 1
    ow = (wd + left + right - (kw - 1) * dilation[1] - 1) // strides[1] + 1
    rh, rw, rc = te.reduce_axis((0, kh), "rh"), te.reduce_axis((0, kw), "rw"), te.reduce_axis((0, ci), "rc")

    def at(n: Any, y: Any, z: Any) -> tuple[Any, Any]:
        z = te.min(z, ow - 1) if columns else z
        return n, y * strides[0] + rh * dilation[0], z * strides[1] + rw * dilation[1]

    if groups_inner:
        def product(n: Any, y: Any, z: Any, o: Any, g: Any) -> Any:
            if pairs:
                return (x[(*at(n, y, z), rc // 2, g, rc % 2)].astype(dtype)
                        * w[rh, rw, rc // 2, o, g, rc % 2].astype(dtype))
            return x[(*at(n, y, z), rc, g)].astype(dtype) * w[rh, rw, rc, o, g].astype(dtype)

        return te.compute((x.shape[0], oh, ow, w.shape[3], w.shape[4]), lambda n, y, z, o, g: te.sum(
            product(n, y, z, o, g), axis=[rh, rw, rc]), name="conv2d_grouped")
    if packed:
        b = int(w.shape[5])

        def weight(g: Any, o: Any) -> Any:
            return w[g, o // b, rh, rw, rc // 2, o % b, rc % 2] if pairs else w[g, o // b, rh, rw, rc, o % b]

        return te.compute((x.shape[0], oh, columns or ow, w.shape[0], w.shape[1] * b), lambda n, y, z, g, o: te.sum(
            x[(*at(n, y, z), g, rc)].astype(dtype) * weight(g, o).astype(dtype),
            axis=[rh, rw, rc]), name="conv2d_grouped")
    return te.compute((x.shape[0], oh, ow, w.shape[3], w.shape[4]), lambda n, y, z, g, o: te.sum(
        x[(*at(n, y, z), g, rc)].astype(dtype) * w[rh, rw, rc, g, o].astype(dtype), axis=[rh, rw, rc]),
        name="conv2d_grouped")


# Groups padded to whole vectors (``padded_group``); off, they run in the widest vector dividing them.
WHOLE_VECTORS = True
# ... and a group of more than 7 vectors that no count from 2 to 7 divides (a prime: RegNet's
# 168 -> 176 = 11 vectors, 264 -> 272 = 17) takes one more: only one-vector tiles would divide it
# (``rules.contraction.choose_tile``).
# Same-process A/Bs (Zen 5): regnet_y_128gf 1.129x, regnet_x_32gf 1.011x (over its one-vector
# tiles of 14 rows, ONE_VECTOR_ROWS).
COMPOSITE_VECTORS = True


# Groups that three half vectors divide keep their width where those run at the full rate,
# packed and tiled three half vectors wide (``three_vectors``) instead of padded to whole vectors.
THREE_VECTOR_GROUPS = True


def three_vectors(out_per_group: int, lanes: int, half_vectors: bool) -> int | None:
    """Where half-width vectors run at the full FMA rate (``tiles.half_vectors_full_rate``), the
    block of three half vectors that divides a group's output channels when whole vectors do not
    (RegNet's 24, 120 and 168 on AVX-512: 32, 128 and 176 padded), else None. Groups of three
    whole vectors (48) are not concerned: on Zen 4 their one-vector tiles ran near the peak
    (regnet_x_3_2gf's at 94-97 %) and six half vectors measured that model 0.99x; they are
    packed whole instead (THREE_WHOLE_VECTORS, measured on Zen 5)."""
    half = lanes // 2
    if not THREE_VECTOR_GROUPS or not half_vectors or half < 4 or out_per_group % lanes == 0:
        return None
    return 3 * half if out_per_group % (3 * half) == 0 else None


def padded_group(out_per_group: int, lanes: int, half_vectors: bool = False) -> int:
    """A group's output channels in the ``channels`` form: whole vectors when the group is wider
    than one, one more where nothing from 2 to 7 divides a count above 7 (COMPOSITE_VECTORS); ``out_per_group``
    itself when it is narrower than a vector or ``three_vectors``."""
    if (not WHOLE_VECTORS or out_per_group <= lanes
            or three_vectors(out_per_group, lanes, half_vectors)):
        return out_per_group
    vectors = -(-out_per_group // lanes)
    if COMPOSITE_VECTORS and vectors > 7 and not any(vectors % v == 0 for v in range(2, 8)):
        vectors += 1
    return vectors * lanes


# Weights of the channels form packed per group in blocks of output channels (``pack_block``).
PACK = True
# A group of exactly three whole vectors (regnet_x_3_2gf's 48 channels) packed in one block, so
# its tiles can be three vectors wide: one vector over 14 rows (blocks of one vector) ran 5-17 %
# slower alone than 3 x 7 on the Zen 5 host (the 14x14 ones 182 against 172 us, 232 against 192,
# the 56x56 ones 608 against 558 and 713 against 630-646; docs/performance.md, session 58).
THREE_WHOLE_VECTORS = True


def pack_block(out_per_group: int, lanes: int, half_vectors: bool = False) -> int | None:
    """Output channels per packed weight block, ``[G, Co/B, KH, KW, Ci, B]``: three half vectors
    where ``three_vectors`` says so, a group of three whole vectors whole (THREE_WHOLE_VECTORS),
    two vectors where they divide the group, else one; None (HWIO
    kept) for a group narrower than a vector. As for
    ungrouped convolutions (``pack_weights.py``), a tile's weights are then one contiguous stream
    instead of rows ``G * Co * 4`` bytes apart (15 KB in regnet_y_32gf's last stage)."""
    if not PACK:
        return None
    three = three_vectors(out_per_group, lanes, half_vectors)
    if three:
        return three
    if THREE_WHOLE_VECTORS and out_per_group == 3 * lanes:
        return out_per_group
    if out_per_group % lanes:
        return None
    return 2 * lanes if out_per_group % (2 * lanes) == 0 else lanes


def groups_inner(groups: int, out_per_group: int, lanes: int, half_vectors: bool = False) -> bool:
    """Whether the vector goes over the groups: when that fills more lanes than a vector over a
    group's output channels, padded to whole vectors (``vector_width`` of each axis). The groups
    form broadcasts no operand (two loads per FMA, as a depthwise convolution): regnet_y_8gf's
    16 groups of 56 ran it at 31 % of the peak."""
    if three_vectors(out_per_group, lanes, half_vectors):
        return False
    return vector_width(groups, lanes) > vector_width(padded_group(out_per_group, lanes), lanes)


@mutator
class _Grouped(PyExprMutator):
    uses: dict[Any, int] = {}  # (of the function being rewritten, read before it: ``grouped_conv_nhwc``)

    def __init__(self, mod: Any, lanes: int, half_vectors: bool, bf16: bool) -> None:
        super().__init__(mod)
        self.lanes, self.half = lanes, half_vectors
        self.bf16 = bf16 and marked(mod)  # (``--precision bf16``, not on AMX: ``_pairs``)
        self.call_te = TECache(self.builder_)

    def visit_call_(self, call: Any) -> Any:
        call = super().visit_call_(call)
        if op_name(call) != "relax.nn.conv2d":
            return call
        a = call.attrs
        x, w = call.args
        xs, ws, outs = static_shape(x.ty), static_shape(w.ty), static_shape(call.ty)
        g = int(a.groups)
        if g == 1 and PERMUTE_PRODUCER and _ungrouped_nhwc(call):
            return self._reads_permuted(call)
        if (a.data_layout != "NHWC" or a.kernel_layout != "HWIO" or a.out_layout != "NHWC" or None in (xs, ws, outs)
                or not 1 < g < xs[3]):
            return call
        n, h, wd, c = xs
        kh, kw, ci, o = ws
        co = o // g
        inner = groups_inner(g, co, self.lanes, self.half)
        if not inner:
            return self._channels_form(call, g)
        emit = self.builder_.emit
        pairs = bool(BF16_GROUPS_INNER and g % 16 == 0 and self._pairs(call, ci))
        permuted = self._channels_permuted(x, g, ci, pairs) if PERMUTE_PRODUCER else None
        if pairs:  # (pairs of a group's input channels, adjacent in each lane: [Ci/2, G, 2])
            x6 = permuted if permuted is not None else emit(
                relax.op.permute_dims(relax.op.reshape(x, [n, h, wd, g, ci // 2, 2]), [0, 1, 2, 4, 3, 5]))
            x5 = emit(relax.op.reshape(emit(relax.op.astype(x6, "bfloat16")), [n, h, wd, ci // 2, g, 2]))
            w5 = emit(relax.op.astype(emit(relax.op.permute_dims(relax.op.reshape(w, [kh, kw, ci // 2, 2, g, co]),
                                                                 [0, 1, 2, 5, 4, 3])), "bfloat16"))
        elif permuted is not None:  # (its producer writes the channels in [Ci, G] order already)
            x5 = emit(relax.op.reshape(permuted, [n, h, wd, ci, g]))
        else:
            x5 = emit(relax.op.permute_dims(relax.op.reshape(x, [n, h, wd, g, ci]), [0, 1, 2, 4, 3]))
        if not pairs:
            w5 = emit(relax.op.permute_dims(relax.op.reshape(w, [kh, kw, ci, g, co]), [0, 1, 2, 4, 3]))
        out5 = emit(self.call_te(grouped_conv, x5, w5, [int(v) for v in a.strides],
                                 [int(v) for v in a.padding], [int(v) for v in a.dilation],
                                 out_dtype(call, x), True, primfunc_name_hint="conv2d_grouped"))
        return relax.op.reshape(emit(relax.op.permute_dims(out5, [0, 1, 2, 4, 3])), outs)

    def _pairs(self, call: Any, ci: int) -> bool:
        """Whether ``call`` (fp32 operands and output) may read bf16 pairs of a group's ``ci``
        input channels: a bf16 build for a target without AMX and an even ``ci``."""
        x, w = call.args
        return bool(self.bf16 and ci % 2 == 0 and out_dtype(call, x) == "float32"
                    and str(x.ty.dtype) == str(w.ty.dtype) == "float32")

    def _channels_form(self, call: Any, g: int) -> Any:
        """The ``channels`` form: each group's output channels padded to whole vectors
        (``padded_group``) and its weights packed (``pack_block``), weight-only work done at load
        time; under ``--precision bf16`` (not on AMX targets) over bf16 pairs of each group's input
        channels, where they pair and the block is whole vectors of the dot product
        (BF16_GROUPS), a block of three half vectors padded to whole ones (BF16_PADDED_GROUPS)."""
        a, (x, w) = call.attrs, call.args
        emit = self.builder_.emit
        n, h, wd, _ = static_shape(x.ty)
        kh, kw, ci, o = static_shape(w.ty)
        _, _, ow, _ = outs = static_shape(call.ty)
        co, dtype = o // g, out_dtype(call, x)
        wide = padded_group(co, self.lanes, self.half)
        block = pack_block(wide, self.lanes, self.half)
        if BF16_PADDED_GROUPS and BF16_GROUPS and block and block % 16 and self._pairs(call, ci):
            wide = padded_group(co, self.lanes)  # (three half vectors in fp32 -> whole vectors of pairs)
            block = pack_block(wide, self.lanes)
        half = bool(BF16_HALF_GROUPS and self.half and not block and co == self.lanes // 2 == 8)
        block = co if half else block  # (pairs in one half vector: bf16.DOT_8x2)
        pairs = bool(BF16_GROUPS and block and (block % 16 == 0 or half) and self._pairs(call, ci))
        block = None if half and not pairs else block
        x5 = emit(relax.op.reshape(emit(relax.op.astype(x, "bfloat16")) if pairs else x, [n, h, wd, g, ci]))
        w5 = emit(relax.op.reshape(w, [kh, kw, ci, g, co]))
        if wide != co:  # (zero weights: a weight-only pad, done at load time)
            w5 = emit(relax.op.nn.pad(w5, [0, 0, 0, 0, 0, 0, 0, 0, 0, wide - co]))
        if block:  # (weight-only too)
            w5 = emit(relax.op.permute_dims(relax.op.reshape(w5, [kh, kw, ci, g, wide // block, block]),
                                            [3, 4, 0, 1, 2, 5]))
        columns = None
        if pairs:
            w5 = emit(relax.op.layout_transform(emit(relax.op.astype(w5, "bfloat16")),
                                                lambda gr, ob, y, z, c, p: (gr, ob, y, z, c // 2, p, c % 2)))
            columns = whole_tiles(ow, fitted=True, long=long_pair_vectors(wide))
        out5 = emit(self.call_te(grouped_conv, x5, w5, [int(v) for v in a.strides], [int(v) for v in a.padding],
                                 [int(v) for v in a.dilation], dtype, False, columns,
                                 primfunc_name_hint="conv2d_grouped"))
        if wide != co or columns:
            out5 = emit(relax.op.strided_slice(out5, axes=[2, 4], begin=[0, 0], end=[ow, co]))
        return relax.op.reshape(out5, outs)

    def _chain(self, value: Any, channels: int) -> tuple[list[Any], Any] | None:
        """The per-channel elementwise ops (a bias, a ReLU) that made ``value``, last first, each
        read only once, and the binding they start from; None where any is read elsewhere."""
        chain = []
        while isinstance(value, relax.Var) and self.uses.get(value) == 1:
            bound = self.lookup_binding(value)
            if op_name(bound) not in PER_CHANNEL or not all(_per_channel(a, channels) for a in bound.args[1:]):
                return chain, bound
            chain.append(bound)
            value = bound.args[0]
        return None

    def _replay(self, out: Any, chain: list[Any], g: int, c: int, pairs: bool = False) -> Any:
        """The ops of ``chain`` applied to ``out``, whose channels are in ``[C, G]`` order (with
        ``pairs``, ``[C/2, G, 2]``): their per-channel operands reordered from ``[G, C]``
        (weight-only, done at load time)."""
        for op in reversed(chain):
            others = [_permute_last(self.builder_.emit, a, g, c, pairs) if _varies(a) else a for a in op.args[1:]]
            out = self.builder_.emit(relax.Call(op.op, [out, *others], op.attrs, op.ty_args))
        return out

    def _channels_permuted(self, x: Any, g: int, ci: int, pairs: bool = False) -> Any | None:
        """``x`` computed with its channels in ``[Ci, G]`` order (with ``pairs``, ``[Ci/2, G,
        2]``), where an ungrouped NHWC convolution and per-channel ops, each read only here, made
        it: the convolution's output channels permuted in its weights. None where ``x`` is
        anything else."""
        found = self._chain(x, g * ci)
        if found is None or op_name(found[1]) != "relax.nn.conv2d" or not _ungrouped_nhwc(found[1]):
            return None
        chain, conv = found
        w = _permute_last(self.builder_.emit, conv.args[1], g, ci, pairs)
        return self._replay(self.builder_.emit(relax.Call(conv.op, [conv.args[0], w], conv.attrs, conv.ty_args)),
                            chain, g, ci, pairs)

    def _reads_permuted(self, conv: Any) -> Any:
        """``conv`` (ungrouped) reading the ``[Co, G]``-ordered output of a groups-form grouped
        convolution, where only per-channel ops, each read only here, lie between: those ops'
        operands and this convolution's input-channel weights permuted instead of the output
        transposed back to ``[G, Co]``."""
        emit = self.builder_.emit
        found = self._chain(conv.args[0], static_shape(conv.args[0].ty)[-1])
        grouped = self._groups_output(found[1]) if found is not None else None
        if grouped is None:
            return conv
        out5, g, co = grouped
        out = self._replay(emit(relax.op.reshape(out5, static_shape(found[1].ty))), found[0], g, co)
        kh, kw, c, o = static_shape(conv.args[1].ty)
        w = emit(relax.op.reshape(conv.args[1], [kh, kw, g, co, o]))
        w = emit(relax.op.reshape(relax.op.permute_dims(w, [0, 1, 3, 2, 4]), [kh, kw, c, o]))
        return relax.Call(conv.op, [out, w], conv.attrs, conv.ty_args)

    def _groups_output(self, reshape: Any) -> tuple[Any, int, int] | None:
        """(the ``[N, H, W, Co, G]`` output, G, Co) where ``reshape`` merges a groups-form grouped
        convolution's output transposed back to ``[G, Co]``, that transpose read only here."""
        if op_name(reshape) != "relax.reshape" or not isinstance(reshape.args[0], relax.Var):
            return None
        moved = self.lookup_binding(reshape.args[0])
        if op_name(moved) != "relax.permute_dims" or [int(v) for v in moved.attrs.axes] != [0, 1, 2, 4, 3]:
            return None  # (the transpose is this pass's own, made for this reshape alone)
        out5 = moved.args[0]
        made = self.lookup_binding(out5) if isinstance(out5, relax.Var) else None
        if not isinstance(made, relax.Call) or not getattr(made.args[0], "name_hint", "").startswith("conv2d_grouped"):
            return None
        _, _, _, co, g = static_shape(out5.ty)
        return out5, g, co


# Under --precision bf16, the ``channels`` form over bf16 pairs of each group's input channels
# (``_Grouped._channels_form``; 0: grouped convolutions stay fp32).
BF16_GROUPS = 1
# ... also where three half vectors divide a group (``three_vectors``: Zen 4's fp32 tiles for
# RegNet's groups of 24, 120 and 168), its output channels then padded to whole 16-lane vectors
# of the dot product (24 -> 32) (0: those groups stay fp32). Same-process A/Bs against 0 (Zen 4,
# session 103, `rule_ab.py M passes.grouped_conv.BF16_PADDED_GROUPS 0 --precision bf16`):
# regnet_x_1_6gf 1.248x, b8 1.401x; regnet_y_1_6gf 1.151x, regnet_y_3_2gf 1.128x,
# regnet_x_32gf 1.085x, regnet_x_8gf 1.047x; groups of 16, 48 and 56 level (regnet_x_800mf,
# regnet_x_3_2gf, regnet_y_8gf).
BF16_PADDED_GROUPS = 1
# ... and so do groups of 8 channels (regnet_y_400mf's) where half vectors run at the full rate
# (Zen 4), their weights packed in one block of 8 pairs per step, a 256-bit dot product per
# step (``bf16.DOT_8x2``; 0: they stay fp32).
BF16_HALF_GROUPS = 1
# ... and the ``groups`` form (a vector over 16 or more groups: ResNeXt's groups of 4 and 8) over
# bf16 pairs of each group's input channels, its input in ``[Ci/2, G, 2]`` order (the dot product
# over two vector operands: ``bf16.DOT_16x2_BOTH``; 0: fp32).
BF16_GROUPS_INNER = 1
# 0 (for A/Bs): the groups form transposes its input to [Ci, G] in a kernel of its own.
PERMUTE_PRODUCER = 1
PER_CHANNEL = {"relax.add", "relax.multiply", "relax.subtract", "relax.maximum", "relax.minimum", "relax.nn.relu"}


def _ungrouped_nhwc(conv: Any) -> bool:
    a = conv.attrs
    return (int(a.groups) == 1 and a.data_layout == "NHWC" and a.kernel_layout == "HWIO"
            and a.out_layout == "NHWC" and static_shape(conv.args[1].ty) is not None)


def _varies(arg: Any) -> bool:
    """Whether an elementwise operand varies along the channels (not a scalar or all ones)."""
    shape = static_shape(arg.ty)
    return bool(shape) and shape[-1] != 1


def _per_channel(arg: Any, channels: int) -> bool:
    """A per-channel vector (``[1, 1, 1, C]``, ``[C]``) or a scalar: permuted with the channels."""
    shape = static_shape(arg.ty) if isinstance(arg.ty, relax.TensorType) else None
    return shape is not None and all(d == 1 for d in shape[:-1]) and (not shape or shape[-1] in (1, channels))


def _permute_last(emit: Any, t: Any, g: int, ci: int, pairs: bool = False) -> Any:
    """``t`` with its last axis of ``g * ci`` reordered from ``[G, Ci]`` to ``[Ci, G]`` (with
    ``pairs``, to ``[Ci/2, G, 2]``)."""
    shape = static_shape(t.ty)
    r = len(shape) - 1
    split = emit(relax.op.reshape(t, [*shape[:-1], g, ci // 2, 2] if pairs else [*shape[:-1], g, ci]))
    axes = list(range(r)) + ([r + 1, r, r + 2] if pairs else [r + 1, r])
    return emit(relax.op.reshape(relax.op.permute_dims(split, axes), shape))


def _prune(mutator_: Any, mod: Any) -> Any:
    """The module without the bindings the permuted producers left unused."""
    for gv, func in list(mod.functions.items()):
        if isinstance(func, relax.Function):
            mod[gv] = relax.analysis.remove_all_unused(func)
    return mod


def grouped_conv_nhwc(target: ResolvedTarget) -> Any:
    """The pass (after ConvertLayout, which gives NHWC/HWIO)."""
    lanes, half = vector_lanes(target.tvm(), 32), half_vectors_full_rate(target.tvm())
    bf16 = not amx.usable(target.tvm())  # (on AMX targets grouped convolutions stay fp32: no rule tiles them)
    return builder_pass(lambda mod: _Grouped(mod, lanes, half, bf16), "GroupedConvNHWC",
                        before=lambda m, f: setattr(m, "uses", use_counts(f)), after=_prune)
