"""Register-tile and vector-width arithmetic, shared by the passes that lay weights out and the
rules that schedule the kernels reading them: a packed weight block is one register tile's panel,
so both sides must compute the same numbers from the same target.

No TVM import at module level; ``target`` arguments are ``tvm.target.Target`` objects except in
:func:`weight_block`, which takes tvmbench's ``ResolvedTarget``.
"""

from __future__ import annotations

from typing import Any

from tvmbench.targets import ResolvedTarget, has_feature

# Accumulator budget: AVX-512 and NEON have 32 vector registers, AVX2 16; leave room for the
# operand loads and the broadcast. A tile beyond the register file spills every accumulator on
# every reduction step: resnet18 built for AVX2 with the 32-register tile ran its convolutions at
# 80 GFLOP/s, against 158 for the AVX-512 build on the same Zen 4 cores (equal FMA throughput).
MAX_ACCUMULATORS = 24
MAX_ACCUMULATORS_16_REGS = 12
# A predicated tail tile's worth against a whole one (its predicate sits in every tile's inner
# loop: ViT's 197-row dense layers ran ~20 % slower than at 200 rows).
PREDICATED_TILE_PERCENT = 80
# ... and for a plain dot product over channels (a 1x1 convolution): on AVX2, resnet50's 1x1
# convolutions on 14x14 maps ran 1.08x faster end to end as one vector over 7 rows than as two
# vectors over a predicated 6, while resnet18's 3x3 ones lost 3 % (same-process A/Bs).
PREDICATED_DOT_TILE_PERCENT = 50
# ... but on 16 registers, measured again with today's rules (session 76, Zen 3 VM, AVX2), the
# predicated two-vector tile won: `benchmarks/rule_ab.py M tiles.PREDICATED_DOT_TILE_PERCENT 80`
# gave resnet50 1.10x [1.05-1.16] and resnet18 1.06x [1.03-1.09] end to end (Winograd products over
# 49 tiles as 2 vectors x a predicated 5 rows instead of 1 x 7: 1.18-1.25x alone). The 50 stays
# for 32-register targets, where it was never measured against.
PREDICATED_DOT_TILE_PERCENT_16_REGS = 80
MAX_ROWS = 8
# ... and on AMD Zen 4 (mcpu znver4), 7: there a tile of 8 rows x 2 vectors ran slower than 7 or
# 4 rows even where 8 divides the map (alone, resnet50's convolutions over 56-pixel rows: 1x1
# 64 -> 64 174 us at 8 rows against 122 at 7, 1x1 64 -> 256 821 against 553, the stem 1352
# against 1136), with no more spills in its code. Not measured on other CPUs, which keep 8.
# (Probably the 8 x 2 tile's 1024-byte accumulator buffer, which TVM put in its workspace pool
# until passes/stack_buffers.py; not measured again on Zen 4 since.)
ZEN4_MAX_ROWS = 7
# A predicated tile has at most this many rows. At 8 rows x 2 vectors (16 accumulators, 8
# broadcasts per reduction step) the conditional row's accumulator no longer fits the registers:
# LLVM keeps it in memory and spills the broadcasts, where at 7 rows it keeps the conditional rows
# in registers. Alone (Zen 4, squeezenet1_1 b8 at 160 px, 39-pixel rows): its 3x3 expand
# convolutions 1.50 against 1.05 ms (8 rows against 7), its 1x1 squeeze and expand ones 0.57
# against 0.48 and 0.26 against 0.24 ms; the stem over 79 pixels 0.97 against 0.90 ms.
PREDICATED_MAX_ROWS = 7
# ... and on 16 registers (AVX2) a predicated tile holds at most this many accumulators where
# that computes at most PREDICATED_SPARE_ROWS more rows than the wider tile. As 2 vectors x 6
# rows (12) LLVM spilled the accumulators around the conditional rows (26 stores and 18 loads of
# ymm registers to the stack in the reduction loop) where a whole 2 x 6 tile, or a predicated
# 2 x 5, spills none: inception_v3's Winograd products over 37 x 37 tiles (1369 rows, no divisor)
# ran 2 x 5 1.9x faster alone than 2 x 6 (Zen 3: 2529 against 4876 us over 32 channels, 3577
# against 8145 over 64). Where the narrower tile computes more rows (17: 20 against 18) the wider
# one won: capping every predicated tile cost inception_v3 (its 17 x 17 maps) 6.5 % end to end.
PREDICATED_ACCUMULATORS_16_REGS = 10
PREDICATED_SPARE_ROWS = 0.03
# ... and at most this many where the tile's window is unrolled whole (a stem's 3x3x3): the taps'
# broadcasts and the conditional rows' accumulators then outgrow the registers at 10. mobilenet_v2's
# stem at batch 3 and 193 px (97-pixel rows, no divisor) as 2 vectors x a predicated 5 rows stored
# 198 ymm registers to the stack, as 2 x 4 none: alone (Zen 3, session 81) 528 against 361 us;
# its 3x3 depthwise convolution over the same rows 288 against 273 us, inception_v3's stem (149-pixel
# rows) 257 against 248. 9, not 8: shufflenet's stem over 24 channels at batch 3 (3 vectors x a
# predicated 3 rows) ran 316 us, 358 as 3 x 2.
PREDICATED_WINDOW_ACCUMULATORS_16_REGS = 9
# ... and on 16 registers a predicated tile competes with a whole tile of 3 rows where 3 is the
# largest divisor under 4 (``row_tile`` offers only the predicated one there): the whole tile is
# taken where its FMAs per load beat the predicated tile's with its discount. (Not 2 rows: 2 x 2
# holds 4 accumulators, too few to cover the FMAs' latency; not measured.)
# squeezenet1_1's stem over 111-pixel rows (3 x 37) as 2 vectors x 3 whole rows instead of a
# predicated 5 ran 1.46x faster alone (Zen 3, session 79: 451 against 658 us). Same-process A/Bs
# (`benchmarks/rule_ab.py M tiles.EXACT_ROWS_16_REGS False`): squeezenet1_1 1.040x [1.011-1.041]
# (batch 8 1.026x), alexnet 1.095x [1.085-1.121] (its 27-pixel rows; batch 8 1.288x), mobilenet_v2
# 1.015x and inception_v3 0.993x (intervals across 1). 32-register targets are unchanged.
EXACT_ROWS_16_REGS = True
# A tile of 4 vectors whose registers hold 3 rows (16 registers) takes them whole where 3 divides
# the row axis; ``row_tile`` called it predicated (no divisor from 4 up), which dropped the
# four-vector tile on 16 registers (32 registers give 4 vectors 6 rows: unchanged). bert-base at batch 3 and 77 tokens
# (231 rows = 3 x 7 x 11) then ran its dense layers as one vector x 11 rows: alone (Zen 3,
# session 81) 4 vectors x 3 whole rows took 1677 against 2188 us (768 -> 768), 6341 against 9063
# (768 -> 3072) and 7007 against 15885 (3072 -> 768; 11 rows 12 KB apart share one L1 set); in the
# model 1.655x [1.628-1.658] (`benchmarks/rule_ab.py bert-base-uncased tiles.WHOLE_ROWS_UNDER_4
# False --also rules.contraction.FEW_ROWS_WINDOWS_ONLY=False --batch-size 3 --seq-length 77`).
# Where two vectors have 4 whole rows or more they keep them (``rules.contraction.choose_tile``):
# densenet121's and googlenet's 1x1 convolutions over 12- and 24-pixel rows at batch 3 lost 1-2 %
# end to end as 4 x 3.
WHOLE_ROWS_UNDER_4 = True
# ... and so does a whole tile of 2 rows that spans the whole vector axis where it holds at least
# this many accumulators (3 vectors or more: 2 x 2 holds too few to cover the FMAs' latency) and
# is worth at least the predicated tile with its discount. RegNet's grouped 3x3 convolutions over
# 14x14 maps (groups of 24 channels: 3 vectors, 4 rows at most, 14 = 2 x 7) ran 3 vectors x a
# predicated 3 rows (15 rows computed for 14; worth 1.5 x 0.8 = 1.2) where 3 x 2 whole (worth
# 1.2, a tie) ran 1.06x faster alone (regnet_x_1_6gf, Zen 1, session 115: 560 against 594 us).
# Tiles of part of a wider axis keep the predicated tile: with them resnet50's Winograd product
# over 14x14 maps and a 1x1 convolution of mobilenet_v2 ran 0.77x and 0.76x as fast, resnet50
# 0.978x [0.977-0.982] (same-process A/B, session 115). 99: off (for A/Bs).
TWO_ROWS_ACCUMULATORS_16_REGS = 6


