"""Converters for torch ops that TVM 0.27's ``from_exported_program`` imports wrongly or not at all.

Each one was found by running a small model through TVM and PyTorch and comparing outputs
(``tests/test_compile.py::test_ops_tvm_imported_wrongly_match_pytorch``); each replaces TVM's
converter for one op name, keyed as torch.export writes it. They emit plain Relax operators, so
the rest of the pipeline (layout conversion, fusion, the schedule rules) sees nothing unusual.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np


def _arg(node: Any, index: int, name: str, default: Any) -> Any:
    return node.args[index] if len(node.args) > index else node.kwargs.get(name, default)


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
    """``div(a, b, rounding_mode=...)`` with a Python number on one side: TVM made the number an
    int32 constant beside a float tensor and the type check refused the model."""
    from tvm import relax

    a, b = importer.retrieve_args(node)[:2]
    mode = _arg(node, 2, "rounding_mode", None)
    dtype = str((a if isinstance(a, relax.Expr) else b).ty.dtype)
    a, b = (relax.const(v, dtype) if isinstance(v, int | float) else v for v in (a, b))
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
    s = np.float32(1.0 / scale) if scale else np.float32(in_size) / np.float32(out_size)
    src = np.floor(np.arange(out_size, dtype=np.float32) * s).astype(np.int64)
    return np.minimum(src, in_size - 1)


def upsample_nearest2d(node: Any, importer: Any) -> Any:
    """``interpolate(mode="nearest")``: TVM resizes with half-pixel centres rounded, which is
    PyTorch's floor of ``i * in / out`` only for whole-number enlargements; any other size (11x13
    from 8x8, a downscale) read the wrong pixels. Those are two ``take``s of the source rows and
    columns PyTorch reads; whole-number enlargements keep TVM's resize."""
    from tvm import relax

    x = importer.env[node.args[0]]
    size = _arg(node, 1, "output_size", None)
    scales = _arg(node, 2, "scale_factors", None)
    try:
        ins = [int(d) for d in x.ty.shape][2:]
    except (TypeError, AttributeError):
        return importer._upsample_nearest2d(node)
    scales = list(scales) if scales else [None] * len(ins)
    outs = list(size) if size else [int(math.floor(i * s)) for i, s in zip(ins, scales, strict=True)]
    if all(o % i == 0 and (s is None or s == o // i) for i, o, s in zip(ins, outs, scales, strict=True)):
        return importer._upsample_nearest2d(node)
    for axis, (i, o, s) in enumerate(zip(ins, outs, scales, strict=True), start=2):
        x = importer.block_builder.emit(relax.op.take(x, relax.const(nearest_indices(i, o, s)), axis))
    return x


# Keyed by torch.export op name (see the module's docstring).
CUSTOM_CONVERTERS = {
    "cumsum.default": cumsum_bool_to_int64,
    "elu.default": elu,
    "amax.default": amax_amin("max"),
    "amin.default": amax_amin("min"),
    "div.Tensor_mode": div_mode,
    "clamp.default": clamp,
    "upsample_nearest2d.vec": upsample_nearest2d,
}
