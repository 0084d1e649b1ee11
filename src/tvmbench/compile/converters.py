"""Converters for torch ops that TVM 0.27's ``from_exported_program`` imports wrongly or not at all.

Each one was found by running a small model through TVM and PyTorch and comparing outputs
(``tests/test_compile.py::test_ops_tvm_imported_wrongly_match_pytorch``), or refused by TVM
(``test_ops_tvm_refused_are_converted_...``); each replaces TVM's converter for one op name,
keyed as torch.export writes it. A form a converter does not handle is refused with the
importer's unsupported-op error (``_refuse``), never converted approximately. They emit plain
Relax operators, so the rest of the pipeline (layout conversion, fusion, the schedule rules) sees
nothing unusual. ``benchmarks/op_battery.py`` runs the 200 small models they were found with.
"""

from __future__ import annotations

import math
import operator
from typing import Any

import numpy as np

from tvmbench.compile.ir import static_shape
from tvmbench.compile.onnx_converters import resample


def _arg(node: Any, index: int, name: str, default: Any) -> Any:
    return node.args[index] if len(node.args) > index else node.kwargs.get(name, default)


def _refuse(node: Any, why: str) -> None:
    """A form of the op that is not converted: the importer's "unsupported op" error (one line
    naming the op, the other frameworks still run), never a wrong result."""
    raise NotImplementedError(f"Unsupported function types ['{node.target.__name__} ({why})']")


def cumsum_bool_to_int64(node: Any, importer: Any) -> Any:
    """torch.cumsum on a bool tensor yields int64 in PyTorch, but TVM's converter keeps bool and
    LLVM codegen then fails (CreateAdd on i1). transformers' GPT-2 mask code does exactly this."""
    from tvm import relax

    x = importer.env[node.args[0]]
    dim = _arg(node, 1, "dim", None)
    dtype = node.kwargs.get("dtype", None)
    dtype = importer._convert_data_type(str(dtype), importer.env) if dtype is not None else None
    if dtype is None and x.ty.dtype == "bool":
        x = importer.block_builder.emit(relax.op.astype(x, "int64"))
    return importer.block_builder.emit(relax.op.cumsum(x, dim, dtype))


def elu(node: Any, importer: Any) -> Any:
    """``elu(x, alpha, scale, input_scale)``: torch.export writes SELU as an ELU with ``scale``
    1.0507, which TVM's converter drops (every SELU output 5 % off)."""
    from tvm import relax

    x = importer.env[node.args[0]]
    alpha, scale, input_scale = (float(_arg(node, i, n, 1.0)) for i, n in
                                 ((1, "alpha"), (2, "scale"), (3, "input_scale")))
    c = lambda v: relax.const(v, x.ty.dtype)  # noqa: E731
    negative = relax.op.minimum(x, c(0.0))
    if input_scale != 1.0:
        negative = relax.op.multiply(negative, c(input_scale))
    out = relax.op.add(relax.op.maximum(x, c(0.0)),
                       relax.op.multiply(c(alpha), relax.op.subtract(relax.op.exp(negative), c(1.0))))
    return importer.block_builder.emit(out if scale == 1.0 else relax.op.multiply(out, c(scale)))


def amax_amin(reduce: str) -> Any:
    """``amax``/``amin`` (torch.logsumexp is written with amax), which TVM 0.27 does not convert."""

    def convert(node: Any, importer: Any) -> Any:
        from tvm import relax

        x = importer.env[node.args[0]]
        dims = _arg(node, 1, "dim", None) or None
        dims = [dims] if isinstance(dims, int) else dims
        keep = bool(_arg(node, 2, "keepdim", False))
        return importer.block_builder.emit(getattr(relax.op, reduce)(x, dims, keep))

    return convert


def div_mode(node: Any, importer: Any) -> Any:
    """``div`` with or without a rounding mode, in the dtype PyTorch gives the result (the node's
    own). TVM divided integer tensors as integers where PyTorch's true division gives a float
    (DeBERTa's relative-position buckets take the log of one: refused), and made a Python number
    an int32 constant beside a float tensor (the type check refused the model)."""
    from tvm import relax

    a, b = importer.retrieve_args(node)[:2]
    mode = _arg(node, 2, "rounding_mode", None)
    val = node.meta.get("val")
    dtype = str(val.dtype).removeprefix("torch.") if hasattr(val, "dtype") else \
        str((a if isinstance(a, relax.Expr) else b).ty.dtype)
    if mode is None and "int" in dtype:  # true division of integers is a float in PyTorch
        dtype = "float32"
    a, b = (relax.const(v, dtype) if isinstance(v, int | float) else
            v if str(v.ty.dtype) == dtype else relax.op.astype(v, dtype) for v in (a, b))
    if mode == "floor":
        out = relax.op.floor_divide(a, b) if "int" in dtype else relax.op.floor(relax.op.divide(a, b))
    elif mode == "trunc" and "float" in dtype:
        out = relax.op.trunc(relax.op.divide(a, b))
    else:
        out = relax.op.divide(a, b)
    return importer.block_builder.emit(out)


def clamp(node: Any, importer: Any) -> Any:
    """``clamp`` of an integer tensor with one bound: TVM's converter made the missing bound an
    infinity and failed converting it to an integer (``gather`` indices clamped from above)."""
    from tvm import relax

    x = importer.env[node.args[0]]
    lo, hi = _arg(node, 1, "min", None), _arg(node, 2, "max", None)
    dtype = str(x.ty.dtype)
    if "int" not in dtype or not all(v is None or isinstance(v, int) for v in (lo, hi)):
        return importer._clamp(node)
    if lo is not None:
        x = relax.op.maximum(x, relax.const(lo, dtype))
    if hi is not None:
        x = relax.op.minimum(x, relax.const(hi, dtype))
    return importer.block_builder.emit(x)


def nearest_indices(in_size: int, out_size: int, scale: float | None) -> np.ndarray:
    """The source index of each output index of PyTorch's ``nearest`` upsampling (its CPU kernel's
    arithmetic, in float32): ``min(floor(i * s), in - 1)`` with ``s = 1 / scale`` when a scale
    was given, else ``in / out``."""
    s = _source_scale(in_size, out_size, False, scale)
    src = np.floor(np.arange(out_size, dtype=np.float32) * s).astype(np.int64)
    return np.minimum(src, in_size - 1)


