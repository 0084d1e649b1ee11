"""A learned latency predictor over the operator store (OpBench's predictor): features in, the
operator's time inside the model out, so a model's time on this machine can be estimated from
its operators without running it.

The model is gradient-boosted trees (xgboost) on log latency, each tree fitting what is left over
a nominal roofline time (``offset``): the trees learn an operator kind's efficiency, which carries
to shapes the store has not seen, where trees on raw log latency could only return the time of
whichever stored operator a split put beside it (a dense layer of the same work predicted 8x
too fast from one stored dense layer). Its quality is reported the only
honest way for this use: leave one model out. For each model of the store, a predictor trained on
the others predicts that model's operators and total; R² (of log latency) and the median relative
error per operator, and the error of the model's total, are what ``tvmbench ops fit`` prints.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tvmbench.errors import MissingFrameworkError, UserError
from tvmbench.profiling.store import OpStore

KINDS = ("conv2d 1x1", "conv2d 3x3", "conv2d depthwise", "conv2d winograd", "winograd transform", "conv2d",
         "dense", "batch matmul", "softmax", "norm", "pool", "reduction", "layout", "elementwise")
FEATURES = ("threads", "log_flops", "log_bytes", "log_intensity", "inputs", "log_output_elements",
            *(f"kind={k}" for k in KINDS))

_ROWS = """
SELECT md.name, o.kind, o.flops, o.bytes, o.intensity, o.inputs, o.outputs, m.threads, m.median_us, mo.count
FROM measurements m
JOIN operators o ON o.workload = m.workload
JOIN model_ops mo ON mo.workload = m.workload
JOIN models md ON md.id = mo.model_id
WHERE m.context = 'in_model' AND m.schedule = 'default'
"""


def features(op: dict[str, Any], threads: int) -> list[float]:
    """One operator's feature vector (``FEATURES``): sizes on log scales, the kind one-hot."""
    kind = op["kind"] if op["kind"] in KINDS else "conv2d" if op["kind"].startswith("conv2d") else "elementwise"
    outputs = op["outputs"] if isinstance(op["outputs"], list) else json.loads(op["outputs"])
    inputs = op["inputs"] if isinstance(op["inputs"], list) else json.loads(op["inputs"])
    out_elements = sum(math.prod(o["shape"]) for o in outputs) or 1
    return [float(threads), math.log1p(op["flops"] or 0.0), math.log1p(op["bytes"] or 0),
            math.log1p(op["intensity"] or 0.0), float(len(inputs)), math.log1p(out_elements),
            *(1.0 if kind == k else 0.0 for k in KINDS)]


# A nominal machine, in work per µs: 50 GFLOP/s and 10 GB/s. Only the ratio matters much; the
# trees correct the rest per kind, and the offset only has to grow with the operator's work.
_FLOPS_PER_US = 50e3
_BYTES_PER_US = 10e3


def offset(op: dict[str, Any]) -> float:
    """Log of the operator's nominal roofline time in µs: the base the trees' prediction adds to."""
    return math.log(1e-3 + (op["flops"] or 0.0) / _FLOPS_PER_US + (op["bytes"] or 0) / _BYTES_PER_US)


@dataclass
class Fit:
    """A trained predictor and its leave-one-model-out report."""

    booster: Any
    report: list[dict[str, Any]]
    rows: int

    def save(self, path: Path) -> Path:
        from tvmbench.files import write_json_atomic

        path.parent.mkdir(parents=True, exist_ok=True)
        self.booster.save_model(str(path))
        write_json_atomic(path.with_suffix(".report.json"), {"features": FEATURES, "rows": self.rows,
                                                              "held_out": self.report})
        return path


def _xgboost() -> Any:
    try:
        import xgboost
    except ImportError:
        raise MissingFrameworkError("the latency predictor", "xgboost", "tune") from None
    return xgboost


def _matrix(x: list[list[float]], base: list[float], y: list[float] | None = None) -> Any:
    return _xgboost().DMatrix(x, label=y, base_margin=base, feature_names=list(FEATURES))


def _train(x: list[list[float]], base: list[float], y: list[float]) -> Any:
    params = {"max_depth": 4, "eta": 0.1, "subsample": 0.9, "seed": 0, "objective": "reg:squarederror"}
    return _xgboost().train(params, _matrix(x, base, y), num_boost_round=200)


