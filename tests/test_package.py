"""Compile once, run anywhere: a package written by ``export`` runs with no model source and no
torch, with the user's inputs, and refuses in one line what it must not load."""

import json
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from tvmbench.cli import main

from .rpc_devices import loopback_devices

CNN = str(Path(__file__).with_name("mlp_model.py")) + ":build_classifier"
ATTENTION = str(Path(__file__).with_name("mlp_model.py")) + ":build_packed_projections"


@pytest.fixture(scope="module")
def package(tmp_path_factory):
    folder = tmp_path_factory.mktemp("pkg") / "classifier"
    assert main(["export", "--model", CNN, "--target", "llvm", "--output-dir", str(folder)]) == 0
    return folder


FIXED = ("--runs", "10", "--warmup", "1")


def run_package(folder, *extra, cwd=None, timing=FIXED):
    """``tvmbench run --package`` in a fresh process, from a folder without the model source."""
    out = subprocess.run([sys.executable, "-m", "tvmbench.cli", "run", "--package", str(folder), *timing,
                          "--no-history", "--json", *extra], capture_output=True, text=True, timeout=300, cwd=cwd)
    return out.returncode, out.stdout, out.stderr


def test_the_package_runs_without_its_source_or_torch_and_checks_its_reference(package, tmp_path):
    # the timer's adaptive mode, as a user runs it: its stopping rule needs scipy.stats, which
    # failed to import where torch had been hidden as a None module
    code, stdout, stderr = run_package(package, "--save-outputs", str(tmp_path / "out.npz"), cwd=tmp_path,
                                       timing=("--min-time", "0.1", "--max-time", "0.3"))
    assert code == 0, stderr
    tvm = json.loads(stdout)["tvm_relax"]
    assert tvm["status"] == "ok" and tvm["info"]["package"] == str(package)
    assert tvm["info"]["torch_loaded"] is False  # the worker never imported torch
    assert tvm["accuracy"]["passed"] and "package" in tvm["accuracy"]["reference_from"]
    with np.load(tmp_path / "out.npz") as saved, np.load(package / "reference.npz") as ref:
        assert list(saved.files) == ["tvm/0"]
        np.testing.assert_allclose(saved["tvm/0"], ref["arr_0"], rtol=1e-4, atol=1e-5)


def test_inputs_from_a_file_and_each_fill_mode(package, tmp_path):
    with np.load(package / "inputs.npz") as seeded:
        x = seeded["input0"]
    np.savez(tmp_path / "mine.npz", input0=(x * 0.5).astype(np.float32))
    outputs = {}
    for name, extra in {"file": ["--inputs", str(tmp_path / "mine.npz")], "zeros": ["--fill-mode", "zeros"],
                        "ones": ["--fill-mode", "ones"]}.items():
        code, stdout, stderr = run_package(package, *extra, "--save-outputs", str(tmp_path / f"{name}.npz"))
        assert code == 0, stderr
        assert json.loads(stdout)["tvm_relax"]["accuracy"]["passed"] is None  # user inputs: no stored reference
        with np.load(tmp_path / f"{name}.npz") as saved:
            outputs[name] = saved["tvm/0"]
    assert not np.allclose(outputs["zeros"], outputs["ones"]) and not np.allclose(outputs["file"], outputs["ones"])
    np.savez(tmp_path / "bad_shape.npz", input0=np.zeros((1, 3, 8, 8), np.float32))
    np.savez(tmp_path / "bad_dtype.npz", input0=x.astype(np.float64))
    np.savez(tmp_path / "bad_name.npz", image=x)
    for bad, words in (("bad_shape", "float32 [1, 3, 8, 8], the model takes float32 [1, 3, 16, 16]"),
                       ("bad_dtype", "'input0' is float64"), ("bad_name", "has no array 'input0'")):
        code, _, stderr = run_package(package, "--inputs", str(tmp_path / f"{bad}.npz"))
        lines = stderr.strip().splitlines()
        assert code == 2 and len(lines) == 1 and words in lines[0], stderr


def test_print_top_lists_the_classes_side_by_side(package):
    code, _, stderr = run_package(package, "--print-top", "3")
    assert code == 0 and "top 3 classes" in stderr and "tvm: class" in stderr, stderr


