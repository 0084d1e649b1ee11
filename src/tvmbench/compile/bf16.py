"""bf16 dense layers and convolutions on CPUs with AVX-512 BF16 (``--precision bf16``).

``vdpbf16ps`` multiplies 16 pairs of bf16 values by 16 pairs and adds each pair's two products to
one fp32 lane: 32 multiply-adds per instruction, twice an fp32 FMA's 16, at the same rate (two per
cycle on Zen 5, measured with a C loop of independent accumulators: 576 against 288 GFLOP/s per
core). A dense layer whose weights and input are rounded to bf16 and accumulated in fp32 (what
OpenVINO runs by default on such CPUs and PyTorch's CPU autocast gives) has twice the arithmetic
ceiling of the fp32 one. On CPUs with AMX (Intel's, where this dot product issues at half the
FMAs' rate) ``rules/amx.py`` puts the products that fit on AMX tiles instead (``compile/amx.py``),
over the same packed weights.

Three pieces make TVM emit it:

- ``passes/bf16_dense.py`` (a Relax pass in stage 1, before PackWeights): a dense layer or a
  convolution reads its input and weights as bf16 (``astype``), its output stays fp32 (and
  ``passes/winograd.py`` rounds a Winograd product's operands). PackWeights then packs the bf16
  weights as ``[N/block, K/2, block, 2]``: the pair of reduction steps each lane multiplies is
  adjacent, 32 values per 16 lanes in one load.
- the tensor intrinsic :data:`DOT_16x2` (registered by :func:`register`): the 16 lanes x 2 steps of
  the contraction rule's innermost loops become one ``vdpbf16ps``.
- TVM lowers bf16 arithmetic to fp32 (``BF16ComputeLegalize``) and its LLVM code generator has no
  bf16 vector type, so the intrinsic calls a small LLVM IR function (:data:`LLVM_IR`, linked into
  the kernel through ``pragma_import_llvm``, inlined by LLVM) that takes the broadcast pair and
  the 32 weights as integer vectors, loaded in TIR (so LLVM keeps TVM's aliasing facts and the
  accumulators in registers; passed as pointers, it stored them after every step), and calls
  ``llvm.x86.avx512bf16.dpbf16ps.512`` itself.
"""

from __future__ import annotations

from typing import Any

from tvmbench.errors import UserError
from tvmbench.targets import AMD_CPUS, has_bf16_dot

