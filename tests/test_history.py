"""The results history (a real SQLite file) and ``tvmbench diff``'s verdicts."""

import json
import re
import shutil
import sqlite3
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from tvmbench.cli import main
from tvmbench.results.diff import compare_runs, confirmed_changes
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
    assert ("rounds' 5th percentiles" in change.basis) == (rounds > 1)


FAR = 1.3  # the model's time in the host's far state (the EPYC VM's vCPUs on two core complexes)
# per host condition: the model's time factor, the probe's fork-join us and paired-work us there
HOST = {"n": (1.0, 1.0, 10.0), "f": (FAR, 1.42, 10.6),
        "h": (2.0, 0.88, 18.0),  # both vCPUs on one core's two hyper-threads: fork-joins as near
        "b": (1.3, 1.0, 10.0)}  # another tenant's burst: the probe reads the near state


def probed_doc(median_ms: float, rounds: list[str], seed: int, per: int = 60, paired: bool = False) -> dict:
    """A run whose round i was timed in host conditions ``rounds[i]`` (one letter per tenth of its
    samples, ``HOST``), each sample with 2 % noise, each round's level with 1 %, and a host-state
    probe turn every 6 samples (3 % noise; with the paired-work reading when ``paired``)."""
    rng = np.random.default_rng(seed)
    samples, turns = [], []
    for states in rounds:
        level = median_ms * rng.lognormal(0, 0.01)
        at = [states[min(i * len(states) // per, len(states) - 1)] for i in range(per)]
        samples += [level * HOST[x][0] * rng.lognormal(0, 0.02) for x in at]
        turns.append([[i, *(HOST[at[min(i, per - 1)]][d] * rng.lognormal(0, 0.03) for d in (1, 2)[:1 + paired])]
                      for i in range(6, per, 6)])
    doc = run_doc(median_ms, seed=seed)
    doc["pytorch"].update(samples_ms=samples, median_ms=float(np.median(samples)))
    chunks = np.split(np.asarray(samples), len(rounds))
    doc["pytorch"]["rounds"] = {"count": len(rounds), "medians_ms": [float(np.median(c)) for c in chunks],
                                "sizes": [per] * len(rounds), "probe_turns": turns}
    return doc


@pytest.mark.parametrize("factor, expected", [(1.10, "slower"), (1.0, "no change"), (0.9, "faster")])
def test_diff_compares_rounds_state_with_state_when_the_host_jumps_between_two_speeds(factor, expected):
    """The host's cores hop between a near and a far state (the model 30 % slower in the far one),
    differently in each run: raw round medians cannot tell a 10 % slowdown from that; compared
    within each state, they can."""
    a = probed_doc(10.0, ["nnnnnnnnnn", "ffffffffff", "nnnnnfffff", "nnnnnnnnnn"], seed=1)
    b = probed_doc(10.0 * factor, ["ffffffffff", "nnnnnnnnnn", "ffffffffff", "fffffnnnnn"], seed=2)
    (change,) = compare_runs([a], [b])
    assert change.verdict == expected and "each host state" in change.basis, (change.ratio, change.ci95)
    assert change.ratio == pytest.approx(factor, rel=0.03), change
    assert re.fullmatch(r"A: 3 in (0\.9\d|1\.0\d) us, 2 in 1\.4\d us; B: 2 in .+, 3 in .+", change.host), change.host
    # a turn that read 100x (its thread preempted) is a state of its own: only its neighbours drop
    a["pytorch"]["rounds"]["probe_turns"][0][3][1] *= 100
    (odd,) = compare_runs([a], [b])
    assert odd.verdict == expected and odd.ratio == pytest.approx(factor, rel=0.03), odd
    for doc in (a, b):
        del doc["pytorch"]["rounds"]["probe_turns"]
    (raw,) = compare_runs([a], [b])
    assert raw.verdict == "no change" and raw.host is None and raw.ci95[1] - raw.ci95[0] > 0.15, raw


@pytest.mark.parametrize("factor, expected", [(1.10, "slower"), (1.0, "no change")])
def test_one_cores_two_hyper_threads_are_a_host_state_of_their_own(factor, expected):
    """Both vCPUs on one core's two hyper-threads: the model twice as slow while the fork-joins
    read like the near state. The paired-work reading tells it apart; fork-joins alone cannot."""
    rounds_a, rounds_b = ["nnnnnnnnnn", "hhhhhhhhhh", "nnnnnhhhhh", "nnnnnnnnnn"], ["n" * 10] * 2 + ["h" * 10, "h" * 5 + "n" * 5]
    a, b = probed_doc(10.0, rounds_a, seed=1, paired=True), probed_doc(10.0 * factor, rounds_b, seed=2, paired=True)
    (change,) = compare_runs([a], [b])
    assert change.verdict == expected and change.ratio == pytest.approx(factor, rel=0.02), change
    assert re.fullmatch(r"A: 3 in 0\.9\d us/10\.\d us, 2 in 0\.8\d us/18\.\d us \(one core\); B: 3 in .+, 2 in .+",
                        change.host)
    a, b = probed_doc(10.0, rounds_a, seed=1), probed_doc(10.0 * factor, rounds_b, seed=2)
    (blind,) = compare_runs([a], [b])
    assert blind.host.startswith("one host state") and blind.ci95[1] / blind.ci95[0] > 2, blind


@pytest.mark.parametrize("factor, expected", [(1.10, "slower"), (1.0, "no change")])
def test_bursts_the_probe_cannot_see_move_the_medians_not_the_verdict(factor, expected):
    """Another tenant's bursts (30 % on most of A's samples, the probe reading the near state)
    pull A's medians up by a fifth; the rounds' 5th percentiles are the code's own time."""
    a = probed_doc(10.0, ["nnnnbbbbbb", "nnnbbbbbbb", "nnnnnbbbbb", "nnnnbbbbbb"], seed=3, paired=True)
    b = probed_doc(10.0 * factor, ["n" * 10] * 4, seed=4, paired=True)
    (change,) = compare_runs([a], [b])
    assert change.b_ms / change.a_ms < 0.9 * factor and "5th percentile" in change.basis, change
    assert change.verdict == expected and change.ratio == pytest.approx(factor, rel=0.03), change


def test_a_run_whose_host_changed_state_says_so_with_each_states_share():
    from tvmbench.measure.records import Rounds
    from tvmbench.results.build import host_states_note
    from tvmbench.results.records import FrameworkResult

    def result(rounds: list[str]) -> FrameworkResult:
        doc = probed_doc(10.0, rounds, seed=3)["pytorch"]
        return FrameworkResult("ok", samples_ms=doc["samples_ms"], rounds=Rounds.from_json(doc["rounds"]))

    note = host_states_note({"pytorch": result(["nnnnnnnnnn", "ffffffffff", "nnnnnfffff", "nnnnnnnnnn"])})
    assert re.search(r"in 2 states .* read (0\.9\d|1\.0\d) us, 1\.4\d us per fork-join\): pytorch 10\.\d\d ms in 6\d% of samples, "
                     r"1[34]\.\d\d ms in 3\d% of samples\.", note), note
    assert host_states_note({"pytorch": result(["nnnnnnnnnn"] * 3)}) is None  # one state: nothing to say


def test_the_report_shows_each_frameworks_median_and_share_per_host_state(tmp_path):
    from tvmbench.results import html

    run = probed_doc(10.0, ["nnnnnnnnnn", "ffffffffff", "nnnnnfffff", "nnnnnnnnnn"], seed=3)
    (section,) = [s for s in html.build([run], tmp_path) if s.title == "Host states"]
    table = section.blocks[-1]
    assert [r[:2] for r in table.rows] == [["m, batch 1", "pytorch"]] * 2
    (near, far) = table.rows
    assert re.fullmatch(r"(0\.9\d|1\.0\d) us", near[2]) and re.fullmatch(r"1\.4\d us", far[2]), table.rows
    assert re.fullmatch(r"6\d%", near[3]) and re.fullmatch(r"3\d%", far[3]), table.rows
    assert 9.5 < float(near[4]) < 10.5 and 12.5 < float(far[4]) < 13.5, table.rows
    assert "Host states" not in [s.title for s in html.build([run_doc(10.0, rounds=4)], tmp_path)]


def test_the_history_lists_each_points_host_states(tmp_path, capsys):
    path = tmp_path / "history.sqlite"
    history = History.open(path)
    history.add("run", probed_doc(10.0, ["nnnnnnnnnn", "ffffffffff", "nnnnnfffff", "nnnnnnnnnn"], seed=3))
    history.add("run", run_doc(10.0, rounds=4))
    history.close()
    assert main(["history", "--history", str(path), "--machine", "all", "--json"]) == 0
    plain, probed = json.loads(capsys.readouterr().out)
    assert plain["host_states"] is None
    assert re.fullmatch(r"(0\.9\d|1\.0\d) us 6\d%, 1\.4\d us 3\d%", probed["host_states"]), probed
    assert main(["history", "--history", str(path), "--machine", "all"]) == 0
    assert "host states" in capsys.readouterr().out


def test_since_takes_a_date_or_an_age_and_a_misspelt_date_is_a_usage_error(tmp_path, capsys):
    path = tmp_path / "history.sqlite"
    history = History.open(path)
    history.add("run", run_doc(10.0))
    history.close()
    for since, count in (("1h", 1), ("2020-01-01", 1), ("2999-01-01T12:00", 0)):
        assert main(["history", "--history", str(path), "--machine", "all", "--since", since, "--json"]) == 0
        assert len(json.loads(capsys.readouterr().out)) == count, since
    with pytest.raises(SystemExit) as info:
        main(["history", "--history", str(path), "--since", "last tuesday"])
    assert info.value.code == 2 and "expected a date like 2026-11-01" in capsys.readouterr().err


def test_diff_says_inconclusive_when_the_sides_share_no_host_state(tmp_path, capsys):
    a = probed_doc(10.0, ["nnnnnnnnnn"] * 3, seed=1)
    b = probed_doc(10.0, ["ffffffffff"] * 3, seed=2)  # the same code, only ever timed in the far state
    (change,) = compare_runs([a], [b])
    assert change.verdict == "inconclusive" and change.ci95 is None, change
    for name, doc in (("a", a), ("b", b)):
        (tmp_path / f"{name}.json").write_text(json.dumps(doc))
    assert main(["diff", str(tmp_path / "a.json"), str(tmp_path / "b.json")]) == 0  # not a regression
    assert "1 inconclusive" in capsys.readouterr().out


@pytest.mark.parametrize("factor, expected", [(1.10, "slower"), (1.0, "no change")])
def test_sides_in_different_host_states_are_judged_through_other_runs_that_saw_both(tmp_path, capsys, factor,
                                                                                     expected):
    """A timed only in the near state, B only in the far one: alone they are inconclusive; other
    runs of the point on this machine that saw both states say what the far state does to the
    model (30 % here), and through them a 10 % slowdown is flagged and identical code is not.
    ``tvmbench diff`` takes them from the history, A and B themselves left out."""
    a = probed_doc(10.0, ["nnnnnnnnnn"] * 4, seed=1)
    b = probed_doc(10.0 * factor, ["ffffffffff"] * 4, seed=2)
    others = [probed_doc(10.0, states, seed=10 + i)
              for i, states in enumerate([["n" * 10, "f" * 10], ["f" * 10, "n" * 10, "n" * 10], ["n" * 10, "f" * 10]])]
    (change,) = compare_runs([a], [b], bridges=others + [a, b])
    assert change.verdict == expected and "bridged by 3 other run(s)" in change.basis, change
    assert change.ratio == pytest.approx(factor, rel=0.03) and change.ci95[1] / change.ci95[0] < 1.08, change
    assert compare_runs([a], [b], bridges=[probed_doc(10.0, ["n" * 10] * 2, seed=9)])[0].verdict == "inconclusive"
    path = tmp_path / "history.sqlite"
    history = History.open(path)
    for doc in (*others, a, b):
        history.add("run", doc, environment=doc["environment"])
    history.close()
    (tmp_path / "a.json").write_text(json.dumps(a))
    assert main(["diff", str(tmp_path / "a.json"), "latest", "--history", str(path)]) == (expected == "slower")
    assert "1 change(s) bridged" in capsys.readouterr().out
    assert main(["diff", "4", "5", "--history", str(path), "--bridges", "0", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["changes"][0]["verdict"] == "inconclusive"


FAR_TVM = 1.05  # TVM over ONNX Runtime in the far state, against the near (resnet18 on the Zen 1 VM, session 115)


def lockstep_doc(tvm_ms: float, ref_ms: float, host: float, seed: int, rounds: int = 4, turns: int = 12,
                 per: int = 10, states: list[str] | None = None, round_sd: float = 0.0) -> dict:
    """A run of tvm and onnxruntime in lockstep turns (tvm's turn, then onnxruntime's, a quarter
    second each) on a host whose speed is ``host`` times the usual for the whole run (a neighbour
    on the memory) and wanders 3 % from turn to turn, alike for both; 2 % noise per sample.
    ``states``: per round, the host state of its turns (one letter per share of them, as
    ``probed_doc``'s), with the probe's turns on TVM's side; in the far state both frameworks
    are ``FAR`` times slower and TVM ``FAR_TVM`` times more. ``round_sd``: TVM's time in each
    round (a process) moves by this much on the log scale that ONNX Runtime's does not."""
    rng = np.random.default_rng(seed)
    process = np.random.default_rng(seed + 1000).lognormal(0, round_sd, rounds) if round_sd else np.ones(rounds)
    doc = {"model": "m", "batch_size": 1, "seq_length": None, "image_size": None,
           "frameworks": ["tvm", "onnxruntime"], "environment": {"cpu_model": "x"}}
    times: dict[str, list] = {"tvm_relax": [[], []], "onnxruntime": [[], []]}
    probe_turns: list[list] = []
    clock = 0.0
    for r in range(rounds):
        probe_turns.append([])
        for t in range(turns):
            letter = states[r][t * len(states[r]) // turns] if states else "n"
            if states:  # (no draws otherwise: the other tests' runs stay as they were)
                probe_turns[-1].append([t * per, *(HOST[letter][d] * rng.lognormal(0, 0.03) for d in (1, 2))])
            wander = host * rng.lognormal(0, 0.03) * HOST[letter][0]
            for key, ms in (("tvm_relax", tvm_ms * process[r] * (FAR_TVM if letter == "f" else 1.0)),
                            ("onnxruntime", ref_ms)):
                times[key][0] += list(ms * wander * rng.lognormal(0, 0.02, per))
                times[key][1].append([clock, clock + 0.25, per])
                clock += 0.25
    for key, (samples, spans) in times.items():
        doc[key] = {"status": "ok", "median_ms": float(np.median(samples)), "samples_ms": samples,
                    "lockstep_turns": spans, "rounds": {"count": rounds, "sizes": [turns * per] * rounds}}
    if states:
        doc["tvm_relax"]["rounds"]["probe_turns"] = probe_turns
    return doc


@pytest.mark.parametrize("tvm_b, host_b, absolute, relative", [
    (10.0, 1.10, "slower", "no change"),  # the machine drifted 10 % between the runs: no regression
    (11.0, 0.92, "no change", "slower"),  # a 10 % regression the machine's drift hid
    (10.0, 1.0, "no change", "no change")])
def test_diff_relative_to_a_framework_in_the_same_turns_divides_the_machines_drift_out(tvm_b, host_b, absolute,
                                                                                       relative):
    a = lockstep_doc(10.0, 14.0, 1.0, seed=1)
    b = lockstep_doc(tvm_b, 14.0, host_b, seed=2)
    assert [c.verdict for c in compare_runs([a], [b])] == [absolute, "slower" if host_b > 1.05 else "no change"
                                                           if host_b > 0.95 else "faster"]
    (change,) = compare_runs([a], [b], relative_to="onnxruntime")
    assert (change.framework, change.verdict) == ("tvm", relative), (change.ratio, change.ci95)
    assert "over onnxruntime" in change.basis


@pytest.mark.parametrize("factor, expected", [(1.0, "no change"), (1.10, "slower")])
def test_diff_relative_to_compares_the_turn_pairs_state_with_state(factor, expected):
    """TVM runs 5 % slower against ONNX Runtime in the host's far state than in the near one, so
    a run timed mostly far reads as a regression of the same code unless the pairs of turns
    are compared state with state; a 10 % slowdown is still flagged. Sides that share no state
    are inconclusive alone, and judged through other runs that saw both states."""
    a = lockstep_doc(10.0, 14.0, 1.0, seed=1, states=["n"] * 4)
    b = lockstep_doc(10.0 * factor, 14.0, 1.0, seed=2, states=["f", "f", "f", "n"])
    (change,) = compare_runs([a], [b], relative_to="onnxruntime")
    assert change.verdict == expected and "within one host state" in change.basis, (change.ratio, change.ci95)
    assert change.ratio == pytest.approx(factor, rel=0.02), change
    blind = [json.loads(json.dumps(doc)) for doc in (a, b)]
    for doc in blind:
        del doc["tvm_relax"]["rounds"]["probe_turns"]
    assert compare_runs(blind[:1], blind[1:], relative_to="onnxruntime")[0].ratio > factor * 1.03  # the state mix
    far = lockstep_doc(10.0 * factor, 14.0, 1.0, seed=3, states=["f"] * 4)
    assert compare_runs([a], [far], relative_to="onnxruntime")[0].verdict == "inconclusive"
    others = [lockstep_doc(10.0, 14.0, 1.0, seed=10 + i, rounds=2, states=s)
              for i, s in enumerate([["n", "f"], ["fn", "n"]])]
    (bridged,) = compare_runs([a], [far], bridges=others, relative_to="onnxruntime")
    assert bridged.verdict == expected and "bridged by 2 other run(s)" in bridged.basis, bridged


def test_diff_relative_to_moderates_each_sides_spread_by_the_other_runs(tmp_path, capsys):
    """With four rounds a side Welch's t has 3-6 degrees of freedom; the spread between rounds
    of the history's other runs of the point moderates each side's own estimate (limma's
    moderated t), so a 10 % slowdown that three deviations a side leave unresolved is flagged.
    The plain verdict, whose runs move by more than their rounds, is not moderated."""
    a = lockstep_doc(10.0, 14.0, 1.0, seed=1, round_sd=0.04)
    b = lockstep_doc(11.0, 14.0, 1.0, seed=6, round_sd=0.04)
    others = [lockstep_doc(10.0, 14.0, 1.0, seed=20 + i, round_sd=0.04) for i in range(6)]
    (alone,) = compare_runs([a], [b], relative_to="onnxruntime")
    (moderated,) = compare_runs([a], [b], bridges=others, relative_to="onnxruntime")
    assert alone.verdict == "no change" and moderated.verdict == "slower", (alone.ci95, moderated.ci95)
    assert moderated.ratio == alone.ratio and "moderated by 6 other run(s)' rounds (12 df)" in moderated.basis
    assert np.log(moderated.ci95[1] / moderated.ci95[0]) < 0.8 * np.log(alone.ci95[1] / alone.ci95[0])
    plain = [json.loads(json.dumps(doc)) for doc in (a, b, *others)]
    for doc in plain:
        doc["tvm_relax"]["rounds"]["probe_turns"] = [[[0, 1.0, 10.0]]] * 4
    assert "moderated" not in compare_runs(plain[:1], plain[1:2], bridges=plain[2:])[0].basis
    path = tmp_path / "history.sqlite"
    history = History.open(path)
    for doc in (*others, a, b):
        history.add("run", doc, environment=doc["environment"])
    history.close()
    # --bridges counts runs, not the frameworks' points in them: the newest 6 are b, a and 4 others
    assert main(["diff", "7", "8", "--history", str(path), "--relative-to", "onnxruntime", "--bridges", "6",
                 "--json"]) == 1
    (change,) = json.loads(capsys.readouterr().out)["changes"]
    assert change["verdict"] == "slower" and "moderated by 4 other run(s)' rounds (12 df)" in change["basis"]


def test_other_runs_in_a_state_neither_side_saw_moderate_by_their_spread_within_states():
    """Both sides timed in the far state, the history's other runs in both states by turns: the
    others' rounds are filed by the states each one's own turns show, so the near-far difference
    of TVM over ONNX Runtime (``FAR_TVM``) is not taken for spread between rounds (on the Zen 4
    VM it left nine injected 10 % slowdowns unflagged, read 1.07-1.15 with intervals as wide as
    0.96-1.39, session 122)."""
    a = lockstep_doc(10.0, 14.0, 1.0, seed=1, states=["f"] * 4)
    b = lockstep_doc(11.0, 14.0, 1.0, seed=2, states=["f"] * 4)
    widths = []
    for states in (["f"] * 4, ["n", "f", "n", "f"]):
        others = [lockstep_doc(10.0, 14.0, 1.0, seed=20 + i, states=states) for i in range(6)]
        (change,) = compare_runs([a], [b], bridges=others, relative_to="onnxruntime")
        assert change.verdict == "slower" and "moderated by 6 other run(s)" in change.basis, change
        widths.append(np.log(change.ci95[1] / change.ci95[0]))
    assert widths[1] < 1.5 * widths[0], widths


def test_diff_relative_to_says_in_one_line_what_is_missing(tmp_path, capsys):
    a, b = lockstep_doc(10.0, 14.0, 1.0, seed=1), lockstep_doc(11.0, 14.0, 1.0, seed=2)
    for name, doc in (("a", a), ("b", b)):
        (tmp_path / f"{name}.json").write_text(json.dumps(doc))
    files = [str(tmp_path / "a.json"), str(tmp_path / "b.json")]
    assert main(["diff", *files, "--relative-to", "ort"]) == 1
    assert "over onnxruntime's in the same lockstep turns" in capsys.readouterr().out
    for extra, said in ((["--relative-to", "tflite"], "unknown framework 'tflite'"),
                        (["--relative-to", "openvino"], "--frameworks tvm,openvino --rounds N")):
        assert main(["diff", *files, *extra]) == 2
        err = capsys.readouterr().err
        assert said in err and len(err.strip().splitlines()) == 1, err
    for doc in (a, b):
        for r in ("tvm_relax", "onnxruntime"):
            doc[r].pop("lockstep_turns")
    (tmp_path / "a.json").write_text(json.dumps(a))
    (tmp_path / "b.json").write_text(json.dumps(b))
    assert main(["diff", *files, "--relative-to", "onnxruntime", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["changes"][0]["verdict"] == "inconclusive"
    for how in ("--relative-to", "--confirm-with"):
        assert main(["diff", *files, how, "onnxruntime"]) == 0
        out = capsys.readouterr().out
        assert "1 inconclusive (fewer than two rounds with lockstep turns of onnxruntime" in out, out
        assert "--frameworks tvm,onnxruntime --rounds N)" in out and "host states" not in out.split("inconclusive")[-1]


@pytest.mark.parametrize("tvm_b, ref_b, host_b, plain, over, expected", [
    (10.0, 14.0, 1.10, "slower", "no change", "no change"),  # the machine drifted 10 % between the runs
    (10.0, 15.4, 1.0, "no change", "faster", "no change"),  # ONNX Runtime itself got 10 % slower
    (11.0, 14.0, 1.0, "slower", "slower", "slower"),
    (11.0, 14.0, 0.95, "no change", "slower", "slower"),  # a drift hid half the regression
    (9.0, 14.0, 1.0, "faster", "faster", "faster")])
def test_diff_confirmed_with_a_reference_says_only_what_both_judgements_agree_on(tvm_b, ref_b, host_b, plain, over,
                                                                                 expected, tmp_path, capsys):
    a = lockstep_doc(10.0, 14.0, 1.0, seed=1)
    b = lockstep_doc(tvm_b, ref_b, host_b, seed=2)
    (alone,), (relative,) = compare_runs([a], [b])[:1], compare_runs([a], [b], relative_to="onnxruntime")
    assert (alone.verdict, relative.verdict) == (plain, over), (alone.ci95, relative.ci95)
    (change,) = confirmed_changes([a], [b], "onnxruntime")
    assert (change.framework, change.verdict, change.ratio, change.ci95) == ("tvm", expected, alone.ratio, alone.ci95)
    assert change.confirm["ratio"] == relative.ratio and change.confirm["verdict"] == over
    for name, doc in (("a", a), ("b", b)):
        (tmp_path / f"{name}.json").write_text(json.dumps(doc))
    files = [str(tmp_path / "a.json"), str(tmp_path / "b.json")]
    assert main(["diff", *files, "--confirm-with", "ort"]) == (expected == "slower")
    out = capsys.readouterr().out
    assert "over onnxruntime: B / A" in out and f"{relative.ratio:.3f}" in out and "where the two judgements" in out
    assert main(["diff", *files, "--confirm-with", "ort", "--relative-to", "ort"]) == 2
    assert "give one" in capsys.readouterr().err


@pytest.mark.parametrize("own, over, expected", [
    ((1.010, 1.001, 1.020), (1.068, 1.033, 1.104), "no change"),  # session 122's A/A pair a1-a4
    ((1.010, 1.001, 1.040), (1.068, 1.033, 1.104), "slower"),
    ((1.064, 1.014, 1.117), (1.150, 1.100, 1.200), "slower"),  # session 121's injected pair 7
    ((0.950, 0.930, 0.965), (0.990, 0.981, 0.999), "no change"),
    ((0.950, 0.930, 0.965), (0.990, 0.960, 0.999), "faster"),
    ((1.050, 1.040, 1.060), (1.010, 0.990, 1.050), "no change")])
def test_a_confirmation_agrees_on_the_direction_and_does_not_rule_out_the_size(own, over, expected):
    """Unit test of ``diff._agreed``: the second judgement's interval must lie beyond 1 and reach
    past the band; one that ends inside the band says the change is smaller than the band."""
    from tvmbench.results.diff import Change, _agreed, verdict

    def change(ratio, low, high):
        return Change("m", 1, None, "tvm", 10.0, 10.0 * ratio, ratio, (low, high), "b", verdict(low, high, 0.03))

    assert _agreed(change(*own), change(*over), "onnxruntime", 0.03).verdict == expected


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
    for i in range(2):
        assert main(["run", "--model", MLP, "--frameworks", "pytorch", "--runs", "20", "--warmup", "2",
                     "--history", str(history), "-q", "-o", str(tmp_path / f"run{i}.json")]) == 0
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
    # a result file names the same machine as its history entry (what bridging host states needs)
    main(["diff", "latest~1", str(tmp_path / "run1.json"), "--history", str(history), "--json"])
    assert json.loads(capsys.readouterr().out)["notes"] == []
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
    doc["tuning_database"] = {"sources": [{"source": "default", "path": "/db", "applied_records": 0}]}
    print_run(doc)  # (a database with nothing for this target counted no kernels: it said "0 of ?")
    assert "TVM tuning records: none; default /db (nothing for this target)" in capsys.readouterr().out
    doc["tuning_database"].update(tasks=26, tasks_with_records=3)
    print_run(doc)
    assert "TVM tuning records: 3 of 26 kernels" in capsys.readouterr().out


def test_tables_in_a_log_keep_their_width_when_force_color_is_set(monkeypatch, capsys):
    """CI systems set FORCE_COLOR, which rich takes for a terminal and then squeezes tables to 80
    columns: a structural hash was cut to "910544635172776…" in a CI log. The width follows the
    stream itself (a pipe or capture: 160 columns), and ``db show``'s columns wrap, never cut."""
    from rich.table import Table

    from tvmbench.results.report import make_console

    monkeypatch.setenv("FORCE_COLOR", "1")
    monkeypatch.delenv("COLUMNS", raising=False)
    table = Table()
    for col in ("workload", "structural hash", "records", "best us", "targets", "kept record's changes to the "
                "default schedule"):
        table.add_column(col)
    table.add_row("1", "6920316013653996685", "2", "44.6", "znver4", "amx_channel_outer False -> True")
    assert make_console().width == 160 and make_console(stderr=True).width == 160
    make_console().print(table)
    out = capsys.readouterr().out
    assert "6920316013653996685" in out and "amx_channel_outer" in out