# AMD Zen 4 executes a 512-bit FMA as two 256-bit halves, two 256-bit FMAs per cycle: 8-lane
# vectors reach the same FLOP rate as 16-lane ones there (not on Intel's AVX-512 cores, with two
# 512-bit FMA units), so a layer of 72 channels may run as nine 8-lane vectors instead of six
# 16-lane ones of which 24 lanes are padding (``pack_weights.odd_vector_block``).
HALF_VECTORS_ZEN4 = True


# On AMD Zen 5 (mcpu znver5, full-width 512-bit FMAs) a tile of four vectors over the rows
# (``rules.contraction.SPAN_ALL``) pays only where it holds more accumulators than two vectors
# could: at equal accumulators two vectors x 8 rows beat four x 4 over long reductions. Alone
# (2 threads, 128 rows): bert-base's 3072 -> 768 dense 1.32 against 1.46 ms, bert-large's
# 4096 -> 1024 2.36 against 2.70 ms; the 768- and 1024-deep ones level (318 against 324 us).
# On the Xeon host four x 4 had won bert-base (1.040x / 1.021x), so other CPUs keep them.
TWO_VECTOR_TIES = ("znver5",)


def two_vector_ties(target: Any) -> bool:
    """Whether a four-vector tile must hold more accumulators than a two-vector one to be chosen
    on this target (TWO_VECTOR_TIES)."""
    return str(target.attrs.get("mcpu", "") or "") in TWO_VECTOR_TIES


