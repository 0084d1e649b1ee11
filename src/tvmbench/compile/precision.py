"""Reduced precision for TVM builds (``--precision``)."""

from __future__ import annotations

from typing import Any

from tvmbench.errors import UserError

PRECISIONS = ("fp32", "fp16", "amp", "bf16")


def import_at_precision(model: Any, target: Any, precision: str = "fp32") -> Any:
    """``model`` imported into Relax (``importer.ImportedModel``) as a build at ``precision``
    compiles it: the one place the benchmark, an exported package and the tuner's tasks get
    their module, so a tuning record's workload is the kernel the build runs (tuned in fp32, a
    bf16 build's kernels matched no record). Recurrent layers become single kernels only in fp32
    CPU builds (``recurrent.registers``)."""
    import dataclasses

    from tvmbench.compile import recurrent
    from tvmbench.compile.importer import import_model

    imported = import_model(model, recurrent.registers(target) if precision == "fp32" else None)
    if precision == "fp32":
        return imported
    return dataclasses.replace(imported, mod=apply_precision(imported.mod, precision, target))


def apply_precision(mod: Any, precision: str, target: Any = None) -> Any:
    """fp16: matmuls and convolutions in fp16 with fp16 accumulation (what tensor cores run
    fastest); amp: fp16 inputs, fp32 accumulation; bf16 (a CPU ``target`` with AVX-512 BF16 only,
    ``compile/bf16.py``): dense layers over bf16 inputs and weights, fp32 accumulation; fp32:
    unchanged. The model's outputs stay fp32."""
    from tvm import relax

    if precision == "fp32":
        return mod
    if precision not in PRECISIONS:
        raise UserError(f"unknown --precision '{precision}'; use one of {', '.join(PRECISIONS)}")
    if precision == "bf16":
        from tvmbench.compile import bf16
        from tvmbench.compile.passes.bf16_dense import mark

        bf16.check_target(target.tvm() if hasattr(target, "tvm") else target)
        return mark(mod)  # (the pipeline's Bf16Dense pass then acts)
    out_dtype = "float16" if precision == "fp16" else "float32"
    return relax.transform.ToMixedPrecision(out_dtype=out_dtype)(mod)
