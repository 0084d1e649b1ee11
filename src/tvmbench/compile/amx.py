"""bf16 products on AMX tiles (Intel Sapphire Rapids and later, ``--precision bf16``).

AVX-512 BF16's ``vdpbf16ps`` (``compile/bf16.py``) issues on Intel at half its FMAs' rate, so a
bf16 build there ran slower than fp32 (resnet50 0.73x, session 85). AMX multiplies a tile of up
to 16 rows x 32 bf16 by a tile of 16 pairs x 16 columns into 16 x 16 fp32 sums in one
``tdpbf16ps``, every 16 cycles whatever its rows: on one core of the Xeon VM (session 91, C
loops) the products alone ran 3.75 TFLOP/s (a 9-row tile 2.09, a 7-row one 1.65), with each
step's four tile loads from L2 2.45, against ~240 GFLOP/s for fp32 FMAs (docs/performance.md).

The weights are already in the layout AMX reads: ``passes/pack_weights.py`` packs a bf16 weight as
``[N/32, K/2, 32, 2]``, and 16 columns of one pack block (64 bytes of each 128-byte row) are a
B tile (a block of 64, GPT-2's LM head, holds two tiles' columns). So ``rules/amx.py`` tiles a
bf16 contraction in ``rows x 32`` outputs and one tensor intrinsic (:func:`register`) replaces
each tile's reduction (its input channels, and a convolution's window of two axes) with one call
of an LLVM IR function (:func:`llvm_ir`, linked into the kernel by ``pragma_import_llvm``) that
loads the tile's sums into tile registers, runs the window's taps, each in steps of 32 or 16 (two A
tiles x two B tiles, four ``tdpbf16ps`` per step; a stem's window row in one), and stores
them back.

Linux hands AMX's 8 KB of tile state to a process only on request (``arch_prctl
(ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA)``; without it the first tile instruction is SIGILL), so
the function asks once per process (a flag in the library), and loads the tile configuration
(``ldtilecfg``: rows and bytes per tile, per thread) where the thread's is another (KEEP_CONFIG).
"""

from __future__ import annotations

import functools
import re
import string
from typing import Any

from tvmbench.targets import has_feature

LLVM_FUNCTION = "tvmbench_amx_bf16"
PACK = 32  # a tile's columns: two B tiles of 16 (of a pack block of 32, or of 64: GPT-2's LM head)
STEP = 32  # reduction steps per tile product (16 pairs)
# Input channels in steps of 16 where 32 do not divide them (48, 80: inception's; SqueezeNet's 16),
# at half a tile product's work per instruction; the least channels a reduction must have to go
# on tiles.
HALF_STEP = 16
MIN_DEPTH = 16
# A bf16 convolution's output channels that blocks of 32 do not divide (48: DenseNet-161's growth;
# GoogLeNet's 16, 144 and 208) are padded with zero channels to whole blocks and sliced off
# (``passes/pack_weights.py``), so that tiles take them: a tile product at up to twice the work
# still runs several times the dot product's rate.
PAD_OUTPUTS = 1
# A bf16 convolution that copies its input into a padded buffer anyway (a window with padding, or
# a flattened map) over input channels in half steps (48, 80: ``channel_steps`` takes 16 at a
# time, each product at half its depth for the same 4.4 ns) reads them as whole steps of 32 in that
# copy, its weights padded with zero inputs at load time: inception_v3's 3x3 from 80 channels over
# 73x73, 5 products per tap -> 3, 0.887 -> 0.787 ms in the model; end to end level within a noisy
# hour (Xeon VM, session 92: inception_v3 1.003-1.024x, googlenet 1.017x, squeezenet1_1 0.994x).
PAD_DEPTH = 1
MAX_ROWS = 16
BLOCKS = (32, 64)  # weight pack blocks whose columns tiles of 32 take
# The fewest rows an A tile may have: a row axis whose largest divisor up to 16 is smaller is
# declined (``rules/amx.py``), or a dense layer's rows padded (``padded_rows``).
MIN_ROWS = 7
# A bf16 stem (a convolution of the NCHW image, at most 4 channels and a window of at most 8
# columns) reads the image laid out with each pixel's 4 channels side by side
# (``passes/pack_weights.py``'s ``stem_on_tiles``), so that a window row, its columns and channels,
# is one row of 32 values of an A tile: one full product per window row, where the NCHW form
# (``_flat``) gives a product of 8 per channel and window row.
STEM_ROWS = 1
STEM_CHANNELS = 4
STEM_ROW = 32
# A stride-1 bf16 convolution runs over its padded map flattened to one row axis (``passes/
# pack_weights.py``'s ``flat_conv``): output pixel ``p = y * W' + x`` of a map ``W'`` columns wide
# (its padding included) reads input pixel ``p + ky * W' + kx``, so the tiles are 16 rows of that
# axis, across the map's rows, the padding columns' rows computed and dropped by the epilogue (a
# loop nest of its own). By map rows a 7x7 map's A tile is 7 rows, and each pair of weight tiles,
# loaded from L2 (ResNet's last stage: 288 KB per block of 32 outputs), serves 7 rows, not 32:
# resnet18's 3x3 convolutions over 7x7 maps alone 0.18 -> 0.13 ms (``benchmarks/amx_shapes.py``).
# Only where the row form is poor (``_Pack.flat_map``): each pair of weight tiles serving one
# short A tile (under FLAT_BELOW_ROWS rows, unpaired: 7x7, 35x35), or the rows computed over added
# columns and sliced off by a pass of their own (17x17 as 18 in 9s; there 1x7 and 7x1 windows,
# by rows a loop of tiles that load and store the sums per tap, are inside the tile too); over at
# least FLAT_MIN_DEPTH inputs (weights of 32 KB per block: below, they stay in L1, and the padding
# rows and the separate epilogue cost more: SqueezeNet's 13x13 maps 0.46x alone); not 1x1 (by rows
# they read the input in place, no copy; session 93 ran 1x1s with tiles under 12 rows as dense
# layers over their pixels, padded to whole tiles: 0.87x squeezenet1_1, 0.96x mobilenet_v2,
# 0.98x googlenet and resnet50, inception_v3 level, the padding copy eating what the tiles of 16
# rows saved). Products cost by rows, so maps of two tiles of 14 per row
# or paired rows stay by rows (alone flattened: 28x28 0.75x, 56x56 0.89x, 14x14 0.92x, 8x8 1x3
# 0.79x). Same-process A/Bs (Xeon VM, session 88, ``benchmarks/rule_ab.py M amx.FLAT_MAPS 0
# --precision bf16 --runs 100 --block 5``): inception_v3 1.105x, resnet34 1.053x, resnet18 1.047x,
# googlenet 1.004x, squeezenet1_1 0.992x, densenet121 0.989x [0.857-1.019].
FLAT_MAPS = 1
# Where a product's weights stream from memory (its tiles run channel-outer, each panel of 32
# columns read once and swept over every row tile: a transformer's dense layers), each step of
# the tile function asks the same step of the next panel into L2 (``_prefetch``): alone with cold
# caches (Xeon VM, session 89), bert-base's dense layers spent 82 % of their time in the tile
# loads (products removed), 30 % less with the weights L1-hot; the loads of a step wait for the
# products before them (no tile register is free), so the hardware's prefetchers do not cover a
# panel read from memory. With two A tiles every row tile over a panel asks; with one (ViT's 13
# tiles of 16 rows), two products a step beside the 32 prefetches, only the first (all of them
# asking: ViT 0.86x). Not in convolutions with a window (resnet18 0.95x asking) nor row-outer
# tiles, whose next panel is in L2 already. Same-process A/Bs: docs/performance.md, session 89.
PREFETCH_PANEL = 1
FLAT_MIN_DEPTH = 512
FLAT_BELOW_ROWS = 10
# A dense layer whose rows' tiles give each pair of weight tiles fewer rows than this (ViT at
# batch 8: 1576 rows, 197 tiles of 8, two A tiles of 8 per pair) has its rows padded with zeros
# to whole pairs of tiles of 16 (``padded_rows``; 0: only rows no tile divides). Each pair of
# weight tiles loaded then serves 32 rows, not 16: alone, 1x1 convolutions over 18 rows per
# pair took 1.5-1.7x the time per row of those over 32 (docs/performance.md, session 93). Only
# where the padding adds at most 1 / PAIR_ROWS_WASTE of the rows: products cost by rows, and
# distilbert's 77 tokens as 96 (tiles of 11, unpaired) were 0.959x end to end.
PAIR_ROWS = 24
PAIR_ROWS_WASTE = 8