def half_vectors_full_rate(target: Any) -> bool:
    """Whether half-width vectors reach the target's FMA peak (HALF_VECTORS_ZEN4)."""
    return HALF_VECTORS_ZEN4 and str(target.attrs.get("mcpu", "") or "") == "znver4"


# ... and on AMD Zen 5 (mcpu znver5) 7 where 7 divides the row axis, 8 elsewhere: same-process
# A/Bs of 7 rows everywhere (session 52) gave resnet50 1.016x / 1.027x and resnet18 1.013x /
# 1.017x, but bert-base 0.955x, whose 128 rows 7 does not divide (its tiles fell to 4 rows);
# 7 only where it divides: vgg16 1.06x, resnet50 1.03x (batch 8 1.05-1.06x), googlenet and
# densenet121 1.02-1.04x, bert-base level (docs/performance.md, "7-row tiles on Zen 5"). Judged
# again with every tile's accumulators on the stack (session 54): resnet50 0.98-0.99x, googlenet
# 0.98-1.00x, but vgg16 1.02-1.03x and resnet50 at batch 8 1.03x; kept.
SEVEN_ROWS_WHERE_THEY_DIVIDE = ("znver5",)


def max_rows(target: Any, rows_extent: int | None = None) -> int:
    """The most rows a register tile has on this target (MAX_ROWS, ZEN4_MAX_ROWS), over a row
    axis of ``rows_extent`` when given (SEVEN_ROWS_WHERE_THEY_DIVIDE)."""
    mcpu = str(target.attrs.get("mcpu", "") or "")
    if mcpu == "znver4":
        return ZEN4_MAX_ROWS
    if mcpu in SEVEN_ROWS_WHERE_THEY_DIVIDE and rows_extent and rows_extent % 7 == 0:
        return 7
    return MAX_ROWS


def vector_bits(target: Any) -> int:
    """The target's widest vector register. On x86 it comes from the ISA features: TVM 0.27's
    ``llvm_get_vector_width`` answers 512 for AVX2 CPUs (haswell, znver2/3) too, and a 16-lane
    fp32 tile is then split into ymm pairs, doubling every register tile past the 16 registers."""
    from tvm.target.codegen import llvm_get_vector_width

    for feature, bits in (("avx512f", 512), ("avx", 256), ("sse2", 128)):
        if has_feature(target, feature):
            return bits
    try:
        bits = int(llvm_get_vector_width(target))
    except Exception:
        bits = 128
    return bits if bits > 0 else 128