DOT_16x2 = "tvmbench_dot_16x2_bf16f32"
# The same product over two rows of 16 values (``b[2, 16]``, rows any stride apart: a matrix as
# the model laid it out, not packed in pairs), interleaved in registers (one ``vpermt2w``) before
# the dot product: an attention's k and v, which computed tensors write per inference
# (``passes/bf16_attention.py``).
DOT_16x2_ROWS = "tvmbench_dot_16x2_rows_bf16f32"
# ... and over 16 pairs of each operand (``a[16, 2]``, ``b[16, 2]``, both packed in pairs): a
# grouped convolution's ``groups`` form, whose input and weights both run along the vector's
# lanes (the groups; ``passes/grouped_conv.py``).
DOT_16x2_BOTH = "tvmbench_dot_16x2_both_bf16f32"
# ... and over 8 lanes (``a[2]``, ``b[8, 2]``, one 256-bit ``vdpbf16ps``): a grouped convolution's
# group of 8 output channels (regnet_y_400mf's), on Zen 4, whose half-width vectors run at the
# full rate (``tiles.half_vectors_full_rate``).
DOT_8x2 = "tvmbench_dot_8x2_bf16f32"
LLVM_FUNCTION = "tvmbench_dpbf16ps"
LLVM_HALF_FUNCTION = "tvmbench_dpbf16ps_half"
LLVM_ROWS_FUNCTION = "tvmbench_dpbf16ps_rows"
LLVM_BOTH_FUNCTION = "tvmbench_dpbf16ps_both"
# linkonce_odr: every kernel that uses it links a copy, and the copies merge.
LLVM_IR = f"""
define linkonce_odr <16 x float> @{LLVM_FUNCTION}(<16 x float> %acc, <16 x i32> %a, <32 x i16> %b) alwaysinline {{
  %x = bitcast <16 x i32> %a to <32 x bfloat>
  %w = bitcast <32 x i16> %b to <32 x bfloat>
  %r = call <16 x float> @llvm.x86.avx512bf16.dpbf16ps.512(<16 x float> %acc, <32 x bfloat> %x, <32 x bfloat> %w)
  ret <16 x float> %r
}}
define linkonce_odr <16 x float> @{LLVM_ROWS_FUNCTION}(<16 x float> %acc, <16 x i32> %a, <16 x i16> %b0, <16 x i16> %b1) alwaysinline {{
  %b = shufflevector <16 x i16> %b0, <16 x i16> %b1, <32 x i32> <{", ".join(f"i32 {i}, i32 {i + 16}" for i in range(16))}>
  %r = call <16 x float> @{LLVM_FUNCTION}(<16 x float> %acc, <16 x i32> %a, <32 x i16> %b)
  ret <16 x float> %r
}}
define linkonce_odr <16 x float> @{LLVM_BOTH_FUNCTION}(<16 x float> %acc, <32 x i16> %a, <32 x i16> %b) alwaysinline {{
  %x = bitcast <32 x i16> %a to <16 x i32>
  %r = call <16 x float> @{LLVM_FUNCTION}(<16 x float> %acc, <16 x i32> %x, <32 x i16> %b)
  ret <16 x float> %r
}}
define linkonce_odr <8 x float> @{LLVM_HALF_FUNCTION}(<8 x float> %acc, <8 x i32> %a, <16 x i16> %b) alwaysinline {{
  %x = bitcast <8 x i32> %a to <16 x bfloat>
  %w = bitcast <16 x i16> %b to <16 x bfloat>
  %r = call <8 x float> @llvm.x86.avx512bf16.dpbf16ps.256(<8 x float> %acc, <16 x bfloat> %x, <16 x bfloat> %w)
  ret <8 x float> %r
}}
declare <16 x float> @llvm.x86.avx512bf16.dpbf16ps.512(<16 x float>, <32 x bfloat>, <32 x bfloat>)
declare <8 x float> @llvm.x86.avx512bf16.dpbf16ps.256(<8 x float>, <16 x bfloat>, <16 x bfloat>)
"""
LANES = 16

_registered = False


def peak_rate(func: Any, target: Any) -> float:
    """A kernel's arithmetic peak against the FMA peak: 2 for one whose products read bf16 pairs
    on a target with the dot product (twice the multiply-adds per instruction), else 1. For
    profiles and rooflines: a bf16 kernel's % of peak is against its own."""
    from tvmbench.compile.tir import reads_bf16

    return 2.0 if target.kind == "llvm" and has_bf16_dot(target.tvm()) and reads_bf16(func) else 1.0


def check_target(target: Any) -> None:
    """One line when ``--precision bf16`` is asked of a target that cannot run it."""
    if not has_bf16_dot(target):
        cpu = target.attrs.get("mcpu", "") if target.kind.name == "llvm" else target.kind.name
        raise UserError(f"--precision bf16 needs a CPU with AVX-512 BF16 (znver4/5, cooperlake, sapphirerapids "
                        f"or later); the target ({cpu or 'generic x86'}) has none: use fp32, or fp16/amp on CUDA")


