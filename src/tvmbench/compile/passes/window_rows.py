"""WindowRows: a window's rows of taps that fall in the padding are skipped, not multiplied by
zeros.

A depthwise window as large as its map (RepLKNet's 29x29 over 28x28, 31x31 over 56x56) reads a
padded copy of its input (``rules/contraction.py``), and a tile of one output row runs the loop
over the window's rows whole: at the map's top and bottom most of those rows are padding, zeros
multiplied and added (45 % of a 29x29 window's taps over 28x28, rows and columns together). The
rule marks that loop (``mark``: the padded buffer, its axis, the rows of it that hold the input)
and this pass (native CPU lowering, ``codegen.py``, ahead of TVM's passes) runs its body only for
rows inside the input. Adding a product with a zero changes no sum, so the results are the same.
Columns stay whole: the taps along the tile's row are unrolled (WINDOW_ROW_TAPS), one body for all.
"""

from __future__ import annotations

from typing import Any

import tvm
import tvm_ffi
from tvm import s_tir, tirx

from tvmbench.compile.ir import kernel_pass
from tvmbench.compile.tir import uses

KEY = "tvmbench.window_rows"
# Off: every row of the window is computed (for A/Bs).
ENABLED = True


def mark(sch: Any, block: Any, loop: Any) -> None:
    """Mark ``loop`` (a reduction loop of ``block``) when ``block`` reads, along one axis indexed
    by ``loop``'s variable, a buffer that a producer block copies from its input with padding
    (``pad[.., v, ..] = if_then_else(.., x[.., v - before, ..], 0)``)."""
    if not ENABLED:
        return
    main = sch.get(block)
    bound = _reduce_var(sch, block, sch.get(loop).loop_var)
    if bound is None:
        return
    for producer in sch.get_producers(block):
        found = _padding(sch.get(producer))
        if found is None:
            continue
        buffer, rows = found
        for read in main.reads:
            if not read.source.same_as(buffer):
                continue
            for axis, r in enumerate(read.region):
                if axis in rows and uses(r.min, bound):
                    sch.annotate(loop, KEY, f"{buffer.name},{axis},{rows[axis][0]},{rows[axis][1]}")
                    return


def _reduce_var(sch: Any, block: Any, var: Any) -> Any | None:
    """The block variable of ``block`` bound to the loop variable ``var`` alone."""
    stmt = sch.get(block)
    realize = None

    def find(node: Any) -> Any:
        nonlocal realize
        if isinstance(node, s_tir.SBlockRealize) and node.block.same_as(stmt):
            realize = node
            return tvm_ffi.structural.VisitInterrupt(True)
        return None

    tvm_ffi.structural_walk(sch.mod["main"].body, find, order="pre")
    if realize is None:
        return None
    for iv, value in zip(stmt.iter_vars, realize.iter_values, strict=True):
        if isinstance(value, tirx.Var) and value.same_as(var):
            return iv.var
    return None


def _padding(block: Any) -> tuple[Any, dict[int, tuple[int, int]]] | None:
    """(the padded buffer, {axis: (first, end) rows of it that hold the input}) of a padding copy
    ``pad[v..] = if_then_else(cond, x[v.. - before], 0)``; None for any other block."""
    if len(block.writes) != 1 or len(block.reads) != 1 or not isinstance(block.body, tirx.BufferStore):
        return None
    value = block.body.value
    if not (isinstance(value, tvm.ir.Call) and getattr(value.op, "name", "") == "prim.if_then_else"):
        return None
    out, src = block.writes[0].source, block.reads[0].source
    if len(out.shape) != len(src.shape):
        return None
    block_vars = [iv.var for iv in block.iter_vars]
    rows = {}
    for axis, (r, index) in enumerate(zip(block.reads[0].region, block.body.indices, strict=True)):
        if isinstance(index, tirx.IntImm) and int(out.shape[axis]) == int(src.shape[axis]) == 1:
            continue  # (an axis of one: its index a constant)
        if not isinstance(index, tirx.Var) or not any(index.same_as(v) for v in block_vars):
            return None
        before = _before(r.min, index)
        if before is None:
            return None
        if before > 0 or int(out.shape[axis]) > int(src.shape[axis]):
            rows[axis] = (before, before + int(src.shape[axis]))
    return out, rows


def _before(read: Any, index: Any) -> int | None:
    """``p`` where ``read`` is ``index - p`` (or ``index + -p``, or ``index``: 0); else None."""
    if isinstance(read, tirx.Var) and read.same_as(index):
        return 0
    if isinstance(read, (tirx.Sub, tirx.Add)) and read.a.same_as(index) and isinstance(read.b, tirx.IntImm):
        return int(read.b.value) if isinstance(read, tirx.Sub) else -int(read.b.value)
    return None


def skip_padding_rows(func: Any) -> Any:
    """``func`` with each marked loop's body run only where the padded buffer's row it reads holds
    input (module docstring); the function itself when nothing is marked or the row depends on a
    loop inside the marked one."""
    marked: list[Any] = []
    tvm_ffi.structural_walk(func.body, [(tirx.For, lambda f: marked.append(f) if KEY in f.annotations else None)])
    if not marked:
        return func

    def rewrite(loop: Any) -> Any:
        if KEY not in loop.annotations:
            return loop
        annotations = {k: v for k, v in loop.annotations.items() if k != KEY}
        name, axis, first, end = str(loop.annotations[KEY]).split(",")
        row = _row_read(loop, name, int(axis))
        body = loop.body
        if row is not None:
            body = tirx.IfThenElse(tirx.all(int(first) <= row, row < int(end)), body, None)
        return tirx.For(loop.loop_var, loop.min, loop.extent, loop.kind, body, loop.thread_binding, annotations)

    return func.with_body(tvm_ffi.structural_map(func.body, (tirx.For, rewrite)))


def _row_read(loop: Any, name: str, axis: int) -> Any | None:
    """The row of buffer ``name`` along ``axis`` that the block under ``loop`` reads, in the
    variables of ``loop`` and the loops around it; None when it depends on a loop inside."""
    realizes: list[Any] = []
    inner: list[Any] = []
    tvm_ffi.structural_walk(loop.body, [(s_tir.SBlockRealize, realizes.append), (tirx.For, lambda f: inner.append(f.loop_var))])
    rows = []
    for realize in realizes:
        mapping = {iv.var: value for iv, value in zip(realize.block.iter_vars, realize.iter_values, strict=True)}
        for read in realize.block.reads:
            if read.source.name == name:
                if not (isinstance(read.region[axis].extent, tirx.IntImm) and int(read.region[axis].extent) == 1):
                    return None  # (a block reading several rows: one row's bounds would not cover them)
                rows.append(tvm_ffi.structural_map(read.region[axis].min,
                                                   (tvm.ir.Var, lambda v, m=mapping: m.get(v, v)), order="post"))
    if len(rows) != 1:
        return None
    used = tvm.tirx.analysis.undefined_vars(rows[0], [])
    if any(v.same_as(i) for v in used for i in inner):
        return None
    return rows[0]


# WindowRows over every kernel of a module (module docstring).
window_rows_pass = kernel_pass(skip_padding_rows, "WindowRows")
