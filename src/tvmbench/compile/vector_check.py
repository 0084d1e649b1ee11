"""A build's guard against a contraction left without vectors.

When no rule takes a matmul or a convolution (a shape its register tile does not fit, a layout a
pass left unexpected), DLight's chain ends at ``rules/fallback.py``: the loops are spread over the
cores, but the multiply-accumulate runs one element at a time, 10-100x slower than a register
tile, and nothing else says so: the outputs are right. The sessions met it four times, each found
by a slow end-to-end number (ResNeXt's grouped convolutions, VGG's adaptive pool at 193 px,
ExpandWindow at 320 px, densenet161's 48-channel Winograd product in bf16 at 193 px: 0.09x of
OpenVINO). This check names such kernels in the build's warnings, which a result keeps and the
CLI prints: a user sees why a model is slow, a developer sees which kernel before a sweep does.

A kernel counts when a product-sum block (``c = c + a * b``, ``tir.is_product_sum``) of at least
:data:`MIN_FLOPS` has no vectorized loop around it once scheduled. A tensorized one (the bf16 dot
product, AMX) has no such block left, so it is not counted; a bf16 kernel without its dot product
is ``bf16.without_dot``'s warning.
"""

from __future__ import annotations

from typing import Any

# A contraction below this many FLOPs costs little even one element at a time (a classifier's
# 512 -> 1000 at batch 1 is 1 MFLOP); none of the zoo's kernels above it runs without vectors (the
# 27 models at batch 1, at batch 8 and at batch 3 with 193 px or 77 tokens, in fp32 and in bf16,
# each kernel checked: session 98).
MIN_FLOPS = 1e6


def contraction_flops(legal: Any) -> dict[str, float]:
    """The kernels of a legalized module (``pipeline.per_inference``, before stage 3 schedules
    its functions in place) that hold a product-sum block, with their FLOPs, those of at least
    :data:`MIN_FLOPS`."""
    import tvm
    import tvm_ffi
    from tvm import s_tir

    from tvmbench.compile.tir import is_product_sum, kernel_flops

    found = {}
    for gv, func in legal.functions.items():
        if not isinstance(func, tvm.tirx.PrimFunc):
            continue
        blocks: list[Any] = []
        tvm_ffi.structural_walk(func.body, (s_tir.SBlock, blocks.append))
        flops = (kernel_flops(func) or 0.0) if any(is_product_sum(b) for b in blocks) else 0.0
        if flops >= MIN_FLOPS:
            found[gv.name_hint] = flops
    return found


def scalar_products(func: Any) -> list[str]:
    """The product-sum blocks of a scheduled PrimFunc with no vectorized loop around them."""
    import tvm
    import tvm_ffi
    from tvm import s_tir

    from tvmbench.compile.tir import is_product_sum

    vectorized: list[Any] = []

    def under(loop: Any) -> None:
        if loop.kind == tvm.tirx.ForKind.VECTORIZED:
            tvm_ffi.structural_walk(loop.body, (s_tir.SBlock, vectorized.append))

    tvm_ffi.structural_walk(func.body, (tvm.tirx.For, under))
    blocks: list[Any] = []
    tvm_ffi.structural_walk(func.body, (s_tir.SBlock, blocks.append))
    return [b.name_hint for b in blocks if is_product_sum(b) and not any(v.same_as(b) for v in vectorized)]


def scalar_contractions(kernels: dict[str, float], scheduled: Any) -> list[str]:
    """Those of ``kernels`` (``contraction_flops``) whose scheduled function multiplies and adds
    one element at a time, largest first."""
    funcs = {gv.name_hint: f for gv, f in scheduled.functions.items()}
    slow = [name for name in kernels if name in funcs and scalar_products(funcs[name])]
    return sorted(slow, key=lambda name: -kernels[name])


def warning(slow: list[str], kernels: dict[str, float]) -> str:
    """The build's one line about ``slow`` (``scalar_contractions``)."""
    flops = sum(kernels[n] for n in slow)
    amount = f"{flops / 1e9:.2f} GFLOP" if flops >= 1e9 else f"{flops / 1e6:.0f} MFLOP"
    names = ", ".join(slow[:3]) + (", ..." if len(slow) > 3 else "")
    return (f"{len(slow)} matmul or convolution kernel(s) ({amount} per inference) multiply and add "
            f"one element at a time, no schedule rule having taken them, and run many times slower than they "
            f"should ({names}): please report the model and its shape")
