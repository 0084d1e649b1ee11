"""WindowProject: a window reduction (a depthwise convolution) computed band by band inside the
1x1 projection it alone feeds, with the 1x1 expansion feeding the window when that is joined too
(the kernels ``passes/fuse_expansion.py`` joins: mobilenet_v2's and mnasnet1_0's inverted
residual blocks whole, and their first blocks, which expand nothing).

Each parallel task owns an image of the batch and a band of rows: it computes the expansion for
the rows the band's window reads (halo included; ExpandWindow's whole-channel tiles) or else the
band's zero-padded input rows, then the window for every channel of the band's rows (its
epilogue applied as the register tiles are written back), then the projection's register tiles
over the band: the expanded and the windowed tensors stay in L2. Unjoined, at batch 8 and 320
px, mnasnet1_0's first depthwise wrote a 26 MB tensor that its projection read back, the two
kernels at 21 % and 36 % of the FMA peak.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from tvmbench.compile import tiles
from tvmbench.compile.knobs import knob
from tvmbench.compile.rules import expand_window
from tvmbench.compile.rules.base import Rule, reduction_blocks, register_tile_loops, unroll_steps
from tvmbench.compile.rules.contraction import DEPTHWISE_REGISTERS, HELD_WINDOW_MIN_ROWS, UNROLL_DEPTH
from tvmbench.compile.tiles import accumulator_budget, largest_divisor, vector_lanes, vector_width
from tvmbench.compile.tir import as_int, buffer_shape, coefficient, dtype_bits

# A map width with no divisor from 4 up (a prime: 97 pixels at 193 px) gets predicated register
# tiles, as in the Contraction rule; 0: tiles of one pixel.
PREDICATED_ROWS = 1
# Output rows per task: the window's tile for them is rows x width x channels (10 KB per row of
# 80 columns x 32 channels).
BAND_ROWS = 4
# The projection's register tile as the Contraction rule scores tiles (``_projection_tile``);
# False: the most vectors that divide the channels, and the rows they leave. Changes only
# 16-register (AVX2) tiles of the zoo's joins; same-process A/Bs on the Zen 3 VM (session 79,
# `rule_ab.py M rules.window_project.SCORED_TILE False`): mobilenet_v2 1.050x [1.040-1.074] with
# BALANCED_BANDS (batch 1), 1.087x [1.075-1.096] at batch 8, mnasnet1_0 1.085x [1.078-1.091] at
# batch 8 and 320 px (its 20x20x96 joins: 4 x 3 -> 3 x 4).
SCORED_TILE = True
# ... but on 16 registers not a predicated tile of fewer than 4 rows where another vector count
# is legal: the scores take mnasnet1_0's 72 -> 24 projection over 49-pixel rows at batch 3 and
# 193 px (7 x 7: no divisor from 2 to 6) as 3 vectors x a predicated 3 rows (9/6 FMAs per load,
# less a fifth), and the joined kernel ran 1.47x slower alone than as 1 vector x 7 whole rows
# (Zen 3, session 81: 703 against 480 us). 32-register targets keep their tiles.
SHORT_PREDICATED_PROJECTION = False
# With an expansion joined and no whole-channel band, the band is the fewest rows whose halo is
# small enough and whose tasks (one per image and band) keep the cores busy
# (``expand_window.WHOLE_BALANCE``): a 28-row map at batch 1 on 2 cores in bands of 4 is 7 tasks,
# 4 rounds of which the last runs on one core; in bands of 7, 4 tasks in 2 rounds (mobilenet_v2's
# join alone on the Zen 3 VM: 175 -> 146 us; the model 1.016x [0.995-1.031], session 79). False:
# the fewest rows whose halo is small enough.
BALANCED_BANDS = True
# The window's weights stay in registers across its tile (one per tap and vector) only where
# they leave a tile of HELD_WINDOW_MIN_ROWS columns, as in the Contraction rule; else the tile is
# a plain one (up to two vectors, as many columns as the accumulators allow) loading the weights
# per tap. On 16 registers a 5x5 window held left a tile of one column and one vector:
# mnasnet1_0's joined 5x5 blocks at batch 3 and 193 px ran 1.28x faster alone with 5 columns
# (Zen 1, session 111). Same-process A/Bs (`rule_ab.py mnasnet1_0
# rules.window_project.LOADED_WINDOW_WEIGHTS 0`, Zen 1): batch 3 at 193 px 1.030x
# [1.022-1.039], batch 8 1.020x [1.011-1.023], batch 8 at 320 px 1.036x [1.027-1.039]. No
# kernel changes at batch 1 at 224 px, nor on 32 registers for windows up to 5x5. 0: held always.
LOADED_WINDOW_WEIGHTS = 1


@dataclass
class _Joined:
    sch: Any
    window: Any  # the window reduction's block
    padded: Any  # the block computing the window's padded input (the expansion's epilogue), if any
    between: Any  # the window's elementwise epilogue (the tensor the projection reads), if any
    dot: Any  # the 1x1 convolution's block
    epilogue: Any  # the projection's elementwise consumer, if any
    shape: list[int]  # the projection's NHWC output (any batch)
    channels: int  # the window's channels
    lanes: int  # vector width over the projection's channels
    window_lanes: int  # over the window's
    window_kinds: str
    dot_kinds: str
    expansion: Any = None  # the 1x1 expansion computing the window's input, when joined too


class WindowProject(Rule):
    """A window reduction computed band by band inside the 1x1 projection it feeds."""

    reductions = (2, 3)

    def schedule(self, func: Any, target: Any) -> Any:
        joined = match(func, target)
        if joined is None:
            return None
        task = tile_projection(joined, target)
        tile_window(joined, task, target)
        return joined.sch


def match(func: Any, target: Any) -> _Joined | None:
    """A window over NHWC (two reduction axes) and then a 1x1 convolution (one) that reads the
    window's rows and columns one to one, optionally after a 1x1 expansion feeding the window;
    elementwise blocks (the padding) before the window and after each reduction. Inlines every
    elementwise block but the last of each group."""
    found = reduction_blocks(func)
    if found is None or len(found[2]) not in (2, 3):
        return None
    sch, infos, reductions = found
    ie, (ia, ib) = (reductions[0] if len(reductions) == 3 else None), reductions[-2:]
    window_kinds, dot_kinds = infos[ia].dom_kind(), infos[ib].dom_kind()
    if window_kinds.count("R") != 2 or dot_kinds.count("R") != 1 \
            or (ie is not None and infos[ie].dom_kind().count("R") != 1):
        return None
    dot = infos[ib].block_rv
    shape = buffer_shape(sch.get(dot).writes[0].source)
    window_shape = buffer_shape(sch.get(infos[ia].block_rv).writes[0].source)
    if len(shape) != 4 or None in shape or len(window_shape) != 4 or None in window_shape \
            or window_shape[:3] != shape[:3] or not _one_to_one(sch.get(dot), dot_kinds):
        return None
    first = 0 if ie is None else ie + 1
    before, between, post = infos[first:ia], infos[ia + 1:ib], infos[ib + 1:]
    pre = infos[:ie] if ie is not None else []  # (the expansion's input copies)
    if any(not b.is_injective() for b in pre + before + post):
        return None
    bits = dtype_bits(sch.get(dot).writes[0].source.dtype)
    lanes, window_lanes = (vector_width(n, vector_lanes(target, bits)) for n in (shape[3], window_shape[3]))
    if lanes < 4 or window_lanes < 4:
        return None
    for info in pre + before[:-1] + between[:-1] + post[:-1]:
        sch.compute_inline(info.block_rv)
    return _Joined(sch, infos[ia].block_rv, before[-1].block_rv if before else None,
                   between[-1].block_rv if between else None, dot, post[-1].block_rv if post else None, shape,
                   window_shape[3], lanes, window_lanes, window_kinds, dot_kinds,
                   infos[ie].block_rv if ie is not None else None)


def _one_to_one(block: Any, kinds: str) -> bool:
    """Whether every operand the 1x1 convolution reads by row and column reads it at the
    output's row and column (no stride): the band's rows of the window are the band's rows."""
    spatial = [iv.var for iv, k in zip(block.iter_vars, kinds, strict=True) if k == "S"]
    h_var, w_var = spatial[-3], spatial[-2]
    for read in block.reads:
        if len(read.region) == 4 and not read.source.same_as(block.writes[0].source):
            h, w = (coefficient(read.region[i].min, v) for i, v in ((1, h_var), (2, w_var)))
            if (h or w) and (h, w) != (1, 1):
                return False
    return True