def _predict(booster: Any, x: list[list[float]], base: list[float]) -> list[float]:
    return [float(p) for p in booster.predict(_matrix(x, base))]


def fit(store: OpStore) -> Fit:
    """Train on every stored in-model time of the default schedules; report leave-one-model-out."""
    _, rows = store.query(_ROWS)
    ops = [{"kind": r[1], "flops": r[2], "bytes": r[3], "intensity": r[4], "inputs": r[5], "outputs": r[6]}
           for r in rows]
    data = [(r[0], features(op, r[7]), math.log(max(r[8], 1e-3)), r[9], offset(op))
            for r, op in zip(rows, ops, strict=True)]
    models = sorted({d[0] for d in data})
    if len(models) < 2:
        raise UserError("the predictor needs operators of at least two models in the store (one is held out "
                        "to report its error); collect more with 'tvmbench ops collect'")
    report = []
    for held in models:
        train = [d for d in data if d[0] != held]
        test = [d for d in data if d[0] == held]
        booster = _train([d[1] for d in train], [d[4] for d in train], [d[2] for d in train])
        predicted = _predict(booster, [d[1] for d in test], [d[4] for d in test])
        report.append(_held_out(held, test, predicted))
    return Fit(_train([d[1] for d in data], [d[4] for d in data], [d[2] for d in data]), report, len(data))


def _held_out(model: str, test: list[tuple[Any, ...]], predicted: list[float]) -> dict[str, Any]:
    actual = [d[2] for d in test]
    mean = sum(actual) / len(actual)
    ss_res = sum((a - p) ** 2 for a, p in zip(actual, predicted, strict=True))
    ss_tot = sum((a - mean) ** 2 for a in actual)
    rel = sorted(abs(math.exp(p) - math.exp(a)) / math.exp(a) for a, p in zip(actual, predicted, strict=True))
    total = sum(math.exp(a) * d[3] for a, d in zip(actual, test, strict=True))
    total_predicted = sum(math.exp(p) * d[3] for p, d in zip(predicted, test, strict=True))
    return {"model": model, "operators": len(test), "r2_log": 1 - ss_res / ss_tot if ss_tot > 0 else None,
            "median_relative_error": rel[len(rel) // 2], "total_us": total, "total_predicted_us": total_predicted,
            "total_relative_error": abs(total_predicted - total) / total if total else None}


def load(path: Path) -> Any:
    if not path.is_file():
        raise UserError(f"no predictor at {path}; train one with 'tvmbench ops fit'")
    booster = _xgboost().Booster()
    booster.load_model(str(path))
    return booster


def predict_ops(booster: Any, operators: list[dict[str, Any]], threads: int) -> list[dict[str, Any]]:
    """Each operator (features as ``profiling.collect.features`` gives them, with ``count``) with
    its predicted µs per call and per inference."""
    if not operators:
        return []
    predicted = _predict(booster, [features(op, threads) for op in operators], [offset(op) for op in operators])
    return [{"kernel": op["name"], "kind": op["kind"], "count": op["count"], "predicted_us": math.exp(float(p)),
             "predicted_us_per_inference": math.exp(float(p)) * op["count"]}
            for op, p in zip(operators, predicted, strict=True)]


def model_operators(model: str, options: Any, target: Any) -> list[dict[str, Any]]:
    """A model's operators with their features and calls per inference, from its compiled module
    alone (legalized, nothing run)."""
    from collections import Counter

    import tvm

    from tvmbench.compile import import_model, ir, pipeline, recurrent
    from tvmbench.models import load_model
    from tvmbench.profiling.collect import features as op_features

    legal = pipeline.per_inference(pipeline.legalized(import_model(load_model(model, options), recurrent.registers(target)).mod, target))
    counts = Counter(c.args[0].name_hint for c in ir.calls(legal["main"], "relax.call_tir"))
    return [{**op_features(gv.name_hint, f), "count": counts[gv.name_hint]}
            for gv, f in legal.functions.items() if isinstance(f, tvm.tirx.PrimFunc) and counts[gv.name_hint]]
