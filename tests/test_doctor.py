"""`tvmbench doctor`: every check is triggered by the facts it looks for, and quiet otherwise."""

import json

import pytest

from tvmbench import doctor
from tvmbench.cli import main
from tvmbench.doctor import Facts

A100 = {"name": "NVIDIA A100-SXM4-40GB", "arch": "sm_80", "compute_capability": "8.0"}
CUDA_80 = {"kind": "cuda", "arch": "sm_80"}
CPU = {"kind": "llvm", "mcpu": "znver4", "num-cores": 2}
APPLIED = [{"source": "default", "path": "/db", "applied_records": 10}]


def clean(**changes):
    """Facts of a well-set-up run, with ``changes`` applied."""
    base = {"target": CPU, "databases": APPLIED, "physical_cores": 2, "threads": 2, "governor": "performance",
            "cpu_busy_percent": 1.0, "warmup_runs": None}
    return Facts(**{**base, **changes})


def checks(facts):
    return {(x.check, x.level) for x in doctor.diagnose(facts)}


def test_a_well_set_up_run_has_no_findings():
    assert doctor.diagnose(clean()) == []


@pytest.mark.parametrize("facts, expected, fix", [
    (clean(target=None, target_error="CUDA target 'cuda' has no GPU architecture"), ("cuda-arch", "error"),
     "-arch=sm_80"),
    (clean(target={"kind": "cuda", "arch": "sm_70"}, gpu=A100, precision="fp16"), ("cuda-arch", "error"),
     "--target cuda"),
    (clean(target=CUDA_80, gpu=A100, precision="fp32"), ("precision", "warn"), "--precision fp16"),
    (clean(bf16_dot=True), ("precision", "info"), "--precision bf16"),
    (clean(precision="bf16"), ("precision", "error"), "--precision fp32"),
    (clean(databases=[]), ("tuning-db", "info"), "tvmbench tune"),
    (clean(target=CUDA_80, gpu=A100, precision="fp16", databases=[]), ("tuning-db", "warn"), "tvmbench tune"),
    (clean(databases=[{"source": "--db", "path": "/x", "records": 5, "applied_records": 0,
                       "foreign_target_records": 5}]), ("tuning-db", "warn"), "tune for this target"),
    (clean(databases=[{"source": "pretuned", "path": "/p", "records": 5,
                       "skipped": "made with TVM 0.26.0, this is 0.27.0: not applied"}]), ("tuning-db", "warn"),
     "tvmbench tune"),
    (clean(env={"OMP_NUM_THREADS": "2", "TVM_NUM_THREADS": "1"}), ("threads", "warn"), "--threads"),
    (clean(threads=4), ("threads", "warn"), "--threads 2"),
    (clean(governor="powersave"), ("governor", "warn"), "cpupower"),
    (clean(cpu_busy_percent=80.0, busy_processes=["make (75%)"]), ("load", "warn"), "idle machine"),
    (clean(warmup_runs=3, model="resnet18", model_gflops=3.6), ("warmup", "warn"), "--warmup 10"),
    (clean(target=CUDA_80, gpu=A100, precision="fp16", warmup_runs=15, model_gflops=40.0), ("warmup", "warn"),
     "--warmup 40"),
    (clean(frameworks={"openvino": {"installed": False, "install": "pip install 'tvmbench[openvino]'"}}),
     ("frameworks", "info"), "tvmbench[openvino]"),
])
def test_each_check_fires_on_its_problem_with_a_fix(facts, expected, fix):
    findings = [x for x in doctor.diagnose(facts) if (x.check, x.level) == expected]
    assert findings and fix in findings[0].fix and findings[0].message


def test_matching_settings_do_not_fire():
    assert checks(clean(target=CUDA_80, gpu=A100, precision="fp16", warmup_runs=25)) == set()
    assert checks(clean(bf16_dot=True, precision="bf16")) == set()
    assert checks(clean(env={"OMP_NUM_THREADS": "2", "TVM_NUM_THREADS": "2"}, warmup_runs=10)) == set()
    # fp32 on a GPU without tensor cores is not a mistake
    assert checks(clean(target={"kind": "cuda", "arch": "sm_61"}, precision="fp32",
                        gpu={"name": "GTX 1080", "arch": "sm_61", "compute_capability": "6.1"})) == set()


def test_doctor_on_this_machine(capsys, monkeypatch):
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    monkeypatch.setenv("TVM_NUM_THREADS", "2")
    code = main(["doctor", "--target", "llvm", "--warmup", "2", "--json"])
    out = json.loads(capsys.readouterr().out)
    found = {x["check"] for x in out["findings"]}
    assert {"threads", "warmup"} <= found and out["facts"]["target"]["kind"] == "llvm"
    assert code == 0  # warnings only
    code = main(["doctor", "--target", "cuda"])
    text = capsys.readouterr().out
    from tvmbench.targets import query_gpu

    if query_gpu() is None:  # without a GPU a bare cuda target cannot get an arch: an error finding
        assert code == 1 and "cuda-arch" in text
