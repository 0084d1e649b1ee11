"""RoundToBf16: a kernel's fp32 -> bf16 roundings by the CPU's instruction, not by integer arithmetic.

TVM's ``BF16ComputeLegalize`` lowers ``Cast("bfloat16", x)`` to integer arithmetic on ``x``'s bits,
``(bits + 0x7FFF + (bits >> 16 & 1)) >> 16`` (round to nearest even), which vectorised is six
instructions for 16 values where AVX-512 BF16 has one (``vcvtneps2bf16``, the same rounding).
Every bf16 build pays it in the epilogue of each kernel that writes bf16 (a convolution's bias,
ReLU and rounding for the next layer) and in the padded copy of the input each AMX convolution
makes (``pad``: bf16 values widened to fp32, padding selected, rounded back: the same bits). After
TVM's lowering (``codegen.py``), each such rounding of 16 lanes becomes:

- of a widened bf16 value (``reinterpret(f32, u32(y) << 16)``): ``y`` itself (exact);
- of an ``if_then_else``: the ``if_then_else`` of its two sides' roundings (the padded copy's);
- of a constant: its bf16 bits;
- of anything else: a call of :data:`LLVM_FUNCTION` (linked into the kernel by
  ``pragma_import_llvm``, inlined by LLVM), which issues ``vcvtneps2bf16``.

On targets with AVX-512 BF16 only (every ``--precision bf16`` build). The instruction reads a
denormal as zero, as the dot product and AMX tiles already read their inputs; a NaN stays a NaN
(the integer form could round one to infinity).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import tvm
import tvm_ffi
from tvm import tirx

from tvmbench.compile.ir import kernel_pass
from tvmbench.compile.tir import as_int
from tvmbench.targets import has_bf16_dot

# 0 leaves TVM's integer rounding (``benchmarks/rule_ab.py M passes.bf16_round.ROUND_BY_INSTRUCTION 0``).
ROUND_BY_INSTRUCTION = 1
LLVM_FUNCTION = "tvmbench_round_bf16x16"
LANES = 16
LLVM_IR = f"""
define linkonce_odr <16 x i16> @{LLVM_FUNCTION}(<16 x float> %x) alwaysinline {{
  %r = call <16 x bfloat> @llvm.x86.avx512bf16.cvtneps2bf16.512(<16 x float> %x)
  %i = bitcast <16 x bfloat> %r to <16 x i16>
  ret <16 x i16> %i
}}
declare <16 x bfloat> @llvm.x86.avx512bf16.cvtneps2bf16.512(<16 x float>)
"""
_REINTERPRET = tvm.ir.Op.get("tirx.reinterpret")
_IF_THEN_ELSE = tvm.ir.Op.get("prim.if_then_else")


def _constant(expr: Any) -> int | None:
    """An integer constant's value (also broadcast), else None."""
    return as_int(expr.value if isinstance(expr, tirx.Broadcast) else expr)


def _is_call(expr: Any, op: Any) -> bool:
    return isinstance(expr, tvm.ir.Call) and expr.op.same_as(op)


def rounded(expr: Any) -> Any:
    """The fp32 vector ``x`` that ``expr`` is TVM's integer rounding of (``Cast(u16, (r + ((r >> 16
    & 1) + 0x7FFF)) >> 16)``, ``r = reinterpret(u32, x)``), else None."""
    if not isinstance(expr, tirx.Cast) or not str(expr.ty).startswith("uint16x"):
        return None
    shifted = expr.value
    if not isinstance(shifted, tirx.RShift) or _constant(shifted.b) != 16 or not isinstance(shifted.a, tirx.Add):
        return None
    bits, bias = shifted.a.a, shifted.a.b
    if (not _is_call(bits, _REINTERPRET) or not isinstance(bias, tirx.Add) or _constant(bias.b) != 0x7FFF
            or not isinstance(bias.a, tirx.BitwiseAnd) or _constant(bias.a.b) != 1):
        return None
    x, inner = bits.args[0], bias.a.a
    if not (isinstance(inner, tirx.RShift) and _constant(inner.b) == 16 and _is_call(inner.a, _REINTERPRET)
            and tvm_ffi.structural_equal(inner.a.args[0], x)):
        return None  # (the tie's bit of another value)
    return x if str(x.ty).startswith("float32x") else None


def _widened(x: Any) -> Any:
    """``y`` where ``x`` is bf16 ``y`` widened to fp32 (``reinterpret(f32, Cast(u32, y) << 16)``)."""
    if not _is_call(x, _REINTERPRET) or not isinstance(x.args[0], tirx.LShift) or _constant(x.args[0].b) != 16:
        return None
    cast = x.args[0].a
    if isinstance(cast, tirx.Cast) and str(cast.value.ty).startswith("uint16x"):
        return cast.value
    return None


def _bf16_bits(value: float) -> int:
    bits = int(np.array(value, dtype=np.float32).view(np.uint32))
    return (bits + 0x7FFF + ((bits >> 16) & 1)) >> 16 & 0xFFFF


def by_instruction(x: Any, calls: list[Any]) -> Any:
    """``x`` (fp32, LANES lanes) rounded to bf16 bits (uint16): as the module's docstring says; the
    extern calls made are appended to ``calls``."""
    y = _widened(x)
    if y is not None:
        return y
    if _is_call(x, _IF_THEN_ELSE):
        return tirx.if_then_else(x.args[0], by_instruction(x.args[1], calls), by_instruction(x.args[2], calls))
    if isinstance(x, tirx.Broadcast) and isinstance(x.value, tirx.FloatImm):
        return tirx.Broadcast(tirx.IntImm("uint16", _bf16_bits(float(x.value.value))), LANES)
    call = tirx.call_pure_extern(f"uint16x{LANES}", LLVM_FUNCTION, x)
    calls.append(call)
    return call


def round_to_bf16(func: Any) -> Any:
    """``func`` with each rounding of LANES lanes made :func:`by_instruction`, and the rounding
    function imported where one calls it; ``func`` itself on a target without AVX-512 BF16 or with
    none to make."""
    target = func.attrs.get("target") if func.attrs else None
    if not ROUND_BY_INSTRUCTION or target is None or target.kind.name != "llvm" or not has_bf16_dot(target):
        return func
    calls: list[Any] = []
    changed = []

    def on_cast(node: Any) -> Any:
        x = rounded(node)
        if x is None or tvm.DataType(str(node.ty)).lanes != LANES:
            return node
        changed.append(node)
        return by_instruction(x, calls)

    body = tvm_ffi.structural_map(func.body, (tirx.Cast, on_cast))
    if not changed:
        return func
    if calls:
        body = tirx.AttrStmt(tirx.IntImm("int32", 0), "pragma_import_llvm", tvm.ir.StringImm(LLVM_IR), body)
    return func.with_body(body)


round_to_bf16_pass = kernel_pass(round_to_bf16, "RoundToBf16")