def slower_than_fp32(target: Any) -> str | None:
    """Why a ``--precision bf16`` build may run slower than fp32 on a ``tvm.target.Target`` (None:
    not known to). AMD's Zen 4/5 gained from the dot product (sessions 66-71); Intel's issues it
    at half its FMAs' rate, the same products per cycle plus the conversions: on a 2-vCPU Sapphire
    Rapids-class VM resnet50 ran 0.73x of fp32 (docs/performance.md, session 85), until its AMX
    tiles took the products (``compile/amx.py``)."""
    from tvmbench.compile import amx

    mcpu = str(target.attrs["mcpu"]) if target.kind.name == "llvm" and "mcpu" in target.attrs else ""
    if not mcpu or mcpu.startswith(AMD_CPUS) or amx.usable(target):
        return None
    return (f"bf16 may run slower than fp32 on this CPU ({mcpu}): its AVX-512 BF16 dot product issues at half the "
            "rate of its fp32 FMAs (resnet50 measured 0.73x of fp32 on a Sapphire Rapids-class CPU); "
            "--precision fp32 is likely faster")


def register() -> None:
    """Register :data:`DOT_16x2`, :data:`DOT_16x2_ROWS`, :data:`DOT_16x2_BOTH` and :data:`DOT_8x2`
    with TVM (once per process)."""
    global _registered
    if _registered:
        return
    from tvm.s_tir import TensorIntrin

    TensorIntrin.register(DOT_16x2, *_intrinsic(rows=False), override=True)
    TensorIntrin.register(DOT_16x2_ROWS, *_intrinsic(rows=True), override=True)
    TensorIntrin.register(DOT_16x2_BOTH, *_intrinsic(rows=False, both=True), override=True)
    TensorIntrin.register(DOT_8x2, *_intrinsic(rows=False, lanes=8), override=True)
    _registered = True


