"""ONNX operators TVM 0.27's importer converts wrongly or not at all, converted here.

The importer has no hook for custom converters, so ``extended_importer`` extends its converter
table for the duration of an import. What it adds, each found by ``benchmarks/op_battery.py
--onnx`` and a matrix of ``Resize`` forms checked against ONNX Runtime:

- ``Resize`` and ``Upsample``: TVM maps output pixels by the sizes' ratio, so a scale that is
  not that ratio (1.5 over 7 pixels, 0.7: PyTorch's ``interpolate(scale_factor=...)`` exports
  them) read the wrong pixels in every mode; ``antialias`` was ignored, ``half_pixel_symmetric``,
  ``axes`` and ``keep_aspect_ratio_policy`` were refused or ignored, and opset 9's ``Upsample``
  read its scales from an attribute it no longer has. Those forms resize along each axis with the
  taps ``resize_taps`` computes from the ONNX specification (float32, as ONNX Runtime does); the
  forms TVM computes right keep its ``resize2d``.
- ``Celu`` (none in TVM), and ``Pow`` with an exponent of another type than its base.
- ``LSTM``, ``GRU`` and ``RNN`` (``recurrent.onnx_converter_classes``, CPU builds only).
"""

from __future__ import annotations

import contextlib
import math
from typing import Any

import numpy as np

_COORDS = ("half_pixel", "pytorch_half_pixel", "align_corners", "asymmetric", "half_pixel_symmetric")


def _source_coordinates(coord: str, in_size: int, out_size: int, scale: np.float32) -> np.ndarray:
    """Each output index's coordinate in the input (ONNX ``coordinate_transformation_mode``)."""
    y, half = np.arange(out_size, dtype=np.float32), np.float32(0.5)
    if coord == "align_corners":
        return y * np.float32((in_size - 1) / (out_size - 1)) if out_size > 1 else np.zeros_like(y)
    if coord == "asymmetric":
        return y / scale
    if coord == "pytorch_half_pixel" and out_size == 1:
        return np.full_like(y, -half)
    if coord == "half_pixel_symmetric":  # the input's centre on the output canvas's centre
        n = np.float32(in_size)  # ONNX Runtime's arithmetic: the offset in float32, the rest in float64
        offset = n / np.float32(2) * (np.float32(1) - np.float32(out_size) / (scale * n))
        return (np.float64(offset) + (y.astype(np.float64) + 0.5) / np.float64(scale) - 0.5).astype(np.float32)
    return (y + half) / scale - half


def _coefficients(mode: str, ratio: np.ndarray, scale: float, attrs: dict[str, Any]) -> np.ndarray:
    """``[out, taps]`` weights of the taps around each coordinate (ONNX's reference definitions;
    ``ratio`` in (0, 1], the distance from the tap left of the coordinate)."""
    if mode == "nearest":
        rule = attrs.get("nearest_mode", "round_prefer_floor")
        right = {"round_prefer_floor": ratio > 0.5, "round_prefer_ceil": ratio >= 0.5,
                 "floor": ratio == 1, "ceil": np.ones_like(ratio, bool),
                 "simple": ratio == 1 if scale >= 1 else np.ones_like(ratio, bool)}[rule]
        return np.stack([~right, right], 1).astype(np.float64)
    aa = attrs.get("antialias", 0) and scale < 1
    r = ratio.astype(np.float64)[:, None]
    if mode == "linear":
        if not aa:
            return np.concatenate([1 - r, r], 1)
        start = int(math.floor(-1 / scale) + 1)
        c = np.clip(1 - np.abs((np.arange(start, 2 - start) - r) * scale), 0, 1)
        return c / c.sum(1, keepdims=True)
    a = float(attrs.get("cubic_coeff_a", -0.75))
    start = int(math.floor(-2 / scale) + 1) if aa else -1
    d = np.abs((np.arange(start, 2 - start) - r) * (scale if aa else 1))
    c = np.where(d <= 1, (a + 2) * d**3 - (a + 3) * d**2 + 1, np.where(d < 2, a * d**3 - 5 * a * d**2 + 8 * a * d - 4 * a, 0))
    return c / c.sum(1, keepdims=True) if aa else c


