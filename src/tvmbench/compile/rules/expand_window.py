"""ExpandWindow: a 1x1 convolution computed band by band inside the window reduction it feeds
(the kernels ``passes/fuse_expansion.py`` joins).

Each parallel task owns an image of the batch, a block of channels and a band of the window's
output rows; it computes the convolution for the rows the band reads (halo included), applies its
epilogue and padding, then the window, all on a tile of some hundred KB that stays in L2.
Unfused, mobilenet_v2's
16->96 expansion at 112x112 wrote 4.8 MB at 68 GFLOP/s, bound by memory, and the depthwise
convolution read it all back.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from tvmbench.compile import bf16, tiles
from tvmbench.compile.knobs import knob
from tvmbench.compile.rules.base import Rule, reduction_blocks, register_tile_loops
from tvmbench.compile.tiles import accumulator_budget, largest_divisor, vector_lanes, vector_width
from tvmbench.compile.tir import as_int, buffer_shape, coefficient, dtype_bits, is_copy, pair_step, uses

# Output rows of the window reduction per tile of the fused kernel: the expansion is recomputed
# for the window's halo, (rows * stride + k - stride) / (rows * stride) of it.
FUSED_BAND_ROWS = 8
# Each task computes the expansion for all channels of its band at once (a register tile of
# several vectors of channels, every input value broadcast once for all of them) instead of one
# cache line of channels per task (one FMA per broadcast, the input read once per channel block),
# in bands of ``_whole_band`` rows. None: wherever such bands exist and keep the cores busy;
# True/False: always/never (tuning's knob). Timed alone at batch 8 and 320 px (Xeon host, 2
# threads), every joined kernel of mobilenet_v2 and mnasnet1_0 ran 1.07-1.9x faster this way
# (mobilenet_v2's 20x20 576-channel join 3896 -> 2122 us, mnasnet1_0's 3834 -> 2050); with bands of 8
# rows (the default's) several ran slower than the default (mobilenet_v2's 40x40 192-channel
# join 2870 -> 3173 us).
WHOLE_CHANNELS: bool | None = None
# Whole-channel bands: at least this many output rows, and the expansion recomputed for the halo
# at most WHOLE_HALO times the band's own rows (a 5x5 window at stride 1 takes bands of 8: 12
# rows computed per 8; bands of 4 computed 8 per 4 and ran mnasnet's 40x40 join 1642 against
# 1391 us).
WHOLE_MIN_ROWS = 4
WHOLE_HALO = 1.5
# ... and bands of at least WHOLE_LONG_ROWS where those leave WHOLE_LONG_TASKS tasks or more (0: the
# fewest rows from WHOLE_MIN_ROWS everywhere). Timed alone (Zen 4, bf16, batch 8), mnasnet1_0's
# 56x56 72-channel join ran 734 us in bands of 4 and 672 in bands of 8, its 28x28 one at stride 2
# 557 against 495-508 in bands of 7 or 14; at batch 1 mobilenet_v2's 112x112 join in bands of 7
# (16 tasks) ran the model 1.037x slower than in bands of 4 (28 tasks).
WHOLE_LONG_ROWS = 7
WHOLE_LONG_TASKS = 32
# Whole-channel tasks (one per image and band) must spread evenly over the cores: tasks / (cores
# x rounds of tasks) at least this (7 tasks on 2 cores: 7/8, declined; the cache-line tasks stay).
WHOLE_BALANCE = 0.9
# The widest expansion register tile, in vectors of channels.
MAX_EXPANSION_VECTORS = 6
# The whole-channel expansion's register tile holds at most this many accumulators (the
# contraction rule's 24 on 32-register targets): among the tiles within it, the one with most FMAs
# per load (``_expansion_tile``). Its reduction is short (16-192 input channels). Alone (Zen 4, 2
# threads, `benchmarks/kernels_alone.py MODEL '{"batch_size":8}' _conv2d '{}'
# '{"expansion_vectors":2,"expansion_rows":7}' ...`), tiles of 16-24 ran 1.2-1.3x slower than
# tiles of 10-14 on every join of mobilenet_v2 and mnasnet1_0 at 56-, 28- and 14-pixel rows
# (mobilenet_v2's 56x56x96: 3 x 4 2668 us, 2 x 7 2720, 6 x 4 3362, 2 x 8 3373; mnasnet1_0's
# 56x56x48: 3 x 4 1318, 3 x 8 1715); on 7-pixel rows, where 6 vectors left one row, 2 x 7 ran
# 2x faster (mobilenet_v2's 7x7x960 1237 -> 645 us, mnasnet1_0's 7x7x1152 1870 -> 918).
EXPANSION_ACCUMULATORS = 14
# ... and on targets with 16 vector registers (AVX2), this many: 14 accumulators, their weight
# vectors and the broadcast are more than 16 registers hold. Same-process A/Bs on the Zen 3 VM
# (`benchmarks/rule_ab.py M rules.expand_window.EXPANSION_ACCUMULATORS 8 --block 5 --runs 300`,
# session 76): mobilenet_v2 1.057x at batch 1 (6: 1.035x), 1.126x at batch 8; mnasnet1_0 level
# (0.995x [0.974-1.009]); Droplet had found the joined expansions 1.24-2.05x faster in the model.
# 10, not 8 (session 83): on 10-, 20-, 40- and 80-pixel rows (maps at 160 and 320 px) 8 left 4
# vectors x 2 rows (8 FMAs per 6 loads) where 10 takes 2 x 5 (10 per 7; 13 registers with the
# weights and the broadcast): mnasnet1_0's 10x10x1152 joins at batch 8 and 320 px alone 3461 ->
# 2863 us, 3725 -> 2825. A/Bs (`rule_ab.py M rules.expand_window.EXPANSION_ACCUMULATORS_16_REGS
# 10 --block 3 --runs 150`, Zen 3): mnasnet1_0 b8 320 px 1.077x [1.053-1.119], efficientnet_b0
# and mobilenet_v3_large b8 320 px 1.032x / 1.030x, mobilenet_v2 b8 320 px 1.015x, b3 193 px
# 1.013x; batch 1 at 224 and 160 px level (0.996-1.009x).
EXPANSION_ACCUMULATORS_16_REGS = 10


@dataclass
class Joined:
    sch: Any
    dot: Any  # the 1x1 convolution's block
    window: Any  # the window reduction's block
    padded: Any  # the block computing the window's padded input, if any
    epilogue: Any  # the window's elementwise consumer, if any
    shape: list[int]  # the window's NHWC output (any batch)
    lanes: int
    kinds: str  # the window's iterator kinds
    pairs: bool = False  # the convolution's lanes x pairs of bf16 steps are blocks (``_pair_blocks``)


class ExpandWindow(Rule):
    """A 1x1 convolution computed band by band inside the window reduction it feeds."""

    reductions = (2, 2)

    def schedule(self, func: Any, target: Any) -> Any:
        joined = match(func, target)
        if joined is None:
            return None
        # A cache line of channels (16 fp32) per task and per register tile: one AVX-512 vector,
        # two AVX2 ones. Three AVX-512 vectors (48 channels, 24 accumulators) ran mobilenet_v2's
        # three joined kernels 1.3-1.4x slower alone and the model 1.07-1.10x slower; for AVX2,
        # one vector instead of two was 1.03-1.18x slower alone.
        line_vectors = max(1, 512 // (joined.lanes * dtype_bits(joined.sch.get(joined.window).writes[0].source.dtype)))
        legal = [v for v in sorted({1, 2, 4, line_vectors}) if joined.shape[3] % (v * joined.lanes) == 0]
        vectors = knob("vectors", next(v for v in (line_vectors, 1) if v in legal), legal)
        budget = max(accumulator_budget(target) // vectors, 1)
        rows = knob("rows", largest_divisor(joined.shape[2], min(tiles.MAX_ROWS, budget)),
                    [r for r in range(1, min(tiles.MAX_ROWS, budget) + 1) if joined.shape[2] % r == 0])
        band = _whole_band(joined, target)
        whole = knob("whole_channels", band is not None if WHOLE_CHANNELS is None else bool(WHOLE_CHANNELS),
                     [False, True])
        task = tile_window(joined, vectors, rows, whole, band)
        if whole:
            tile_whole_expansion(joined, task, accumulator_budget(target), tiles.max_rows(target))
        else:
            tile_expansion(joined, task, vectors, rows)
        return joined.sch


def match(func: Any, target: Any) -> Joined | None:
    """Two reductions, the second an NHWC window over (rows, columns, channels) whose channels are
    whole vectors; copies before the first, elementwise blocks after each. Inlines the copies and
    every elementwise block but the last of each group (the padding and the epilogue)."""
    found = reduction_blocks(func)
    if found is None or len(found[2]) != 2:
        return None
    sch, infos, (ia, ib) = found
    window = infos[ib].block_rv
    out = sch.get(window).writes[0].source
    shape = buffer_shape(out)
    if len(shape) != 4 or None in shape:
        return None
    # Channels in whole vectors, half or quarter ones where the target's do not divide them
    # (mnasnet's 72 channels on AVX-512: 8-lane vectors; declined, the joined kernel had run the
    # fallback schedule, 20x slower than the peers at 320 px).
    lanes = vector_width(shape[3], vector_lanes(target, dtype_bits(out.dtype)))
    kinds = infos[ib].dom_kind()
    block = sch.get(window)
    # (normalize_prim_func drops the batch loop when the batch is 1)
    spatial_vars = [str(iv.var) for iv, k in zip(block.iter_vars, kinds, strict=True) if k == "S"]
    if (kinds.count("R") != 2 or lanes < 4 or len(spatial_vars) != 3 + (shape[0] > 1)
            or spatial_vars != [str(r.min) for r in block.writes[0].region[4 - len(spatial_vars):]]):
        return None  # not an NHWC window over ([batch,] rows, columns, channels)
    mid, post = infos[ia + 1:ib], infos[ib + 1:]
    if any(not is_copy(sch.get(b.block_rv)) for b in infos[:ia]) or any(not b.is_injective() for b in post):
        return None
    for info in infos[:ia]:  # the 1x1 convolution's input copy
        sch.compute_inline(info.block_rv)
    # The convolution's epilogue joins the window's padding: one block computing the padded,
    # activated tile the window reads.
    for info in mid[:-1] + post[:-1]:
        sch.compute_inline(info.block_rv)
    return Joined(sch, infos[ia].block_rv, window, mid[-1].block_rv if mid else None,
                   post[-1].block_rv if post else None, shape, lanes, kinds)


def _whole_band(joined: Joined, target: Any) -> int | None:
    """Output rows per band for whole-channel tasks: the fewest, from WHOLE_MIN_ROWS (from
    WHOLE_LONG_ROWS where WHOLE_LONG_TASKS remain), that divide the height with the halo at most
    WHOLE_HALO; None when no such band exists or the tasks (one per image and band) would leave
    cores idle. Fewer rows keep the task's tile (all channels of
    the rows it reads) small: mobilenet_v2's 80x80 144-channel join ran 5544 us in bands of 4 and
    7170 in bands of 5."""
    height, batch = joined.shape[1], joined.shape[0]
    kernel, stride = _window_rows(joined)
    if kernel is None:
        return None
    fit = [b for b in range(WHOLE_MIN_ROWS, height + 1)
           if height % b == 0 and b * stride + kernel - stride <= WHOLE_HALO * b * stride]
    if not fit or not balanced(batch * height // fit[0], target):
        return None
    long = [b for b in fit if WHOLE_LONG_ROWS and b >= WHOLE_LONG_ROWS and batch * height // b >= WHOLE_LONG_TASKS
            and balanced(batch * height // b, target)]
    return long[0] if long else fit[0]


def balanced(tasks: int, target: Any) -> bool:
    """Whether ``tasks`` parallel tasks keep the target's cores busy: tasks / (cores x rounds of
    tasks) at least WHOLE_BALANCE."""
    cores = int(target.attrs.get("num-cores") or 1)
    return tasks / (-(-tasks // cores) * cores) >= WHOLE_BALANCE


def _window_rows(joined: Joined) -> tuple[int | None, int]:
    """The window's height and stride over rows (None when its reads do not show them)."""
    block = joined.sch.get(joined.window)
    spatial = [iv for iv, k in zip(block.iter_vars, joined.kinds, strict=True) if k == "S"]
    h_var = spatial[-3].var
    kh = next(iv for iv, k in zip(block.iter_vars, joined.kinds, strict=True) if k == "R")
    for read in block.reads:
        if len(read.region) == 4 and uses(read.region[1].min, kh.var):
            stride = coefficient(read.region[1].min, h_var)
            return (as_int(kh.dom.extent), stride) if stride and stride > 0 else (None, 1)
    return None, 1


