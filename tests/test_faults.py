"""Faults that must lose nothing and print one line: shared databases and caches under
concurrency, damaged files on disk, outputs that cannot be written, and usage errors.

Each test makes the fault for real (a second process holding a lock, bytes cut off a file, a
path under /proc) on the tiny MLP and asserts the exit status, one clear line, and that what was
already there survives. Worker crashes, hangs, memory hogs and a killed parent are in
test_isolation.py."""

import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from tvmbench.cli import main
from tvmbench.errors import UserError
from tvmbench.targets import resolve_target
from tvmbench.tuning.database import META, RECORDS, WORKLOADS, TuningDatabase, load_databases

MLP = str(Path(__file__).with_name("mlp_model.py")) + ":build"
TARGET = resolve_target("llvm", gpu_query=lambda: None)
REAL_DB = Path(__file__).with_name("data") / "tuning_db"


def one_line(capsys) -> str:
    err = [line for line in capsys.readouterr().err.strip().splitlines() if line.strip()]
    assert len(err) == 1 and "Traceback" not in err[0], err
    return err[0]


@pytest.fixture
def database(tmp_path):
    """A copy of a real database (tests/data/tuning_db: the AVX2 database tvmbench shipped until
    2026-11-27): real workloads and records."""
    db = tmp_path / "db"
    db.mkdir()
    for name in (WORKLOADS, RECORDS, META):
        (db / name).write_bytes((REAL_DB / name).read_bytes())
    return db


HOLD_LOCK = """
import sys, time
from tvmbench.tuning.database import TuningDatabase
with TuningDatabase.open(sys.argv[1]).writing():
    print("locked", flush=True)
    time.sleep(60)
"""


