"""Default CPU schedules, in the style of DLight rules, for functions no tuning record covers.

TVM 0.27's DLight CPU rules cover GEMV and row reductions only, so an untuned conv net or
transformer runs naive scalar loops on one core (ResNet-50: ~4 s where PyTorch takes ~80 ms).
These rules match block *patterns*, not layer names, so they apply to any model:

``Contraction``
    A function whose one reduction block writes an output whose innermost axis is contiguous
    in every operand that uses it: NN matmul and batch-matmul, NHWC convolution (weights in
    HWIO, so output channels are contiguous), depthwise convolution, pooling, global means.
    The output is computed in register tiles of ``rows x (vectors * lanes)`` accumulators,
    with the whole reduction running inside the tile (the classic outer-product micro-kernel:
    per reduction step, ``vectors`` contiguous loads and ``rows`` broadcasts feed
    ``rows * vectors`` FMAs). Tiles are distributed over cores; the output-channel tile is the
    outer index so a tile's weight panel stays in L2 while the rows stream past it. The
    elementwise epilogue (bias, batch-norm scale/shift, residual add, ReLU) is computed from
    the accumulators as they are written back, so it costs no extra pass over memory.

``Injective``
    Functions of elementwise, broadcast, layout and padding blocks: one fused loop per block,
    split over cores when large enough to pay for the thread launch, vectorised inside.

``Fallback``
    Tried after DLight's rules: whatever is still unscheduled gets its leading spatial loops
    parallelised, so no function runs as one scalar loop nest on one core.

The compile pipeline turns convolutions to NHWC/HWIO and lifts the weight layout transforms
out of ``main`` (run once at load time), which is what makes convolutions match
``Contraction``. Row reductions (softmax, layer norm) keep DLight's Reduction rule.
"""

from __future__ import annotations

import functools
from typing import Any

import numpy as np

from tvmbench.targets import has_feature

# Accumulator budget: AVX-512 and NEON have 32 vector registers, AVX2 16; leave room for the
# operand loads and the broadcast. A tile beyond the register file spills every accumulator on
# every reduction step: resnet18 built for AVX2 with the 32-register tile ran its convolutions at
# 80 GFLOP/s, against 158 for the AVX-512 build on the same Zen 4 cores (equal FMA throughput).
_MAX_ACCUMULATORS = 24
_MAX_ACCUMULATORS_16_REGS = 12
# A predicated tail tile's worth against a whole one (its predicate sits in every tile's inner
# loop: ViT's 197-row dense layers ran ~20 % slower than at 200 rows).
_PREDICATED_TILE_PERCENT = 80
# ... and for a plain dot product over channels (a 1x1 convolution): on AVX2, resnet50's 1x1
# convolutions on 14x14 maps ran 1.08x faster end to end as one vector over 7 rows than as two
# vectors over a predicated 6, while resnet18's 3x3 ones lost 3 % (same-process A/Bs).
_PREDICATED_DOT_TILE_PERCENT = 50
_MAX_ROWS = 8
# Reductions this short (a pooling or depthwise window) read their padding inline.
_SHORT_REDUCTION = 49
_INLINE_PAD_BYTES = 1 << 20
# Below this many output elements, a parallel loop costs more in thread wake-up than it saves.
_PARALLEL_MIN_ELEMENTS = 8192
# When the operands that do not depend on the row axis (a convolution's weights, the second
# operand of a matmul) are at most this large, the tiles run spatial-outer with the output-channel
# tiles inner: the weights stay in L2 and the input is read once, instead of once per channel tile
# (same-process A/Bs against channel-outer: resnet18 1.12x, mobilenet_v2 1.09x, resnet50 1.05x,
# bert-base 1.03x). Larger weights (deep ResNet layers, BERT's dense layers) keep channel-outer,
# where one tile's weight panel stays in cache while the smaller input is swept.
_SPATIAL_OUTER_WEIGHT_BYTES = 1 << 20
# A 1x1 convolution whose output (larger than this) only feeds a window reduction (mobilenet's
# expansion into its depthwise convolution) is computed band by band inside that reduction's
# tiles (pipeline.fuse_expansion_into_window), so the expanded tensor never leaves the cache.
_FUSE_EXPANSION_BYTES = 1 << 20
# Output rows of the window reduction per tile of the fused kernel: the expansion is recomputed
# for the window's halo, (rows * stride + k - stride) / (rows * stride) of it.
_FUSED_BAND_ROWS = 8
# Reductions this short (a 3x3 window, a 3x3x3 stem convolution) are unrolled whole: their loops
# of 3 cost more in branches and index arithmetic than the tile's FMAs.
_UNROLL_REDUCTION = 27


def _vector_bits(target: Any) -> int:
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


