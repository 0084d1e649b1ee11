"""Small helpers for reading TIR blocks, shared by the schedule rules and the pass that joins
kernels for one of them (``passes/fuse_expansion.py``)."""

from __future__ import annotations

from typing import Any

import tvm
from tvm import s_tir
from tvm.s_tir.dlight.analysis import normalize_prim_func
from tvm.s_tir.dlight.analysis.common_analysis import collect_vars_used_in_prim_expr
from tvm.sym.pattern import detect_linear_equation

# A 1x1 convolution whose output (larger than this) only feeds a window reduction (mobilenet's
# expansion into its depthwise convolution) is computed band by band inside that reduction's
# tiles (passes/fuse_expansion.py, rules/expand_window.py), so the expanded tensor never leaves
# the cache.
FUSE_EXPANSION_BYTES = 1 << 20


def as_int(expr: Any) -> int | None:
    """A constant extent or index as an int, else None (symbolic)."""
    try:
        return int(expr)
    except (TypeError, ValueError):
        return None


def dtype_bits(dtype: Any) -> int:
    return int(tvm.DataType(str(dtype)).bits)


def buffer_shape(buffer: Any) -> list[int | None]:
    return [as_int(d) for d in buffer.shape]


def uses(expr: Any, var: Any) -> bool:
    """Whether ``expr`` mentions ``var``."""
    return any(v.same_as(var) for v in collect_vars_used_in_prim_expr(expr))


def coefficient(index: Any, var: Any) -> int | None:
    """Coefficient of ``var`` in a linear index expression (None if not linear in it)."""
    if not uses(index, var):
        return 0
    coeffs = detect_linear_equation(index, [var])
    if len(coeffs) != 2:
        return None
    return as_int(coeffs[0])


def packed_block(index: Any, var: Any, innermost: bool) -> int | None:
    """P when ``index`` is ``var % P`` in the innermost dimension or ``var // P`` in another one."""
    kind = tvm.tirx.FloorMod if innermost else tvm.tirx.FloorDiv
    if isinstance(index, kind) and index.a.same_as(var):
        return as_int(index.b)
    return None


def is_copy(block: Any) -> bool:
    """A block that stores exactly what it loads at the same indices (no padding condition)."""
    if len(block.reads) != 1 or len(block.writes) != 1:
        return False
    read, write = block.reads[0].region, block.writes[0].region
    return len(read) == len(write) and all(str(r.min) == str(w.min) and int(r.extent) == 1 == int(w.extent)
                                           for r, w in zip(read, write, strict=True)) \
        and "if_then_else" not in str(block.body)


def single_reduction(func: Any) -> tuple[list[int], list[int | None]] | None:
    """(reduction extents above 1, output shape) of a function with one reduction block."""
    infos = normalize_prim_func(sch := s_tir.Schedule(func))
    reductions = [b for b in infos or [] if not b.is_injective()]
    if len(reductions) != 1:
        return None
    extents = [as_int(e) for e in reductions[0].dom()]
    if any(e is None for e in extents):
        return None
    shape = buffer_shape(sch.get(reductions[0].block_rv).writes[0].source)
    return [e for e, k in zip(extents, reductions[0].dom_kind(), strict=True) if k == "R" and e > 1], shape


def fusion_role(func: Any) -> str | None:
    """``"dot"`` for a 1x1 convolution (one reduction axis, NHWC output), ``"window"`` for a
    per-channel window reduction (depthwise convolution, pooling: two reduction axes of at most
    7), else None: the two halves the expansion fusion joins."""
    try:
        found = single_reduction(func)
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
