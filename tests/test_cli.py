"""End-to-end: the CLI as a user runs it, real TVM and real PyTorch in worker processes."""

import json

import pytest

from tvmbench.cli import main


def run_cli(args, capsys):
    code = main(args)
    out, err = capsys.readouterr()
    return code, out, err


@pytest.fixture(scope="module")
def resnet_result(tmp_path_factory):
    path = tmp_path_factory.mktemp("out") / "r.json"
    code = main(["run", "--model", "resnet18", "--image-size", "64", "--target", "llvm", "--warmup", "2",
                 "--runs", "5", "--output", str(path), "--quiet"])
    return code, json.loads(path.read_text())


def test_resnet18_run_matches_pytorch_and_keeps_the_json_shape(resnet_result):
    code, r = resnet_result
    assert code == 0
    # the shape users' scripts read (fields may be added, never renamed)
    assert r["model"] == "resnet18" and r["batch_size"] == 1 and r["target"] == "llvm"
    # True exactly when a kernel ran a tuning record (here the shipped database's FC layer, whose
    # shape does not depend on the image size)
    assert r["tuning_enabled"] is bool((r["tuning_database"] or {}).get("tasks_with_records"))
    for key in ("avg_latency_ms", "throughput_samples_per_sec", "total_runs"):
        assert key in r["tvm_relax"]
    for key in ("avg_latency_ms", "throughput_samples_per_sec", "device"):
        assert key in r["pytorch"]
    assert r["tvm_relax"]["total_runs"] == 5 and len(r["tvm_relax"]["samples_ms"]) == 5
    assert r["pytorch"]["device"] == "cpu"
    acc = r["tvm_relax"]["accuracy"]
    assert acc["passed"] is True and acc["max_abs_err"] < 1e-4 and acc["cosine"] > 0.999
    expected = r["pytorch"]["median_ms"] / r["tvm_relax"]["median_ms"]
    assert r["speedup"] == pytest.approx(expected)
    assert r["tvm_relax"]["throughput_samples_per_sec"] == pytest.approx(1e3 / r["tvm_relax"]["avg_latency_ms"])


def test_result_records_target_threads_phases_and_environment(resnet_result):
    _, r = resnet_result
    assert r["target_config"]["kind"] == "llvm" and r["target_config"]["mcpu"]
    assert r["tvm_relax"]["info"]["target"] == r["target_config"]
    assert r["tvm_relax"]["info"]["threads"] == r["pytorch"]["info"]["threads"] == r["measurement"]["threads"]
    phases = r["tvm_relax"]["phases_s"]
    for key in ("export_s", "import_s", "compile_s", "first_inference_s"):
        assert key in phases
    assert r["environment"]["packages"]["apache-tvm"] == "0.27.0.post1"
    assert r["model_info"]["flops"] > 1e8 and r["model_info"]["param_count"] > 1e7
    assert r["tvm_relax"]["peak_rss_bytes"] > 1e8


def test_second_run_reuses_the_compiled_library(resnet_result, tmp_path, capsys):
    path = tmp_path / "again.json"
    code, _, _ = run_cli(["run", "--model", "resnet18", "--image-size", "64", "--target", "llvm",
                          "--frameworks", "tvm", "--warmup", "1", "--runs", "2", "--output", str(path), "-q"], capsys)
    r = json.loads(path.read_text())
    assert code == 0
    assert r["tvm_relax"]["info"]["cache_hit"] is True
    assert r["tvm_relax"]["phases_s"]["compile_s"] == 0
    assert r["tvm_relax"]["info"]["cache_key"] == resnet_result[1]["tvm_relax"]["info"]["cache_key"]
    # without PyTorch among the frameworks, a reference is still computed and checked
    assert r["tvm_relax"]["accuracy"]["passed"] is True
    assert "pytorch" not in r


def test_verbose_prints_a_counter_once_and_each_new_step(capsys):
    from rich.console import Console

    from tvmbench.cli.common import status_events

    on_event = status_events(None, 0.0, Console(stderr=True, width=60))
    for fw, msg in [("tvm", "timed run 40"), ("tvm", "timed run 80"), ("onnxruntime", "timed run 10"),
                    ("tvm", "a long step " + "x" * 80), ("tvm", "timed run 120")]:
        on_event(fw, msg)
    lines = capsys.readouterr().err.splitlines()
    assert [line.split("s  ", 1)[1] for line in lines] == [
        "tvm: timed run 40", "onnxruntime: timed run 10", "tvm: a long step " + "x" * 80, "tvm: timed run 120"]