_SYS_ARCH_PRCTL, _ARCH_REQ_XCOMP_PERM, _XFEATURE_XTILEDATA = 158, 0x1023, 18


# The tile function (``_function`` fills in its tile registers and configuration): sums[rows x
# tiles_a, 32] += the products of ``outer`` x ``inner`` taps (a window's: the A and B pointers move by
# ``*_outer`` and ``*_inner`` bytes), each of ``steps`` steps of ``kstep``; ``ld*``: row strides in
# bytes, ``*_skip``: bytes from the first A tile (sums tile) to the second. The sums stay in their
# tiles across the whole window.
_FUNCTION = string.Template("""
define linkonce_odr void @${name}(ptr %c, i64 %ldc, i64 %c_skip, ptr %a, i64 %lda, i64 %a_skip, i64 %a_outer,
    i64 %a_inner, ptr %b, i64 %ldb, i64 %b_outer, i64 %b_inner, i64 %outer, i64 %inner, i64 %steps, i64 %kstep, i64 %rows${extra}) {
entry:
  %granted = load atomic i32, ptr @tvmbench_amx_granted monotonic, align 4
  %ok = icmp ne i32 %granted, 0
  br i1 %ok, label %configure, label %ask
ask:
  %r = call i64 (i64, ...) @syscall(i64 ${prctl}, i64 ${perm}, i64 ${xtiledata})
  store atomic i32 1, ptr @tvmbench_amx_granted monotonic, align 4
  br label %configure
configure:
  %cfg = alloca [64 x i8], align 64
  call void @llvm.memset.p0.i64(ptr %cfg, i8 0, i64 64, i1 false)
  store i8 1, ptr %cfg
  %rows8 = trunc i64 %rows to i8
  %kbytes = mul i64 %kstep, 2
  %kbytes16 = trunc i64 %kbytes to i16
  %pairs = udiv i64 %kstep, 2
  %pairs8 = trunc i64 %pairs to i8
  %bstep = mul i64 %ldb, %pairs
${config}
${load_config}
  br label %configured
configured:
  %c_row0 = getelementptr i8, ptr %c, i64 0
  %c_row1 = getelementptr i8, ptr %c, i64 %c_skip
  %a_row0 = getelementptr i8, ptr %a, i64 0
  %a_row1 = getelementptr i8, ptr %a, i64 %a_skip
${ptrs}
${load}
  %taps = mul i64 %outer, %inner
${panel}
  br label %tap
tap:
  %j = phi i64 [0, %configured], [%j1, %tap_end]
  %jo = udiv i64 %j, %inner
  %ji = urem i64 %j, %inner
  %a_off_o = mul i64 %jo, %a_outer
  %a_off_i = mul i64 %ji, %a_inner
  %a_off = add i64 %a_off_o, %a_off_i
  %b_off_o = mul i64 %jo, %b_outer
  %b_off_i = mul i64 %ji, %b_inner
  %b_off = add i64 %b_off_o, %b_off_i
  %b_tap = getelementptr i8, ptr %b, i64 %b_off
${tap_a}
  br label %loop
loop:
  %i = phi i64 [0, %tap], [%next, %${latch}]
  %ak = mul i64 %i, %kbytes
${step_a}
  %bk = mul i64 %i, %bstep
  %pb0 = getelementptr i8, ptr %b_tap, i64 %bk
  %pb1 = getelementptr i8, ptr %pb0, i64 64
  call void @llvm.x86.tileloadd64(i8 6, ptr %pb0, i64 %ldb)
  call void @llvm.x86.tileloadd64(i8 7, ptr %pb1, i64 %ldb)
${products}
${prefetch}
  %next = add i64 %i, 1
  %done = icmp eq i64 %next, %steps
  br i1 %done, label %tap_end, label %loop
tap_end:
  %j1 = add i64 %j, 1
  %taps_done = icmp eq i64 %j1, %taps
  br i1 %taps_done, label %exit, label %tap
exit:
${store}
  ret void
}
""")


