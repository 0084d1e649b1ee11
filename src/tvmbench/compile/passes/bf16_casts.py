"""BindCastOperands: a cast to bf16 whose operand holds a ``Let`` casts a variable bound to it.

TVM's ``BF16ComputeLegalize`` lowers ``Cast("bfloat16", x)`` to integer arithmetic on ``x``'s
bits (round to nearest even) that names ``x`` more than once, copying the expression; a ``Let``
inside it (the fast ``exp`` of a sigmoid or SiLU, ``passes/fast_math.py``) is then bound twice,
and once the loop is vectorised TVM's vectoriser fails ("Let cannot bind the same var to two
different values"). EfficientNet's SiLU epilogues, which cast to bf16 for the next convolution
under ``--precision bf16``, did not compile. Bound to a variable by a statement first, only the
variable is copied. Runs before TVM's lowering (``codegen._pipeline``).
"""

from __future__ import annotations

from typing import Any

import tvm_ffi
from tvm import tirx

from tvmbench.compile.ir import kernel_pass
from tvmbench.compile.tir import has_let


def bind_cast_operands(func: Any) -> Any:
    """``func`` with each store of a bf16 cast of an expression holding a ``Let`` made ``v = x;
    store(cast(v))`` (a statement: a ``Let`` expression of bf16 type would be copied whole); the
    function itself when there is none."""
    changed = []

    def on_store(node: Any) -> Any:
        value = node.value
        if (not isinstance(value, tirx.Cast) or not str(value.ty).startswith("bfloat16")
                or not has_let(value.value)):
            return node
        changed.append(node)
        var = tirx.Var("cast_operand", value.value.ty)
        store = tirx.BufferStore(node.buffer, tirx.Cast(str(value.ty), var), node.indices)
        return tirx.SeqStmt([tirx.LetStmt(var, _widened_by_bits(value.value)), store])

    body = tvm_ffi.structural_map(func.body, (tirx.BufferStore, on_store))
    return func.with_body(body) if changed else func


def _widened_by_bits(expr: Any) -> Any:
    """``expr`` with each widening of a bf16 value (``Cast("float32", x)``) written as TVM's bf16
    legalisation writes it: ``x``'s 16 bits shifted to the top of a float32's. TVM legalises the
    bf16 arithmetic of stores, not of a ``LetStmt``'s value: there the widening stayed a numeric
    conversion of the 16 bits as an integer once the bf16 buffer became ``uint16`` (a residual
    stored in bf16 and added back in an epilogue with a SiLU, torchvision's EfficientNetV2 under
    --precision bf16: outputs off by 5e4)."""

    def on_cast(node: Any) -> Any:
        if str(node.ty) != "float32" or not str(node.value.ty).startswith("bfloat16"):
            return node
        bits = tirx.Cast("uint32", tirx.reinterpret("uint16", node.value))
        return tirx.reinterpret("float32", tirx.shift_left(bits, tirx.const(16, "uint32")))

    return tvm_ffi.structural_map(expr, (tirx.Cast, on_cast))


bind_cast_operands_pass = kernel_pass(bind_cast_operands, "BindCastOperands")


def scalar_constant_stores(func: Any) -> Any:
    """``func`` with each vectorised loop that stores a bf16 constant made serial; the function
    itself when there is none. TVM's bf16 legalisation turns a bf16 buffer into ``uint16`` and a
    scalar bf16 constant into its bits, but leaves a vector of them (``bfloat16x8``), and the store
    fails to build ("dtype mismatch on BufferStore"): an epilogue partitioned at the padding of its
    channels (``rules/base.partition_at_cuts``) stores zeros in bf16 over the padded vectors, and
    the SE blocks of torchvision's mobilenet_v3_large did not compile in bf16 (sessions 68-93).
    The loop runs over padding only. Runs after ``codegen.opaque_and_simplified``, which folds
    such a vector's value to the constant."""
    changed = []

    def on_loop(loop: Any) -> Any:
        if loop.kind != tirx.ForKind.VECTORIZED:
            return loop
        stores: list[Any] = []
        tvm_ffi.structural_walk(loop.body, (tirx.BufferStore, stores.append))
        if not any(str(s.buffer.dtype) == "bfloat16" and isinstance(s.value, tirx.FloatImm) for s in stores):
            return loop
        changed.append(loop)
        return tirx.For(loop.loop_var, loop.min, loop.extent, tirx.ForKind.SERIAL, loop.body, loop.thread_binding,
                        loop.annotations)

    body = tvm_ffi.structural_map(func.body, (tirx.For, on_loop))
    return func.with_body(body) if changed else func


scalar_constant_stores_pass = kernel_pass(scalar_constant_stores, "ScalarConstantStores")
