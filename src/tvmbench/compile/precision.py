"""Reduced precision for TVM builds (``--precision``)."""

from __future__ import annotations

from typing import Any

from tvmbench.errors import UserError

PRECISIONS = ("fp32", "fp16", "amp", "bf16")


def apply_precision(mod: Any, precision: str) -> Any:
    """fp16: matmuls and convolutions in fp16 with fp16 accumulation (what tensor cores run
    fastest); amp: fp16 inputs, fp32 accumulation; fp32: unchanged. The model's outputs stay fp32."""
    from tvm import relax

    if precision == "fp32":
        return mod
    if precision == "bf16":
        raise UserError("--precision bf16: TVM 0.27's mixed-precision pass (ToMixedPrecision) only produces fp16; "
                        "use --precision fp16 or amp")
    if precision not in PRECISIONS:
        raise UserError(f"unknown --precision '{precision}'; use one of {', '.join(PRECISIONS)}")
    out_dtype = "float16" if precision == "fp16" else "float32"
    return relax.transform.ToMixedPrecision(out_dtype=out_dtype)(mod)