def test_a_second_writer_of_a_database_waits_or_with_no_wait_fails_in_one_line(database, capsys):
    holder = subprocess.Popen([sys.executable, "-c", HOLD_LOCK, str(database)], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "locked"
        t0 = time.monotonic()
        assert main(["tune", "--model", MLP, "--target", "llvm", "--trials", "8", "--db", str(database),
                     "--no-wait", "-q"]) == 2
        assert "being written by another tvmbench process" in one_line(capsys)
        assert time.monotonic() - t0 < 30  # refused before any tuning
        waited, got = [], threading.Event()

        def writer():
            with TuningDatabase.open(database).writing(on_wait=waited.append):
                got.set()

        thread = threading.Thread(target=writer)
        thread.start()
        time.sleep(1)
        assert not got.is_set() and "waiting for another tvmbench process" in waited[0]
        holder.kill()  # the lock goes with its holder: the waiting writer gets it
        thread.join(30)
        assert got.is_set()
    finally:
        holder.kill()
        holder.wait()


def test_readers_never_rewrite_a_database_and_skip_a_line_being_appended(database, capsys):
    records = database / RECORDS
    records.write_bytes(records.read_bytes() + b'[0, [[["Sample')  # a tuner halfway through a line
    before = records.read_bytes()
    db = TuningDatabase.open(database)
    assert db.count_records() == len(before.splitlines()) - 1
    assert main(["db", "show", str(database)]) == 0
    schedules = load_databases([("--db", str(database))], TARGET)
    assert records.read_bytes() == before  # nothing rewritten by reading
    assert schedules.infos[0]["records"] == db.count_records()


@pytest.mark.parametrize("bad, what", [(b"[]", "not a record"), (b"\xff\xfe not utf-8", "not UTF-8"),
                                       (b'{"a": 1}', "not a record")])
def test_corrupt_record_lines_are_skipped_and_repaired_under_the_lock_with_their_line_named(database, bad, what):
    records = database / RECORDS
    good = records.read_bytes().rstrip(b"\n").split(b"\n")
    records.write_bytes(b"\n".join([good[0], bad, *good[1:]]))  # and no newline at the end
    db = TuningDatabase.open(database)
    assert db.count_records() == len(good)
    with db.writing():
        pass
    assert any(f"{RECORDS} line 2: {what}" in w for w in db.warnings), db.warnings
    fixed = records.read_bytes()
    assert fixed.endswith(b"\n") and fixed.split(b"\n")[:-1] == good  # the next append is a line of its own


def test_a_damaged_metadata_file_is_refused_in_one_line_not_replaced(database, capsys):
    (database / META).write_text('{"target": {"kind": "llvm"}, "runs": [')
    before = (database / META).read_bytes()
    with pytest.raises(UserError, match="is damaged"):
        TuningDatabase.open(database, TARGET, create=True)
    assert main(["db", "show", str(database)]) == 2
    assert "tvmbench_db.json is damaged" in one_line(capsys)
    assert (database / META).read_bytes() == before  # the run history is still there to restore


def test_two_runs_at_once_on_a_fresh_cache_both_measure_and_leave_no_temporary_files(database, tmp_path):
    """Two real `tvmbench run` processes, one fresh cache: both build the database view, compile
    and write the same library cache entry at the same time; both must succeed with the same
    applied records, and no temporary file may be left behind."""
    env = {**os.environ, "TVMBENCH_CACHE": str(tmp_path / "fresh-cache")}
    cmd = [sys.executable, "-m", "tvmbench.cli", "run", "--model", MLP, "--target", "llvm", "--frameworks", "tvm",
           "--db", str(database), "--runs", "5", "--warmup", "1", "--no-history", "--json", "-q"]
    procs = [subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for _ in range(2)]
    outs = [p.communicate(timeout=300) for p in procs]
    assert all(p.returncode == 0 for p in procs), [e for _, e in outs]
    docs = [json.loads(out) for out, _ in outs]
    assert all(d["tvm_relax"]["status"] == "ok" for d in docs)
    assert docs[0]["tuning_database"] == docs[1]["tuning_database"]
    leftovers = [p for p in (tmp_path / "fresh-cache").rglob("*") if p.is_file() and (p.name.startswith(".")
                                                                                       or ".tmp" in p.name)]
    assert not leftovers  # no temporary files left behind


def test_a_truncated_cache_entry_is_rebuilt_with_a_warning_and_the_key_follows_the_compile_sources(monkeypatch):
    import tvmbench.compile as compile_pkg
    from tvmbench.compile import compile_model, import_model
    from tvmbench.models import ModelOptions, load_model

    imported = import_model(load_model(MLP, ModelOptions()))
    first = compile_model(imported, TARGET)
    meta = first.path.parent / "meta.json"
    meta.write_text(meta.read_text()[:20])  # a kill in the middle of writing it, in an older tvmbench
    again = compile_model(imported, TARGET)
    assert not again.cache_hit and any("damaged" in w for w in again.warnings)
    assert json.loads(meta.read_text())["pipeline"]  # rewritten whole
    assert compile_model(imported, TARGET).cache_hit
    monkeypatch.setattr(compile_pkg, "sources_digest", lambda: "an edited rule")
    assert compile_pkg.cache_key(imported, TARGET, "none", False) != first.cache_key


def test_an_export_with_external_data_loads_in_onnxruntime_and_openvino(tmp_path, monkeypatch):
    """The dynamo exporter writes the weights beside the model; the cache entry must keep the
    name the model refers to (it broke every peer on gpt2)."""
    ort = pytest.importorskip("onnxruntime")
    ov = pytest.importorskip("openvino")
    from tvmbench.models import ModelOptions, load_model, onnx_export

    monkeypatch.setenv("TVMBENCH_CACHE", str(tmp_path))
    monkeypatch.setattr(onnx_export, "EXPORTERS", ("dynamo",))
    model = load_model(MLP, ModelOptions())
    exported = onnx_export.onnx_file(model)
    assert exported.exporter == "dynamo"
    assert [p.name for p in exported.path.parent.iterdir() if p.name.startswith("model.onnx.")]  # external data
    x = next(iter(model.inputs.values()))
    ort_out = ort.InferenceSession(str(exported.path)).run(None, {next(iter(model.inputs)): x})[0]
    ov_out = ov.Core().compile_model(str(exported.path), "CPU", {"INFERENCE_PRECISION_HINT": "f32"})([x])[0]
    assert ort_out.shape == ov_out.shape == (32, 256)
    assert abs(ort_out - ov_out).max() < 1e-3


def test_an_edited_model_file_is_exported_again(tmp_path, monkeypatch):
    from tvmbench.models import ModelOptions, load_model
    from tvmbench.models.onnx_export import onnx_file

    monkeypatch.setenv("TVMBENCH_CACHE", str(tmp_path / "cache"))
    source = tmp_path / "net.py"
    source.write_text("import torch\ndef build():\n    return torch.nn.Linear(8, 4), (torch.randn(2, 8),)\n")
    first = onnx_file(load_model(f"{source}:build", ModelOptions()))
    source.write_text("import torch\ndef build():\n    return torch.nn.Linear(8, 6), (torch.randn(2, 8),)\n")
    second = onnx_file(load_model(f"{source}:build", ModelOptions()))
    assert not second.cache_hit and second.path != first.path


def test_an_output_that_cannot_be_written_is_refused_before_measuring(capsys):
    t0 = time.monotonic()
    assert main(["run", "--model", MLP, "--frameworks", "pytorch", "-o", "/proc/tvmbench/x.json"]) == 2
    assert "cannot write /proc/tvmbench/x.json" in one_line(capsys)
    assert time.monotonic() - t0 < 10


def test_symlinks_and_devices_are_written_through(tmp_path):
    from tvmbench.files import write_json_atomic

    target = tmp_path / "real.json"
    target.write_text("{}")
    link = tmp_path / "link.json"
    link.symlink_to(target)
    write_json_atomic(link, {"a": 1})
    assert link.is_symlink() and json.loads(target.read_text()) == {"a": 1}
    write_json_atomic("/dev/null", {"a": 1})
    assert Path("/dev/null").is_char_device()


def test_a_usage_error_is_the_short_usage_line_and_the_error(capsys):
    with pytest.raises(SystemExit) as exit_:
        main(["run", "--model", MLP, "--batch-size", "0"])
    err = capsys.readouterr().err.strip().splitlines()
    assert exit_.value.code == 2 and len(err) == 2
    assert err[0].startswith("usage: tvmbench run") and "--batch-size" in err[1]


def test_rpc_listens_on_loopback_unless_told_and_warns_what_another_address_exposes():
    from tvmbench.cli import build_parser
    from tvmbench.cli.tune import exposure_warning

    args = build_parser().parse_args(["rpc", "server", "--tracker", "127.0.0.1:9190", "--key", "k"])
    assert args.host == "127.0.0.1" and exposure_warning("server", args.host, args.port) is None
    assert "run it on this machine" in exposure_warning("server", "0.0.0.0", 9090)
    assert "register devices" in exposure_warning("tracker", "10.0.0.5", 9190)


def test_a_crash_inside_a_worker_is_exit_status_1_not_a_usage_error():
    from tvmbench.api import _in_worker
    from tvmbench.errors import WorkFailed

    from .test_isolation import segfaults

    with pytest.raises(WorkFailed, match="crashed with SIGSEGV.*the worker's output: "):  # its dump in a log
        _in_worker(segfaults, None, 1, 60, "profiling x")


def test_a_model_file_under_the_home_folder_is_found_with_a_tilde(tmp_path, monkeypatch):
    from tvmbench.models import ModelOptions, check_model_name, load_model

    monkeypatch.setenv("HOME", str(tmp_path))
    (tmp_path / "net.py").write_text(Path(MLP.rpartition(":")[0]).read_text())
    check_model_name("~/net.py:build")
    assert load_model("~/net.py:build", ModelOptions()).module is not None


def test_workers_that_segfault_hang_or_eat_memory_lose_nothing_of_the_frameworks_beside_them(tmp_path, monkeypatch,
                                                                                             capfd):
    """One run, TVM beside three frameworks that fail in their workers (plugins, tests/faulty_backend.py):
    each failure is one line naming its framework and what happened (a crash's native dump goes to a
    log file that line names, not to the terminal), TVM's result is measured and written, and the
    exit status is 1 (a failure, not a usage error)."""
    from .faulty_backend import PLUGINS

    monkeypatch.setenv("TVMBENCH_BACKENDS", PLUGINS)
    out = tmp_path / "result.json"
    code = main(["run", "--model", MLP, "--target", "llvm", "--frameworks", "tvm,segfaults,hangs,hogs", "--runs", "20",
                 "--warmup", "3", "--timeout", "40", "--memory-limit", "2", "--no-history", "--json", "-q",
                 "-o", str(out)])
    captured = capfd.readouterr()  # file descriptors: what the workers wrote is caught too
    err = [line for line in captured.err.splitlines() if line.strip()]
    assert code == 1 and len(err) == 3, captured.err
    lines = {line.split(":")[1].strip(): line for line in err}
    assert sorted(lines) == ["hangs", "hogs", "segfaults"], captured.err
    # (40 s: a fresh VM faults new memory in at ~100 MB/s, and the hog needs 2 GiB of it; session 88)
    assert "SIGSEGV" in lines["segfaults"] and "40 s" in lines["hangs"] and "memory" in lines["hogs"], lines
    dump = Path(lines["segfaults"].rpartition("the worker's output: ")[2].rstrip(")"))
    assert "egfault" in dump.read_text()
    for doc in (json.loads(captured.out), json.loads(out.read_text())):
        assert doc["tvm_relax"]["status"] == "ok" and doc["tvm_relax"]["median_ms"] > 0
        assert [doc[fw]["status"] for fw in ("segfaults", "hangs", "hogs")] == ["failed"] * 3
