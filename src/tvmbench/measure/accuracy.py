"""Check a framework's outputs against the fp32 PyTorch eager reference.

A speedup on wrong outputs is not a speedup, so every framework's outputs are compared with the
reference and a result that fails gets no speedup. Three numbers per output: the maximum absolute
error, the maximum error relative to the reference's magnitude (max|a-b| / max|ref|, which stays
meaningful where individual reference values are near zero) and the cosine similarity.

PyTorch's float32 outputs are themselves rounded: through a hundred layers they are about 1e-3 of
the largest output away from the exact result, so a correct implementation that rounds
differently can miss a 1e-3 bound against them. A narrow miss (:func:`narrow_miss`) is therefore
judged again against PyTorch's outputs in float64 (:func:`arbitrate`), where each framework's
own rounding error is visible apart from the reference's.
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


NARROW = 10.0  # a miss of at most this many times the relative bound, cosine passing, is judged again
ROUNDING = 2.0  # against float64: within this many times PyTorch float32's own error still passes


def narrow_miss(check: dict[str, Any], tolerance: Tolerance) -> bool:
    """Whether a failed check missed only the error bound, and by less than NARROW times: the
    outputs point the same way (cosine) and are off by no more than float32 rounding through a
    deep network can make them. A gross error is never judged again."""
    outputs = check.get("outputs")
    if check.get("passed") is not False or not outputs:
        return False
    return all(o["cosine"] >= tolerance.min_cosine and o["max_rel_err"] <= NARROW * tolerance.rtol for o in outputs)


def arbitrate(check: dict[str, Any], outputs: Sequence[np.ndarray], reference: Sequence[np.ndarray],
              exact: Sequence[np.ndarray], tolerance: Tolerance) -> dict[str, Any]:
    """``check`` (outputs against the float32 reference) judged again against ``exact``, the
    reference model's outputs in float64. An output passes when its error against the exact
    outputs is within the tolerance, or within ROUNDING times the float32 reference's own error
    against them: the framework rounds no worse than PyTorch does, and the miss was the two
    roundings added. The verdict and both errors are recorded under ``float64``."""
    ours = compare(outputs, exact, tolerance)
    theirs = compare(reference, exact, tolerance)
    if "outputs" not in ours or "outputs" not in theirs:  # shapes differ: no second opinion
        return {**check, "float64": {"passed": None, "reason": ours.get("reason") or theirs.get("reason")}}
    passed = all(_within(o, r, tolerance, ROUNDING) for o, r in zip(ours["outputs"], theirs["outputs"], strict=True))
    return {**check, "passed": passed, "judged_by": "float64", "float64": {
        "passed": passed, "max_rel_err": ours["max_rel_err"], "reference_fp32_max_rel_err": theirs["max_rel_err"],
        "cosine": ours["cosine"], "rounding_factor": ROUNDING}}


def _within(ours: dict[str, Any], theirs: dict[str, Any], tolerance: Tolerance, factor: float) -> bool:
    """One output's errors (``ours``) within the tolerance, or no worse than ``factor`` times those of
    a computation that rounds as it should (``theirs``): its relative error and its distance from
    a cosine of 1 each at most ``factor`` times the other's."""
    min_cosine = min(tolerance.min_cosine, 1 - factor * (1 - theirs["cosine"]))
    return ours["cosine"] >= min_cosine and (ours["max_abs_err"] <= tolerance.atol or
                                             ours["max_rel_err"] <= max(tolerance.rtol, factor * theirs["max_rel_err"]))


REDUCED = 2.0  # a 16-bit miss within this many times PyTorch's own error at that precision passes


def reduced_miss(check: dict[str, Any]) -> bool:
    """Whether a failed check (at a bf16 or fp16 tolerance) compared outputs that PyTorch's own
    reduced-precision outputs can judge: every output the reference's shape and finite."""
    return check.get("passed") is False and bool(check.get("outputs"))


def arbitrate_reduced(check: dict[str, Any], reduced: Sequence[np.ndarray], reference: Sequence[np.ndarray],
                      precision: str, tolerance: Tolerance) -> dict[str, Any]:
    """``check`` (a framework computing in ``precision`` against PyTorch's float32) judged again by
    what that precision does to this model: ``reduced`` are PyTorch's outputs under
    ``torch.autocast`` at ``precision``. Some models (deep networks with random weights and
    normalised activations, a segmentation head's per-pixel outputs) amplify bf16's rounding until
    PyTorch's own bf16 misses the fixed bound (cosine 0.82 for FCN-ResNet50); a framework
    whose error is within REDUCED times PyTorch's rounds as that precision does, and a framework
    computing something else still fails. Both errors are recorded under ``precision``."""
    theirs = compare(reduced, reference, tolerance)
    if "outputs" not in theirs:
        return {**check, precision: {"passed": None, "reason": theirs.get("reason")}}
    passed = all(_within(o, r, tolerance, REDUCED) for o, r in zip(check["outputs"], theirs["outputs"], strict=True))
    return {**check, "passed": passed, "judged_by": f"pytorch {precision}", precision: {
        "passed": passed, "pytorch_max_rel_err": theirs["max_rel_err"], "pytorch_cosine": theirs["cosine"],
        "factor": REDUCED}}


def second_opinion(check: dict[str, Any]) -> dict[str, Any] | None:
    """The second reference's record a check was judged by (``float64``, ``bfloat16`` or
    ``float16``, with ``precision`` naming it), or None."""
    for precision in ("float64", "bfloat16", "float16"):
        judged = check.get(precision) or {}
        if judged.get("passed") is not None or judged.get("reason"):
            return {**judged, "precision": precision}
    return None