def band_choices(height: int, most: int) -> tuple[list[int], int]:
    """The bands of output rows a joined kernel may take (those that divide the height, from 2
    rows) and the default among them: the most rows up to ``most``, else the fewest (a prime
    height is one band). A band of 1 fails to schedule on a stride-1 window, and the kernel falls
    back to DLight's reduction rule, which recomputes the expansion per window tap: mnasnet1_0's
    joins at batch 8 and 320 px ran for minutes, and a 13-row map (mnasnet1_0 at 193 px, batch 3,
    where no band of 2-8 rows divides 13) took 86 ms, and 1.0 ms as one band."""
    bands = [r for r in range(2, height + 1) if height % r == 0]
    return bands, max([r for r in bands if r <= most], default=bands[0] if bands else 1)


def tile_window(joined: Joined, vectors: int, rows: int, whole: bool = False, whole_band: int | None = None) -> Any:
    """One parallel task per image, channel block and band of output rows (``whole``: per image and
    band, the channel blocks inside, in bands of ``whole_band`` rows); the window's register tile is
    ``rows`` columns by ``vectors`` vectors. Returns the task loop."""
    sch, window, lanes = joined.sch, joined.window, joined.lanes
    loops = sch.get_loops(window)
    *batch, h, w, c = [loop for loop, k in zip(loops, joined.kinds, strict=True) if k == "S"]
    reduce = [loop for loop, k in zip(loops, joined.kinds, strict=True) if k == "R"]
    c_outer, c_vec, c_lane = sch.split(c, factors=[None, vectors, lanes])
    bands, default = band_choices(joined.shape[1], FUSED_BAND_ROWS)
    default = whole_band if whole and whole_band else default
    band_rows = knob("band_rows", default, [r for r in bands if r <= max(2 * FUSED_BAND_ROWS, default)] or [default])
    band_outer, band = sch.split(h, factors=[None, band_rows])
    w_outer, w_inner = sch.split(w, factors=[None, rows])
    if whole:
        sch.reorder(*batch, band_outer, c_outer, band, w_outer, *reduce, w_inner, c_vec, c_lane)
        task = sch.fuse(*batch, band_outer)
    else:
        sch.reorder(*batch, c_outer, band_outer, band, w_outer, *reduce, w_inner, c_vec, c_lane)
        task = sch.fuse(*batch, c_outer, band_outer)
    sch.parallel(task)
    register_tile_loops(sch, window, w_inner, c_vec, c_lane, w_outer, reduce[0], lanes, joined.epilogue)
    return task