def tile_projection(joined: _Joined, target: Any) -> Any:
    """One parallel task per image and band of rows; the projection in register tiles of
    ``rows`` columns by ``vectors`` vectors of output channels, its reduction (the window's
    channels) unrolled by UNROLL_DEPTH. Returns the task loop."""
    sch, dot, lanes = joined.sch, joined.dot, joined.lanes
    loops = sch.get_loops(dot)
    *batch, h, w, o = [loop for loop, k in zip(loops, joined.dot_kinds, strict=True) if k == "S"]
    (reduce,) = [loop for loop, k in zip(loops, joined.dot_kinds, strict=True) if k == "R"]
    height, width, out_vectors = joined.shape[1], joined.shape[2], joined.shape[3] // lanes
    budget = accumulator_budget(target)
    legal_vectors = [v for v in range(1, 5) if out_vectors % v == 0]  # (24 channels: 3 vectors of 8)
    vectors = knob("vectors", _projection_tile(width, legal_vectors, target)[0], legal_vectors)
    # (as many rows as the Contraction rule's tiles: alone, mnasnet1_0's joined kernel at batch 8
    # and 320 px took 2945 us with its 5 rows of 16 channels, 2983 with 10, 3530 with 16)
    default_rows = _projection_tile(width, [vectors], target)[1]
    rows = knob("rows", default_rows,
                [r for r in range(1, max(budget // vectors, 1) + 1) if width % r == 0 or r == default_rows])
    bands, default = expand_window.band_choices(height, BAND_ROWS)  # (a 7-row map is one band)
    if joined.expansion is not None:
        default = _expansion_band(joined, target, bands) or default
    band = knob("band_rows", default, [r for r in bands if r <= 2 * BAND_ROWS] or bands[:1] or [1])
    band_outer, band_in = sch.split(h, factors=[None, band])
    w_outer, w_in = sch.split(w, factors=[None, rows])
    o_outer, o_vec, o_lane = sch.split(o, factors=[None, vectors, lanes])
    sch.reorder(*batch, band_outer, band_in, w_outer, o_outer, reduce, w_in, o_vec, o_lane)
    task = sch.fuse(*batch, band_outer) if batch else band_outer
    sch.parallel(task)
    steps = unroll_steps(sch, reduce, UNROLL_DEPTH)
    register_tile_loops(sch, dot, w_in, o_vec, o_lane, o_outer, steps[0], lanes, joined.epilogue)
    return task


def _projection_tile(width: int, legal_vectors: list[int], target: Any) -> tuple[int, int]:
    """(vectors, rows) of the projection's register tile: with SCORED_TILE, the Contraction rule's
    choice among ``legal_vectors`` (``tiles.register_tile``: most FMAs per load, a predicated tile
    discounted, and on 16 registers capped where it would spill), else the most vectors and the
    rows they leave. On AVX2 the most vectors took mobilenet_v2's 32-channel projections over
    28-pixel rows as 4 vectors x a predicated 3 rows (12 accumulators, 4 weight vectors and the
    broadcast: 17 registers): the joined kernel ran 1.85x slower alone than as 2 x 4 or 4 x 2
    (Zen 3: 323 against 175 us)."""
    budget = accumulator_budget(target)
    if SCORED_TILE:
        def scored(choices: list[int]) -> tuple[int, int]:
            return tiles.register_tile(width, sorted(choices, reverse=True), budget,
                                       tiles.predicated_percent(budget, True), most_rows=tiles.max_rows(target))

        vectors, rows = scored(legal_vectors)
        if not SHORT_PREDICATED_PROJECTION and budget <= tiles.MAX_ACCUMULATORS_16_REGS and width % rows \
                and rows < 4 and len(legal_vectors) > 1:
            return scored([v for v in legal_vectors if v != vectors])
        return vectors, rows
    vectors = max(legal_vectors)
    return vectors, _row_tile(width, min(tiles.max_rows(target), max(budget // vectors, 1)), vectors)


def _expanded(joined: _Joined) -> expand_window.Joined:
    """The expansion and the window as ExpandWindow describes a joined pair."""
    return expand_window.Joined(joined.sch, joined.expansion, joined.window, joined.padded, None, joined.shape,
                                joined.window_lanes, joined.window_kinds)


def _expansion_band(joined: _Joined, target: Any, bands: list[int]) -> int | None:
    """With an expansion joined, a band recomputes it for the window's halo: ExpandWindow's
    whole-channel band (its halo at most WHOLE_HALO of the band's rows, tasks spread evenly), else
    the fewest rows with that halo whose tasks keep the cores busy (BALANCED_BANDS), else the
    fewest with that halo, else the whole map. Bands of 2 rows over a 5x5 window computed
    the expansion up to 3 times over (mnasnet1_0's, at batch 8 and 320 px: the model 0.91x)."""
    ew = _expanded(joined)
    band = expand_window._whole_band(ew, target)
    if band is not None:
        return band
    kernel, stride = expand_window._window_rows(ew)
    if kernel is None:
        return None
    fit = [b for b in bands if b * stride + kernel - stride <= expand_window.WHOLE_HALO * b * stride]
    even = [b for b in fit if BALANCED_BANDS and expand_window.balanced(joined.shape[0] * joined.shape[1] // b, target)]
    return (even or fit)[0] if fit else (bands[-1] if bands else None)


def tile_window(joined: _Joined, task: Any, target: Any) -> None:
    """The window computed inside each task for the band's rows and every channel, in register
    tiles of columns x vectors of channels with the window unrolled; as many columns as leave
    registers for the window's weights (the Contraction rule's depthwise tiles), or, where those
    would be fewer than HELD_WINDOW_MIN_ROWS, the weights loaded per tap (LOADED_WINDOW_WEIGHTS)."""
    sch, window, lanes = joined.sch, joined.window, joined.window_lanes
    if joined.between is not None:
        sch.compute_at(joined.between, task, preserve_unit_loops=True)
    sch.compute_at(window, task, preserve_unit_loops=True)
    if joined.expansion is not None:  # the expansion's rows the band reads, halo included
        expand_window.tile_whole_expansion(_expanded(joined), task, accumulator_budget(target), tiles.max_rows(target))
    elif joined.padded is not None:
        sch.compute_at(joined.padded, task, preserve_unit_loops=True)
        _, lane = sch.split(sch.get_loops(joined.padded)[-1], factors=[None, lanes])
        sch.vectorize(lane)
    loops = sch.get_loops(window)[-5:]  # (rows, columns, channels, window rows, window columns)
    h, w, c, kh, kw = loops
    taps = (as_int(sch.get(kh).extent) or 1) * (as_int(sch.get(kw).extent) or 1)
    width = as_int(sch.get(w).extent) or 1
    channel_vectors = joined.channels // lanes
    legal_vectors = [v for v in (1, 2, 4) if channel_vectors % v == 0]
    # (16 vector registers on AVX2, where two vectors' taps alone would fill them)
    registers = DEPTHWISE_REGISTERS if accumulator_budget(target) == tiles.MAX_ACCUMULATORS else 16
    least = HELD_WINDOW_MIN_ROWS if LOADED_WINDOW_WEIGHTS else 2
    held = [v for v in legal_vectors if v <= 2 and (registers - 2) // v - taps >= least]
    if held or not LOADED_WINDOW_WEIGHTS:
        vectors = knob("window_vectors", max(held or [1]), legal_vectors)
        most = min(tiles.max_rows(target), max((registers - 2) // vectors - taps, 1))
    else:  # (the weights loaded per tap)
        vectors = knob("window_vectors", max(v for v in legal_vectors if v <= 2), legal_vectors)
        most = min(tiles.max_rows(target), max(accumulator_budget(target) // vectors, 1))
    rows = knob("window_rows", _row_tile(width, most, vectors),
                [r for r in range(1, tiles.MAX_ROWS + 1) if width % r == 0 or r == _row_tile(width, most, vectors)])
    w_outer, w_in = sch.split(w, factors=[None, rows])
    c_outer, c_vec, c_lane = sch.split(c, factors=[None, vectors, lanes])
    sch.reorder(h, w_outer, c_outer, kh, kw, w_in, c_vec, c_lane)
    sch.unroll(kh)
    sch.unroll(kw)
    register_tile_loops(sch, window, w_in, c_vec, c_lane, c_outer, kh, lanes, joined.between)


def _row_tile(width: int, limit: int, vectors: int) -> int:
    """Columns per register tile: the largest divisor of the map's width up to ``limit``, else
    (a prime width: 97 pixels at 193 px) a predicated tile of 4 to 7 (``tiles.row_tile``) when
    ``PREDICATED_ROWS``, not tiles of one pixel."""
    rows, predicated = tiles.row_tile(width, limit, vectors)
    return rows if PREDICATED_ROWS or not predicated else largest_divisor(width, limit)