def _intrinsic(rows: bool, both: bool = False, lanes: int = LANES) -> tuple[Any, Any]:
    """(description, implementation) of :data:`DOT_16x2` (``b[16, 2]``, the pairs adjacent: packed
    weights), or, ``rows``, of :data:`DOT_16x2_ROWS` (``b[2, 16]``, two rows any stride apart), or,
    ``both``, of :data:`DOT_16x2_BOTH` (``a[16, 2]`` too, a pair per lane instead of one broadcast),
    or, 8 ``lanes``, of :data:`DOT_8x2`. (TVMScript evaluates the Python ``if`` s here when it
    parses: four functions each.)"""
    from tvm.script import tirx as T

    shape = (2, lanes) if rows else (lanes, 2)
    a_shape = (lanes, 2) if both else (2,)
    vector, function = f"float32x{lanes}", LLVM_FUNCTION if lanes == LANES else LLVM_HALF_FUNCTION

    @T.prim_func(s_tir=True)
    def desc(a_h: T.handle, b_h: T.handle, c_h: T.handle) -> None:
        stride = T.int64()
        a = T.match_buffer(a_h, a_shape, "bfloat16", offset_factor=1)
        b = T.match_buffer(b_h, shape, "bfloat16", offset_factor=1, strides=[stride, 1] if rows else None)
        c = T.match_buffer(c_h, (lanes,), "float32", offset_factor=1)
        with T.sblock("root"):
            if both:
                T.reads(c[0:lanes], a[0:lanes, 0:2], b[0:lanes, 0:2])
            else:
                T.reads(c[0:lanes], a[0:2], b[0:shape[0], 0:shape[1]])
            T.writes(c[0:lanes])
            for i, k in T.grid(lanes, 2):
                with T.sblock("update"):
                    vi, vk = T.axis.remap("SR", [i, k])
                    if both:
                        c[vi] = c[vi] + T.cast(a[vi, vk], "float32") * T.cast(b[vi, vk], "float32")
                    elif rows:
                        c[vi] = c[vi] + T.cast(a[vk], "float32") * T.cast(b[vk, vi], "float32")
                    else:
                        c[vi] = c[vi] + T.cast(a[vk], "float32") * T.cast(b[vi, vk], "float32")

    @T.prim_func(s_tir=True)
    def impl(a_h: T.handle, b_h: T.handle, c_h: T.handle) -> None:
        stride = T.int64()
        a = T.match_buffer(a_h, a_shape, "bfloat16", offset_factor=1)
        b = T.match_buffer(b_h, shape, "bfloat16", offset_factor=1, strides=[stride, 1] if rows else None)
        c = T.match_buffer(c_h, (lanes,), "float32", offset_factor=1)
        with T.sblock("root"):
            if both:
                T.reads(c[0:lanes], a[0:lanes, 0:2], b[0:lanes, 0:2])
            else:
                T.reads(c[0:lanes], a[0:2], b[0:shape[0], 0:shape[1]])
            T.writes(c[0:lanes])
            # (uint16 views of the bf16 operands, loaded as values with their aliasing facts: TVM's
            # bf16 legalisation would compute in fp32 what it loads as bf16. The broadcast pair is
            # not bound to a name: so bound, it became a 4-byte buffer from TVM's workspace pool,
            # two calls per tile and a store per step; without, resnet50 1.050x, mobilenet_v2
            # 1.084x, squeezenet1_1 1.080x, bert-base 1.020x in bf16, session 98)
            a16 = T.decl_buffer((32 if both else 2,), "uint16", data=a.data, elem_offset=a.elem_offset)
            if both:
                b16 = T.decl_buffer((32,), "uint16", data=b.data, elem_offset=b.elem_offset)
                c[T.ramp(0, 1, 16)] = T.call_pure_extern(
                    "float32x16", LLVM_BOTH_FUNCTION, c[T.ramp(0, 1, 16)], a16[T.ramp(0, 1, 32)], b16[T.ramp(0, 1, 32)])
            elif rows:
                b16 = T.decl_buffer((stride + 16,), "uint16", data=b.data, elem_offset=b.elem_offset)
                c[T.ramp(0, 1, 16)] = T.call_pure_extern(
                    "float32x16", LLVM_ROWS_FUNCTION, c[T.ramp(0, 1, 16)],
                    T.broadcast(T.reinterpret("uint32", a16[T.ramp(0, 1, 2)]), 16), b16[T.ramp(0, 1, 16)],
                    b16[T.ramp(stride, 1, 16)])
            else:
                b16 = T.decl_buffer((2 * lanes,), "uint16", data=b.data, elem_offset=b.elem_offset)
                c[T.ramp(0, 1, lanes)] = T.call_pure_extern(
                    vector, function, c[T.ramp(0, 1, lanes)],
                    T.broadcast(T.reinterpret("uint32", a16[T.ramp(0, 1, 2)]), lanes), b16[T.ramp(0, 1, 2 * lanes)])

    return desc, impl


def bf16_kernels(legal: Any) -> list[str]:
    """The kernels whose products read bf16 operands (``--precision bf16``'s dense layers and
    convolutions; not a copy or transpose of bf16 values). ``legal``: the legalized module
    without the weights' packing at load (``pipeline.per_inference``), asked before stage 3,
    whose scheduling rewrites its functions in place."""
    import tvm

    from tvmbench.compile.tir import reads_bf16

    return [gv.name_hint for gv, f in legal.functions.items()
            if isinstance(f, tvm.tirx.PrimFunc) and reads_bf16(f, reductions=True)]


def without_dot(kernels: list[str], scheduled: Any) -> list[str]:
    """Those of ``kernels`` (``bf16_kernels``) that do not call the bf16 dot product once
    ``scheduled`` (``compile/bf16.py``): TVM lowers their bf16 arithmetic to fp32 one element at
    a time, so they run correct but many times slower (alexnet's and inception_v3's
    convolutions, 30-90x, before session 66 gave them whole row tiles)."""
    funcs = {gv.name_hint: f for gv, f in scheduled.functions.items()}
    from tvmbench.compile import amx

    return sorted(n for n in kernels if n in funcs
                  and not any(f in funcs[n].script() for f in (LLVM_FUNCTION, amx.LLVM_FUNCTION)))
