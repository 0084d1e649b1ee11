"""The peer frameworks (ONNX Runtime, OpenVINO) on the shared ONNX export, beside TVM and PyTorch."""

import json

import pytest

from tvmbench.cli import main
from tvmbench.errors import UserError
from tvmbench.models import ModelOptions, load_model
from tvmbench.models.onnx_export import onnx_file

pytest.importorskip("onnxruntime")
pytest.importorskip("openvino")


def test_all_cpu_frameworks_run_the_same_inputs_and_match(tmp_path):
    out = tmp_path / "r.json"
    code = main(["run", "--model", "resnet18", "--image-size", "32", "--target", "llvm", "--frameworks",
                 "tvm,pytorch,onnxruntime,openvino", "--warmup", "2", "--runs", "5", "--output", str(out), "-q"])
    assert code == 0
    result = json.loads(out.read_text())
    for key in ("tvm_relax", "onnxruntime", "openvino"):
        assert result[key]["accuracy"]["passed"], (key, result[key]["accuracy"])
        assert result[key]["total_runs"] == 5
    assert result["onnxruntime"]["info"]["onnx_exporter"] == "torchscript"
    # OpenVINO would pick bf16 on this CPU; an fp32 comparison must be asked for and recorded.
    assert result["openvino"]["info"]["inference_precision"] == "f32"
    assert result["onnxruntime"]["info"]["graph_optimization"] == "ORT_ENABLE_ALL"


def test_peers_run_a_graph_whose_exporter_dropped_an_unused_input():
    """The ONNX graph of a model with an input it never reads takes one input fewer: the peers
    feed theirs by name (they refused the model before: "the ONNX graph takes 1 inputs")."""
    from pathlib import Path

    from tvmbench.backends import BackendConfig
    from tvmbench.backends.onnxruntime import OnnxRuntimeBackend
    from tvmbench.backends.openvino import OpenVINOBackend
    from tvmbench.backends.pytorch import PyTorchBackend
    from tvmbench.measure import accuracy
    from tvmbench.targets import resolve_target

    cfg = BackendConfig(target=resolve_target("llvm", gpu_query=lambda: None), threads=2)
    model = load_model(str(Path(__file__).with_name("mlp_model.py")) + ":build_unused_input")
    reference = PyTorchBackend(cfg)
    reference.prepare(model)
    reference.run()
    for backend in (OnnxRuntimeBackend(cfg), OpenVINOBackend(cfg)):
        backend.prepare(model)
        backend.run()
        result = accuracy.compare(backend.outputs(), reference.outputs(), accuracy.tolerance_for("float32"))
        assert result["passed"], (type(backend).__name__, result)


def test_onnx_export_happens_once_per_model_and_shape():
    first = onnx_file(load_model("resnet18", ModelOptions(image_size=40)))
    again = onnx_file(load_model("resnet18", ModelOptions(image_size=40)))
    other = onnx_file(load_model("resnet18", ModelOptions(image_size=48)))
    assert again.cache_hit and again.path == first.path and again.export_s == 0.0
    assert other.path != first.path


EXPORTER = """
import sys, time
from tvmbench.models import ModelOptions, load_model
from tvmbench.models.onnx_export import onnx_file
model = load_model(sys.argv[1], ModelOptions())
time.sleep(max(0.0, float(sys.argv[2]) - time.time()))  # both processes start exporting together
exported = onnx_file(model)
print(exported.cache_hit, exported.path)
"""


def test_two_processes_wanting_one_export_at_once_export_it_once(tmp_path):
    """ONNX Runtime's and OpenVINO's workers prepare together: the second waits for the first
    one's export and reads it instead of exporting the same model beside it."""
    import os
    import subprocess
    import sys
    import time
    from pathlib import Path

    model = str(Path(__file__).with_name("mlp_model.py")) + ":build_conv"
    env = {**os.environ, "TVMBENCH_CACHE": str(tmp_path)}
    start = str(time.time() + 8)  # after both have imported torch and built the model
    procs = [subprocess.Popen([sys.executable, "-c", EXPORTER, model, start], env=env, text=True,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE) for _ in range(2)]
    outs = [p.communicate(timeout=120) for p in procs]
    assert all(p.returncode == 0 for p in procs), [err for _, err in outs]
    lines = sorted(out.split() for out, _ in outs)
    assert [hit for hit, _ in lines] == ["False", "True"] and lines[0][1] == lines[1][1], lines


def test_a_model_the_tracer_cannot_export_falls_back_to_dynamo():
    # transformers' GPT-2 mask code defeats the TorchScript exporter; the dynamo exporter works.
    exported = onnx_file(load_model("gpt2", ModelOptions(seq_length=8, config_overrides={"n_layer": 1})))
    assert exported.exporter == "dynamo" and exported.path.stat().st_size > 0


def test_frameworks_command_lists_every_framework(capsys):
    assert main(["frameworks"]) == 0
    text = capsys.readouterr().out
    for name in ("tvm", "pytorch", "onnxruntime", "openvino"):
        assert name in text


def test_torch_compile_reports_its_compile_time_apart_from_latency(tmp_path):
    from pathlib import Path

    model = str(Path(__file__).with_name("mlp_model.py")) + ":build"
    out = tmp_path / "r.json"
    assert main(["run", "--model", model, "--target", "llvm", "--frameworks", "pytorch,torch_compile",
                 "--warmup", "2", "--runs", "5", "--output", str(out), "-q"]) == 0
    entry = json.loads(out.read_text())["torch_compile"]
    assert entry["accuracy"]["passed"]
    assert entry["phases_s"]["compile_s"] > 0 and entry["info"]["mode"] == "torch.compile (default)"


def test_an_unknown_torch_compile_mode_is_a_usage_error(capsys):
    with pytest.raises(SystemExit) as exit_info:  # argparse's own one-line usage error
        main(["run", "--model", "resnet18", "--frameworks", "torch_compile", "--torch-compile-mode", "fast"])
    assert exit_info.value.code == 2
    assert "--torch-compile-mode" in capsys.readouterr().err


@pytest.mark.parametrize("given, error", [
    ("broken", "is not name=module:Class"),
    ("tvm=tests.ghost_backend:GhostBackend", "takes the name of a tvmbench framework"),
    ("x=tests.no_such_module:X", "cannot be loaded: No module named 'tests.no_such_module'"),
    ("x=tvmbench.errors:UserError", "is not a tvmbench.backends.Backend subclass"),
])
def test_a_framework_plugin_that_cannot_be_used_is_a_one_line_usage_error(monkeypatch, given, error):
    from tvmbench.backends import load_class, parse_frameworks

    monkeypatch.setenv("TVMBENCH_BACKENDS", given)
    with pytest.raises(UserError, match=error):
        load_class(parse_frameworks("x")[0])