def resize_taps(in_size: int, out_size: int, scale: float, attrs: dict[str, Any]) -> tuple[np.ndarray, np.ndarray]:
    """Source indices and float32 weights ``[out, taps]`` of one axis of an ONNX ``Resize``
    (``attrs``: ``mode``, ``coordinate_transformation_mode``, ``nearest_mode``,
    ``cubic_coeff_a``, ``exclude_outside``, ``antialias``, as strings and numbers). The taps are
    the ones ONNX's reference picks (the n nearest, ties to the left, edges repeated)."""
    mode = attrs.get("mode", "nearest")
    x = _source_coordinates(attrs.get("coordinate_transformation_mode", "half_pixel"), in_size, out_size, np.float32(scale))
    left = np.ceil(x).astype(np.int64) - 1  # the tap left of x, or x's own left neighbour when x is whole
    coeffs = _coefficients(mode, x - left, float(scale), attrs)  # distances in (0, 1]
    n = coeffs.shape[1]  # even for every mode: as many taps right of x as left of it
    index = left[:, None] - (n // 2 - 1) + np.arange(n)[None, :]
    if attrs.get("exclude_outside", 0):
        coeffs = np.where((index < 0) | (index >= in_size), 0.0, coeffs)
        total = coeffs.sum(1, keepdims=True)
        coeffs = coeffs / np.where(total == 0, 1.0, total)
    return np.clip(index, 0, in_size - 1), coeffs.astype(np.float32)


def resample(bb: Any, x: Any, axis: int, index: np.ndarray, weight: np.ndarray) -> Any:
    """``sum_k take(x, index[:, k], axis) * weight[:, k]`` over the taps of non-zero weight: a
    separable resampling along one axis (one ``take`` where every output reads one pixel)."""
    from tvm import relax

    keep = [k for k in range(index.shape[1]) if np.any(weight[:, k])]
    if all(np.count_nonzero(weight[i]) == 1 and weight[i].max() == 1 for i in range(len(weight))):
        return bb.emit(relax.op.take(x, relax.const(index[np.arange(len(index)), weight.argmax(1)]), axis))
    rank, out = len(x.ty.shape), None
    for k in keep:
        w = weight[:, k].reshape([-1] + [1] * (rank - 1 - axis))
        term = relax.op.multiply(relax.op.take(x, relax.const(index[:, k]), axis), relax.const(w))
        out = term if out is None else relax.op.add(out, term)
    return bb.emit(out)


def _text(value: Any, default: str) -> str:
    return value.decode() if isinstance(value, bytes) else (value or default)


def _static(bb: Any, x: Any) -> list[int] | None:
    try:
        return [int(d) for d in bb.normalize(x).ty.shape]
    except (TypeError, AttributeError, ValueError):
        return None


def _constant(value: Any, params: Any) -> np.ndarray | None:
    """An input's value when it is a constant (a weight or a folded subgraph), else None."""
    import tvm
    from tvm.relax.frontend.onnx.onnx_frontend import get_constant

    if value is None:
        return None
    value = get_constant(value, params)
    return value.value.numpy() if isinstance(value, tvm.ir.GenericConst) else None


def _axes_plan(shape: list[int], axes: list[int], scales: np.ndarray | None, sizes: np.ndarray | None,
               policy: str) -> list[tuple[int, int, int, float]]:
    """``(axis, in, out, scale)`` of each resized axis, as ONNX Runtime computes them (float32:
    ``out = int(scale * in)`` from scales; from sizes the scale is ``out / in``, or one scale for
    all axes under ``keep_aspect_ratio_policy``)."""
    if scales is not None and scales.size:
        ss = [np.float32(s) for s in scales]
        return [(a, shape[a], int(s * np.float32(shape[a])), float(s)) for a, s in zip(axes, ss, strict=True)]
    assert sizes is not None
    ratios = [np.float32(o) / np.float32(shape[a]) for a, o in zip(axes, sizes, strict=True)]
    if policy == "stretch":
        return [(a, shape[a], int(o), float(r)) for a, o, r in zip(axes, sizes, ratios, strict=True)]
    s = min(ratios) if policy == "not_larger" else max(ratios)
    return [(a, shape[a], int(math.floor(float(s) * shape[a] + 0.5)), float(s)) for a in axes]


def _tvm_resizes_right(plan: list[tuple[int, int, int, float]], attrs: dict[str, Any], rank: int) -> bool:
    """Whether TVM's own resize computes this form as ONNX does: it maps pixels by the sizes'
    ratio and knows neither antialiasing nor ``half_pixel_symmetric``; only spatial axes."""
    mode = attrs["coordinate_transformation_mode"]
    if mode not in ("half_pixel", "pytorch_half_pixel", "align_corners", "asymmetric"):
        return False
    for axis, n, out, scale in plan:
        if axis < 2 and (n != out or scale != 1):
            return False
        if mode != "align_corners" and np.float32(scale) != np.float32(out) / np.float32(n):
            return False
        if attrs.get("antialias", 0) and out < n and attrs["mode"] != "nearest":
            return False
    return rank in (3, 4, 5)


def _resize(bb: Any, x: Any, plan: list[tuple[int, int, int, float]], attrs: dict[str, Any]) -> Any:
    for axis, n, out, scale in plan:
        if n != out or scale != 1:
            x = resample(bb, x, axis, *resize_taps(n, out, scale, attrs))
    return x


def refuse(op: str, why: str) -> None:
    """A form of ONNX op ``op`` not converted: the importer's unsupported-op error (one line)."""
    import tvm

    raise tvm.error.OpNotImplemented(f"The following operators are not supported for frontend ONNX: {op} ({why})")


def _resize_converter() -> type:
    from tvm.relax.frontend.onnx import onnx_frontend

    class Resize(onnx_frontend.OnnxOpConverter):
        """ONNX ``Resize`` by the specification's taps where TVM's resize differs (module doc)."""

        @classmethod
        def _impl_v10(cls, bb: Any, inputs: list[Any], attr: dict[str, Any], params: Any) -> Any:
            return cls._convert(bb, inputs[0], _constant(inputs[1], params), None, _opset10(attr), None, "Resize")

        @classmethod
        def _impl_v11(cls, bb: Any, inputs: list[Any], attr: dict[str, Any], params: Any) -> Any:
            attrs = {"mode": _text(attr.get("mode"), "nearest"),
                     "coordinate_transformation_mode": _text(attr.get("coordinate_transformation_mode"), "half_pixel"),
                     "nearest_mode": _text(attr.get("nearest_mode"), "round_prefer_floor"),
                     "cubic_coeff_a": attr.get("cubic_coeff_a", -0.75), "exclude_outside": attr.get("exclude_outside", 0),
                     "antialias": attr.get("antialias", 0), "axes": attr.get("axes"),
                     "keep_aspect_ratio_policy": _text(attr.get("keep_aspect_ratio_policy"), "stretch")}
            get = lambda i: _constant(inputs[i], params) if len(inputs) > i else None  # noqa: E731
            stock = lambda: onnx_frontend.Resize._impl_v18(bb, inputs, attr, params)  # noqa: E731
            return cls._convert(bb, inputs[0], get(2), get(3), attrs, stock, "Resize")

        @classmethod
        def _convert(cls, bb: Any, x: Any, scales: np.ndarray | None, sizes: np.ndarray | None,
                     attrs: dict[str, Any], stock: Any, op: str) -> Any:
            shape = _static(bb, x)
            known = (scales is not None and scales.size) or sizes is not None
            if shape is None or not known or attrs["coordinate_transformation_mode"] == "tf_crop_and_resize":
                if stock is None:
                    refuse(op, "scales computed at run time or an input of unknown shape")
                return stock()
            if attrs["mode"] not in ("nearest", "linear", "cubic") or attrs["coordinate_transformation_mode"] not in _COORDS:
                refuse(op, f"mode {attrs['mode']}, coordinates {attrs['coordinate_transformation_mode']}")
            axes = [a % len(shape) for a in (attrs.get("axes") or range(len(shape)))]
            plan = _axes_plan(shape, axes, scales, sizes, attrs.get("keep_aspect_ratio_policy", "stretch"))
            if stock is not None and not attrs.get("axes") and attrs.get("keep_aspect_ratio_policy") == "stretch" \
                    and _tvm_resizes_right(plan, attrs, len(shape)):
                return stock()
            return _resize(bb, x, plan, attrs)

    class Upsample(Resize):
        """ONNX ``Upsample`` (opsets 7-9): a ``Resize`` of opset 10 whose scales opset 7 gave as
        an attribute (TVM read that attribute in opset 9 too, where the scales are an input)."""

        @classmethod
        def _impl_v7(cls, bb: Any, inputs: list[Any], attr: dict[str, Any], params: Any) -> Any:
            scales = np.array(attr.get("scales", []), np.float32)
            return cls._convert(bb, inputs[0], scales, None, _opset10(attr), None, "Upsample")

        @classmethod
        def _impl_v9(cls, bb: Any, inputs: list[Any], attr: dict[str, Any], params: Any) -> Any:
            return cls._convert(bb, inputs[0], _constant(inputs[1], params), None, _opset10(attr), None, "Upsample")

    return Resize, Upsample


def _opset10(attr: dict[str, Any]) -> dict[str, Any]:
    """Resize's attributes before opset 11: asymmetric coordinates and ONNX Runtime's "simple"
    nearest pixel (rounded up when downscaling, down otherwise)."""
    return {"mode": _text(attr.get("mode"), "nearest"), "coordinate_transformation_mode": "asymmetric",
            "nearest_mode": "simple"}


def _celu() -> type:
    from tvm import relax
    from tvm.relax.frontend.onnx import onnx_frontend

    class Celu(onnx_frontend.OnnxOpConverter):
        """``max(0, x) + min(0, alpha * (exp(x / alpha) - 1))`` (TVM has no converter)."""

        @classmethod
        def _impl_v12(cls, bb: Any, inputs: list[Any], attr: dict[str, Any], params: Any) -> Any:
            x, alpha = inputs[0], float(attr.get("alpha", 1.0))
            dtype = str(x.ty.dtype)
            c = lambda v: relax.const(v, dtype)  # noqa: E731
            neg = relax.op.multiply(c(alpha), relax.op.subtract(relax.op.exp(relax.op.divide(x, c(alpha))), c(1.0)))
            return relax.op.add(relax.op.maximum(x, c(0.0)), relax.op.minimum(neg, c(0.0)))

    return Celu


def _pow() -> type:
    from tvm import relax
    from tvm.relax.frontend.onnx import onnx_frontend

    class Pow(onnx_frontend.Pow):
        """``Pow`` whose exponent has another type than its base (ONNX allows it; torch's dynamo
        exporter writes ``x ** 3`` with an int64 exponent): the exponent cast to the base's type
        (TVM refused: "Binary operators must have the same dtype")."""

        @classmethod
        def _impl_v7(cls, bb: Any, inputs: list[Any], attr: dict[str, Any], params: Any) -> Any:
            base, exponent = inputs
            dtype = getattr(getattr(base, "ty", None), "dtype", None)
            if dtype is not None and getattr(getattr(exponent, "ty", None), "dtype", dtype) != dtype:
                exponent = bb.normalize(relax.op.astype(exponent, dtype))
            return super()._impl_v7(bb, [base, exponent], attr, params)

    return Pow


def converter_classes() -> dict[str, type]:
    """The converters this module adds or replaces, by ONNX op type."""
    resize, upsample = _resize_converter()
    return {"Resize": resize, "Upsample": upsample, "Celu": _celu(), "Pow": _pow()}


@contextlib.contextmanager
def extended_importer(extra: dict[str, type] | None = None) -> Any:
    """TVM's ONNX importer with ``converter_classes()`` and ``extra`` in its converter table for
    the duration (it has no hook for custom converters; the table is a module function)."""
    from tvm.relax.frontend.onnx import onnx_frontend

    table = onnx_frontend._get_convert_map
    extended = {**converter_classes(), **(extra or {})}
    onnx_frontend._get_convert_map = lambda: {**table(), **extended}
    try:
        yield
    finally:
        onnx_frontend._get_convert_map = table
