"""`run --rpc`: TVM runs and is timed on a device behind a TVM RPC tracker (here a server on
127.0.0.1, a real tracker and server process)."""

import json
from pathlib import Path

from tvmbench.cli import main

from .rpc_devices import loopback_devices

MLP = str(Path(__file__).with_name("mlp_model.py")) + ":build"


def test_run_times_tvm_on_the_remote_device_with_its_own_clock(tmp_path):
    out = tmp_path / "r.json"
    with loopback_devices("bench", servers=1) as port:
        assert main(["run", "--model", MLP, "--target", "llvm", "--frameworks", "tvm,pytorch", "--rpc",
                     f"127.0.0.1:{port}", "--rpc-key", "bench", "--warmup", "2", "--runs", "10", "--output",
                     str(out), "-q"]) == 0
    doc = json.loads(out.read_text())
    tvm = doc["tvm_relax"]
    assert tvm["status"] == "ok" and tvm["accuracy"]["passed"] and tvm["total_runs"] == 10
    assert tvm["info"]["remote"] == {"tracker": f"127.0.0.1:{port}", "key": "bench"}
    assert "time_evaluator" in tvm["info"]["clock"] and tvm["phases_s"]["upload_s"] >= 0
    assert 0 < tvm["median_ms"] < 1000
    assert doc["pytorch"]["status"] == "ok" and "remote" not in doc["pytorch"]["info"]
    assert any("remote device" in w for w in doc["warnings"])


def test_run_with_a_key_no_device_has_is_one_line(tmp_path, capsys):
    with loopback_devices("bench", servers=0) as port:
        code = main(["run", "--model", MLP, "--target", "llvm", "--rpc", f"127.0.0.1:{port}", "--rpc-key", "gpu0",
                     "-q"])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1 and "no device registered as 'gpu0'" in err[0]


def test_run_rpc_without_a_key_is_a_usage_error(capsys):
    assert main(["run", "--model", MLP, "--rpc", "127.0.0.1:9190", "-q"]) == 2
    assert "--rpc-key" in capsys.readouterr().err
