"""Small helpers for reading TIR blocks, shared by the schedule rules and the pass that joins
kernels for one of them (``passes/fuse_expansion.py``)."""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterator
from typing import Any

import tvm
import tvm_ffi
from tvm import s_tir
from tvm.s_tir.dlight.analysis import normalize_prim_func
from tvm.s_tir.dlight.analysis.common_analysis import collect_vars_used_in_prim_expr
from tvm.sym.pattern import detect_linear_equation

# A 1x1 convolution whose output only feeds a window reduction (mobilenet's expansion into its
# depthwise convolution) is computed band by band inside that reduction's tiles
# (passes/fuse_expansion.py, rules/expand_window.py), so the expanded tensor never leaves the
# cache, when that output is larger than this; None: larger than one core's L2 of the target's
# CPU (``ResolvedTarget.l2_bytes``). An output that fits L2 makes its round trip there at little
# cost, and the joined kernel's recomputed halo and narrower tiles then cost more than they save
# (measured: docs/performance.md, "The expansion join follows the L2 size").
FUSE_EXPANSION_BYTES: int | None = None


def fuse_expansion_bytes(l2_bytes: int) -> int:
    """The size over which an expansion is joined into its window (FUSE_EXPANSION_BYTES)."""
    return FUSE_EXPANSION_BYTES if FUSE_EXPANSION_BYTES is not None else l2_bytes


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


_CUT_OPS = (tvm.tirx.LE, tvm.tirx.LT, tvm.tirx.GE, tvm.tirx.GT)


def select_cuts(expr: Any, var: Any, extent: int, conjuncts: bool = True) -> list[int]:
    """The constant points in ``(0, extent)`` along ``var`` where an ``if_then_else`` of ``expr``
    changes branch: a concatenation's boundaries (``T.if_then_else(448 <= v, a[v - 448], ...)``),
    a padding's end (``0 <= v and v < 197``; with ``conjuncts`` only, the parts of an ``and``)."""
    cuts = set()
    for e in nodes(expr):
        if isinstance(e, tvm.ir.Call) and getattr(e.op, "name", "") == "prim.if_then_else":
            for cond in _conjuncts(e.args[0]) if conjuncts else [e.args[0]]:
                cut = _cut(cond, var) if isinstance(cond, _CUT_OPS) else None
                if cut is not None and 0 < cut < extent:
                    cuts.add(cut)
    return sorted(cuts)


def _conjuncts(cond: Any) -> list[Any]:
    """``a and b and ...`` as its parts (a padding's ``0 <= v and v < 197``); else ``[cond]``."""
    if isinstance(cond, tvm.tirx.And):
        return _conjuncts(cond.a) + _conjuncts(cond.b)
    return [cond]


def nodes(expr: Any, indices: bool = True) -> Iterator[Any]:
    """Every node of a TIR expression, depth first: operands, call arguments, a ``Let``'s value
    and body, a ``Select``'s parts and (with ``indices``) the indices of buffer loads."""
    stack = [expr]
    while stack:
        e = stack.pop()
        yield e
        for name in ("a", "b", "value", "body", "condition", "true_value", "false_value"):
            child = getattr(e, name, None)
            if isinstance(child, tvm.ir.expr.Expr):
                stack.append(child)
        stack.extend(list(getattr(e, "args", None) or []))
        if indices:
            stack.extend(list(getattr(e, "indices", None) or []))


def _cut(cond: Any, var: Any) -> int | None:
    """The first index at which ``cond`` (``c <= v``, ``v < c``, ...) changes value, else None."""
    a, b = cond.a, cond.b
    flipped = isinstance(b, tvm.tirx.Var) and b.same_as(var)
    const = as_int(a if flipped else b)
    if const is None or not (flipped or (isinstance(a, tvm.tirx.Var) and a.same_as(var))):
        return None
    # v < c and v >= c switch at c; v <= c and v > c switch at c + 1 (mirrored when flipped).
    strict = isinstance(cond, (tvm.tirx.LT, tvm.tirx.GE))
    return const if strict != flipped else const + 1


def single_reduction(func: Any) -> tuple[list[int], list[int | None]] | None:
    """(reduction extents above 1, output shape) of a function with one reduction block."""
    found = None if reduction_block_count(func) == 0 else _reductions(func)[1]
    return None if found is None else (list(found[0]), list(found[1]))


