"""Check a framework's outputs against the fp32 PyTorch eager reference.

A speedup on wrong outputs is not a speedup, so every framework's outputs are compared with the
reference and a result that fails gets no speedup. Three numbers per output: the maximum absolute
error, the maximum error relative to the reference's magnitude (max|a-b| / max|ref|, which stays
meaningful where individual reference values are near zero) and the cosine similarity.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np


@dataclass(frozen=True)
class Tolerance:
    """Pass when cosine >= min_cosine and (max_abs <= atol or max_rel <= rtol)."""

    min_cosine: float
    atol: float
    rtol: float


TOLERANCES = {
    "float32": Tolerance(min_cosine=0.999, atol=1e-4, rtol=1e-3),
    "float16": Tolerance(min_cosine=0.995, atol=1e-2, rtol=5e-2),
    "bfloat16": Tolerance(min_cosine=0.99, atol=5e-2, rtol=1e-1),
}


def tolerance_for(precision: str, override: dict[str, float] | None = None) -> Tolerance:
    base = TOLERANCES.get(precision, TOLERANCES["float32"])
    return Tolerance(**{**asdict(base), **(override or {})})


def compare(outputs: Sequence[np.ndarray], reference: Sequence[np.ndarray], tolerance: Tolerance) -> dict[str, Any]:
    """Compare output lists element by element; the worst output decides."""
    if len(outputs) != len(reference):
        return {"passed": False, "reason": f"{len(outputs)} outputs, reference has {len(reference)}"}
    per_output = []
    for i, (out, ref) in enumerate(zip(outputs, reference, strict=True)):
        out = np.asarray(out)
        ref = np.asarray(ref)
        if out.shape != ref.shape:
            return {"passed": False, "reason": f"output {i} has shape {out.shape}, reference {ref.shape}"}
        a = out.astype(np.float64).ravel()
        b = ref.astype(np.float64).ravel()
        if not np.all(np.isfinite(a)):
            return {"passed": False, "reason": f"output {i} has NaN or Inf values"}
        diff = np.abs(a - b)
        max_abs = float(diff.max()) if diff.size else 0.0
        scale = float(np.abs(b).max()) if b.size else 0.0
        max_rel = max_abs / scale if scale > 0 else (0.0 if max_abs == 0 else float("inf"))
        na, nb = float(np.linalg.norm(a)), float(np.linalg.norm(b))
        if na == 0 and nb == 0:
            cosine = 1.0
        elif na == 0 or nb == 0:
            cosine = 0.0
        else:
            cosine = float(np.dot(a, b) / (na * nb))
        passed = cosine >= tolerance.min_cosine and (max_abs <= tolerance.atol or max_rel <= tolerance.rtol)
        per_output.append({"max_abs_err": max_abs, "max_rel_err": max_rel, "cosine": cosine, "passed": passed})
    return {
        "passed": all(o["passed"] for o in per_output),
        "max_abs_err": max(o["max_abs_err"] for o in per_output),
        "max_rel_err": max(o["max_rel_err"] for o in per_output),
        "cosine": min(o["cosine"] for o in per_output),
        "tolerance": asdict(tolerance),
        "outputs": per_output,
    }
