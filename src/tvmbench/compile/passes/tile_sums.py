"""TileSumsFromZero: an AMX tile's sums start at zero in the tile registers, not zeroed in memory.

The AMX rule (``rules/amx.py``) tensorizes a tile's reduction into one call of the tile function
(``compile/amx.py``), which loads the sums from the tile's buffer of fp32 sums, accumulates and
stores them back; the reduction's initialisation, split off by ``write_back``, zeroes that buffer
just before (a 28 x 32 tile: 56 vector stores, then four tile loads of the zeros). Where the call
is the tile's whole reduction (a window inside the tile, a dense layer's channels: the call
directly after the zeroing, not in a loop of taps), the zeroing loop is dropped after TVM's
lowering and the call made to the function's variant that starts its sums with ``tilezero``
(``amx.ZERO_SUFFIX``). The buffer must be the tile's own (allocated in the loop, zeroed whole, and
the call's sums at its start), or the rows zeroed exactly the call's sums (a flattened map's,
accumulated in the reduction's output: ``FLAT_SUMS``): then every value the epilogue reads is one
the call stores.
"""

from __future__ import annotations

from typing import Any

import tvm
import tvm_ffi
from tvm import tirx

from tvmbench.compile import amx
from tvmbench.compile.ir import kernel_pass
from tvmbench.compile.tir import as_int

# 0 keeps the zeroing in memory (``benchmarks/rule_ab.py M passes.tile_sums.SUMS_FROM_ZERO 0``).
SUMS_FROM_ZERO = 1
# ... also where the sums are rows of a larger buffer (a flattened map's: ``_zeroed_rows``); 0: own
# buffers only.
FLAT_SUMS = 1
_CALL_EXTERN = tvm.ir.Op.get("tirx.call_extern")
_ACCESS_PTR = tvm.ir.Op.get("tirx.tvm_access_ptr")


def _zeroing(stmt: Any) -> tuple[Any, int] | None:
    """(buffer, elements) where ``stmt`` is a nest of loops storing vectors of zeros into a flat
    buffer, whole and in order from its start: ``for i in range(n): buf[i * L: i * L + L] =
    Broadcast(0.0, L)``, or over two output rows (paired rows' tiles) ``for r, i in grid(2, n):
    buf[r * n * L + i * L: ...]``."""
    loops = []
    while isinstance(stmt, tirx.For):
        loops.append(stmt)
        stmt = stmt.body
    if not loops or not isinstance(stmt, tirx.BufferStore) or len(stmt.indices) != 1:
        return None
    value, index = stmt.value, stmt.indices[0]
    if (not isinstance(value, tirx.Broadcast) or not isinstance(value.value, tirx.FloatImm)
            or float(value.value.value) != 0.0 or not isinstance(index, tirx.Ramp)):
        return None
    elements, expected = int(value.lanes), tirx.IntImm("int32", 0)
    for loop in reversed(loops):
        if as_int(loop.min) != 0 or as_int(loop.extent) is None:
            return None
        expected = expected + loop.loop_var * elements
        elements *= as_int(loop.extent)
    if not tvm.sym.Analyzer().can_prove_equal(index.base, expected):
        return None
    return stmt.buffer, elements


def _zeroed_rows(stmt: Any) -> tuple[Any, Any, int, int] | None:
    """(buffer, offset, rows, stride) where ``stmt`` zeroes ``rows`` rows of ``amx.PACK`` fp32 sums
    in a larger buffer, ``stride`` elements apart from ``offset`` on: ``for r in range(rows):
    buf[offset + r * stride: ... + 32] = Broadcast(0.0, 32)`` (a flattened map's sums, accumulated
    in the reduction's output itself: ``rules/amx.py``'s ``_sums_in_place``)."""
    if not isinstance(stmt, tirx.For) or as_int(stmt.min) != 0 or as_int(stmt.extent) is None:
        return None
    store = stmt.body
    if not isinstance(store, tirx.BufferStore) or len(store.indices) != 1 or str(store.buffer.dtype) != "float32":
        return None
    value, index = store.value, store.indices[0]
    if (not isinstance(value, tirx.Broadcast) or not isinstance(value.value, tirx.FloatImm)
            or float(value.value.value) != 0.0 or not isinstance(index, tirx.Ramp) or int(value.lanes) != amx.PACK):
        return None
    analyzer = tvm.sym.Analyzer()
    offset, next_row = (analyzer.simplify(_with(index.base, stmt.loop_var, r)) for r in (0, 1))
    stride = as_int(analyzer.simplify(next_row - offset))
    return None if stride is None else (store.buffer, offset, as_int(stmt.extent), stride)