# The passes ask about the same kernels again and again (densenet201's legalization: 1455 calls
# of single_reduction, 2410 of reduction_kinds, 10 s in all, each building a Schedule). A
# PrimFunc never changes and TVM objects hash and compare by address, so the answers are kept
# per function object (the cache holds the function: its address is not reused meanwhile), both
# from one normalisation, and a kernel without reduction blocks is answered from its blocks.
ANALYSES_CACHED = 4096


@functools.lru_cache(maxsize=ANALYSES_CACHED)
def _reductions(func: Any) -> tuple[Any, Any]:
    """(``reduction_kinds``, ``single_reduction``) from one DLight normalisation of ``func``:
    the passes ask both of the same kernels, and the normalisation is the cost."""
    try:
        infos = normalize_prim_func(sch := s_tir.Schedule(func))
    except Exception:
        return None, None
    if not infos:
        return None, None
    reductions = [i for i in infos if not i.is_injective()]
    kinds = tuple("dot" if is_product_sum(sch.get(i.block_rv)) else "row" for i in reductions)
    if len(reductions) != 1:
        return kinds, None
    extents = [as_int(e) for e in reductions[0].dom()]
    if any(e is None for e in extents):
        return kinds, None
    shape = buffer_shape(sch.get(reductions[0].block_rv).writes[0].source)
    return kinds, (tuple(e for e, k in zip(extents, reductions[0].dom_kind(), strict=True) if k == "R" and e > 1),
                   tuple(shape))


def has_let(node: Any) -> bool:
    """Whether a TIR statement or expression holds a ``Let`` expression (the fast ``exp``'s)."""
    found: list[Any] = []
    tvm_ffi.structural_walk(node, [(tvm.tirx.Let, found.append)])
    return bool(found)


COMM_REDUCE = 2  # (IterVar.CommReduce: a reduction axis)
DATA_PAR = 0  # (IterVar.DataPar: a spatial axis)


def reads_bf16(func: Any, reductions: bool = False) -> bool:
    """Whether a function's blocks read bf16 buffers (``--precision bf16``'s dense layers and
    convolutions); ``reductions``: only its reduction blocks (a product over bf16 operands, not a
    copy of bf16 values)."""
    blocks: list[Any] = []  # (every block: a hand-written kernel, RoBERTa's cumsum, has no root block)
    tvm_ffi.structural_walk(func.body, (s_tir.SBlock, blocks.append))
    return any(r.source.dtype == "bfloat16" for block in blocks for r in block.reads
               if not reductions or any(int(v.iter_type) == COMM_REDUCE for v in block.iter_vars))


def pair_step(read: Any) -> Any:
    """The reduction variable of a bf16 weight packed in pairs of its steps (``w[..., k % 2]``,
    passes/pack_weights.py under ``--precision bf16``) that ``read`` reads, else None."""
    last = read.region[-1].min if read.source.dtype == "bfloat16" and len(read.region) >= 3 else None
    if isinstance(last, tvm.tirx.FloorMod) and as_int(last.b) == 2 and isinstance(last.a, tvm.tirx.Var):
        return last.a
    return None


def fusion_role(func: Any) -> str | None:
    """``"dot"`` for a 1x1 convolution (one reduction axis, NHWC output), ``"bf16_dot"`` for one
    over bf16 operands (``--precision bf16``), ``"window"`` for a per-channel window reduction
    (depthwise convolution, pooling: two reduction axes of at most 7), else None: the parts the
    expansion fusion joins (at any batch size)."""
    try:
        found = single_reduction(func)
    except Exception:
        return None
    if found is None or len(found[1]) != 4 or None in found[1]:
        return None
    reduce, shape = found
    if len(reduce) == 1:
        # (a bf16 one joins only as an expansion: WindowProject's projection computes in fp32)
        return "bf16_dot" if reads_bf16(func) else "dot"
    if len(reduce) == 2 and max(reduce) <= 7 and shape[1] >= 4 and shape[3] % 4 == 0:
        return "window"  # (channels in whole vectors of 4 lanes or more: ExpandWindow's tiles)
    return None


def is_product_sum(block: Any) -> bool:
    """Whether a reduction block accumulates the product of two loads (``c = c + a * b``): a
    matmul or a convolution, not a max or a plain sum. Each load may be widened (``c += f32(a) *
    f32(b)``: bf16 operands accumulated in fp32, ``--precision bf16``)."""
    return product_operands(block) is not None