@pytest.mark.parametrize("damage, words", [
    ("library", "model.so does not match its digest"),
    ("params", "params.npz does not match its digest"),
    ("tvm_version", "built with TVM 0.26.0"),
    ("aarch64", "cannot run on this machine; run it on such a device with --rpc HOST:PORT --rpc-key KEY (or, for "
                "aarch64, on an emulated one: tvmbench rpc emulate)"),
])
def test_a_package_it_must_not_load_is_one_line(package, tmp_path, damage, words):
    import shutil

    broken = tmp_path / "broken"
    shutil.copytree(package, broken)
    spec = json.loads((broken / "package.json").read_text())
    if damage == "library":
        (broken / "model.so").write_bytes((broken / "model.so").read_bytes()[:1000])
    elif damage == "params":
        (broken / "params.npz").write_bytes((package / "params.npz").read_bytes()[:-10] + b"0123456789")
    elif damage == "tvm_version":
        spec["tvm_version"] = "0.26.0"
    else:
        spec["target"] = {"kind": "llvm", "mtriple": "aarch64-linux-gnu", "mcpu": "cortex-a72"}
    (broken / "package.json").write_text(json.dumps(spec))
    code, _, stderr = run_package(broken)
    lines = stderr.strip().splitlines()
    assert code == 2 and len(lines) == 1 and words in lines[0] and "Traceback" not in stderr, stderr


def test_a_bf16_package_on_a_cpu_without_avx512_bf16_is_refused_in_one_line(package, monkeypatch):
    """Its kernels would stop on an illegal instruction (``vdpbf16ps``): ``verify`` refuses it
    first. The CPU's feature is the one thing mocked (this host may or may not have it)."""
    from tvmbench import targets
    from tvmbench.errors import UserError
    from tvmbench.models import package as pkg

    spec = {**json.loads((package / "package.json").read_text()), "precision": "bf16"}
    monkeypatch.setattr(targets, "has_bf16_dot", lambda target: True)
    pkg.verify(package, spec)
    monkeypatch.setattr(targets, "has_bf16_dot", lambda target: False)
    with pytest.raises(UserError, match="--precision bf16 and this CPU has no AVX-512 BF16"):
        pkg.verify(package, spec)


def test_the_package_runs_on_a_device_server_over_rpc(package):
    with loopback_devices("pkg", servers=1) as port:
        code, stdout, stderr = run_package(package, "--rpc", f"127.0.0.1:{port}", "--rpc-key", "pkg")
    assert code == 0, stderr
    tvm = json.loads(stdout)["tvm_relax"]
    assert tvm["status"] == "ok" and tvm["info"]["remote"]["key"] == "pkg" and tvm["accuracy"]["passed"]


def _emulator_missing() -> bool:
    from tvmbench import emulator
    from tvmbench.errors import UserError

    try:
        emulator.tools()
    except UserError:
        return True
    return shutil.which("aarch64-linux-gnu-g++") is None


@pytest.mark.skipif(_emulator_missing(),
                    reason="needs the aarch64 cross compiler, qemu-user and debootstrap (apt-get install "
                           "g++-aarch64-linux-gnu qemu-user debootstrap, or `make cross`)")
def test_aarch64_packages_run_on_an_emulated_device_and_match_their_references(tmp_path, capsys):
    """The aarch64 code of tvmbench's rules executed, not only compiled (tiles of NEON's 4 lanes):
    a convolutional network for a Cortex-A72 and a ViT block with GPT-2's split (attention, layer
    norm, GELU, the joined slices) for a Neoverse V1 (whose features, SVE among them, LLVM may
    use), on a qemu device behind the tracker; tuning on that device is refused."""
    packages = {"cnn": (CNN, "llvm -mcpu=cortex-a72"), "vit": (ATTENTION, "llvm -mcpu=neoverse-v1")}
    for name, (model, target) in packages.items():
        assert main(["export", "--model", model, "--target", target, "--output-dir", str(tmp_path / name)]) == 0
    with loopback_devices("emu", servers=1, emulated=True) as port:
        for name in packages:
            code, stdout, stderr = run_package(tmp_path / name, "--rpc", f"127.0.0.1:{port}", "--rpc-key", "emu")
            assert code == 0, stderr
            doc = json.loads(stdout)
            tvm = doc["tvm_relax"]
            assert tvm["accuracy"]["passed"], (name, tvm["accuracy"])
            assert tvm["info"]["remote"]["emulated"].startswith("qemu-aarch64")
            assert any("under emulation" in w for w in doc["warnings"]), doc["warnings"]
        # tuning on it would time an emulator: refused in one line
        code = main(["tune", "--model", CNN, "--target", "llvm -mcpu=cortex-a72", "--rpc", f"127.0.0.1:{port}",
                     "--rpc-key", "emu", "--trials", "2", "--db", str(tmp_path / "db")])
        err = capsys.readouterr().err
        assert code == 2 and "is emulated" in err.strip().splitlines()[-1] and "Traceback" not in err, err