def _with(expr: Any, var: Any, value: int) -> Any:
    """``expr`` with ``var`` (found by name: lowered variables are not reliably the same object) as ``value``."""
    return tvm_ffi.structural_map(expr, (tirx.Var, lambda v: tirx.const(value, v.ty.dtype)
                                         if str(v.name) == str(var.name) else v))


def _names(pointer: Any, buffer: Any) -> bool:
    """Whether ``pointer`` (an access pointer's variable) is ``buffer``'s: by name, within one
    sequence of statements that allocates the buffer (after TVM's lowering the tensor
    intrinsic's view of the sums passes a variable of its own, of the buffer's name)."""
    return isinstance(pointer, tirx.Var) and str(pointer.name) == str(buffer.name)


def _tile_call(stmt: Any, buffer: Any, offset: Any, rows: int, stride: int) -> Any:
    """The tile function's call in ``stmt`` whose sums are ``rows`` rows of ``amx.PACK`` values of
    ``buffer``, ``stride`` elements apart from ``offset`` on, or None."""
    call = stmt.value if isinstance(stmt, tirx.Evaluate) else None
    if call is None or not isinstance(call, tvm.ir.Call) or not call.op.same_as(_CALL_EXTERN):
        return None
    name = str(call.args[0].value)
    if not name.startswith(amx.LLVM_FUNCTION) or name.endswith(amx.ZERO_SUFFIX):
        return None
    sums = call.args[1]
    if not (isinstance(sums, tvm.ir.Call) and sums.op.same_as(_ACCESS_PTR) and _names(sums.args[1], buffer)
            and tvm.sym.Analyzer().can_prove_equal(sums.args[2], offset) and as_int(sums.args[3]) == rows * stride):
        return None
    # (the call's sums cover the rows zeroed: rows of 32 fp32, ``stride`` apart, the second A
    # tile's after the first's; so every value the epilogue reads, the call stores)
    ldc, c_skip, tile_rows = (as_int(call.args[i]) for i in (2, 3, 17))
    tiles_a = 2 if name[len(amx.LLVM_FUNCTION):].startswith("2") else 1
    if ldc != 4 * stride or tile_rows is None or tiles_a * tile_rows != rows or (
            tiles_a == 2 and c_skip != tile_rows * ldc):
        return None
    return call


def _own_sums(stmt: Any, before: list[Any]) -> tuple[Any, Any, int, int] | None:
    """(buffer, 0, rows, ``amx.PACK``) where ``stmt`` zeroes a tile's own buffer of sums whole
    (``_zeroing``), allocated in ``before``; else None."""
    zeroed = _zeroing(stmt)
    if zeroed is None or zeroed[1] % amx.PACK or not any(
            isinstance(a, tirx.AllocBuffer) and a.buffer.same_as(zeroed[0]) and _elements(a.buffer) == zeroed[1]
            for a in before):
        return None
    return zeroed[0], tirx.const(0, "int64"), zeroed[1] // amx.PACK, amx.PACK


def _elements(buffer: Any) -> int | None:
    """A flat fp32 buffer's elements, else None."""
    shape = buffer.shape
    return as_int(shape[0]) if len(shape) == 1 and str(buffer.dtype) == "float32" else None


def sums_from_zero(func: Any) -> Any:
    """``func`` with each tile's zeroing loop dropped and its call starting from zero (the module's
    docstring); ``func`` itself where there is none."""
    if not SUMS_FROM_ZERO:
        return func
    changed = []

    def on_seq(node: Any) -> Any:
        stmts, before = list(node.seq), len(changed)
        for i, stmt in enumerate(stmts[:-1]):
            zeroed = _own_sums(stmt, stmts[:i]) or (_zeroed_rows(stmt) if FLAT_SUMS else None)
            if zeroed is None:
                continue
            for j in range(i + 1, len(stmts)):
                call = _tile_call(stmts[j], *zeroed)
                if call is not None:
                    stmts[j] = tirx.Evaluate(tirx.call_extern("void", str(call.args[0].value) + amx.ZERO_SUFFIX,
                                                              *call.args[1:]))
                    stmts[i] = tirx.Evaluate(0)
                    changed.append(call)
                    break
                if not isinstance(stmts[j], tirx.DeclBuffer):  # (only views between the two)
                    break
        return tirx.SeqStmt(stmts) if len(changed) > before else node

    body = tvm_ffi.structural_map(func.body, (tirx.SeqStmt, on_seq), order="pre")
    return func.with_body(body) if changed else func


tile_sums_from_zero_pass = kernel_pass(sums_from_zero, "TileSumsFromZero")
