"""The results history (a real SQLite file) and ``tvmbench diff``'s verdicts."""

import json
import shutil
import sqlite3
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from tvmbench.cli import main
from tvmbench.results.diff import compare_runs
from tvmbench.results.history import SCHEMA_VERSION, History

MLP = str(Path(__file__).with_name("mlp_model.py")) + ":build"


def run_doc(median_ms: float, rounds: int = 1, n: int = 60, seed: int = 0, spread: float = 0.02) -> dict:
    """A run result document with ``n`` timed samples around ``median_ms`` (log-normal noise),
    split into ``rounds`` rounds whose medians also differ a little (process placement)."""
    rng = np.random.default_rng(seed)
    per = n // rounds
    shifts = rng.normal(0, spread / 2, rounds)
    samples = np.concatenate([median_ms * np.exp(s + rng.normal(0, spread, per)) for s in shifts])
    result = {"status": "ok", "median_ms": float(np.median(samples)), "samples_ms": samples.tolist()}
    if rounds > 1:
        chunks = np.split(samples, rounds)
        result["rounds"] = {"count": rounds, "medians_ms": [float(np.median(c)) for c in chunks],
                            "sizes": [per] * rounds}
    return {"model": "m", "batch_size": 1, "seq_length": None, "image_size": None, "frameworks": ["pytorch"],
            "pytorch": result, "environment": {"cpu_model": "x"}}


@pytest.mark.parametrize("rounds", [1, 4])
@pytest.mark.parametrize("factor, expected", [(1.10, "slower"), (1.0, "no change"), (1.01, "no change"),
                                              (0.90, "faster")])
def test_diff_flags_a_real_slowdown_and_nothing_within_the_noise_band(factor, expected, rounds):
    a = run_doc(10.0, rounds, seed=1)
    b = run_doc(10.0 * factor, rounds, seed=2)
    (change,) = compare_runs([a], [b])
    assert change.verdict == expected, (change.ratio, change.ci95)
    assert ("round medians" in change.basis) == (rounds > 1)


def probed_doc(median_ms: float, hours: list[float], seed: int) -> dict:
    """A run of 4 rounds whose host ran ``hours[i]`` times slower in round i: the model's samples
    and the probe's both carry it, each with 1-2 % noise of its own."""
    rng = np.random.default_rng(seed)
    doc = run_doc(median_ms, rounds=4, seed=seed)
    result, per = doc["pytorch"], len(doc["pytorch"]["samples_ms"]) // 4
    samples = np.concatenate([h * np.asarray(result["samples_ms"][i * per:(i + 1) * per]) for i, h in enumerate(hours)])
    result.update(samples_ms=samples.tolist(), median_ms=float(np.median(samples)))
    result["rounds"]["medians_ms"] = [float(np.median(c)) for c in np.split(samples, 4)]
    result["rounds"]["probe_ms"] = [0.5 * h * rng.lognormal(0, 0.01) for h in hours]
    return doc


@pytest.mark.parametrize("factor, expected", [(1.10, "slower"), (1.0, "no change")])
def test_diff_divides_out_the_hour_the_host_probe_saw(factor, expected):
    """Each side's rounds ran in a different hour (the host 0.85-1.2x as fast): raw round medians
    cannot tell a 10 % slowdown from that, the medians over the probe's can."""
    a = probed_doc(10.0, [1.0, 1.2, 0.9, 1.15], seed=1)
    b = probed_doc(10.0 * factor, [0.85, 1.1, 1.2, 0.95], seed=2)
    (change,) = compare_runs([a], [b])
    assert change.verdict == expected and "probe" in change.basis, (change.ratio, change.ci95)
    assert change.ratio == pytest.approx(factor, rel=0.03) and change.host == pytest.approx(1.0, rel=0.05)
    # a round whose probe ran 100x slower (its threads against another pool's) leaves that side raw
    b["pytorch"]["rounds"]["probe_ms"][2] *= 100
    (odd,) = compare_runs([a], [b])
    assert "probe" not in odd.basis and odd.host is None
    for doc in (a, b):
        del doc["pytorch"]["rounds"]["probe_ms"]
    (raw,) = compare_runs([a], [b])
    assert raw.verdict == "no change" and raw.host is None and raw.ci95[1] - raw.ci95[0] > 0.15


