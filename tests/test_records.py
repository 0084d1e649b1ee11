"""The typed result records write exactly the documents tvmbench wrote before them.

``data/run_result.json`` was written by ``tvmbench run --model tests/mlp_model.py:build
--frameworks tvm,pytorch,onnxruntime,tensorrt --runs 5 --warmup 1 --rounds 2`` with the dict-based
code that preceded the records (at commit 39a67f8): two rounds, an unavailable framework,
accuracy checks and speedups, the seed's field names.
"""

import json
from pathlib import Path

import numpy as np

from tvmbench.measure.isolation import Outcome
from tvmbench.measure.records import FrameworkRun
from tvmbench.measure.runner import RunConfig, merge_rounds
from tvmbench.measure.timer import Measurement, TimerConfig
from tvmbench.results.build import build_result
from tvmbench.results.records import RunResult
from tvmbench.targets import resolve_target

STORED = json.loads((Path(__file__).parent / "data" / "run_result.json").read_text())


def _keys(doc, depth=2):
    """Key paths of a document down to ``depth`` levels, in order."""
    out = []
    for k, v in doc.items():
        out.append(k)
        if depth > 1 and isinstance(v, dict) and k not in ("environment", "info", "phases_s", "target_config"):
            out += [f"{k}.{sub}" for sub in _keys(v, depth - 1)]
    return out


def test_a_stored_result_reads_into_records_and_writes_back_key_for_key():
    result = RunResult.from_json(STORED)
    assert result.results["tvm"].ok and not result.results["tensorrt"].ok
    assert result.results["pytorch"].rounds.sizes == [5, 5]
    again = result.to_json()
    assert list(again) == list(STORED)
    assert again == STORED
    assert json.dumps(again) == json.dumps(STORED)  # same order at every level


def _run(samples_s, outputs, info, flops=None):
    half = len(samples_s) // 2
    runs = []
    for part in (samples_s[:half], samples_s[half:]):
        m = Measurement(samples_s=list(part), warmup_s=[0.01], block_size=1, stop_reason="fixed runs",
                        total_calls=len(part) + 1, timed_calls=len(part), timed_wall_s=sum(part), config={})
        runs.append(Outcome(ok=True, peak_rss_bytes=1 << 20, value=FrameworkRun(
            info=info, phases_s={"prepare_s": 0.1, "first_inference_s": 0.01}, outputs=outputs,
            batch_size=32, model=STORED["model_info"] | {"flops": None}, measurement=m, flops=flops)))
    return merge_rounds(runs)


def test_a_result_built_from_measurements_has_the_stored_documents_shape():
    rng = np.random.default_rng(0)
    reference = [rng.standard_normal((32, 256)).astype("float32")]
    frameworks = STORED["frameworks"]
    raw = {fw: _run(list(rng.uniform(1e-3, 2e-3, 10)), reference, STORED[key]["info"],
                    flops=16777216 if fw == "pytorch" else None)
           for fw, key in zip(frameworks, ("pytorch", "tvm_relax", "onnxruntime"), strict=False) if fw != "tensorrt"}
    raw["tensorrt"] = Outcome(ok=False, error={"kind": "unavailable", "type": "FrameworkUnavailableError",
                                               "message": "no GPU"})
    cfg = RunConfig(model=STORED["model"], target=resolve_target("llvm", gpu_query=lambda: None),
                    frameworks=tuple(frameworks), threads=2, rounds=2,
                    timer=TimerConfig(fixed_warmup_runs=1, fixed_runs=5))
    built = build_result(cfg, frameworks, raw, reference, STORED["environment"]).to_json()
    assert _keys(built) == _keys(STORED)
    assert built["tvm_relax"]["accuracy"]["passed"] and built["pytorch"]["accuracy"] == {"passed": True,
                                                                                         "reference": True}
    assert built["tvm_relax"]["rounds"]["sizes"] == [5, 5] and built["tvm_relax"]["total_runs"] == 10
    assert built["speedup"] == built["tvm_speedups"]["pytorch"]["speedup"] > 0