def test_tiny_bert_matches_pytorch_and_verbose_prints_the_compile_stages_in_order(tmp_path, capsys):
    path = tmp_path / "bert.json"
    code, out, err = run_cli(["run", "--model", "bert-base-uncased", "--seq-length", "32", "--hf-config",
                              "num_hidden_layers=1", "--warmup", "1", "--runs", "3", "--output", str(path),
                              "--no-cache", "-v"], capsys)
    r = json.loads(path.read_text())
    assert code == 0, out
    assert r["seq_length"] == 32
    assert r["tvm_relax"]["accuracy"]["passed"] and len(r["tvm_relax"]["accuracy"]["outputs"]) == 2
    assert "bert-base-uncased" in out and "tvm" in out and "pytorch" in out
    tvm = [line.split("tvm: ", 1)[1] for line in err.splitlines() if " s  tvm: " in line]
    steps = ["building the model", "imported into Relax through", " kernels (", "scheduled", "lowering",
             "compiled in", "first inference", "warmup run"]
    where = [next((i for i, line in enumerate(tvm) if s in line), None) for s in steps]
    assert None not in where and where == sorted(where), tvm
    assert any(" s  pytorch: first inference" in line for line in err.splitlines())


@pytest.mark.parametrize(
    "args, message",
    [
        (["run", "--model", "resnet5"], "unknown model 'resnet5'"),
        (["run", "--model", "bert-base"], "did you mean bert-base-uncased,"),  # the name it begins, first
        (["compare", "--models", ",,"], "names no model"),
        (["run", "--model", "resnet18", "--target", "llvm -mcpux=1"], "unknown option '-mcpux'"),
        (["run", "--model", "resnet18", "--target", "cuda"], "no GPU architecture"),
        (["run", "--model", "resnet18", "--input-shape", "x:1xZ"], "bad --input-shape"),
        (["run", "--model", "resnet18", "--frameworks", "tvm,tensorflow"], "unknown framework 'tensorflow'"),
        (["run", "--model", "missing.onnx"], "does not exist"),
        (["run", "--model", "resnet18", "--db", "/nonexistent/db"], "is not a MetaSchedule database"),
        (["run", "--model", "bert-base-uncased", "--hf-config", "layers"], "bad --hf-config"),
        (["run", "--model", "resnet18", "--seq-length", "64"], "--seq-length applies to models of tokens"),
        (["profile", "--model", "gpt2", "--image-size", "64"], "--image-size applies to models of images"),
        (["export", "--model", "resnet18", "--image-size", "8"], "--image-size 8 is too small"),
        (["export", "--model", "resnet18", "--output-dir", "/dev/null/x"], "cannot write the output folder"),
        (["tune", "--model", "resnet18", "--trials", "4", "--db", "/dev/null/x"], "cannot write the tuning database"),
        (["run", "--model", "resnet18", "--history", "/dev/null/h.sqlite"], "cannot open the history"),
        (["rpc", "server", "--tracker", "127.0.0.1:1", "--key", "x"], "cannot reach the TVM RPC tracker"),
        # found only while building, in each framework's worker: still one line, no table
        (["run", "--model", "torchvision:vit_b_16", "--image-size", "200", "--frameworks", "pytorch,onnxruntime",
          "--no-history"], "at image size 200: Input shape indivisible by patch size"),
    ],
)
def test_user_mistakes_get_one_line_and_exit_2(args, message, capsys):
    code, out, err = run_cli(args, capsys)
    assert code == 2
    lines = [line for line in err.splitlines() if line.strip() and not line.startswith("target: ")]
    assert len(lines) == 1 and message in lines[0] and "Traceback" not in err and not out


@pytest.mark.parametrize("args, message", [(["run", "--model", "resnet18", "--batch-size", "0"], "positive integer"),
                                           (["rpc", "tracker", "--port", "99999"], "port number of at most")])
def test_bad_number_flag_is_a_usage_error(args, message, capsys):
    with pytest.raises(SystemExit) as info:
        main(args)
    assert info.value.code == 2
    assert message in capsys.readouterr().err


def test_every_command_prints_its_help(capsys):
    """A `%` in a help string (argparse formats them) broke `tvmbench --help` for every user."""
    import argparse

    from tvmbench.cli import build_parser

    parser = build_parser()
    commands = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction)).choices
    assert {"run", "compare", "tune", "profile"} <= set(commands)
    for argv in [["--help"]] + [[name, "--help"] for name in commands]:
        with pytest.raises(SystemExit) as info:
            main(argv)
        assert info.value.code == 0, argv
        assert "usage:" in capsys.readouterr().out, argv


UNSUPPORTED = """
import torch
class M(torch.nn.Module):
    def forward(self, x):
        return torch.linalg.det(x) + 1
def build():
    return M(), (torch.randn(2, 3, 3),)
"""


def test_unconvertible_op_fails_tvm_only_and_names_the_op(tmp_path, capsys):
    model_file = tmp_path / "unsupported.py"
    model_file.write_text(UNSUPPORTED)
    path = tmp_path / "u.json"
    code, out, err = run_cli(["run", "--model", f"{model_file}:build", "--warmup", "1", "--runs", "3",
                              "--output", str(path), "-q"], capsys)
    r = json.loads(path.read_text())
    assert code == 2
    assert r["pytorch"]["status"] == "ok" and r["pytorch"]["total_runs"] == 3  # the other framework survives
    assert r["tvm_relax"]["status"] == "failed" and "linalg_det" in r["tvm_relax"]["error"]
    assert r["speedup"] is None
    assert "linalg_det" in err and "Traceback" not in err