def test_diff_of_two_files_exits_1_on_a_regression_and_says_when_machines_differ(tmp_path, capsys):
    a, b = run_doc(10.0, seed=1), run_doc(11.5, seed=2)
    b["environment"] = {"cpu_model": "another CPU"}
    (tmp_path / "a.json").write_text(json.dumps(a))
    (tmp_path / "b.json").write_text(json.dumps(b))
    assert main(["diff", str(tmp_path / "a.json"), str(tmp_path / "b.json")]) == 1
    out = capsys.readouterr().out
    assert out.splitlines()[0].startswith("different machines") and "slower" in out
    assert main(["diff", str(tmp_path / "a.json"), str(tmp_path / "a.json"), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["regressed"] is False


def test_runs_are_kept_in_the_history_and_diffed_by_reference(tmp_path, capsys):
    history = tmp_path / "history.sqlite"
    for _ in range(2):
        assert main(["run", "--model", MLP, "--frameworks", "pytorch", "--runs", "20", "--warmup", "2",
                     "--history", str(history), "-q"]) == 0
    capsys.readouterr()
    assert main(["history", "--history", str(history), "--machine", "all", "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert [r["kind"] for r in rows] == ["run", "run"] and rows[0]["entry"] > rows[1]["entry"]
    assert all(r["model"] == MLP and r["framework"] == "pytorch" and r["median_ms"] > 0 for r in rows)
    assert main(["history", "--history", str(history), "--machine", "this", "--json"]) == 0
    assert len(json.loads(capsys.readouterr().out)) == 2  # this machine's fingerprint matches its own runs
    code = main(["diff", "latest~1", "latest", "--history", str(history), "--json"])
    doc = json.loads(capsys.readouterr().out)
    assert doc["notes"] == [] and len(doc["changes"]) == 1 and code == (1 if doc["regressed"] else 0)
    assert main(["run", "--model", MLP, "--frameworks", "pytorch", "--runs", "5", "--no-history",
                 "--history", str(history), "-q"]) == 0
    assert sqlite3.connect(history).execute("SELECT COUNT(*) FROM entries").fetchone()[0] == 2


WRITER = """
import sys
from tvmbench.results.history import History
h = History.open(sys.argv[1])
for i in range(25):
    h.add("run", {"model": "m%d" % i, "frameworks": []}, ["writer", sys.argv[2]], {"cpu_model": "x"})
"""


def test_two_processes_appending_at_once_both_land(tmp_path):
    path = tmp_path / "history.sqlite"
    History.open(path).close()
    procs = [subprocess.Popen([sys.executable, "-c", WRITER, str(path), str(k)], stderr=subprocess.PIPE, text=True)
             for k in range(2)]
    for p in procs:
        assert p.wait(timeout=120) == 0, p.stderr.read()
    rows = sqlite3.connect(path).execute("SELECT command FROM entries").fetchall()
    assert len(rows) == 50 and {json.loads(c)[1] for (c,) in rows} == {"0", "1"}


def test_a_damaged_or_newer_history_is_one_line_and_never_replaced(tmp_path, capsys):
    damaged = tmp_path / "damaged.sqlite"
    damaged.write_bytes(b"not a database at all" * 100)
    assert main(["history", "--history", str(damaged)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "is not a tvmbench history" in err[0]
    assert damaged.read_bytes() == b"not a database at all" * 100
    newer = tmp_path / "newer.sqlite"
    History.open(newer).close()
    db = sqlite3.connect(newer)
    db.execute("UPDATE meta SET value = ? WHERE key = 'schema_version'", (str(SCHEMA_VERSION + 1),))
    db.commit()
    db.close()
    assert main(["diff", "latest~1", "latest", "--history", str(newer)]) == 2
    assert "newer than this tvmbench reads" in capsys.readouterr().err
    assert main(["history", "--history", str(tmp_path / "none.sqlite")]) == 2
    assert "no history" in capsys.readouterr().err


CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")


def test_the_html_report_renders_in_a_real_browser(tmp_path):
    """report.html from a small real run, opened in headless Chromium: every figure loaded with
    a size, every table has rows; a screenshot is kept next to it."""
    if CHROMIUM is None:
        pytest.skip("no Chromium on this machine (apt-get install chromium; `make test` installs it)")
    sync_api = pytest.importorskip("playwright.sync_api", reason="playwright is not installed (the dev extra)")
    history = tmp_path / "history.sqlite"
    result = tmp_path / "run.json"
    assert main(["run", "--model", MLP, "--frameworks", "tvm,pytorch", "--target", "llvm", "--runs", "20",
                 "--warmup", "2", "--history", str(history), "-o", str(result), "-q"]) == 0
    report = tmp_path / "report.html"
    assert main(["report", str(result), "-o", str(report), "--markdown", str(tmp_path / "report.md"),
                 "--history", str(history)]) == 0
    with sync_api.sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=[
            "--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update",
            "--disable-sync", "--no-first-run"])
        try:
            page = browser.new_page(viewport={"width": 1200, "height": 900})
            page.goto(report.as_uri())
            images = page.eval_on_selector_all("img", "els => els.map(e => [e.complete, e.naturalWidth, "
                                                      "e.naturalHeight])")
            rows = page.eval_on_selector_all("table", "els => els.map(e => e.querySelectorAll('tbody tr').length)")
            headings = page.eval_on_selector_all("h2", "els => els.map(e => e.textContent)")
            page.screenshot(path=str(tmp_path / "report.png"), full_page=True)
        finally:
            browser.close()
    assert images and all(done and w > 0 and h > 0 for done, w, h in images), images
    assert rows and all(n > 0 for n in rows), rows
    assert {"Environment", "Latency", "Latency distributions"} <= set(headings)
    assert (tmp_path / "report.png").stat().st_size > 10_000
    markdown = (tmp_path / "report.md").read_text()
    assert "| point | framework | median ms" in markdown and "report_files/distribution-0.png" in markdown


def test_run_json_prints_the_document_on_stdout_and_the_table_has_tail_percentiles(capsys):
    assert main(["run", "--model", MLP, "--frameworks", "pytorch", "--runs", "20", "--warmup", "2", "--json",
                 "--no-history"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["pytorch"]["status"] == "ok" and doc["pytorch"]["p99_ms"] >= doc["pytorch"]["median_ms"]
    from tvmbench.results.report import print_run

    print_run(doc)
    assert "p90 ms" in capsys.readouterr().out