# The tile configuration is loaded only where the thread's differs (read back by ``sttilecfg``,
# which costs next to nothing; another kernel's, or another library's, is never assumed away).
# ``ldtilecfg`` on every call cost 45-80 ns (a C loop of the tile function's work, session 91): a
# twelfth of a 3x3 convolution's tile over 64 channels, a third of a 1x1's over 64. 0: on every call.
KEEP_CONFIG = 1
ZERO_SUFFIX = "_z"
_LOAD_CONFIG = """  call void @llvm.x86.ldtilecfg(ptr %cfg)"""
_LOAD_CONFIG_IF_OTHER = """  %now = alloca [64 x i8], align 64
  call void @llvm.x86.sttilecfg(ptr %now)
  %want = load <8 x i64>, ptr %cfg, align 64
  %have = load <8 x i64>, ptr %now, align 64
  %differs = icmp ne <8 x i64> %want, %have
  %differ_bits = bitcast <8 x i1> %differs to i8
  %other = icmp ne i8 %differ_bits, 0
  br i1 %other, label %load_config, label %configured
load_config:
  call void @llvm.x86.ldtilecfg(ptr %cfg)"""


def _function(tiles_a: int, prefetch: bool = False, keep_config: bool = True, zero: bool = False) -> str:
    """The LLVM IR of ``function_name(tiles_a, prefetch, zero)`` (``_FUNCTION``), in tile registers
    0-3 (sums: loaded, or with ``zero`` started at zero, ``passes/tile_sums.py``), 4-5 (a), 6-7 (b);
    with 8 or 16 for ``kstep`` a single step per tap."""
    sums = [(0, 0, 0), (1, 0, 64)] + ([(2, 1, 0), (3, 1, 64)] if tiles_a == 2 else [])
    ptrs = "\n".join(f"  %c{t} = getelementptr i8, ptr %c_row{r}, i64 {off}" for t, r, off in sums)
    load = "\n".join(f"  call void @llvm.x86.tilezero(i8 {t})" if zero else
                     f"  call void @llvm.x86.tileloadd64(i8 {t}, ptr %c{t}, i64 %ldc)" for t, _, _ in sums)
    store = "\n".join(f"  call void @llvm.x86.tilestored64(i8 {t}, ptr %c{t}, i64 %ldc)" for t, _, _ in sums)
    step_a = "\n".join(f"  %pa{r} = getelementptr i8, ptr %a_tap{r}, i64 %ak\n"
                       f"  call void @llvm.x86.tileloadd64(i8 {4 + r}, ptr %pa{r}, i64 %lda)" for r in range(tiles_a))
    tap_a = "\n".join(f"  %a_tap{r} = getelementptr i8, ptr %a_row{r}, i64 %a_off" for r in range(tiles_a))
    products = "\n".join(f"  call void @llvm.x86.tdpbf16ps(i8 {t}, i8 {4 + r}, i8 {6 + off // 64})"
                         for t, r, off in sums)
    config = "\n".join(f"  %colsb{t} = getelementptr i8, ptr %cfg, i64 {16 + 2 * t}\n"
                       f"  store i16 {'%kbytes16' if t in (4, 5) else 64}, ptr %colsb{t}\n"
                       f"  %rowsp{t} = getelementptr i8, ptr %cfg, i64 {48 + t}\n"
                       f"  store i8 {'%pairs8' if t in (6, 7) else '%rows8'}, ptr %rowsp{t}" for t in range(8))
    panel, ahead = _prefetch() if prefetch else ("", "")
    return _FUNCTION.substitute(
        name=function_name(tiles_a, prefetch, zero), prctl=_SYS_ARCH_PRCTL, perm=_ARCH_REQ_XCOMP_PERM, xtiledata=_XFEATURE_XTILEDATA,
        config=config, ptrs=ptrs, load=load, tap_a=tap_a, step_a=step_a, products=products, store=store,
        panel=panel, prefetch=ahead, extra=", i32 %next_panel" if prefetch else "",
        load_config=_LOAD_CONFIG_IF_OTHER if keep_config else _LOAD_CONFIG,
        latch="step_end" if prefetch else "loop")


def _prefetch() -> tuple[str, str]:
    """(before the taps, in each step) of the tile function: where ``%next_panel`` is set, the next
    panel's weights asked into L2 (PREFETCH_PANEL), a step's B rows (16 pairs x 128 bytes, 32
    lines) at the same offset into the panel after this one (``taps x steps x`` a step's bytes
    past this step's)."""
    panel = ("  %panel0 = mul i64 %steps, %bstep\n  %panel = mul i64 %panel0, %taps\n"
             "  %asking = icmp ne i32 %next_panel, 0")
    lines = ["  br i1 %asking, label %ahead, label %step_end", "ahead:",
             "  %pn = getelementptr i8, ptr %pb0, i64 %panel"]
    for j in range(32):
        lines += [f"  %pn{j} = getelementptr i8, ptr %pn, i64 {64 * j}",
                  f"  call void @llvm.prefetch.p0(ptr %pn{j}, i32 0, i32 2, i32 1)"]
    return panel, "\n".join([*lines, "  br label %step_end", "step_end:"])


def function_name(tiles_a: int, prefetch: bool, zero: bool = False) -> str:
    """The tile function of ``tiles_a`` A tiles, asking the next panel into L2 (``_prefetch``) or
    not, its sums loaded or (``zero``) started at zero."""
    return f"{LLVM_FUNCTION}{tiles_a}{'_next' if prefetch else ''}{ZERO_SUFFIX if zero else ''}"


def llvm_ir() -> str:
    """The tile functions' LLVM IR (linked into each kernel by ``pragma_import_llvm``), as
    KEEP_CONFIG sets them."""
    return _llvm_ir(bool(KEEP_CONFIG))


@functools.cache
def _llvm_ir(keep_config: bool) -> str:
    # (linkonce_odr: every kernel that uses them links a copy, and the copies merge)
    functions = "\n".join(_function(tiles_a, prefetch, keep_config, zero) for zero in (False, True)
                          for prefetch in (False, True) for tiles_a in (1, 2))
    return f"""
@tvmbench_amx_granted = linkonce_odr global i32 0
declare i64 @syscall(i64, ...)
declare void @llvm.memset.p0.i64(ptr, i8, i64, i1)
declare void @llvm.x86.ldtilecfg(ptr)
declare void @llvm.x86.sttilecfg(ptr)
declare void @llvm.x86.tileloadd64(i8 immarg, ptr, i64)
declare void @llvm.x86.tilestored64(i8 immarg, ptr, i64)
declare void @llvm.x86.tilezero(i8 immarg)
declare void @llvm.x86.tdpbf16ps(i8 immarg, i8 immarg, i8 immarg)
declare void @llvm.prefetch.p0(ptr, i32 immarg, i32 immarg, i32 immarg)
{functions}
"""

_registered: set[str] = set()


def tile_rows(extent: int) -> int | None:
    """Rows per A tile over a row axis of ``extent``: its largest divisor from MIN_ROWS to 16, else
    None."""
    return max((r for r in range(MIN_ROWS, MAX_ROWS + 1) if extent % r == 0), default=None)