def upsample_nearest2d(node: Any, importer: Any) -> Any:
    """``interpolate(mode="nearest")``: TVM resizes with half-pixel centres rounded, which is
    PyTorch's floor of ``i * in / out`` only for whole-number enlargements; any other size (11x13
    from 8x8, a downscale) read the wrong pixels. Those are two ``take``s of the source rows and
    columns PyTorch reads; whole-number enlargements keep TVM's resize."""
    from tvm import relax

    x = importer.env[node.args[0]]
    found = _resize_args(node, x, _arg(node, 2, "scale_factors", None))
    if found is None or all(o % i == 0 and (s is None or s == o // i) for i, o, s in zip(*found, strict=True)):
        return importer._upsample_nearest2d(node)
    for axis, (i, o, s) in enumerate(zip(*found, strict=True), start=2):
        x = importer.block_builder.emit(relax.op.take(x, relax.const(nearest_indices(i, o, s)), axis))
    return x


def _source_scale(in_size: int, out_size: int, align_corners: bool, scale: float | None) -> np.float32:
    """PyTorch's ``area_pixel_compute_scale``: input pixels per output pixel, in float32."""
    if align_corners:
        return np.float32((in_size - 1) / (out_size - 1)) if out_size > 1 else np.float32(0)
    return np.float32(1.0 / scale) if scale else np.float32(in_size) / np.float32(out_size)


def linear_taps(in_size: int, out_size: int, align_corners: bool, scale: float | None) -> tuple[np.ndarray, np.ndarray]:
    """Source indices and weights ``[out, 2]`` of PyTorch's linear interpolation along one axis
    (``compute_source_index_and_lambda``, float32)."""
    ratio, dst = _source_scale(in_size, out_size, align_corners, scale), np.arange(out_size, dtype=np.float32)
    src = ratio * dst if align_corners else np.maximum(ratio * (dst + np.float32(0.5)) - np.float32(0.5), 0)
    i0 = np.minimum(np.floor(src).astype(np.int64), in_size - 1)
    l1 = np.clip(src - i0.astype(np.float32), 0, 1).astype(np.float32)
    return np.stack([i0, i0 + (i0 < in_size - 1)], 1), np.stack([1 - l1, l1], 1)


def antialias_taps(in_size: int, out_size: int, align_corners: bool, scale: float | None) -> tuple[np.ndarray, np.ndarray]:
    """Source indices and weights of PyTorch's antialiased bilinear resampling along one axis
    (Pillow's triangle filter widened by the downscale, ``_compute_indices_min_size_weights_aa``)."""
    ratio = float(_source_scale(in_size, out_size, align_corners, scale))
    support = ratio if ratio >= 1 else 1.0
    invscale = 1 / ratio if ratio >= 1 else 1.0
    rows = []
    for i in range(out_size):
        center = ratio * (i + 0.5)
        lo = max(int(center - support + 0.5), 0)
        hi = min(int(center + support + 0.5), in_size)
        j = np.arange(lo, hi)
        w = np.maximum(1 - np.abs((j - center + 0.5) * invscale), 0)
        rows.append((j, w / w.sum() if w.sum() else w))
    taps = max(len(j) for j, _ in rows)
    index = np.array([np.pad(j, (0, taps - len(j)), mode="edge") for j, _ in rows], dtype=np.int64)
    weight = np.array([np.pad(w, (0, taps - len(w))) for _, w in rows], dtype=np.float32)
    return index, weight


def _resize_args(node: Any, x: Any, scales: Any) -> tuple[list[int], list[int], list[float | None]] | None:
    try:
        ins = [int(d) for d in x.ty.shape][2:]
    except (TypeError, AttributeError):
        return None
    size = node.args[1] if len(node.args) > 1 else None
    scales = list(scales) if scales and all(s is not None for s in scales) else [None] * len(ins)
    outs = list(size) if size else [int(math.floor(i * s)) for i, s in zip(ins, scales, strict=True)]
    return ins, outs, scales


def upsample_bilinear2d(node: Any, importer: Any) -> Any:
    """``interpolate(mode="bilinear", scale_factor=s)`` where ``1 / s`` is not ``in / out`` (1.5,
    0.7): PyTorch maps pixels by the given factor, TVM's resize by the sizes' ratio, so every
    output pixel but the first was off. Those resize along each axis with PyTorch's own indices
    and weights; sizes given, or factors that divide evenly, keep TVM's resize."""
    x = importer.env[node.args[0]]
    align = bool(_arg(node, 2, "align_corners", False))
    found = _resize_args(node, x, _arg(node, 3, "scale_factors", None))
    if found is None or align or all(s is None or np.float32(1.0 / s) == np.float32(i) / np.float32(o)
                                     for i, o, s in zip(*found, strict=True)):
        return importer._upsample_bilinear2d(node)
    for axis, (i, o, s) in enumerate(zip(*found, strict=True), start=2):
        x = resample(importer.block_builder, x, axis, *linear_taps(i, o, align, s))
    return x


def upsample_bilinear2d_aa(node: Any, importer: Any) -> Any:
    """``interpolate(mode="bilinear", antialias=True)``: TVM 0.27 resized without the antialias
    filter (its converter says so), so a downscale read 2 of the pixels PyTorch averages."""
    x = importer.env[node.args[0]]
    align = bool(_arg(node, 2, "align_corners", False))
    found = _resize_args(node, x, [_arg(node, 3, "scales_h", None), _arg(node, 4, "scales_w", None)])
    if found is None:
        return importer._upsample_bilinear2d_aa(node)
    for axis, (i, o, s) in enumerate(zip(*found, strict=True), start=2):
        if i != o:
            x = resample(importer.block_builder, x, axis, *antialias_taps(i, o, align, s))
    return x


def grid_sampler_2d(node: Any, importer: Any) -> Any:
    """``grid_sample``: TVM's op reads the grid as ``[N, 2, H, W]`` although its converter passes
    PyTorch's ``[N, H, W, 2]`` (outputs of the wrong shape); the grid is transposed first."""
    from tvm import relax

    args = importer.retrieve_args(node)
    data, grid = args[0], args[1]
    interp, pad, align = (args[i] if len(args) > i else d for i, d in ((2, 0), (3, 0), (4, False)))
    grid = relax.op.permute_dims(grid, [0, 3, 1, 2])
    return importer.block_builder.emit(relax.op.image.grid_sample(
        data, grid, method={0: "bilinear", 1: "nearest", 2: "bicubic"}.get(interp, "bilinear"), layout="NCHW",
        padding_mode={0: "zeros", 1: "border", 2: "reflection"}.get(pad, "zeros"), align_corners=bool(align)))


def _orthogonal(shapes: list[list[int]]) -> bool:
    """Whether index tensors of these shapes each vary along their own axis of the broadcast
    result, in order (``d[:, None, None], h[:, None], w``): then indexing is one take per axis.
    Their broadcast must have an axis per index: ``x[arange(1), argmax]`` (CLIP's pooled token)
    is two indices of shape ``[1]`` and one joint axis, and a take per axis gave ``[1, 1, C]``."""
    rank = len(shapes)
    if max(len(shape) for shape in shapes) != rank:
        return False
    for j, shape in enumerate(shapes):
        padded = [1] * (rank - len(shape)) + list(shape)
        if len(shape) > rank or any(d != 1 for k, d in enumerate(padded) if k != j):
            return False
    return True


def index_tensor(node: Any, importer: Any) -> Any:
    """``x[..., i, j]`` with several index tensors (PyTorch's advanced indexing, which nearest
    1-d and 3-d interpolation decompose into): TVM's converter refused broadcast index shapes of
    rank 3 and built wrong ones for indices after sliced axes. Orthogonal indices become one take
    per axis; others index the moved-to-front axes jointly and move the result's axes back where
    PyTorch puts them (at the first indexed axis when the indexed axes are adjacent)."""
    from tvm import relax

    data = importer.env[node.args[0]]
    indices = [None if i is None else importer.env[i] for i in node.args[1]]
    used = [k for k, i in enumerate(indices) if i is not None]
    if any(str(indices[k].ty.dtype) == "bool" for k in used):
        _refuse(node, "a boolean mask index, whose selection's size is not known when compiling")
    if len(used) == 1:
        return importer.block_builder.emit(relax.op.take(data, indices[used[0]], axis=used[0]))
    shapes = [static_shape(indices[k].ty) for k in used]
    if len(used) < 2 or any(s is None for s in shapes):
        return importer._index_tensor(node)
    adjacent = used == list(range(used[0], used[-1] + 1))
    if adjacent and _orthogonal(shapes):
        for k in reversed(used):
            idx = indices[k]
            if len(static_shape(idx.ty)) != 1:
                idx = relax.op.reshape(idx, [-1])
            data = importer.block_builder.emit(relax.op.take(data, idx, axis=k))
        return data
    rank = len(data.ty.shape)
    order = used + [k for k in range(rank) if k not in used]
    if order != list(range(rank)):
        data = importer.block_builder.emit(relax.op.permute_dims(data, order))
    out = importer.block_builder.emit(relax.op.index_tensor(data, [indices[k] for k in used]))
    if adjacent and used[0] > 0:
        nb, out_rank = len(static_shape(out.ty)) - (rank - len(used)), len(static_shape(out.ty))
        perm = list(range(nb, nb + used[0])) + list(range(nb)) + list(range(nb + used[0], out_rank))
        out = importer.block_builder.emit(relax.op.permute_dims(out, perm))
    return out


def _window_taps(in_size: int, out_size: int) -> np.ndarray:
    """Source indices ``[out, K]`` of each adaptive-pooling window (PyTorch's ``start_index`` /
    ``end_index``), the shorter windows padded with their last index (harmless under max)."""
    starts = [(i * in_size) // out_size for i in range(out_size)]
    ends = [-(-((i + 1) * in_size) // out_size) for i in range(out_size)]
    taps = max(e - b for b, e in zip(starts, ends, strict=True))
    return np.array([[min(b + k, e - 1) for k in range(taps)] for b, e in zip(starts, ends, strict=True)], dtype=np.int64)


def adaptive_max_pool(node: Any, importer: Any) -> Any:
    """``adaptive_max_pool1d/2d`` (not converted by TVM 0.27): the maximum over each window,
    axis by axis (a rectangle's maximum is the maximum of its rows' maxima). Only the values: a
    model that reads the returned indices stays refused, so the pair's second element, which
    stands in for them, is never read."""
    from tvm import relax

    if any(u.target is operator.getitem and u.args[1] == 1 for u in node.users):
        _refuse(node, "its indices")
    x = importer.env[node.args[0]]
    sizes = list(node.args[1])
    rank = len(x.ty.shape)
    for axis, out in zip(range(rank - len(sizes), rank), sizes, strict=True):
        index = _window_taps(int(x.ty.shape[axis]), out)
        best = None
        for k in range(index.shape[1]):
            tap = relax.op.take(x, relax.const(index[:, k]), axis)
            best = tap if best is None else relax.op.maximum(best, tap)
        x = importer.block_builder.emit(best)
    return importer.block_builder.emit(relax.Tuple([x, x]))


def var_std_mean(root: bool) -> Any:
    """``var_mean`` / ``std_mean`` (not converted): the pair, with the correction."""

    def convert(node: Any, importer: Any) -> Any:
        from tvm import relax

        x = importer.env[node.args[0]]
        dims = _arg(node, 1, "dim", None)
        dims = list(range(len(x.ty.shape))) if dims is None else [dims] if isinstance(dims, int) else list(dims)
        correction = node.kwargs.get("correction", 1)
        correction = 1 if correction is None else correction
        keep = bool(node.kwargs.get("keepdim", False))
        n = int(np.prod([int(x.ty.shape[d]) for d in dims]))
        mean = relax.op.mean(x, dims, keepdims=True)
        centred = relax.op.subtract(x, mean)
        spread = relax.op.divide(relax.op.sum(relax.op.multiply(centred, centred), dims, keep),
                                 relax.const(float(max(n - correction, 0)), str(x.ty.dtype)))
        spread = relax.op.sqrt(spread) if root else spread
        mean = mean if keep else relax.op.squeeze(mean, dims)
        return importer.block_builder.emit(relax.Tuple([spread, mean]))

    return convert


# (PyTorch's "mean" counts the kept value too, TVM's does not: ``_scatter_mean``)
_SCATTER_REDUCTIONS = {"sum": "add", "prod": "mul", "amax": "max", "amin": "min"}


def _scatter_mean(bb: Any, data: Any, dim: int, index: Any, src: Any, include_self: bool) -> Any:
    """PyTorch's scatter mean: the sum over each target's sources (and the kept value when
    ``include_self``) divided by their count; a target no source reaches keeps its value (its
    count is 0, its sum the value itself: dividing by ``max(count, 1)`` covers both)."""
    from tvm import relax

    if not include_self:
        data = bb.emit(relax.op.scatter_elements(data, index, relax.op.zeros_like(src), dim, "update"))
    total = relax.op.scatter_elements(data, index, src, dim, "add")
    start = relax.op.ones_like(data) if include_self else relax.op.zeros_like(data)
    count = relax.op.scatter_elements(start, index, relax.op.ones_like(src), dim, "add")
    return bb.emit(relax.op.divide(total, relax.op.maximum(count, relax.const(1.0, str(data.ty.dtype)))))


def scatter_add_reduce(node: Any, importer: Any) -> Any:
    """``scatter_add`` and ``scatter_reduce`` (not converted): TVM's ``scatter_elements`` with the
    reduction; ``include_self=False`` first writes each reduction's identity where src goes."""
    from tvm import relax

    args = importer.retrieve_args(node)
    data, dim, index, src = args[:4]
    reduce = "sum" if len(args) < 5 else args[4]
    include_self = bool(node.kwargs.get("include_self", args[5] if len(args) > 5 else True))
    dtype = str(data.ty.dtype)
    if reduce == "mean" and "float" in dtype:
        return _scatter_mean(importer.block_builder, data, dim, index, src, include_self)
    if reduce not in _SCATTER_REDUCTIONS:
        _refuse(node, f"reduce={reduce!r} on {dtype}")
    if not include_self:
        identity = {"sum": 0.0, "prod": 1.0, "amax": -math.inf, "amin": math.inf}[reduce]
        fill = relax.op.add(relax.op.zeros_like(src), relax.const(identity, dtype))
        data = importer.block_builder.emit(relax.op.scatter_elements(data, index, fill, dim, "update"))
    return importer.block_builder.emit(relax.op.scatter_elements(data, index, src, dim, _SCATTER_REDUCTIONS[reduce]))


def exp2(node: Any, importer: Any) -> Any:
    """``exp2`` (not converted): ``exp(x * ln 2)``."""
    from tvm import relax

    x = importer.env[node.args[0]]
    return importer.block_builder.emit(relax.op.exp(relax.op.multiply(x, relax.const(math.log(2.0), str(x.ty.dtype)))))


def shift(op: str) -> Any:
    """``x << k`` / ``x >> k`` of an integer tensor by a number (not converted)."""

    def convert(node: Any, importer: Any) -> Any:
        from tvm import relax

        x = importer.env[node.args[0]]
        by = node.args[1]
        by = relax.const(by, str(x.ty.dtype)) if isinstance(by, int) else importer.env[by]
        return importer.block_builder.emit(getattr(relax.op, op)(x, by))

    return convert


def hypot(node: Any, importer: Any) -> Any:
    """``hypot`` (not converted): ``sqrt(a * a + b * b)``."""
    from tvm import relax

    a, b = importer.retrieve_args(node)[:2]
    return importer.block_builder.emit(relax.op.sqrt(relax.op.add(relax.op.multiply(a, a), relax.op.multiply(b, b))))


def prod(node: Any, importer: Any) -> Any:
    """``prod`` over one axis (not converted)."""
    from tvm import relax

    x = importer.env[node.args[0]]
    dim = _arg(node, 1, "dim", None)
    return importer.block_builder.emit(relax.op.prod(x, dim, bool(_arg(node, 2, "keepdim", False))))


def cdist(node: Any, importer: Any) -> Any:
    """``cdist`` with p = 2 (not converted): ``sqrt(max(|a|^2 + |b|^2 - 2 a.b, 0))``, the
    matrix-product form PyTorch uses for more than 25 rows, exact enough for fewer."""
    from tvm import relax

    a, b = importer.retrieve_args(node)[:2]
    if float(_arg(node, 2, "p", 2.0)) != 2.0:
        _refuse(node, "p other than 2")
    dtype = str(a.ty.dtype)
    na = relax.op.sum(relax.op.multiply(a, a), [-1], keepdims=True)
    nb = relax.op.sum(relax.op.multiply(b, b), [-1], keepdims=True)
    rank = len(b.ty.shape)
    swap = [*range(rank - 2), rank - 1, rank - 2]  # the last two axes exchanged
    dots = relax.op.matmul(a, relax.op.permute_dims(b, swap))
    squared = relax.op.subtract(relax.op.add(na, relax.op.permute_dims(nb, swap)),
                                relax.op.multiply(relax.const(2.0, dtype), dots))
    return importer.block_builder.emit(relax.op.sqrt(relax.op.maximum(squared, relax.const(0.0, dtype))))


def _grid(values: Any, own: list[int], axis_at: int, region: list[int]) -> Any:
    """``values`` (an index of shape ``own``) placed at ``axis_at`` of the indexed region and
    broadcast to its shape: one coordinate of every element PyTorch writes."""
    from tvm import relax

    reshaped = relax.op.reshape(values, [1] * axis_at + own + [1] * (len(region) - axis_at - len(own)))
    return relax.op.broadcast_to(reshaped, region)


def index_put(node: Any, importer: Any) -> Any:
    """``x[:, i] = v`` / ``x.index_fill(1, i, v)`` / ``index_copy`` / ``index_add`` (index_put with
    sliced axes): TVM's converter refused fewer index tensors than axes, and built index grids for
    the sliced ones that broadcast along the wrong axis. Here every axis gets its full coordinate
    grid over the region PyTorch writes (adjacent indexed axes; every axis indexed, or others, as
    TVM does), negative indices counted from the end."""
    from tvm import relax

    from tvmbench.compile.passes.bounded_take import from_front

    args = importer.retrieve_args(node)
    data, indices, values = args[0], list(args[1]), args[2]
    accumulate = bool(args[3] if len(args) > 3 else node.kwargs.get("accumulate", False))
    shape = static_shape(data.ty)
    if shape is None:
        return importer._index_put(node)
    indices += [None] * (len(shape) - len(indices))
    used = [k for k, i in enumerate(indices) if i is not None]
    index_shapes = {k: static_shape(indices[k].ty) for k in used}
    if (not used or len(used) == len(shape) or used != list(range(used[0], used[-1] + 1))
            or None in index_shapes.values() or any(str(indices[k].ty.dtype) == "bool" for k in used)):
        return importer._index_put(node)
    joint = list(np.broadcast_shapes(*index_shapes.values()))
    region = [*shape[:used[0]], *joint, *shape[used[-1] + 1:]]
    if accumulate and len(used) == 1 and len(index_shapes[used[0]]) == 1:
        return _add_rows(node, importer, data, used[0], indices[used[0]], values, region)
    grids = []
    for k, index in enumerate(indices):
        if index is not None:
            own = index_shapes[k]
            grids.append(_grid(from_front(index, shape[k]), own, used[0] + len(joint) - len(own), region))
        else:
            at = k if k < used[0] else used[0] + len(joint) + k - used[-1] - 1
            grids.append(_grid(relax.op.arange(0, shape[k], 1, "int64"), [shape[k]], at, region))
    values = relax.op.broadcast_to(values, region)
    if accumulate:  # TVM's index_put adds in parallel, racing on repeated coordinates
        return _add_flat(importer.block_builder, data, grids, values, shape)
    return importer.block_builder.emit(relax.op.index_put(data, relax.Tuple(grids), values, accumulate))


def _rows_of(node: Any, importer: Any, axis: int, shape: list[int]) -> tuple[Any, Any] | None:
    """(x, src) when the FX node ``node`` is ``x[..., src, ...]``: a gather of rows along ``axis``
    by one 1-d index, x of ``shape`` apart from that axis; else None."""
    import torch

    if getattr(node, "target", None) is not torch.ops.aten.index.Tensor or len(node.args) < 2:
        return None
    picks = list(node.args[1])
    x = importer.env[node.args[0]]
    x_shape = static_shape(x.ty)
    if (len(picks) != axis + 1 or any(p is not None for p in picks[:axis]) or picks[axis] is None
            or x_shape is None or len(x_shape) != len(shape)
            or x_shape[:axis] + x_shape[axis + 1:] != shape[:axis] + shape[axis + 1:]):
        return None
    src = importer.env[picks[axis]]
    src_shape = static_shape(src.ty)
    if src_shape is None or len(src_shape) != 1 or not str(src.ty.dtype).startswith("int"):
        return None
    return x, src


def _zeros(node: Any) -> bool:
    """Whether the FX node ``node`` is a tensor of zeros made to be added into (``zeros_like``,
    ``full_like(x, 0)``, ``new_zeros``): the scatter kernel then writes the zeros itself."""
    import torch

    aten = torch.ops.aten
    target = getattr(node, "target", None)
    if target in (aten.zeros_like.default, aten.zeros.default, aten.new_zeros.default):
        return True
    fill = {aten.full_like.default: 1, aten.full.default: 1, aten.new_full.default: 2}.get(target)
    return fill is not None and len(node.args) > fill and node.args[fill] == 0


def _add_rows(node: Any, importer: Any, data: Any, axis: int, index: Any, values: Any, region: list[int]) -> Any:
    """``data[..., index, ...] += values`` along one axis by a 1-d index (``index_add``), with
    ``compile/scatter.py``'s kernel: rows added in order, columns shared out; a gather of rows as
    the values (``x[src]``) read in place."""
    from tvm import relax

    from tvmbench.compile.scatter import scatter_add_rows

    bb = importer.block_builder
    shape = static_shape(data.ty)
    outer, inner = int(np.prod(shape[:axis])), int(np.prod(shape[axis + 1:]))
    rows = _rows_of(node.args[2], importer, axis, shape)
    if rows is not None:
        x, gather = rows
        values = relax.op.reshape(x, [outer, static_shape(x.ty)[axis], inner])
    else:
        gather = None
        values = relax.op.reshape(relax.op.broadcast_to(values, region), [outer, region[axis], inner])
    data3 = None if _zeros(node.args[0]) else bb.emit(relax.op.reshape(data, [outer, shape[axis], inner]))
    out = bb.emit_te(scatter_add_rows, index, bb.emit(values), gather, data3, shape[axis],
                     primfunc_name_hint="scatter_add_rows")
    return bb.emit(relax.op.reshape(out, shape))


def _add_flat(bb: Any, data: Any, grids: list[Any], values: Any, shape: list[int]) -> Any:
    """``data[grids] += values`` by several index tensors: their flat offsets into ``data`` added one
    after another (one task; the rows kernel over a single column)."""
    from tvm import relax

    from tvmbench.compile.scatter import scatter_add_rows

    flat = None
    for k, grid in enumerate(grids):
        stride = int(np.prod(shape[k + 1:]))
        term = relax.op.multiply(relax.op.astype(grid, "int64"), relax.const(stride, "int64"))
        flat = term if flat is None else relax.op.add(flat, term)
    count = int(np.prod(static_shape(bb.normalize(values).ty)))
    out = bb.emit_te(scatter_add_rows, bb.emit(relax.op.reshape(flat, [count])),
                     bb.emit(relax.op.reshape(values, [1, count, 1])), None,
                     bb.emit(relax.op.reshape(data, [1, int(np.prod(shape)), 1])), primfunc_name_hint="scatter_add_rows")
    return bb.emit(relax.op.reshape(out, shape))


def embedding_bag(node: Any, importer: Any) -> Any:
    """``EmbeddingBag`` (``_embedding_bag``, no TVM converter) in sum or mean mode over 1-d
    indices and offsets: each index's bag numbered by a running count of the offsets at or
    before it, the table's rows added into their bags by ``compile/scatter.py``'s kernel (in
    PyTorch's order), a mean divided by the bag's size (an empty bag's is 0). Indices before the
    first offset go to a bag of their own that is dropped. Max mode, per-sample weights, a
    padding index and the other three outputs are refused."""
    from tvm import relax

    from tvmbench.compile.scatter import scatter_add_rows

    weight, indices, offsets = (importer.env[a] for a in node.args[:3])
    mode = int(_arg(node, 4, "mode", 0))
    extra = [_arg(node, 6, "per_sample_weights", None), _arg(node, 7, "include_last_offset", False)]
    padding = _arg(node, 8, "padding_idx", -1)
    shapes = [static_shape(t.ty) for t in (weight, indices, offsets)]
    if mode not in (0, 1) or any(extra) or padding not in (None, -1):
        _refuse(node, "max mode, per-sample weights, include_last_offset or a padding index")
    if None in shapes or len(shapes[1]) != 1 or len(shapes[2]) != 1 or len(shapes[0]) != 2:
        _refuse(node, "indices and offsets that are not 1-d of known size")
    if any(user.target is not operator.getitem or user.args[1] != 0 for user in node.users):
        _refuse(node, "its offset2bag, bag_size or max_indices outputs used")
    bb, count, bags = importer.block_builder, shapes[1][0], shapes[2][0]
    # (one mark past the ids: an empty last bag's offset is the number of ids)
    marks = relax.op.scatter_elements(relax.op.zeros([count + 1], "int64"), relax.op.astype(offsets, "int64"),
                                      relax.op.ones([bags], "int64"), 0, "add")
    running = relax.op.strided_slice(relax.op.cumsum(marks, 0, "int64"), axes=[0], begin=[0], end=[count])
    seg = relax.op.subtract(running, relax.const(1, "int64"))
    seg = bb.emit(relax.op.where(relax.op.less(seg, relax.const(0, "int64")), relax.const(bags, "int64"), seg))
    table = bb.emit(relax.op.reshape(weight, [1, *shapes[0]]))
    sums = bb.emit_te(scatter_add_rows, seg, table, indices, None, bags + 1, primfunc_name_hint="scatter_add_rows")
    out = relax.op.strided_slice(relax.op.reshape(sums, [bags + 1, shapes[0][1]]), axes=[0], begin=[0], end=[bags])
    if mode == 1:
        ends = relax.op.concat([relax.op.strided_slice(offsets, axes=[0], begin=[1], end=[bags]),
                                relax.const(np.array([count]), str(offsets.ty.dtype))], 0)
        size = relax.op.astype(relax.op.maximum(relax.op.subtract(ends, offsets), relax.const(1, str(offsets.ty.dtype))),
                               str(weight.ty.dtype))
        out = relax.op.divide(out, relax.op.expand_dims(size, 1))
    return bb.emit(relax.Tuple([bb.emit(out), seg, seg, seg]))


def rrelu_eval(node: Any, importer: Any) -> Any:
    """``rrelu`` in eval mode (``rrelu_with_noise_functional``, a tuple with the noise): a leaky
    ReLU with the mean slope ``(lower + upper) / 2``; training mode's random slopes refused."""
    from tvm import relax

    x, noise = importer.env[node.args[0]], importer.env[node.args[1]]
    lower, upper = float(_arg(node, 2, "lower", 1 / 8)), float(_arg(node, 3, "upper", 1 / 3))
    if _arg(node, 4, "training", False):
        _refuse(node, "training mode")
    out = importer.block_builder.emit(relax.op.nn.leakyrelu(x, (lower + upper) / 2))
    return importer.block_builder.emit(relax.Tuple([out, noise]))


def kthvalue(node: Any, importer: Any) -> Any:
    """``kthvalue(x, k, dim, keepdim)``: the last of the ``k`` smallest (``topk``), values and
    indices."""
    from tvm import relax

    x, k = importer.env[node.args[0]], int(node.args[1])
    dim, keep = int(_arg(node, 2, "dim", -1)), bool(_arg(node, 3, "keepdim", False))
    values, indices = (importer.block_builder.emit(relax.TupleGetItem(importer.block_builder.emit(
        relax.op.topk(x, k, dim, "both", largest=False, dtype="int64")), i)) for i in (0, 1))
    pick = relax.const(np.array([k - 1], "int64"))
    outs = [relax.op.take(t, pick, axis=dim) for t in (values, indices)]
    outs = outs if keep else [relax.op.squeeze(t, [dim]) for t in outs]
    return importer.block_builder.emit(relax.Tuple([importer.block_builder.emit(t) for t in outs]))


def trilinear(node: Any, importer: Any) -> Any:
    """``_trilinear(a, b, c, expand_a, expand_b, expand_c, sum_dims)`` (``nn.Bilinear``): the
    three inputs, unsqueezed at their expand dims, multiplied and summed over ``sum_dims``, as one
    einsum."""
    from tvm import relax

    inputs = [importer.env[a] for a in node.args[:3]]
    expands, sums = [list(e) for e in node.args[3:6]], list(node.args[6])
    total = len(inputs[0].ty.shape) + len(expands[0])
    letters = "abcdefghijklmnopqrstuvwxyz"[:total]
    subscripts = ["".join(letters[d] for d in range(total) if d not in e) for e in expands]
    out = "".join(letters[d] for d in range(total) if d not in sums)
    return importer.block_builder.emit(relax.op.einsum(inputs, f"{','.join(subscripts)}->{out}"))


_COPIES = ("lift_fresh_copy.default", "detach_.default", "detach.default", "clone.default", "alias.default")


def constant_masks(ep: Any) -> dict[str, np.ndarray]:
    """The true positions of each one-dimensional boolean mask an ``index.Tensor`` of ``ep``
    reads from a constant (a tensor built in ``forward``, or a buffer), by the index node's name:
    those selections have a size known when compiling. (The importer sees such a constant as a
    parameter, without its value.)"""
    import torch

    values = {**dict(ep.named_buffers()), **ep.constants}
    sources = {s.arg.name: s.target for s in ep.graph_signature.input_specs if s.target in values}
    masks = {}
    for node in ep.graph.nodes:
        if node.op != "call_function" or getattr(node.target, "__name__", "") != "index.Tensor":
            continue
        used = [i for i in node.args[1] if i is not None]
        if len(used) != 1 or not hasattr(used[0], "op"):
            continue
        source = used[0]
        while source.op == "call_function" and source.args and hasattr(source.args[0], "op") and \
                getattr(source.target, "__name__", "") in _COPIES:
            source = source.args[0]
        value = values.get(sources.get(source.name, ""))
        if value is not None and value.dtype == torch.bool and value.dim() == 1:
            masks[node.name] = np.flatnonzero(value.numpy()).astype("int64")
            _drop_size_checks(ep, node)
    return masks


def _drop_size_checks(ep: Any, node: Any) -> None:
    """Remove the run-time checks torch.export adds on a data-dependent size (``sym_size`` of
    ``node``, compared, asserted): with the mask constant the size is known, and TVM's importer
    cannot compare a symbolic size with a Python int. The checks hold, so the program is the same."""
    graph = ep.graph
    sizes = [u for u in node.users if getattr(u.target, "__name__", "") == "sym_size.int"]
    for size in sizes:
        for compare in list(size.users):
            for check in list(compare.users):
                if getattr(check.target, "__name__", "") == "_assert_scalar.default":
                    graph.erase_node(check)
            if not compare.users:
                graph.erase_node(compare)
        if not size.users:
            graph.erase_node(size)


def bool_mask_index(masks: dict[str, np.ndarray]) -> Any:
    """``index.Tensor`` that takes the positions of a constant boolean mask (``constant_masks``)
    as a ``take``; every other index goes to ``index_tensor`` (a mask computed from the input
    selects a number of elements known only at run time: refused there)."""

    def convert(node: Any, importer: Any) -> Any:
        from tvm import relax

        if node.name not in masks:
            return index_tensor(node, importer)
        axis = next(k for k, i in enumerate(node.args[1]) if i is not None)
        return importer.block_builder.emit(relax.op.take(importer.env[node.args[0]], relax.const(masks[node.name]), axis=axis))

    return convert


def sort_stable(node: Any, importer: Any) -> Any:
    """``sort(x, stable=True)``: TVM's argsort is ``std::stable_sort`` on CPU, so equal values
    keep their order, as PyTorch's stable sort; values gathered by the indices."""
    from tvm import relax

    x = importer.env[node.args[0]]
    dim, descending = int(node.kwargs.get("dim", -1)), bool(node.kwargs.get("descending", False))
    indices = importer.block_builder.emit(relax.op.argsort(x, dim, descending, dtype="int64"))
    values = importer.block_builder.emit(relax.op.gather_elements(x, indices, axis=dim))
    return importer.block_builder.emit(relax.Tuple([values, indices]))


def convolution(node: Any, importer: Any) -> Any:
    """``convolution`` as TVM converts it, except the transposed 3-d one it refuses (3-d U-Nets'
    upsampling: nnU-Net, V-Net): ``_conv_transpose3d``."""
    x, transposed = importer.env[node.args[0]], bool(_arg(node, 6, "transposed", False))
    if not transposed or len(x.ty.shape) != 5:
        return importer._convolution(node)
    return _conv_transpose3d(node, importer)


def _conv_transpose3d(node: Any, importer: Any) -> Any:
    """A transposed 3-d convolution. Where the kernel equals the stride (no overlap, no padding:
    the common 2x2x2 upsampling), each input voxel's channels times the weights are its output
    block: one matmul and a depth-to-space rearrangement. Otherwise the textbook form: the input
    spread out by the stride (zeros between), padded by ``dilation * (k - 1) - padding`` (and the
    output padding after), convolved with the weights flipped in space and their channel axes
    swapped (a load-time transform)."""
    from tvm import relax

    bb = importer.block_builder
    x, w = importer.env[node.args[0]], importer.env[node.args[1]]
    bias = importer.env[node.args[2]] if node.args[2] is not None else None
    stride, padding, dilation, _, out_pad, groups = (node.args[i] for i in range(3, 9))
    n, c, *space = static_shape(x.ty)
    _, per, *kernel = static_shape(w.ty)  # [C_in, C_out / groups, kd, kh, kw]
    if list(kernel) == list(stride) and not any(padding) and not any(out_pad) and set(dilation) == {1} \
            and groups == 1:
        return bb.emit(_blocks_per_voxel(x, w, bias, space, kernel))
    if groups != 1:
        _refuse(node, "groups")
    spread = _spread(x, n, c, space, stride)
    pads = [[dilation[a] * (kernel[a] - 1) - padding[a]] * 2 for a in range(3)]
    for a in range(3):
        pads[a][1] += out_pad[a]
    if min(min(p) for p in pads) < 0:
        _refuse(node, "padding wider than the kernel")
    spread = relax.op.nn.pad(spread, [0, 0, 0, 0] + [v for p in pads for v in p])
    flipped = relax.op.permute_dims(relax.op.flip(relax.op.flip(relax.op.flip(w, 2), 3), 4), [1, 0, 2, 3, 4])
    out = relax.op.nn.conv3d(spread, flipped, dilation=list(dilation))
    return bb.emit(out if bias is None else relax.op.add(out, relax.op.reshape(bias, [1, per, 1, 1, 1])))


def _blocks_per_voxel(x: Any, w: Any, bias: Any, space: list[int], kernel: list[int]) -> Any:
    """``conv_transpose3d`` with kernel = stride: [N, D, H, W, C_in] @ [C_in, k^3 * C_out], each
    voxel's [kd, kh, kw, C_out] block put in place."""
    from tvm import relax

    n, c = static_shape(x.ty)[:2]
    o = static_shape(w.ty)[1]
    (d, h, wd), (kd, kh, kw) = space, kernel
    rows = relax.op.reshape(relax.op.permute_dims(x, [0, 2, 3, 4, 1]), [n * d * h * wd, c])
    columns = relax.op.reshape(relax.op.permute_dims(w, [0, 2, 3, 4, 1]), [c, kd * kh * kw * o])
    y = relax.op.reshape(relax.op.matmul(rows, columns), [n, d, h, wd, kd, kh, kw, o])
    # (the output channels stay innermost until the end: the convolutions around run channels last)
    y = relax.op.reshape(relax.op.permute_dims(y, [0, 1, 4, 2, 5, 3, 6, 7]), [n, d * kd, h * kh, wd * kw, o])
    y = y if bias is None else relax.op.add(y, bias)
    return relax.op.permute_dims(y, [0, 4, 1, 2, 3])


def _spread(x: Any, n: int, c: int, space: list[int], stride: list[int]) -> Any:
    """[N, C, D, H, W] with ``stride - 1`` zeros between neighbours along each axis."""
    from tvm import relax

    if set(stride) == {1}:
        return x
    (d, h, w), (sd, sh, sw) = space, stride
    y = relax.op.reshape(x, [n, c, d, 1, h, 1, w, 1])
    y = relax.op.nn.pad(y, [0, 0, 0, 0, 0, 0, 0, sd - 1, 0, 0, 0, sh - 1, 0, 0, 0, sw - 1])
    y = relax.op.reshape(y, [n, c, d * sd, h * sh, w * sw])
    return relax.op.strided_slice(y, [2, 3, 4], [0, 0, 0], [(d - 1) * sd + 1, (h - 1) * sh + 1, (w - 1) * sw + 1])


# Giles, "Approximating the erfinv function" (GPU Computing Gems, 2011), single precision: central
# and tail polynomials in w = -log(1 - x^2), relative error about 4e-7 (torch's CPU kernel is a
# rational approximation with a Newton step; they agree to float32 rounding).
_ERFINV_CENTRAL = (2.81022636e-08, 3.43273939e-07, -3.5233877e-06, -4.39150654e-06, 0.00021858087,
                   -0.00125372503, -0.00417768164, 0.246640727, 1.50140941)
_ERFINV_TAIL = (-0.000200214257, 0.000100950558, 0.00134934322, -0.00367342844, 0.00573950773,
                -0.0076224613, 0.00943887047, 1.00167406, 2.83297682)


def erfinv(node: Any, importer: Any) -> Any:
    """``erfinv`` (no TVM converter): Giles' single-precision approximation (above)."""
    from tvm import relax

    x = importer.env[node.args[0]]
    c = lambda v: relax.const(v, str(x.ty.dtype))  # noqa: E731
    w = relax.op.negative(relax.op.log(relax.op.multiply(relax.op.subtract(c(1.0), x), relax.op.add(c(1.0), x))))

    def poly(coeffs: tuple[float, ...], t: Any) -> Any:
        p = c(coeffs[0])
        for a in coeffs[1:]:
            p = relax.op.add(c(a), relax.op.multiply(p, t))
        return p

    central = poly(_ERFINV_CENTRAL, relax.op.subtract(w, c(2.5)))
    tail = poly(_ERFINV_TAIL, relax.op.subtract(relax.op.sqrt(w), c(3.0)))
    p = relax.op.where(relax.op.less(w, c(5.0)), central, tail)
    return importer.block_builder.emit(relax.op.multiply(p, x))


def copysign(node: Any, importer: Any) -> Any:
    """``copysign(a, b)``: ``|a|`` with the sign of ``b``, a negative zero's too (``1 / -0.0``
    is ``-inf``)."""
    from tvm import relax

    a, b = importer.env[node.args[0]], node.args[1]
    dtype = str(a.ty.dtype)
    b = importer.env[b] if not isinstance(b, int | float) else relax.const(float(b), dtype)
    negative = relax.op.logical_or(relax.op.less(b, relax.const(0.0, dtype)),
                                   relax.op.less(relax.op.divide(relax.const(1.0, dtype), b), relax.const(0.0, dtype)))
    magnitude = relax.op.abs(a)
    return importer.block_builder.emit(relax.op.where(negative, relax.op.negative(magnitude), magnitude))


# Keyed by torch.export op name (see the module's docstring).
CUSTOM_CONVERTERS = {
    "cumsum.default": cumsum_bool_to_int64,
    "elu.default": elu,
    "amax.default": amax_amin("max"),
    "amin.default": amax_amin("min"),
    "div.Tensor": div_mode,
    "div.Scalar": div_mode,
    "div.Tensor_mode": div_mode,
    "clamp.default": clamp,
    "upsample_nearest2d.vec": upsample_nearest2d,
    "upsample_bilinear2d.vec": upsample_bilinear2d,
    "_upsample_bilinear2d_aa.default": upsample_bilinear2d_aa,
    "grid_sampler_2d.default": grid_sampler_2d,
    "index.Tensor": index_tensor,
    "index_put.default": index_put,
    "_embedding_bag.default": embedding_bag,
    "adaptive_max_pool2d.default": adaptive_max_pool,
    "adaptive_max_pool1d.default": adaptive_max_pool,
    "var_mean.correction": var_std_mean(root=False),
    "std_mean.correction": var_std_mean(root=True),
    "scatter_add.default": scatter_add_reduce,
    "scatter_reduce.two": scatter_add_reduce,
    "exp2.default": exp2,
    "__lshift__.Scalar": shift("left_shift"),
    "__rshift__.Scalar": shift("right_shift"),
    "hypot.default": hypot,
    "prod.dim_int": prod,
    "_cdist_forward.default": cdist,
    "rrelu_with_noise_functional.default": rrelu_eval,
    "kthvalue.default": kthvalue,
    "_trilinear.default": trilinear,
    "sort.stable": sort_stable,
    "erfinv.default": erfinv,
    "copysign.Tensor": copysign,
    "copysign.Scalar": copysign,
    "convolution.default": convolution,
}