def test_missing_framework_is_reported_not_fatal(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("TVMBENCH_BACKENDS", "ghost=tests.ghost_backend:GhostBackend")  # a plugin
    path = tmp_path / "g.json"
    code, _, err = run_cli(["run", "--model", "resnet18", "--image-size", "32", "--frameworks", "pytorch,ghost",
                            "--runs", "2", "--warmup", "1", "--output", str(path), "-q", "--no-isolation"], capsys)
    r = json.loads(path.read_text())
    assert code == 2
    assert r["pytorch"]["status"] == "ok"
    assert r["ghost"]["status"] == "failed" and r["ghost"]["error_kind"] == "missing"
    assert "pip install" in r["ghost"]["error"] and "ghost" in err


def test_target_command_prints_the_resolved_dict(capsys):
    code, out, _ = run_cli(["target", "llvm -mcpu=skylake-avx512"], capsys)
    assert code == 0 and json.loads(out)["config"]["mcpu"] == "skylake-avx512"


def test_models_command_lists_the_zoo(capsys):
    code, out, _ = run_cli(["models", "--no-stats"], capsys)
    assert code == 0
    for name in ("resnet18", "densenet201", "bert-large-uncased", "google/vit-base-patch16-224"):
        assert name in out


def test_onnx_file_runs_with_tvm_alone_by_default(tmp_path, capsys):
    pytest.importorskip("onnx")
    import torch

    path = tmp_path / "conv.onnx"
    torch.onnx.export(torch.nn.Conv2d(3, 4, 3).eval(), (torch.randn(1, 3, 8, 8),), str(path), input_names=["x"],
                      dynamic_axes={"x": {0: "batch"}}, dynamo=False)
    out = tmp_path / "onnx.json"
    code, _, _ = run_cli(["run", "--model", str(path), "--batch-size", "2", "--runs", "3", "--warmup", "1",
                          "--output", str(out), "-q"], capsys)
    r = json.loads(out.read_text())
    assert code == 0 and r["frameworks"] == ["tvm"] and r["batch_size"] == 2
    assert r["tvm_relax"]["info"]["frontend"] == "onnx"
    pytest.importorskip("onnxruntime")
    # no PyTorch module for an ONNX file: ONNX Runtime runs once, untimed, for the reference
    assert r["tvm_relax"]["accuracy"]["passed"] is True
    assert r["tvm_relax"]["accuracy"]["reference_from"] == "onnxruntime"
    code, _, _ = run_cli(["run", "--model", str(path), "--frameworks", "tvm,onnxruntime", "--runs", "3", "--warmup",
                          "1", "--output", str(out), "-q", "--no-history"], capsys)
    r = json.loads(out.read_text())
    # without PyTorch, ONNX Runtime's outputs are the reference: a wrong TVM result cannot pass as a speed
    assert code == 0 and r["tvm_relax"]["accuracy"]["passed"] is True
    assert r["tvm_relax"]["accuracy"]["reference_from"] == "onnxruntime"
    assert r["onnxruntime"]["accuracy"] == {"passed": True, "reference": True}


def test_run_progress_estimates_the_time_left_from_the_finished_workers():
    from tvmbench.cli.common import status_events
    from tvmbench.measure.runner import WORKER_DONE

    class Status:
        def update(self, text):
            self.text = text

    t, status = [0.0], Status()
    on_event = status_events(status, 0.0, total=3, clock=lambda: t[0])
    on_event("pytorch", "timed run 40")
    assert "left" not in status.text  # nothing finished: no estimate
    t[0] = 20.0
    on_event("pytorch", WORKER_DONE)
    assert "1/3 done, about 40 s left" in status.text
    t[0] = 30.0
    on_event("tvm", "compiling")
    assert "about 30 s left" in status.text  # the current worker's 10 s already count
    t[0] = 80.0
    on_event("tvm", WORKER_DONE)
    assert "2/3 done, about 40 s left" in status.text  # the workers took 20 s and 60 s


def test_listings_print_json_and_a_closed_pipe_is_not_an_error():
    """``models`` and ``frameworks`` print JSON for scripts; a reader that goes away early
    (``tvmbench models --json | head -1``) ends the command quietly, not with a traceback."""
    import json
    import subprocess
    import sys

    cmd = [sys.executable, "-m", "tvmbench.cli"]
    listed = json.loads(subprocess.run([*cmd, "models", "--no-stats", "--json"], capture_output=True, text=True,
                                       check=True).stdout)
    assert {"resnet18", "bert-base-uncased"} <= {m["name"] for m in listed}
    found = json.loads(subprocess.run([*cmd, "frameworks", "--json"], capture_output=True, text=True,
                                      check=True).stdout)
    assert found["pytorch"]["installed"] and "tensorrt" in found
    proc = subprocess.Popen([*cmd, "models", "--no-stats", "--json"], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)
    proc.stdout.close()  # before the command has written anything
    err = proc.stderr.read()
    assert proc.wait(timeout=120) == 0 and "Traceback" not in err and "Exception ignored" not in err, err