def fits(depth: int, block: int) -> bool:
    """Whether a bf16 product over a reduction of ``depth`` with weights packed in blocks of
    ``block`` columns goes on AMX tiles (``rules/amx.py``): whole steps (``channel_steps``), blocks of
    32 or 64 (a stem's window columns, 8, are a product of their own, but its columns are not
    padded)."""
    return channel_steps(depth) is not None and block in BLOCKS


def stem_rows(shape: list[int], dtype: str, attrs: Any) -> bool:
    """Whether a stem of HWIO weights ``shape`` runs a window row per product (STEM_ROWS)."""
    kh, kw, ci, _ = shape
    return (bool(STEM_ROWS) and dtype == "bfloat16" and ci <= STEM_CHANNELS and kw * STEM_CHANNELS <= STEM_ROW
            and int(attrs.groups) == 1 and all(int(d) == 1 for d in attrs.dilation))


def padded_rows(extent: int, pairs: bool = False) -> int | None:
    """The rows a dense layer computes so that A tiles cover them whole (``passes/pack_weights.py``
    pads its input with zero rows), None where ``tile_rows`` finds a tile: ViT's 197 tokens (a
    prime) as 208, in 13 tiles of 16. With ``pairs``, also where the tiles found give each pair of
    weight tiles fewer than PAIR_ROWS rows: padded to whole pairs of tiles of 16 (PAIR_ROWS_WASTE)."""
    rows = tile_rows(extent)
    if extent <= MAX_ROWS:
        return None
    if rows is None:
        return -(-extent // MAX_ROWS) * MAX_ROWS
    served = rows * (2 if (extent // rows) % 2 == 0 else 1)
    padded = -(-extent // (2 * MAX_ROWS)) * 2 * MAX_ROWS
    if not (pairs and PAIR_ROWS and served < PAIR_ROWS and PAIR_ROWS_WASTE * (padded - extent) <= extent):
        return None
    return padded


def usable(target: Any) -> bool:
    """Whether a ``tvm.target.Target`` is a CPU with AMX's bf16 tile products."""
    return target.kind.name == "llvm" and has_feature(target, "amx-bf16") and has_feature(target, "amx-tile")


def channel_steps(depth: int) -> tuple[int, int] | None:
    """(reduction steps per tile product, products) for a reduction over ``depth`` input channels:
    32 at a time, else 16 (HALF_STEP), and at least MIN_DEPTH channels; None where they do not fit."""
    if depth < MIN_DEPTH or depth % HALF_STEP:
        return None
    step = STEP if depth % STEP == 0 else HALF_STEP
    return step, depth // step


def steps(depth: int) -> tuple[int, int] | None:
    """(reduction steps per tile product, products) for a tap's reduction of ``depth``: input
    channels (``channel_steps``), or a single product of 8 or 16 (a stem's window row of 7
    columns, padded to 8)."""
    return channel_steps(depth) or ((depth, 1) if depth in (8, 16) else None)


def register(rows: int, tiles_a: int, depth: int, stride: int = 1, window: tuple[int, int] | None = None,
             flat: bool = False, pair: int = 0, wide: int = 0, share: int = 0) -> str:
    """The name of the tensor intrinsic for a tile of ``tiles_a`` x ``rows`` rows and 32 columns
    over a reduction of ``depth`` (``steps``) whose rows are ``stride`` rows apart in the input
    (a strided convolution's), registered with TVM once per process. ``window``: the two outer
    reductions (a convolution's window rows and columns) the tile covers too, its sums held in
    the tiles across them; ``flat``: those are a stem's channels and window rows (or its window
    rows alone, ``_flat_rows``), and its rows and the reduction (window columns) index one
    dimension of the input, so the rows overlap; ``pair``: the two A tiles are two output rows (of
    a map whose rows make one tile each: 14x14), ``pair`` input rows apart (``_paired``); ``wide``:
    the rows are a flattened map's pixels, a window row ``wide`` pixels from the next (``_wide``);
    ``share``: the row tiles that read each panel of weights streamed from memory (the tiles
    channel-outer), whose tile function asks the next panel into L2 (PREFETCH_PANEL; 0: not
    streamed)."""
    share = share if PREFETCH_PANEL and window is None and not (flat or pair or wide) else 0
    return _register(rows, tiles_a, depth, stride, window, flat, pair, wide, share)


def _register(rows: int, tiles_a: int, depth: int, stride: int, window: tuple[int, int] | None, flat: bool,
              pair: int, wide: int, share: int) -> str:
    """``register`` with ``share`` as given (``register_named`` registers a record's name as it is)."""
    taps = "x".join(str(t) for t in window) if window else "1"
    name = (f"tvmbench_amx_bf16_{tiles_a}x{rows}x{depth}_s{stride}_w{taps}{'_stem' if flat else ''}_p{pair}_f{wide}"
            f"{f'_n{share}' if share else ''}")
    if name in _registered:
        return name
    from tvm.s_tir import TensorIntrin

    if wide:
        desc, impl = (_wide if len(window) == 2 else _wide_line)(rows, tiles_a, depth, wide, *window)
    elif pair:
        desc, impl = _paired(rows, depth, stride, window, pair)
    else:
        make = _plain if window is None else (_flat if len(window) == 2 else _flat_rows) if flat else _window
        desc, impl = make(rows, tiles_a, depth, stride, *(window or (share,)))
    TensorIntrin.register(name, desc, impl, override=True)
    _registered.add(name)
    return name


# ``register``'s names, read back (a window of one tap is never made: "w1" is no window).
_NAME = re.compile(r"tvmbench_amx_bf16_(\d+)x(\d+)x(\d+)_s(\d+)_w([\dx]+)(_stem)?_p(\d+)_f(\d+)(?:_n(\d+))?")


def register_named(name: str) -> bool:
    """Register the intrinsic ``register`` named ``name`` (False: not one of its names). A tuning
    record's trace names the intrinsic it tensorized with, and replaying it (applying a database,
    in another process than the rule that made it) needs it registered: a bf16 build's in-model
    check failed with "TensorIntrin ... is not registered"."""
    m = _NAME.fullmatch(name)
    if m is None:
        return False
    tiles_a, rows, depth, stride = (int(g) for g in m.group(1, 2, 3, 4))
    window = None if m.group(5) == "1" else tuple(int(t) for t in m.group(5).split("x"))
    _register(rows, tiles_a, depth, stride, window, bool(m.group(6)), int(m.group(7)), int(m.group(8)),
              int(m.group(9) or 0))  # (as named, whatever PREFETCH_PANEL says now)
    return True


def _call(tiles_a: int, c: Any, sc: Any, a16: Any, lda: Any, a_outer: Any, a_inner: Any, b16: Any, sb: Any,
          b_outer: Any, b_inner: Any, outer: int, inner: int, depth: int, rows: int,
          skips: tuple[Any, Any] | None = None, share: int = 0) -> Any:
    """The call of the tile function (``_function``), strides in elements; ``skips``: from the first
    sums and A tile to the second where they are not the next ``rows`` rows (paired rows);
    ``share``: the tiles that read one weight panel, one after another, which ask the next panel
    into L2 (``_prefetch``; 0: none)."""
    from tvm.script import tirx as T

    kstep, count = steps(depth)

    def i64(v: Any) -> Any:  # (every integer argument 64 bits, as the function declares them)
        return T.int64(v) if isinstance(v, int) else v

    c_skip, a_skip = skips or (sc * rows, i64(lda) * rows)
    # (with two A tiles, four products a step, every tile over a panel asks for the next; with one,
    # two products a step beside the 32 prefetches, only the first. Which tile is first: from its
    # A tile's offset in the buffer over a tile's elements. 32 bits, as the function declares it:
    # TVM narrows an index this small to 32 bits, and a call whose types differ from the
    # function's is not inlined, nor the function linked.)
    first = T.floormod(T.floordiv(a16.elem_offset, a_skip * tiles_a), max(share, 1)) == 0
    ahead = [T.int32(1) if tiles_a == 2 else T.Cast("int32", T.Select(first, 1, 0))] if share else []
    return T.call_extern("void", function_name(tiles_a, bool(share)), c.access_ptr("rw"), sc * 4, i64(c_skip) * 4,
                         a16.access_ptr("r"), i64(lda) * 2, i64(a_skip) * 2, i64(a_outer) * 2, i64(a_inner) * 2,
                         b16.access_ptr("r"), sb * 2, i64(b_outer) * 2, i64(b_inner) * 2,
                         *(i64(v) for v in (outer, inner, count, kstep, rows)), *ahead)


def _plain(rows: int, tiles_a: int, depth: int, stride: int, share: int = 0) -> tuple[Any, Any]:
    """A tile over the input channels alone (a dense layer, a 1x1 convolution)."""
    from tvm.script import tirx as T

    m, k = rows * tiles_a, depth
    span = (m - 1) * stride + 1  # (input rows the tile's rows reach)

    @T.prim_func(s_tir=True)
    def desc(a: T.handle, b: T.handle, c: T.handle) -> None:
        A = T.match_buffer(a, (span, k), "bfloat16", offset_factor=1, strides=[T.int64(), 1])
        B = T.match_buffer(b, (k // 2, PACK, 2), "bfloat16", offset_factor=1, strides=[T.int64(), 2, 1])
        C = T.match_buffer(c, (m, PACK), "float32", offset_factor=1, strides=[T.int64(), 1])
        with T.sblock("root"):
            T.reads(C[0:m, 0:PACK], A[0:span, 0:k], B[0:k // 2, 0:PACK, 0:2])
            T.writes(C[0:m, 0:PACK])
            for i, j, r in T.grid(m, PACK, k):
                with T.sblock("update"):
                    vi, vj, vr = T.axis.remap("SSR", [i, j, r])
                    C[vi, vj] = C[vi, vj] + T.cast(A[vi * stride, vr], "float32") * T.cast(B[vr // 2, vj, vr % 2], "float32")

    @T.prim_func(s_tir=True)
    def impl(a: T.handle, b: T.handle, c: T.handle) -> None:
        sa, sb, sc = T.int64(), T.int64(), T.int64()
        A = T.match_buffer(a, (span, k), "bfloat16", offset_factor=1, strides=[sa, 1])
        B = T.match_buffer(b, (k // 2, PACK, 2), "bfloat16", offset_factor=1, strides=[sb, 2, 1])
        C = T.match_buffer(c, (m, PACK), "float32", offset_factor=1, strides=[sc, 1])
        with T.sblock("root"):
            T.reads(C[0:m, 0:PACK], A[0:span, 0:k], B[0:k // 2, 0:PACK, 0:2])
            T.writes(C[0:m, 0:PACK])
            # (uint16 views: TVM's bf16 legalisation stores bf16 as uint16, and a pointer to a
            # bf16 buffer no longer matches its element type)
            a16 = T.decl_buffer((span * sa,), "uint16", data=A.data, elem_offset=A.elem_offset)
            b16 = T.decl_buffer((k // 2 * sb,), "uint16", data=B.data, elem_offset=B.elem_offset)
            T.evaluate(_call(tiles_a, C, sc, a16, sa * stride, 0, 0, b16, sb, 0, 0, 1, 1, k, rows, share=share))

    return desc, impl


def _window(rows: int, tiles_a: int, depth: int, stride: int, kh: int, kw: int) -> tuple[Any, Any]:
    """A tile over a convolution's window and input channels (NHWC, rows along the columns)."""
    from tvm.script import tirx as T

    m, k = rows * tiles_a, depth
    span = (m - 1) * stride + kw

    @T.prim_func(s_tir=True)
    def desc(a: T.handle, b: T.handle, c: T.handle) -> None:
        A = T.match_buffer(a, (kh, span, k), "bfloat16", offset_factor=1, strides=[T.int64(), T.int64(), 1])
        B = T.match_buffer(b, (kh, kw, k // 2, PACK, 2), "bfloat16", offset_factor=1,
                           strides=[T.int64(), T.int64(), T.int64(), 2, 1])
        C = T.match_buffer(c, (m, PACK), "float32", offset_factor=1, strides=[T.int64(), 1])
        with T.sblock("root"):
            T.reads(C[0:m, 0:PACK], A[0:kh, 0:span, 0:k], B[0:kh, 0:kw, 0:k // 2, 0:PACK, 0:2])
            T.writes(C[0:m, 0:PACK])
            for i, j, r0, r1, r in T.grid(m, PACK, kh, kw, k):
                with T.sblock("update"):
                    vi, vj, v0, v1, vr = T.axis.remap("SSRRR", [i, j, r0, r1, r])
                    C[vi, vj] = C[vi, vj] + T.cast(A[v0, vi * stride + v1, vr], "float32") * T.cast(
                        B[v0, v1, vr // 2, vj, vr % 2], "float32")

    @T.prim_func(s_tir=True)
    def impl(a: T.handle, b: T.handle, c: T.handle) -> None:
        sa0, sa1, sb0, sb1, sb, sc = T.int64(), T.int64(), T.int64(), T.int64(), T.int64(), T.int64()
        A = T.match_buffer(a, (kh, span, k), "bfloat16", offset_factor=1, strides=[sa0, sa1, 1])
        B = T.match_buffer(b, (kh, kw, k // 2, PACK, 2), "bfloat16", offset_factor=1, strides=[sb0, sb1, sb, 2, 1])
        C = T.match_buffer(c, (m, PACK), "float32", offset_factor=1, strides=[sc, 1])
        with T.sblock("root"):
            T.reads(C[0:m, 0:PACK], A[0:kh, 0:span, 0:k], B[0:kh, 0:kw, 0:k // 2, 0:PACK, 0:2])
            T.writes(C[0:m, 0:PACK])
            a16 = T.decl_buffer((kh * sa0,), "uint16", data=A.data, elem_offset=A.elem_offset)
            b16 = T.decl_buffer((kh * sb0,), "uint16", data=B.data, elem_offset=B.elem_offset)
            T.evaluate(_call(tiles_a, C, sc, a16, sa1 * stride, sa0, sa1, b16, sb, sb0, sb1, kh, kw, k, rows))

    return desc, impl


def _wide(rows: int, tiles_a: int, depth: int, wide: int, kh: int, kw: int) -> tuple[Any, Any]:
    """A tile over a convolution's window and input channels on a flattened map (FLAT_MAPS): row
    ``i`` of the tile reads input row ``i + ky * wide + kx``."""
    from tvm.script import tirx as T

    m, k = rows * tiles_a, depth
    span = m - 1 + (kh - 1) * wide + kw

    @T.prim_func(s_tir=True)
    def desc(a: T.handle, b: T.handle, c: T.handle) -> None:
        A = T.match_buffer(a, (span, k), "bfloat16", offset_factor=1, strides=[T.int64(), 1])
        B = T.match_buffer(b, (kh, kw, k // 2, PACK, 2), "bfloat16", offset_factor=1,
                           strides=[T.int64(), T.int64(), T.int64(), 2, 1])
        C = T.match_buffer(c, (m, PACK), "float32", offset_factor=1, strides=[T.int64(), 1])
        with T.sblock("root"):
            T.reads(C[0:m, 0:PACK], A[0:span, 0:k], B[0:kh, 0:kw, 0:k // 2, 0:PACK, 0:2])
            T.writes(C[0:m, 0:PACK])
            for i, j, r0, r1, r in T.grid(m, PACK, kh, kw, k):
                with T.sblock("update"):
                    vi, vj, v0, v1, vr = T.axis.remap("SSRRR", [i, j, r0, r1, r])
                    C[vi, vj] = C[vi, vj] + T.cast(A[vi + v0 * wide + v1, vr], "float32") * T.cast(
                        B[v0, v1, vr // 2, vj, vr % 2], "float32")

    @T.prim_func(s_tir=True)
    def impl(a: T.handle, b: T.handle, c: T.handle) -> None:
        sa, sb0, sb1, sb, sc = T.int64(), T.int64(), T.int64(), T.int64(), T.int64()
        A = T.match_buffer(a, (span, k), "bfloat16", offset_factor=1, strides=[sa, 1])
        B = T.match_buffer(b, (kh, kw, k // 2, PACK, 2), "bfloat16", offset_factor=1, strides=[sb0, sb1, sb, 2, 1])
        C = T.match_buffer(c, (m, PACK), "float32", offset_factor=1, strides=[sc, 1])
        with T.sblock("root"):
            T.reads(C[0:m, 0:PACK], A[0:span, 0:k], B[0:kh, 0:kw, 0:k // 2, 0:PACK, 0:2])
            T.writes(C[0:m, 0:PACK])
            a16 = T.decl_buffer((span * sa,), "uint16", data=A.data, elem_offset=A.elem_offset)
            b16 = T.decl_buffer((kh * sb0,), "uint16", data=B.data, elem_offset=B.elem_offset)
            T.evaluate(_call(tiles_a, C, sc, a16, sa, sa * wide, sa, b16, sb, sb0, sb1, kh, kw, k, rows))

    return desc, impl


def _wide_line(rows: int, tiles_a: int, depth: int, step: int, taps: int) -> tuple[Any, Any]:
    """``_wide`` for a window of one axis (1x7: ``step`` 1; 7x1: the map's width) over weights
    ``[taps, depth / 2, 32, 2]``: row ``i`` of the tile reads input row ``i + t * step``."""
    from tvm.script import tirx as T

    m, k = rows * tiles_a, depth
    span = m + (taps - 1) * step

    @T.prim_func(s_tir=True)
    def desc(a: T.handle, b: T.handle, c: T.handle) -> None:
        A = T.match_buffer(a, (span, k), "bfloat16", offset_factor=1, strides=[T.int64(), 1])
        B = T.match_buffer(b, (taps, k // 2, PACK, 2), "bfloat16", offset_factor=1,
                           strides=[T.int64(), T.int64(), 2, 1])
        C = T.match_buffer(c, (m, PACK), "float32", offset_factor=1, strides=[T.int64(), 1])
        with T.sblock("root"):
            T.reads(C[0:m, 0:PACK], A[0:span, 0:k], B[0:taps, 0:k // 2, 0:PACK, 0:2])
            T.writes(C[0:m, 0:PACK])
            for i, j, r0, r in T.grid(m, PACK, taps, k):
                with T.sblock("update"):
                    vi, vj, v0, vr = T.axis.remap("SSRR", [i, j, r0, r])
                    C[vi, vj] = C[vi, vj] + T.cast(A[vi + v0 * step, vr], "float32") * T.cast(
                        B[v0, vr // 2, vj, vr % 2], "float32")

    @T.prim_func(s_tir=True)
    def impl(a: T.handle, b: T.handle, c: T.handle) -> None:
        sa, sb0, sb, sc = T.int64(), T.int64(), T.int64(), T.int64()
        A = T.match_buffer(a, (span, k), "bfloat16", offset_factor=1, strides=[sa, 1])
        B = T.match_buffer(b, (taps, k // 2, PACK, 2), "bfloat16", offset_factor=1, strides=[sb0, sb, 2, 1])
        C = T.match_buffer(c, (m, PACK), "float32", offset_factor=1, strides=[sc, 1])
        with T.sblock("root"):
            T.reads(C[0:m, 0:PACK], A[0:span, 0:k], B[0:taps, 0:k // 2, 0:PACK, 0:2])
            T.writes(C[0:m, 0:PACK])
            a16 = T.decl_buffer((span * sa,), "uint16", data=A.data, elem_offset=A.elem_offset)
            b16 = T.decl_buffer((taps * sb0,), "uint16", data=B.data, elem_offset=B.elem_offset)
            T.evaluate(_call(tiles_a, C, sc, a16, sa, sa * step, 0, b16, sb, sb0, 0, taps, 1, k, rows))

    return desc, impl


def _flat(rows: int, tiles_a: int, depth: int, stride: int, channels: int, kh: int) -> tuple[Any, Any]:
    """A tile over a stem's channels, window rows and (innermost) window columns, NCHW: each row
    of the tile reads ``depth`` neighbouring columns from its own, ``stride`` columns apart."""
    from tvm.script import tirx as T

    m, k = rows * tiles_a, depth
    span = (m - 1) * stride + k

    @T.prim_func(s_tir=True)
    def desc(a: T.handle, b: T.handle, c: T.handle) -> None:
        A = T.match_buffer(a, (channels, kh, span), "bfloat16", offset_factor=1, strides=[T.int64(), T.int64(), 1])
        B = T.match_buffer(b, (channels, kh, k // 2, PACK, 2), "bfloat16", offset_factor=1,
                           strides=[T.int64(), T.int64(), T.int64(), 2, 1])
        C = T.match_buffer(c, (m, PACK), "float32", offset_factor=1, strides=[T.int64(), 1])
        with T.sblock("root"):
            T.reads(C[0:m, 0:PACK], A[0:channels, 0:kh, 0:span], B[0:channels, 0:kh, 0:k // 2, 0:PACK, 0:2])
            T.writes(C[0:m, 0:PACK])
            for i, j, r0, r1, r in T.grid(m, PACK, channels, kh, k):
                with T.sblock("update"):
                    vi, vj, v0, v1, vr = T.axis.remap("SSRRR", [i, j, r0, r1, r])
                    C[vi, vj] = C[vi, vj] + T.cast(A[v0, v1, vi * stride + vr], "float32") * T.cast(
                        B[v0, v1, vr // 2, vj, vr % 2], "float32")

    @T.prim_func(s_tir=True)
    def impl(a: T.handle, b: T.handle, c: T.handle) -> None:
        sa0, sa1, sb0, sb1, sb, sc = T.int64(), T.int64(), T.int64(), T.int64(), T.int64(), T.int64()
        A = T.match_buffer(a, (channels, kh, span), "bfloat16", offset_factor=1, strides=[sa0, sa1, 1])
        B = T.match_buffer(b, (channels, kh, k // 2, PACK, 2), "bfloat16", offset_factor=1,
                           strides=[sb0, sb1, sb, 2, 1])
        C = T.match_buffer(c, (m, PACK), "float32", offset_factor=1, strides=[sc, 1])
        with T.sblock("root"):
            T.reads(C[0:m, 0:PACK], A[0:channels, 0:kh, 0:span], B[0:channels, 0:kh, 0:k // 2, 0:PACK, 0:2])
            T.writes(C[0:m, 0:PACK])
            a16 = T.decl_buffer((channels * sa0,), "uint16", data=A.data, elem_offset=A.elem_offset)
            b16 = T.decl_buffer((channels * sb0,), "uint16", data=B.data, elem_offset=B.elem_offset)
            T.evaluate(_call(tiles_a, C, sc, a16, T.int64(stride), sa0, sa1, b16, sb, sb0, sb1, channels, kh, k, rows))

    return desc, impl


def _flat_rows(rows: int, tiles_a: int, depth: int, stride: int, kh: int) -> tuple[Any, Any]:
    """A tile over a stem's window rows, each ``depth`` neighbouring values of one input row (its
    window row's columns and channels, ``passes/pack_weights.py``'s ``stem_rows_image``), the
    tile's rows ``stride`` values apart, so they overlap."""
    from tvm.script import tirx as T

    m, k = rows * tiles_a, depth
    span = (m - 1) * stride + k

    @T.prim_func(s_tir=True)
    def desc(a: T.handle, b: T.handle, c: T.handle) -> None:
        A = T.match_buffer(a, (kh, span), "bfloat16", offset_factor=1, strides=[T.int64(), 1])
        B = T.match_buffer(b, (kh, k // 2, PACK, 2), "bfloat16", offset_factor=1, strides=[T.int64(), T.int64(), 2, 1])
        C = T.match_buffer(c, (m, PACK), "float32", offset_factor=1, strides=[T.int64(), 1])
        with T.sblock("root"):
            T.reads(C[0:m, 0:PACK], A[0:kh, 0:span], B[0:kh, 0:k // 2, 0:PACK, 0:2])
            T.writes(C[0:m, 0:PACK])
            for i, j, r0, r in T.grid(m, PACK, kh, k):
                with T.sblock("update"):
                    vi, vj, v0, vr = T.axis.remap("SSRR", [i, j, r0, r])
                    C[vi, vj] = C[vi, vj] + T.cast(A[v0, vi * stride + vr], "float32") * T.cast(
                        B[v0, vr // 2, vj, vr % 2], "float32")

    @T.prim_func(s_tir=True)
    def impl(a: T.handle, b: T.handle, c: T.handle) -> None:
        sa0, sb0, sb, sc = T.int64(), T.int64(), T.int64(), T.int64()
        A = T.match_buffer(a, (kh, span), "bfloat16", offset_factor=1, strides=[sa0, 1])
        B = T.match_buffer(b, (kh, k // 2, PACK, 2), "bfloat16", offset_factor=1, strides=[sb0, sb, 2, 1])
        C = T.match_buffer(c, (m, PACK), "float32", offset_factor=1, strides=[sc, 1])
        with T.sblock("root"):
            T.reads(C[0:m, 0:PACK], A[0:kh, 0:span], B[0:kh, 0:k // 2, 0:PACK, 0:2])
            T.writes(C[0:m, 0:PACK])
            a16 = T.decl_buffer((kh * sa0,), "uint16", data=A.data, elem_offset=A.elem_offset)
            b16 = T.decl_buffer((kh * sb0,), "uint16", data=B.data, elem_offset=B.elem_offset)
            T.evaluate(_call(tiles_a, C, sc, a16, T.int64(stride), 0, sa0, b16, sb, 0, sb0, 1, kh, k, rows))

    return desc, impl


def _paired(rows: int, depth: int, stride: int, window: tuple[int, int] | None, pair: int) -> tuple[Any, Any]:
    """Two A tiles from two output rows ``pair`` input rows apart (NHWC; a 1x1 convolution, or one
    with a window of two axes), the sums ``[2, rows, 32]``: on a map whose row is a single tile
    (14 columns), each B tile then serves two products, as with two tiles along the row."""
    kh, kw = window or (1, 1)
    m, k, hs = rows, depth, kh + pair
    span = (m - 1) * stride + kw
    c_shape, a_shape, b_shape = (2, m, PACK), (hs, span, k), (kh, kw, k // 2, PACK, 2)
    if window is None:
        return _paired_plain(rows, k, stride, pair, c_shape, a_shape)
    return _paired_window(rows, k, stride, pair, c_shape, a_shape, b_shape)


def _paired_plain(rows: int, k: int, stride: int, pair: int, c_shape: tuple[int, ...],
                  a_shape: tuple[int, ...]) -> tuple[Any, Any]:
    """``_paired``'s form for a 1x1 convolution (no window axes)."""
    from tvm.script import tirx as T

    m, hs, span = rows, a_shape[0], a_shape[1]

    @T.prim_func(s_tir=True)
    def desc_plain(a: T.handle, b: T.handle, c: T.handle) -> None:
        A = T.match_buffer(a, a_shape, "bfloat16", offset_factor=1, strides=[T.int64(), T.int64(), 1])
        B = T.match_buffer(b, (k // 2, PACK, 2), "bfloat16", offset_factor=1, strides=[T.int64(), 2, 1])
        C = T.match_buffer(c, c_shape, "float32", offset_factor=1, strides=[T.int64(), T.int64(), 1])
        with T.sblock("root"):
            T.reads(C[0:2, 0:m, 0:PACK], A[0:hs, 0:span, 0:k], B[0:k // 2, 0:PACK, 0:2])
            T.writes(C[0:2, 0:m, 0:PACK])
            for h, i, j, r in T.grid(2, m, PACK, k):
                with T.sblock("update"):
                    vh, vi, vj, vr = T.axis.remap("SSSR", [h, i, j, r])
                    C[vh, vi, vj] = C[vh, vi, vj] + T.cast(A[vh * pair, vi * stride, vr], "float32") * T.cast(
                        B[vr // 2, vj, vr % 2], "float32")

    @T.prim_func(s_tir=True)
    def impl_plain(a: T.handle, b: T.handle, c: T.handle) -> None:
        sa0, sa1, sb, sc0, sc = T.int64(), T.int64(), T.int64(), T.int64(), T.int64()
        A = T.match_buffer(a, a_shape, "bfloat16", offset_factor=1, strides=[sa0, sa1, 1])
        B = T.match_buffer(b, (k // 2, PACK, 2), "bfloat16", offset_factor=1, strides=[sb, 2, 1])
        C = T.match_buffer(c, c_shape, "float32", offset_factor=1, strides=[sc0, sc, 1])
        with T.sblock("root"):
            T.reads(C[0:2, 0:m, 0:PACK], A[0:hs, 0:span, 0:k], B[0:k // 2, 0:PACK, 0:2])
            T.writes(C[0:2, 0:m, 0:PACK])
            a16 = T.decl_buffer((hs * sa0,), "uint16", data=A.data, elem_offset=A.elem_offset)
            b16 = T.decl_buffer((k // 2 * sb,), "uint16", data=B.data, elem_offset=B.elem_offset)
            T.evaluate(_call(2, C, sc, a16, sa1 * stride, 0, 0, b16, sb, 0, 0, 1, 1, k, rows, (sc0, sa0 * pair)))

    return desc_plain, impl_plain


def _paired_window(rows: int, k: int, stride: int, pair: int, c_shape: tuple[int, ...], a_shape: tuple[int, ...],
                   b_shape: tuple[int, ...]) -> tuple[Any, Any]:
    """``_paired``'s form for a convolution with a window of two axes."""
    from tvm.script import tirx as T

    m, (hs, span), (kh, kw) = rows, a_shape[:2], b_shape[:2]

    @T.prim_func(s_tir=True)
    def desc_window(a: T.handle, b: T.handle, c: T.handle) -> None:
        A = T.match_buffer(a, a_shape, "bfloat16", offset_factor=1, strides=[T.int64(), T.int64(), 1])
        B = T.match_buffer(b, b_shape, "bfloat16", offset_factor=1, strides=[T.int64(), T.int64(), T.int64(), 2, 1])
        C = T.match_buffer(c, c_shape, "float32", offset_factor=1, strides=[T.int64(), T.int64(), 1])
        with T.sblock("root"):
            T.reads(C[0:2, 0:m, 0:PACK], A[0:hs, 0:span, 0:k], B[0:kh, 0:kw, 0:k // 2, 0:PACK, 0:2])
            T.writes(C[0:2, 0:m, 0:PACK])
            for h, i, j, r0, r1, r in T.grid(2, m, PACK, kh, kw, k):
                with T.sblock("update"):
                    vh, vi, vj, v0, v1, vr = T.axis.remap("SSSRRR", [h, i, j, r0, r1, r])
                    C[vh, vi, vj] = C[vh, vi, vj] + T.cast(A[v0 + vh * pair, vi * stride + v1, vr], "float32") * T.cast(
                        B[v0, v1, vr // 2, vj, vr % 2], "float32")

    @T.prim_func(s_tir=True)
    def impl(a: T.handle, b: T.handle, c: T.handle) -> None:
        sa0, sa1, sb0, sb1, sb, sc0, sc = T.int64(), T.int64(), T.int64(), T.int64(), T.int64(), T.int64(), T.int64()
        A = T.match_buffer(a, a_shape, "bfloat16", offset_factor=1, strides=[sa0, sa1, 1])
        B = T.match_buffer(b, b_shape, "bfloat16", offset_factor=1, strides=[sb0, sb1, sb, 2, 1])
        C = T.match_buffer(c, c_shape, "float32", offset_factor=1, strides=[sc0, sc, 1])
        with T.sblock("root"):
            T.reads(C[0:2, 0:m, 0:PACK], A[0:hs, 0:span, 0:k], B[0:kh, 0:kw, 0:k // 2, 0:PACK, 0:2])
            T.writes(C[0:2, 0:m, 0:PACK])
            a16 = T.decl_buffer((hs * sa0,), "uint16", data=A.data, elem_offset=A.elem_offset)
            b16 = T.decl_buffer((kh * sb0,), "uint16", data=B.data, elem_offset=B.elem_offset)
            T.evaluate(_call(2, C, sc, a16, sa1 * stride, sa0, sa1, b16, sb, sb0, sb1, kh, kw, k, rows,
                             (sc0, sa0 * pair)))

    return desc_window, impl