def product_operands(block: Any) -> tuple[Any, Any] | None:
    """The two loads a product-sum block multiplies (``is_product_sum``), each without its
    widening cast; None for any other block."""
    body = block.body
    if not isinstance(body, tvm.tirx.BufferStore) or not isinstance(body.value, tvm.tirx.Add):
        return None
    load = tvm.ir.expr.TensorLoad  # (``tvm.tirx.BufferLoad`` is a constructor function in 0.27)
    acc, product = body.value.a, body.value.b
    if not (isinstance(acc, load) and acc.source.same_as(body.buffer) and isinstance(product, tvm.tirx.Mul)):
        return None
    operands = [x.value if isinstance(x, tvm.tirx.Cast) and str(x.ty) == str(acc.ty) else x
                for x in (product.a, product.b)]
    return (operands[0], operands[1]) if all(isinstance(x, load) for x in operands) else None


def contraction_output(func: Any) -> list[int] | None:
    """The shape of what the kernel's first product-sum block (its matmul or convolution) writes,
    before any epilogue: None without one (or without a root block to find it under)."""
    return written_shape(func, is_product_sum)


def written_shape(func: Any, accept: Callable[[Any], bool]) -> list[int] | None:
    """The static shape of what the first block under the root that ``accept`` takes writes
    (an intermediate buffer of a fused kernel, or an argument); None if none does."""
    try:
        sch = s_tir.Schedule(func)
        blocks = [sch.get(b) for b in sch.get_child_blocks(sch.get_sblock("root"))]
    except s_tir.schedule.ScheduleError:
        return None
    for block in blocks:
        if accept(block) and block.writes:
            shape = [as_int(d) for d in block.writes[0].source.shape]
            return None if None in shape else shape  # type: ignore[return-value]
    return None


def reduction_kinds(func: Any) -> list[str] | None:
    """The reduction blocks of a PrimFunc in order, each ``"dot"`` (``is_product_sum``) or
    ``"row"`` (any other reduction: a softmax's max and sum); None when DLight cannot describe
    the function."""
    kinds = _reductions(func)[0]
    return None if kinds is None else list(kinds)


def attention_blocks(func: Any) -> list[Any] | None:
    """The blocks of a joined attention (``reduction_kinds``: a product sum, row reductions, a
    product sum), else None. Counted first from the blocks themselves: a CNN's kernels have fewer
    than three reductions and are turned away without a Schedule built for them."""
    if reduction_block_count(func) < 3:
        return None
    kinds = reduction_kinds(func)
    if not kinds or len(kinds) < 3 or kinds[0] != "dot" or kinds[-1] != "dot" or "dot" in kinds[1:-1]:
        return None
    return _blocks(func)


def block_names(func: Any) -> set[str]:
    """The names of ``func``'s blocks, read without a Schedule."""
    return {b.name_hint for b in _blocks(func)}


def _blocks(func: Any) -> list[Any]:
    blocks: list[Any] = []
    tvm_ffi.structural_walk(func.body, [(s_tir.SBlock, blocks.append)])
    return blocks


@functools.lru_cache(maxsize=ANALYSES_CACHED)
def reduction_block_count(func: Any) -> int:
    """How many blocks of ``func`` are not injective (an iterator that is not data-parallel, as
    DLight reads them), counted from the blocks alone: an upper bound on ``reduction_kinds``'
    length, without building a Schedule."""
    return sum(any(int(v.iter_type) != DATA_PAR for v in b.iter_vars) for b in _blocks(func))


# A hand-written kernel's floating-point operations, set where TVM's estimate cannot count them
# (``compile/recurrent.py``: its Let-bound exponentials are outside what the estimator reads).
FLOPS_ATTR = "tvmbench.flops"


def kernel_flops(func: Any) -> float | None:
    """The kernel's FLOPs: its own ``FLOPS_ATTR`` if it has one, else TVM's estimate; None when
    neither can be had."""
    from tvm.s_tir.analysis import estimate_tir_flops

    if func.attrs is not None and FLOPS_ATTR in func.attrs:
        return float(func.attrs[FLOPS_ATTR])
    try:
        return float(estimate_tir_flops(tvm.IRModule({"main": _lets_counted(func)})))
    except Exception:  # (an op the estimator has no rule for)
        return None


def _lets_counted(func: Any) -> Any:
    """The function with each ``Let`` expression replaced by ``body + value``: TVM's estimate has
    no rule for ``Let`` (``passes/fast_math.py`` writes its exponential with them, and a joined
    attention's FLOPs went uncounted), and this counts the value's operations once, as they run,
    plus one addition per ``Let``."""
    def count(let: Any) -> Any:
        return tvm.tirx.Add(let.body, let.value.astype(str(let.body.ty)))

    return func.with_body(tvm_ffi.structural_map(func.body, (tvm.tirx.Let, count)))