def _expansion_at(joined: Joined, task: Any) -> list[Any]:
    """The padded input (vectorised) and the 1x1 convolution moved inside each task; returns the
    convolution's row, column, channel and reduction loops (after the image's unit loop; over bf16
    pairs, ``_pair_blocks``, the channels' loop steps by the dot product's 16 lanes)."""
    sch = joined.sch
    if joined.padded is not None:
        sch.compute_at(joined.padded, task, preserve_unit_loops=True)
        _, lane = sch.split(sch.get_loops(joined.padded)[-1], factors=[None, joined.lanes])
        sch.vectorize(lane)
    _pair_blocks(joined)
    sch.compute_at(joined.dot, task, preserve_unit_loops=True)
    return list(sch.get_loops(joined.dot)[-4:])


def _pair_blocks(joined: Joined) -> None:
    """Over bf16 weights packed in pairs (``--precision bf16``, ``bf16_dense.BF16_JOINED_EXPANSIONS``):
    the 1x1 convolution's 16 lanes x 2 reduction steps (8 lanes where PackWeights packed three half
    vectors: ``bf16_dense.BF16_HALF_EXPANSIONS``) made a block of their own (``joined.dot``
    becomes the block around them) before it moves into the tasks, for ``register_tile`` to put on
    ``vdpbf16ps`` (``compile/bf16.py``). Blockized after the move, under the predicate the clipped
    halo rows give the convolution, TVM's blockize bound the rows wrongly (bands of 7 rows computed
    as if of 9) and tensorize refused the block."""
    sch, dot = joined.sch, joined.dot
    if joined.lanes not in (bf16.LANES, bf16.LANES // 2) or not any(pair_step(r) is not None for r in sch.get(dot).reads):
        return
    *_, channels, reduce = [loop for loop in sch.get_loops(dot) if (as_int(sch.get(loop).extent) or 0) > 1]
    vec, lane = sch.split(channels, factors=[None, joined.lanes])
    step, pair = sch.split(reduce, factors=[None, 2])
    sch.reorder(vec, step, lane, pair)
    joined.dot, joined.pairs = sch.blockize(lane), True


def _lanes(joined: Joined) -> list[int]:
    """The split factor of the lanes in the convolution's channel loop (none over bf16 pairs)."""
    return [] if joined.pairs else [joined.lanes]


def tile_expansion(joined: Joined, task: Any, vectors: int, rows: int) -> None:
    """The padded input and the 1x1 convolution computed inside each task, for the rows its band
    reads, the convolution in the same register tile shape as the window."""
    sch = joined.sch
    d_rows, d_cols, d_channels, d_reduce = _expansion_at(joined, task)
    d_outer, d_inner = sch.split(d_cols, factors=[None, largest_divisor(as_int(sch.get(d_cols).extent) or 1, rows)])
    d_vec, *d_lane = sch.split(d_channels, factors=[vectors, *_lanes(joined)])
    register_tile(joined, task, [d_rows, d_outer], d_reduce, d_inner, d_vec, d_lane)


def tile_whole_expansion(joined: Joined, task: Any, budget: int, most_rows: int) -> None:
    """The padded input and the 1x1 convolution computed inside each task for all channels of the
    rows its band reads, in ``_expansion_tile``'s register tile (tuning may go up to ``budget``
    accumulators)."""
    sch, lanes = joined.sch, joined.lanes
    d_rows, d_cols, d_channels, d_reduce = _expansion_at(joined, task)
    channel_vectors = (as_int(sch.get(d_channels).extent) or lanes) // (1 if joined.pairs else lanes)
    cols = as_int(sch.get(d_cols).extent) or 1
    most = expansion_accumulators(budget)
    vectors = knob("expansion_vectors", _expansion_tile(channel_vectors, cols, most_rows, most)[0],
                   [v for v in range(1, MAX_EXPANSION_VECTORS + 1) if channel_vectors % v == 0])
    limit = min(tiles.MAX_ROWS, max(budget // vectors, 1))  # (tuning's range)
    rows = knob("expansion_rows", _expansion_rows(vectors, cols, most_rows, most),
                [r for r in range(1, limit + 1) if cols % r == 0])
    d_outer, d_inner = sch.split(d_cols, factors=[None, rows])
    d_block, d_vec, *d_lane = sch.split(d_channels, factors=[None, vectors, *_lanes(joined)])
    register_tile(joined, task, [d_rows, d_outer, d_block], d_reduce, d_inner, d_vec, d_lane)


def register_tile(joined: Joined, task: Any, outer: list[Any], reduce: Any, rows: Any, vecs: Any,
                  lane: list[Any]) -> None:
    """The 1x1 convolution's register tile (``rows`` x ``vecs`` x ``lane``) under the ``outer``
    loops, the last of which holds the tile; over bf16 pairs (no ``lane`` loop: ``_pair_blocks``)
    each vector's block becomes one ``vdpbf16ps`` (of 256 bits over 8 lanes), as in the contraction
    rule's tiles."""
    sch, dot = joined.sch, joined.dot
    sch.reorder(*outer, reduce, rows, vecs, *lane)
    register_tile_loops(sch, dot, rows, vecs, lane[0] if lane else None, outer[-1], reduce, joined.lanes, None)
    if joined.pairs:
        bf16.register()
        sch.tensorize(sch.get_loops(sch.get_child_blocks(dot)[0])[-2],
                      bf16.DOT_16x2 if joined.lanes == bf16.LANES else bf16.DOT_8x2)
        sch.annotate(task, "pragma_import_llvm", bf16.LLVM_IR)


def expansion_accumulators(budget: int) -> int:
    """The whole-channel expansion tile's accumulators at most, for a target whose register
    tiles may hold ``budget`` (``tiles.accumulator_budget``)."""
    return EXPANSION_ACCUMULATORS if budget >= tiles.MAX_ACCUMULATORS else EXPANSION_ACCUMULATORS_16_REGS


def _expansion_tile(channel_vectors: int, cols: int, most_rows: int,
                    accumulators: int = EXPANSION_ACCUMULATORS) -> tuple[int, int]:
    """(vectors, rows) of the whole-channel expansion's register tile: vectors dividing the
    channels (at most MAX_EXPANSION_VECTORS), each with ``_expansion_rows``; the most FMAs per load
    (``rows * vectors / (rows + vectors)``), then the most vectors (fewer passes over the input)."""
    options = [(v, _expansion_rows(v, cols, most_rows, accumulators))
               for v in range(1, min(MAX_EXPANSION_VECTORS, accumulators) + 1) if channel_vectors % v == 0]
    return max(options, key=lambda t: (t[0] * t[1] / (t[0] + t[1]), t[0]))


def _expansion_rows(vectors: int, cols: int, most_rows: int, accumulators: int = EXPANSION_ACCUMULATORS) -> int:
    """The expansion tile's rows over ``vectors``: the largest divisor of the columns within
    ``accumulators`` and ``most_rows``."""
    return largest_divisor(cols, max(min(most_rows, accumulators // vectors), 1))