def vector_lanes(target: Any, dtype_bits: int) -> int:
    """Elements of ``dtype_bits`` in one of the target's vector registers."""
    return max(vector_bits(target) // dtype_bits, 1)


def accumulator_budget(target: Any) -> int:
    """Vector accumulators a register tile may hold on this target."""
    triple = str(target.attrs.get("mtriple", "") or "")
    if triple.startswith(("aarch64", "arm64")) or has_feature(target, "avx512f"):
        return MAX_ACCUMULATORS  # 32 vector registers (AArch64 NEON/SVE, AVX-512)
    return MAX_ACCUMULATORS_16_REGS


def sixteen_registers(target: Any) -> bool:
    """Whether the target has 16 vector registers (AVX2), not 32 (``accumulator_budget``)."""
    return accumulator_budget(target) <= MAX_ACCUMULATORS_16_REGS


# A tile of bf16 pairs has no predicated form (the dot product cannot run under a predicate:
# ``passes/pack_weights.whole_tiles`` computes extra columns instead). Where no tile from 4 to 8
# rows divides the row axis but one from LONG_PAIR_MIN_ROWS to 13 does (13-pixel rows: ResNet's
# 13x13 maps at 193 px, SqueezeNet's and AlexNet's at 224), a tile of bf16 pairs takes that many
# rows of two vectors: up to LONG_PAIR_ACCUMULATORS accumulators (26 of 32 registers, with the two
# weight vectors and the broadcast), where they were computed over whole tiles of extra columns
# and sliced off (13 as 14). Alone (Zen 5, resnet50 b3 193 px, 3x3 256 -> 256 over 13x13): 2 x 13
# 585 us against 661 over 14 columns in 2 x 7, one vector x 13 637 us. Same-process A/Bs of 0
# (`rule_ab.py M tiles.LONG_PAIR_ACCUMULATORS 0 --precision bf16`, session 97, Zen 5): resnet152
# b3 193 px 1.098x, resnet101 1.080x, resnet50 1.036x, alexnet b8 1.060x, b1 1.045x, squeezenet1_1
# b1 1.057x, inception_v3 1.020x, resnet18 b3 193 px, googlenet, squeezenet1_1 b8 level. 9 rows
# (27-pixel rows) against 13 only: alexnet 1.017x / 1.011x, squeezenet1_1 level. In fp32 (a
# predicated tile of 7 there, no padding) the 13-row tile measured 0.98-1.00x: pairs only. 0: no
# such tile.
LONG_PAIR_ACCUMULATORS = 26
LONG_PAIR_MIN_ROWS = 9


def long_pair_vectors(channels: int, lanes: int = 16) -> bool:
    """Whether a long tile of bf16 pairs could cover ``channels`` output channels (padded to
    their packed blocks): one vector, or whole pairs of vectors. At three (48 channels) 13 rows
    would not fit the registers, and a tile of pairs has no predicated rows to fall back on."""
    return channels == lanes or channels % (2 * lanes) == 0


def long_pair_rows(rows_extent: int) -> int | None:
    """Rows of a two-vector tile of bf16 pairs over ``rows_extent`` rows that no tile from 4 to
    8 rows divides (LONG_PAIR_ACCUMULATORS), else None."""
    if not LONG_PAIR_ACCUMULATORS or largest_divisor(rows_extent, MAX_ROWS) >= 4:
        return None
    rows = largest_divisor(rows_extent, LONG_PAIR_ACCUMULATORS // 2)
    return rows if rows >= max(LONG_PAIR_MIN_ROWS, MAX_ROWS + 1) else None


def largest_divisor(n: int, limit: int) -> int:
    """The largest divisor of ``n`` that is at most ``limit`` (1 at worst)."""
    for d in range(min(n, limit), 0, -1):
        if n % d == 0:
            return d
    return 1


def vector_width(extent: int, lanes: int) -> int:
    """Widest power-of-two vector (at most the target's lanes) that divides the axis exactly;
    a remainder would put a predicate inside the vector loop and defeat vectorisation."""
    width = lanes
    while width >= 4:
        if extent % width == 0:
            return width
        width //= 2
    return 1


def row_tile(rows_extent: int, limit: int, vectors: int = 2, most_rows: int = MAX_ROWS,
             under_4: bool = True, short: bool = False) -> tuple[int, bool]:
    """Rows of a register tile at most ``limit``: the largest divisor of the row extent, else
    (no divisor from 4 up) a predicated tail tile of at most PREDICATED_MAX_ROWS rows. Says
    whether it is predicated.

    A predicated tile computes its masked rows too, so its rows are the ones that waste least
    for their FMAs per load: 13 rows (squeezenet's 13x13 maps) as 7 + 6 instead of 8 + 5
    computes 14 rows instead of 16; its classifier's 1x1 convolution at batch 8 ran 1.42x faster
    (alone, 3.90 against 5.53 ms). Same-process A/Bs against always 8 rows (Xeon host):
    squeezenet1_1 1.13x at batch 1 and 8, inception_v3 1.08x at 299 px, 1.02x at 160 px.
    ``under_4``: whether four vectors may take 3 whole rows (WHOLE_ROWS_UNDER_4; a dot product's
    tile, ``rules.contraction.WINDOW_WHOLE_ROWS_UNDER_4``). ``short``: a row axis of at most
    MAX_ROWS that ``limit`` cannot cover whole takes the predicated tile too (SHORT_AXIS_VECTORS)."""
    cap = min(max(MAX_ROWS, most_rows), limit)
    rows = largest_divisor(rows_extent, cap)
    if rows < 4 and (rows_extent > MAX_ROWS or (short and rows_extent > cap >= 4)) and not (WHOLE_ROWS_UNDER_4 and under_4 and vectors == 4 and rows == cap == 3):
        def worth(r: int) -> float:
            return r * vectors / (r + vectors) * rows_extent / (-(-rows_extent // r) * r)

        return max(range(4, min(cap, PREDICATED_MAX_ROWS) + 1), key=lambda r: (worth(r), r), default=cap), True
    return rows, False


# A tile of this many vectors or more counts its weight vectors, which it holds through a
# reduction step, against the accumulator budget: regnet_y_16gf's grouped 3x3 convolutions over
# 28x28 maps (7 vectors of 16 lanes per group) ran 7 vectors x 3 rows (21 accumulators, 28
# registers with the weights) 1.4x slower than x 2 rows alone (Zen 5: 2838 against 1978 us); in
# the model 1.035x (regnet_y_8gf, regnet_x_16gf level). Only 7-vector tiles are this wide today,
# and where their weight panel outgrows L1 one vector over 14 rows beats both
# (``rules.contraction.FEW_ROWS``).
WEIGHTS_HELD_FROM = 6
# A tile of the whole vector axis, this many vectors or more, whose registers cannot hold a whole
# short row axis (at most MAX_ROWS) that no 4 or more divide takes a predicated tile over it, not
# one row: on 16 registers (AVX2) RegNet's grouped 3x3 convolutions over 7x7 maps (groups of 24
# channels: 3 vectors, 4 rows at most) ran as one vector over the 7 columns (7 FMAs per 8 loads), where 3
# vectors over a predicated 4 (12 per 7) ran 1.37x faster alone (regnet_x_1_6gf, Zen 1, session
# 114: 356 against 487 us). Two vectors stay as they were: 2 x 4 predicated ran slower than 1 x 7
# (session 111, mnasnet1_0's 7x7 expansion: 1250 against 1167 us), and so do tiles of part of a
# wider axis: with them, mobilenet_v2's 1x1 convolutions packed in blocks of 3 vectors took 3 x 4
# over 7 columns, one 0.68x as fast, the model 0.974x [0.971-0.977] (same-process A/B, session
# 114). Such a tile is not held to PREDICATED_ACCUMULATORS_16_REGS: 3 x 4 (12) was the one
# measured. 0: off (for A/Bs).
SHORT_AXIS_VECTORS = 3


def register_tile(rows_extent: int | None, vector_choices: list[int], budget: int,
                  predicated_percent: int | None = None, reserved_per_vector: int = 0,
                  most_rows: int = MAX_ROWS, predicated_cap: int | None = None,
                  axis_vectors: int = 0) -> tuple[int, int]:
    """(vectors, rows) of the register tile: the one with most FMAs per load within the budget.

    Each reduction step loads ``vectors`` weight vectors and broadcasts ``rows`` inputs to feed
    ``rows * vectors`` FMAs. With 32 registers, among one and two vectors two always win (2 x 8
    accumulators; four are offered only where the contraction rule allows them); with
    16 (AVX2) two vectors allow at most 6 rows, and a 7-row axis (a 7x7 feature map) is better
    served by one vector over 7 rows than by two vectors over one. ``reserved_per_vector``
    registers per vector of the tile are taken from the budget first (a depthwise window's
    weights, held across the tile). On 16 registers a predicated tile is capped where it would
    spill (``predicated_cap``, by default PREDICATED_ACCUMULATORS_16_REGS) and weighed against whole
    rows of 3 (EXACT_ROWS_16_REGS). ``axis_vectors``: the vectors of the whole vector axis, whose
    tile may take a predicated short row axis (SHORT_AXIS_VECTORS)."""
    cap = PREDICATED_ACCUMULATORS_16_REGS if predicated_cap is None else predicated_cap
    if rows_extent is None:
        return vector_choices[0], 1
    best: tuple[float, int, int] | None = None
    for vectors in vector_choices:
        held = reserved_per_vector + (1 if vectors >= WEIGHTS_HELD_FROM else 0)
        limit = min(max((budget - held * vectors) // vectors, 1), most_rows)
        short = bool(SHORT_AXIS_VECTORS) and vectors == axis_vectors >= SHORT_AXIS_VECTORS
        rows, predicated = row_tile(rows_extent, limit, vectors, most_rows, short=short)
        if predicated and budget <= MAX_ACCUMULATORS_16_REGS and rows * vectors > cap and not (short and rows_extent <= MAX_ROWS):
            rows, predicated = _spilling_less(rows_extent, rows, vectors, most_rows, cap)
        penalty = (PREDICATED_TILE_PERCENT if predicated_percent is None else predicated_percent) / 100
        score = rows * vectors / (rows + vectors) * (penalty if predicated else 1.0)
        whole = largest_divisor(rows_extent, min(limit, MAX_ROWS))
        if predicated and EXACT_ROWS_16_REGS and budget <= MAX_ACCUMULATORS_16_REGS \
                and _whole_wins(whole, vectors, score, vectors == axis_vectors):
            rows, predicated, score = whole, False, whole * vectors / (whole + vectors)
        if best is None or score > best[0]:
            best = (score, vectors, rows)
    assert best is not None
    return best[1], best[2]


def _whole_wins(whole: int, vectors: int, score: float, whole_axis: bool) -> bool:
    """Whether whole rows beat a predicated tile worth ``score`` on 16 registers: 3 or more when
    worth more (EXACT_ROWS_16_REGS), 2 under a tile of the whole vector axis when they hold
    TWO_ROWS_ACCUMULATORS_16_REGS and are worth as much (predication costs what the score does
    not count)."""
    worth = whole * vectors / (whole + vectors)
    if whole >= 3:
        return worth > score
    return whole == 2 and whole_axis and whole * vectors >= TWO_ROWS_ACCUMULATORS_16_REGS and worth >= score - 1e-9


def _spilling_less(rows_extent: int, rows: int, vectors: int, most_rows: int, cap: int) -> tuple[int, bool]:
    """(rows, predicated) of a predicated tile on 16 registers within ``cap`` accumulators where
    that computes at most PREDICATED_SPARE_ROWS more rows than ``rows`` (else ``rows``)."""
    fewer, predicated = row_tile(rows_extent, max(cap // vectors, 1), vectors, most_rows)
    def computed(r: int) -> int:
        return -(-rows_extent // r) * r
    if computed(fewer) <= computed(rows) * (1 + PREDICATED_SPARE_ROWS):
        return fewer, predicated
    return rows, True


def predicated_percent(budget: int, dot: bool) -> int | None:
    """``register_tile``'s ``predicated_percent`` for a contraction: a plain dot product over
    channels (a 1x1 convolution, a Winograd product) takes PREDICATED_DOT_TILE_PERCENT (its
    ``_16_REGS`` value where the budget is that of 16 registers), others the general one (None)."""
    if not dot:
        return None
    return PREDICATED_DOT_TILE_PERCENT if budget >= MAX_ACCUMULATORS else PREDICATED_DOT_TILE_PERCENT_16_REGS


def packed_tile_vectors(target: Any, rows_extent: int, dot: bool = False) -> int:
    """Vectors of the register tile over a packed weight whose output rows number
    ``rows_extent``: what the weight packing needs to make one tile's panel one contiguous stream
    (a tile reading half of each packed row fetches every cache line twice)."""
    budget = accumulator_budget(target)
    return register_tile(rows_extent, [2, 1], budget, predicated_percent(budget, dot), most_rows=max_rows(target))[0]


def weight_block(target: ResolvedTarget, rows: int | None = None, dot: bool = False) -> int:
    """Output channels per packed weight block: the contraction rule's register tile, two fp32
    vectors, or one where the target's registers hold only a one-vector tile over ``rows`` output
    rows (AVX2 on a 7x7 feature map); ``dot``: a 1x1 convolution."""
    tvm_target = target.tvm()
    vectors = 2 if rows is None else packed_tile_vectors(tvm_target, rows, dot)
    return vectors * vector_lanes(tvm_target, 32)