def _vector_lanes(target: Any, dtype_bits: int) -> int:
    return max(_vector_bits(target) // dtype_bits, 1)


def _accumulator_budget(target: Any) -> int:
    """Vector accumulators a register tile may hold on this target."""
    triple = str(target.attrs.get("mtriple", "") or "")
    if triple.startswith(("aarch64", "arm64")) or has_feature(target, "avx512f"):
        return _MAX_ACCUMULATORS  # 32 vector registers (AArch64 NEON/SVE, AVX-512)
    return _MAX_ACCUMULATORS_16_REGS


def _row_tile(rows_extent: int, limit: int) -> tuple[int, bool]:
    """Rows of a register tile at most ``limit``: the largest divisor of the row extent, else
    (no divisor from 4 up) a predicated tail tile. Says whether it is predicated."""
    rows = _largest_divisor(rows_extent, min(_MAX_ROWS, limit))
    if rows < 4 and rows_extent > _MAX_ROWS:
        return min(_MAX_ROWS, limit), True
    return rows, False


def _register_tile(rows_extent: int | None, vector_choices: list[int], budget: int,
                   predicated_percent: int | None = None) -> tuple[int, int]:
    """(vectors, rows) of the register tile: the one with most FMAs per load within the budget.

    Each reduction step loads ``vectors`` weight vectors and broadcasts ``rows`` inputs to feed
    ``rows * vectors`` FMAs. With 32 registers two vectors always win (2 x 8 accumulators); with
    16 (AVX2) two vectors allow at most 6 rows, and a 7-row axis (a 7x7 feature map) is better
    served by one vector over 7 rows than by two vectors over one."""
    if rows_extent is None:
        return vector_choices[0], 1
    best: tuple[float, int, int] | None = None
    for vectors in vector_choices:
        rows, predicated = _row_tile(rows_extent, max(budget // vectors, 1))
        penalty = (_PREDICATED_TILE_PERCENT if predicated_percent is None else predicated_percent) / 100
        score = rows * vectors / (rows + vectors) * (penalty if predicated else 1.0)
        if best is None or score > best[0]:
            best = (score, vectors, rows)
    assert best is not None
    return best[1], best[2]


def packed_tile_vectors(target: Any, rows_extent: int, dot: bool = False) -> int:
    """Vectors of the register tile over a packed weight whose output rows number
    ``rows_extent``: what the weight packing needs to make one tile's panel one contiguous stream
    (a tile reading half of each packed row fetches every cache line twice)."""
    return _register_tile(rows_extent, [2, 1], _accumulator_budget(target),
                          _PREDICATED_DOT_TILE_PERCENT if dot else None)[0]


def _bits(dtype: Any) -> int:
    import tvm

    return int(tvm.DataType(str(dtype)).bits)


def _int(expr: Any) -> int | None:
    try:
        return int(expr)
    except (TypeError, ValueError):
        return None


def _coefficient(index: Any, var: Any) -> int | None:
    """Coefficient of ``var`` in a linear index expression (None if not linear in it)."""
    from tvm.sym.pattern import detect_linear_equation

    if not _uses(index, var):
        return 0
    coeffs = detect_linear_equation(index, [var])
    if len(coeffs) != 2:
        return None
    return _int(coeffs[0])


def _packed(index: Any, var: Any, innermost: bool) -> int | None:
    """P when ``index`` is ``var % P`` in the innermost dimension or ``var // P`` in another one."""
    import tvm

    kind = tvm.tirx.FloorMod if innermost else tvm.tirx.FloorDiv
    if isinstance(index, kind) and index.a.same_as(var):
        return _int(index.b)
    return None


def _uses(expr: Any, var: Any) -> bool:
    from tvm.s_tir.dlight.analysis.common_analysis import collect_vars_used_in_prim_expr

    return any(v.same_as(var) for v in collect_vars_used_in_prim_expr(expr))


def _shape(buffer: Any) -> list[int | None]:
    return [_int(d) for d in buffer.shape]


def _largest_divisor(n: int, limit: int) -> int:
    for d in range(min(n, limit), 0, -1):
        if n % d == 0:
            return d
    return 1


def _vector_width(extent: int, lanes: int) -> int:
    """Widest power-of-two vector (at most the target's lanes) that divides the axis exactly;
    a remainder would put a predicate inside the vector loop and defeat vectorisation."""
    width = lanes
    while width >= 4:
        if extent % width == 0:
            return width
        width //= 2
    return 1


def _schedule_injective_block(sch: Any, block: Any, lanes: int) -> None:
    """Vectorise the innermost loop, spread the loops around it over the cores.

    The loop nest keeps its shape (rather than being fused into one flat loop) so that every
    index stays affine in the loop variables: a flat loop over a transpose or a broadcast would
    need a division and a modulo per element and per dimension, which costs more than the copy.
    """
    loops = sch.get_loops(block)
    if not loops:
        return
    extents = [_int(sch.get(loop).extent) for loop in loops]
    if any(e is None for e in extents):
        return
    total = int(np.prod(extents))
    width = _vector_width(extents[-1], lanes)
    inner = loops[-1]
    if width > 1:
        inner, vec = sch.split(inner, factors=[None, width])
        sch.vectorize(vec)
    if total < _PARALLEL_MIN_ELEMENTS:
        return
    outer = loops[:-1]
    if outer and int(np.prod(extents[:-1])) >= 2:
        sch.parallel(sch.fuse(*outer) if len(outer) > 1 else outer[0])
    else:
        # One long loop: chunks of 64 vectors, so the tail predicate (if any) sits on this scalar
        # loop and thread hand-offs stay few.
        par, _ = sch.split(inner, factors=[None, 64])
        sch.parallel(par)


def _is_copy(block: Any) -> bool:
    """A block that stores exactly what it loads at the same indices (no padding condition)."""
    if len(block.reads) != 1 or len(block.writes) != 1:
        return False
    read, write = block.reads[0].region, block.writes[0].region
    return len(read) == len(write) and all(str(r.min) == str(w.min) and int(r.extent) == 1 == int(w.extent)
                                           for r, w in zip(read, write, strict=True)) \
        and "if_then_else" not in str(block.body)


def _contraction_schedule(func: Any, target: Any) -> Any:
    return _tile_contraction(func, target, may_pad=True)


def _padding(extents: list[int], n_axis: int, lanes: int) -> list[int] | None:
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


def _tile_contraction(func: Any, target: Any, may_pad: bool, einsum_padded: bool = False) -> Any:
    from tvm import s_tir
    from tvm.s_tir.dlight.analysis import normalize_prim_func

    sch = s_tir.Schedule(func)
    infos = normalize_prim_func(sch)
    if not infos:
        return None
    reductions = [b for b in infos if not b.is_injective()]
    if len(reductions) != 1 or any(k not in "SR" for k in reductions[0].dom_kind()):
        return None
    main = reductions[0]
    block = sch.get(main.block_rv)
    if len(block.writes) != 1:
        return None
    out_buffer = block.writes[0].source
    out_region = block.writes[0].region
    lanes = _vector_lanes(target, _bits(out_buffer.dtype))

    iter_vars = [iv.var for iv in block.iter_vars]
    kinds = main.dom_kind()
    extents = [_int(e) for e in main.dom()]
    if any(e is None for e in extents):
        return None  # dynamic shapes: leave to DLight/MetaSchedule

    def spatial_index_var(dim: int) -> int | None:
        r = out_region[dim]
        for i, v in enumerate(iter_vars):
            if kinds[i] == "S" and r.min.same_as(v):
                return i
        return None

    n_axis = spatial_index_var(len(out_region) - 1)
    if n_axis is None or extents[n_axis] < 4:
        return None
    n_var = iter_vars[n_axis]
    # Every operand must either not depend on the vector axis (broadcast) or read it contiguously
    # in its innermost dimension; anything else (a transposed operand, a row reduction) is a gather.
    # A packed operand (``w[n // P, ..., n % P]``, see pipeline.pack_conv_weights) is contiguous
    # within each tile when the tile divides P.
    packs = []
    for read in block.reads:
        region = read.region
        for d, r in enumerate(region):
            last = d == len(region) - 1
            c = _coefficient(r.min, n_var)
            if c is None:
                block_size = _packed(r.min, n_var, last)
                if block_size is None:
                    return None
                packs.append(block_size)
            elif (not last and c != 0) or (last and c not in (0, 1)):
                return None

    # The row axis: the output's next-to-innermost spatial axis, else the longest other one.
    m_axis = spatial_index_var(len(out_region) - 2) if len(out_region) >= 2 else None
    if m_axis is None or extents[m_axis] == 1:
        others = [i for i, k in enumerate(kinds) if k == "S" and i != n_axis and extents[i] > 1]
        m_axis = max(others, key=lambda i: extents[i]) if others else None

    padded = _padding(extents, n_axis, lanes) if may_pad and not packs else None
    if padded is not None:
        try:
            # Only a plain einsum (operands indexed by the loop variables) can be padded; the
            # operands get padded copies, the output a padded buffer sliced into the real one.
            sch.pad_einsum(main.block_rv, padded)
        except Exception:
            return _tile_contraction(func, target, may_pad=False)  # a convolution: tiles with a tail
        return _tile_contraction(sch.mod["main"], target, may_pad=False, einsum_padded=True)

    # Producers: a plain copy (the "padding" of a 1x1 convolution) is inlined, it would only cost
    # a pass over memory. Real padding stays a separate parallel loop nest, so the tile's loads
    # carry no bounds check, except under a short reduction (pooling, depthwise convolution: a
    # 3x3 window per output) with a strided or cache-sized input: there the copy is a pass over
    # memory for 9 operations per output (for stride 2, over 4 inputs per output), and a bounds
    # check per load is the cheaper of the two (mobilenet_v2's stride-2 depthwise convolutions
    # 1.4-2.3x faster; the stride-1 ones over 1 MB ran 4-9 % slower inline, so they keep it).
    window = int(np.prod([e for e, k in zip(extents, kinds, strict=True) if k == "R"]))
    out_elems = int(np.prod([e for e, k in zip(extents, kinds, strict=True) if k == "S"]))
    for info in infos[: infos.index(main)]:
        if not info.is_injective():
            continue
        produced = sch.get(info.block_rv).writes[0].source
        in_elems = int(np.prod([_int(d) or 0 for d in produced.shape]))
        short = window <= _SHORT_REDUCTION and (in_elems * _bits(produced.dtype) // 8 <= _INLINE_PAD_BYTES
                                                or in_elems >= 3 * out_elems)
        # (pad_einsum's padded operands are left alone: their bounds check is on the vector axis.)
        if _is_copy(sch.get(info.block_rv)) or (short and not einsum_padded):
            try:
                sch.compute_inline(info.block_rv)
                continue
            except Exception:
                pass
        _schedule_injective_block(sch, info.block_rv, lanes)
    # Epilogue: fold the chain of elementwise consumers into one block reading the reduction.
    consumers = infos[infos.index(main) + 1:]
    if any(not c.is_injective() for c in consumers):
        return None
    # Each block is inlined into the ones that read it, leaving the last: a value used twice
    # (GELU's ``x * f(x)``) cannot be reverse-inlined into a single consumer.
    for info in consumers[:-1]:
        sch.compute_inline(info.block_rv)
    epilogue = consumers[-1].block_rv if consumers else None

    width = _vector_width(extents[n_axis], lanes)
    n_vectors_total = extents[n_axis] // width
    rows_wanted = 1 if m_axis is None else min(_MAX_ROWS, extents[m_axis])
    choices = [v for v in ((4, 2, 1) if rows_wanted == 1 else (2, 1))
               if n_vectors_total % v == 0 and all(p % (v * width) == 0 for p in packs)]
    if not choices:
        return None
    dot = sum(1 for e, k in zip(extents, kinds, strict=True) if k == "R" and e > 1) == 1
    vectors, rows = _register_tile(None if m_axis is None else extents[m_axis], choices,
                                   _accumulator_budget(target), _PREDICATED_DOT_TILE_PERCENT if dot else None)

    loops = sch.get_loops(main.block_rv)
    n_outer, n_vec_i, n_lane = sch.split(loops[n_axis], factors=[None, vectors, width])
    outer_spatial = [n_outer]
    inner = []
    if m_axis is not None:
        m_outer, m_inner = sch.split(loops[m_axis], factors=[None, rows])
        inner.append(m_inner)
    for i, k in enumerate(kinds):
        if k == "S" and i not in (n_axis, m_axis):
            outer_spatial.append(loops[i])
    if m_axis is not None:
        outer_spatial.append(m_outer)
        # Small weights (all of them under _SPATIAL_OUTER_WEIGHT_BYTES) stay in cache while the
        # input is read once: the output-channel tiles go innermost instead of outermost.
        m_var = iter_vars[m_axis]
        weight_bytes = sum(int(np.prod([_int(d) or 0 for d in r.source.shape])) * _bits(r.source.dtype) // 8
                           for r in block.reads if not r.source.same_as(out_buffer)
                           and not any(_uses(x.min, m_var) for x in r.region))
        if weight_bytes and weight_bytes <= _SPATIAL_OUTER_WEIGHT_BYTES:
            outer_spatial = outer_spatial[1:] + outer_spatial[:1]
    reduce_loops = [loops[i] for i, k in enumerate(kinds) if k == "R"]
    sch.reorder(*outer_spatial, *reduce_loops, *inner, n_vec_i, n_lane)
    tile = sch.fuse(*outer_spatial)
    total_tiles = _int(sch.get(tile).extent) or 0
    if total_tiles > 1:
        sch.parallel(tile)
    for loop in inner + [n_vec_i] + (reduce_loops if window <= _UNROLL_REDUCTION else []):
        sch.unroll(loop)
    if width > 1:
        sch.vectorize(n_lane)

    # Accumulate in a tile-sized buffer (promoted to registers by LLVM), written back once with
    # the epilogue applied.
    writeback = sch.cache_write(main.block_rv, 0, "global")
    if epilogue is not None:
        try:
            # Only an epilogue over the whole output joins the write-back: TVM inlines a slice of
            # it (the padding cut off a padded matmul) without bounding the write-back's loops.
            if _shape(sch.get(epilogue).writes[0].source) != _shape(out_buffer):
                raise ValueError("the epilogue covers part of the output")
            sch.reverse_compute_inline(epilogue)
        except Exception:
            _schedule_injective_block(sch, epilogue, lanes)  # it then runs as its own loop nest
    sch.reverse_compute_at(writeback, tile, preserve_unit_loops=True)
    wb_loops = sch.get_loops(writeback)[1:]
    if wb_loops and width > 1:
        _, vec = sch.split(wb_loops[-1], factors=[None, width])
        sch.vectorize(vec)
    if reduce_loops:
        init = sch.decompose_reduction(main.block_rv, reduce_loops[0])
        init_loops = sch.get_loops(init)
        if width > 1 and init_loops:
            sch.vectorize(init_loops[-1])
    return sch


def _single_reduction(func: Any) -> tuple[list[int], list[int]] | None:
    """(reduction extents above 1, output shape) of a function with one reduction block."""
    from tvm import s_tir
    from tvm.s_tir.dlight.analysis import normalize_prim_func

    infos = normalize_prim_func(sch := s_tir.Schedule(func))
    reductions = [b for b in infos or [] if not b.is_injective()]
    if len(reductions) != 1:
        return None
    extents = [_int(e) for e in reductions[0].dom()]
    if any(e is None for e in extents):
        return None
    shape = _shape(sch.get(reductions[0].block_rv).writes[0].source)
    return [e for e, k in zip(extents, reductions[0].dom_kind(), strict=True) if k == "R" and e > 1], shape


def fusion_role(func: Any) -> str | None:
    """``"dot"`` for a 1x1 convolution (one reduction axis, NHWC output), ``"window"`` for a
    per-channel window reduction (depthwise convolution, pooling: two reduction axes of at most
    7), else None: the two halves the expansion fusion joins."""
    try:
        found = _single_reduction(func)
    except Exception:
        return None
    if found is None or len(found[1]) != 4 or None in found[1] or found[1][0] != 1:
        return None
    reduce, shape = found
    if len(reduce) == 1:
        return "dot"
    if len(reduce) == 2 and max(reduce) <= 7 and shape[1] >= 4:
        return "window"
    return None


def _expand_window_schedule(func: Any, target: Any) -> Any:
    """A 1x1 convolution computed inside the window reduction that consumes it.

    Each parallel task owns a block of channels and a band of the window's output rows; it
    computes the convolution for the rows the band reads (halo included), applies its epilogue
    and padding, then the window, all on a tile of some hundred KB that stays in L2. Unfused,
    mobilenet_v2's 16->96 expansion at 112x112 wrote 4.8 MB at 68 GFLOP/s, bound by memory,
    and the depthwise convolution read it all back.
    """
    from tvm import s_tir
    from tvm.s_tir.dlight.analysis import normalize_prim_func

    sch = s_tir.Schedule(func)
    infos = normalize_prim_func(sch)
    reductions = [i for i, b in enumerate(infos or []) if not b.is_injective()]
    if len(reductions) != 2:
        return None
    ia, ib = reductions
    dot, window = infos[ia].block_rv, infos[ib].block_rv
    out = sch.get(window).writes[0].source
    shape = _shape(out)
    if len(shape) != 4 or shape[0] != 1 or None in shape:
        return None
    rows_out, cols_out, channels = shape[1:]
    lanes = _vector_lanes(target, _bits(out.dtype))
    budget = _accumulator_budget(target)
    kinds = infos[ib].dom_kind()
    block = sch.get(window)
    spatial_vars = [str(iv.var) for iv, k in zip(block.iter_vars, kinds, strict=True) if k == "S"]
    if (kinds.count("R") != 2 or channels % lanes
            or spatial_vars != [str(r.min) for r in block.writes[0].region[1:]]):
        return None  # not an NHWC window over (rows, columns, channels)
    mid, post = infos[ia + 1:ib], infos[ib + 1:]
    if any(not _is_copy(sch.get(b.block_rv)) for b in infos[:ia]) or any(not b.is_injective() for b in post):
        return None
    for info in infos[:ia]:  # the 1x1 convolution's input copy
        sch.compute_inline(info.block_rv)
    # The convolution's epilogue joins the window's padding: one block computing the padded,
    # activated tile the window reads.
    for info in mid[:-1] + post[:-1]:
        sch.compute_inline(info.block_rv)
    padded = mid[-1].block_rv if mid else None
    epilogue = post[-1].block_rv if post else None

    # A cache line of channels (16 fp32) per task and per register tile: one AVX-512 vector, two
    # AVX2 ones. Three AVX-512 vectors (48 channels, 24 accumulators) ran mobilenet_v2's three
    # joined kernels 1.3-1.4x slower alone and the model 1.07-1.10x slower; for AVX2, one vector
    # instead of two was 1.03-1.18x slower alone.
    line_vectors = max(1, 512 // (lanes * _bits(out.dtype)))
    vectors = next(v for v in (line_vectors, 1) if channels % (v * lanes) == 0)
    loops = sch.get_loops(window)
    spatial = [loop for loop, k in zip(loops, kinds, strict=True) if k == "S"]
    reduce = [loop for loop, k in zip(loops, kinds, strict=True) if k == "R"]
    c_outer, c_vec, c_lane = sch.split(spatial[2], factors=[None, vectors, lanes])
    band_outer, band = sch.split(spatial[0], factors=[None, _largest_divisor(rows_out, _FUSED_BAND_ROWS)])
    rows = _largest_divisor(cols_out, min(_MAX_ROWS, max(budget // vectors, 1)))
    w_outer, w_inner = sch.split(spatial[1], factors=[None, rows])
    sch.reorder(c_outer, band_outer, band, w_outer, *reduce, w_inner, c_vec, c_lane)
    task = sch.fuse(c_outer, band_outer)
    sch.parallel(task)
    _register_tile_loops(sch, window, w_inner, c_vec, c_lane, w_outer, reduce[0], lanes, epilogue)

    if padded is not None:
        sch.compute_at(padded, task, preserve_unit_loops=True)
        _, lane = sch.split(sch.get_loops(padded)[-1], factors=[None, lanes])
        sch.vectorize(lane)
    sch.compute_at(dot, task, preserve_unit_loops=True)
    d_rows, d_cols, d_channels, d_reduce = sch.get_loops(dot)[1:]
    d_outer, d_inner = sch.split(d_cols, factors=[None, _largest_divisor(_int(sch.get(d_cols).extent) or 1, rows)])
    d_vec, d_lane = sch.split(d_channels, factors=[vectors, lanes])
    sch.reorder(d_rows, d_outer, d_reduce, d_inner, d_vec, d_lane)
    _register_tile_loops(sch, dot, d_inner, d_vec, d_lane, d_outer, d_reduce, lanes, None)
    return sch


def _register_tile_loops(sch: Any, block: Any, rows: Any, vecs: Any, lane: Any, tile: Any, first_reduce: Any,
                         lanes: int, epilogue: Any) -> None:
    """Unroll and vectorise a register tile, accumulate it in a tile buffer written back once
    (with ``epilogue`` applied) under ``tile``, and split off the initialisation."""
    sch.unroll(rows)
    sch.unroll(vecs)
    sch.vectorize(lane)
    writeback = sch.cache_write(block, 0, "global")
    if epilogue is not None:
        sch.reverse_compute_inline(epilogue)
    sch.reverse_compute_at(writeback, tile, preserve_unit_loops=True)
    _, vec = sch.split(sch.get_loops(writeback)[-1], factors=[None, lanes])
    sch.vectorize(vec)
    init = sch.decompose_reduction(block, first_reduce)
    sch.vectorize(sch.get_loops(init)[-1])


def _winograd_schedule(func: Any, target: Any) -> Any:
    """The input and output transforms of a Winograd convolution (``compile/winograd.py``).

    Both select their coefficients by the position inside the transformed or the output tile:
    those position loops are unrolled inside the channel-vector loop, so every selection resolves
    at compile time and each unrolled body is a straight sum of vector loads. The output
    transform's consumers (bias, residual add, ReLU) are inlined into it: the tile is written
    once, finished. Tiles are spread over the cores.
    """
    import math

    from tvm import s_tir
    from tvm.s_tir.dlight.analysis import normalize_prim_func

    sch = s_tir.Schedule(func)
    infos = normalize_prim_func(sch)
    if not infos or not all(b.is_injective() for b in infos):
        return None
    names = [sch.get(b.block_rv).name_hint for b in infos]
    if any(n.startswith("winograd_input") for n in names):
        (transform,) = [b.block_rv for b, n in zip(infos, names, strict=True) if n.startswith("winograd_input")]
        out = sch.get(transform).writes[0].source
        lanes = _vector_lanes(target, _bits(out.dtype))
        for info, name in zip(infos, names, strict=True):
            if not name.startswith("winograd_input"):
                _schedule_injective_block(sch, info.block_rv, lanes)
        pos, tiles, channels = sch.get_loops(transform)
        width = _vector_width(_int(sch.get(channels).extent) or 1, lanes)
        c_outer, c_lane = sch.split(channels, factors=[None, width])
        sch.reorder(tiles, c_outer, pos, c_lane)
        sch.parallel(tiles)
        sch.unroll(pos)
        sch.vectorize(c_lane)
        return sch
    if not any(n.startswith("winograd_output") for n in names):
        return None
    (transform,) = [b.block_rv for b, n in zip(infos, names, strict=True) if n.startswith("winograd_output")]
    products = [r.source for r in sch.get(transform).reads if len(r.source.shape) == 3]
    alpha = math.isqrt(_int(products[0].shape[0]) or 0) if products else 0
    m = alpha - 2
    shape = _shape(sch.get(transform).writes[0].source)
    # Everything else is the convolution's elementwise epilogue over the same output.
    for info in infos[:-1]:
        sch.compute_inline(info.block_rv)
    last = infos[-1].block_rv
    out = sch.get(last).writes[0].source
    # (the batch loop is gone when the batch is 1: normalize_prim_func drops unit loops)
    loops = sch.get_loops(last)
    if m < 2 or len(loops) < 3 or _shape(out) != shape \
            or [_int(sch.get(loop).extent) for loop in loops[-3:]] != shape[-3:]:
        return None
    lanes = _vector_lanes(target, _bits(out.dtype))
    *batch, rows, cols, channels = loops
    width = _vector_width(_int(sch.get(channels).extent) or 1, lanes)
    r_outer, r_inner = sch.split(rows, factors=[None, m])
    w_outer, w_inner = sch.split(cols, factors=[None, m])
    c_outer, c_lane = sch.split(channels, factors=[None, width])
    sch.reorder(*batch, r_outer, w_outer, c_outer, r_inner, w_inner, c_lane)
    sch.parallel(sch.fuse(*batch, r_outer, w_outer))
    sch.unroll(r_inner)
    sch.unroll(w_inner)
    sch.vectorize(c_lane)
    return sch


def _row_reduction_schedule(func: Any, target: Any) -> Any:
    """Row-wise normalisations (layer norm, softmax): reductions over the contiguous last axis,
    then an elementwise output over the same rows. One parallel task per row computes every
    reduction as vector partial sums (rfactor over the vector lanes), folds the lanes, and writes
    the row vectorised. DLight's CPU Reduction rule keeps one scalar accumulator per row: a chain
    of dependent adds that cannot be reordered without fast-math (bert-base's layer norm 8x
    slower, its softmax 1.9x)."""
    import tvm
    from tvm import s_tir
    from tvm.s_tir.dlight.analysis import normalize_prim_func
    from tvm.s_tir.dlight.base.common_schedules import try_inline_contiguous_spatial

    sch = s_tir.Schedule(func)
    infos = normalize_prim_func(sch)
    if not infos:
        return None
    infos = try_inline_contiguous_spatial(sch, infos)
    reductions = [b for b in infos if not b.is_injective()]
    out = infos[-1]
    if not reductions or not out.is_injective() or not sch.get(out.block_rv).writes:
        return None
    lanes = _vector_lanes(target, _bits(sch.get(out.block_rv).writes[0].source.dtype))
    rows = None
    for info in reductions:
        kinds, extents = info.dom_kind(), [_int(e) for e in info.dom()]
        if (len(kinds) < 2 or kinds != "S" * (len(kinds) - 1) + "R" or any(e is None for e in extents)
                or extents[-1] % lanes or (rows is not None and extents[:-1] != rows)):
            return None
        rows = extents[:-1]
        # The reduced axis must be the innermost, contiguous axis of everything the block reads.
        block = sch.get(info.block_rv)
        r_var = block.iter_vars[-1].var
        for read in block.reads:
            for d, r in enumerate(read.region):
                c = _coefficient(r.min, r_var)
                if c is None or (d < len(read.region) - 1 and c != 0) or c not in (0, 1):
                    return None
    out_extents = [_int(e) for e in out.dom()]
    if out_extents[:-1] != rows or out_extents[-1] is None or out_extents[-1] % lanes:
        return None

    rfactored = set()
    for info in reductions:
        _, lane = sch.split(sch.get_loops(info.block_rv)[-1], factors=[None, lanes])
        written = sch.get(info.block_rv).writes[0].source
        rfactored.add(sch.get(sch.rfactor(lane, factor_axis=len(written.shape))).name_hint)
    out_loops = sch.get_loops(out.block_rv)
    row = sch.fuse(*out_loops[:-1]) if len(out_loops) > 2 else out_loops[0]
    if int(np.prod(out_extents)) >= _PARALLEL_MIN_ELEMENTS:
        sch.parallel(row)
    _, vec = sch.split(out_loops[-1], factors=[None, lanes])
    sch.vectorize(vec)
    root = sch.get_sblock("root")
    out_name = sch.get(out.block_rv).name_hint
    names = [sch.get(b).name_hint for b in sch.get_child_blocks(root)]
    for name in reversed(names):
        if name != out_name:
            sch.compute_at(sch.get_sblock(name), row, preserve_unit_loops=True)
    for name in names:
        if name == out_name:
            continue
        block_rv = sch.get_sblock(name)
        loops = sch.get_loops(block_rv)[1:]
        if name in rfactored:
            # compute_at orders the loops as the block's iterators: lanes first, reduction last.
            sch.reorder(loops[-1], loops[0])
            loops = sch.get_loops(block_rv)[1:]
            sch.vectorize(loops[-1])
            init = sch.decompose_reduction(block_rv, loops[0])
            sch.vectorize(sch.get_loops(init)[-1])
        elif all(iv.iter_type != tvm.tirx.IterVar.CommReduce for iv in sch.get(block_rv).iter_vars):
            extent = _int(sch.get(loops[-1]).extent) if loops else None
            if extent and extent % lanes == 0:
                _, vec = sch.split(loops[-1], factors=[None, lanes])
                sch.vectorize(vec)
        else:
            for loop in loops:  # folding the lanes of the partial sums
                sch.unroll(loop)
    return sch


def _injective_schedule(func: Any, target: Any) -> Any:
    from tvm import s_tir
    from tvm.s_tir.dlight.analysis import normalize_prim_func

    sch = s_tir.Schedule(func)
    infos = normalize_prim_func(sch)
    if not infos or not all(b.is_injective() for b in infos):
        return None
    return _schedule_every_block(sch, infos, target)


def _fallback_schedule(func: Any, target: Any) -> Any:
    """Anything the other rules left: at least spread each loop nest's leading spatial loops over
    the cores and vectorise elementwise blocks, rather than run one scalar loop on one core."""
    from tvm import s_tir
    from tvm.s_tir.dlight.analysis import normalize_prim_func

    sch = s_tir.Schedule(func)
    infos = normalize_prim_func(sch)
    return _schedule_every_block(sch, infos, target) if infos else None


def _schedule_every_block(sch: Any, infos: list[Any], target: Any) -> Any:
    from tvm.s_tir.dlight.base.common_schedules import try_inline_contiguous_spatial

    for info in try_inline_contiguous_spatial(sch, infos):
        block = sch.get(info.block_rv)
        lanes = _vector_lanes(target, _bits(block.writes[0].source.dtype) if block.writes else 32)
        if info.is_injective():
            _schedule_injective_block(sch, info.block_rv, lanes)
            continue
        kinds = info.dom_kind()
        lead = len(kinds) - len(kinds.lstrip("S"))
        extents = [_int(e) for e in info.dom()]
        if lead == 0 or any(e is None for e in extents):
            continue
        loops = sch.get_loops(info.block_rv)[:lead]
        fused = sch.fuse(*loops) if lead > 1 else loops[0]
        if int(np.prod(extents)) >= _PARALLEL_MIN_ELEMENTS:
            sch.parallel(fused)
    return sch


@functools.cache
def _rule_classes() -> dict[str, type]:
    """Built on first use, so importing tvmbench does not import TVM."""
    import tvm
    from tvm.s_tir.dlight.cpu.base import CPUScheduleRule

    def make(name: str, schedule: Any, doc: str) -> type:
        def apply(self: Any, func: Any, target: Any, tunable: bool) -> Any:
            if not isinstance(func, tvm.tirx.PrimFunc) or not self.is_target_available(target):
                return None
            try:
                return schedule(func, target)
            except Exception:
                return None  # a pattern this rule half-matches: leave it to the next rule

        return type(name, (CPUScheduleRule,), {"apply": apply, "__doc__": doc})

    return {
        "Winograd": make("Winograd", _winograd_schedule,
                         "The input and output transforms of a Winograd convolution, tile positions unrolled."),
        "ExpandWindow": make("ExpandWindow", _expand_window_schedule,
                             "A 1x1 convolution computed band by band inside the window reduction it feeds."),
        "Contraction": make("Contraction", _contraction_schedule, "Register-tiled reductions (matmul/conv/pool)."),
        "Injective": make("Injective", _injective_schedule, "Parallel, vectorised elementwise/layout loops."),
        "RowReduction": make("RowReduction", _row_reduction_schedule,
                             "Layer norm and softmax: per-row vector partial sums, rows in parallel."),
        "Fallback": make("Fallback", _fallback_schedule, "Parallel outer loops for whatever is left."),
    }


def rules() -> list[Any]:
    """The rule instances tried before DLight's, in order (first match wins)."""
    return [_rule_classes()[name]() for name in ("Winograd", "ExpandWindow", "Contraction", "Injective",
                                                   "RowReduction")]


def fallback_rule() -> Any:
    """The last rule of the CPU list, after DLight's GEMV and Reduction rules."""
    return _rule_classes()["Fallback"]()
