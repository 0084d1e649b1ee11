"""Droplet: legal neighbouring moves, a statistical test for accepting one, and the search on a
known landscape. (DPMeta on a real database is in test_tune.py, from its tuned MLP.)"""

import json
import math
from pathlib import Path

import numpy as np
import pytest

from tvmbench.tuning.droplet import Candidate, categorical_moves, faster, search, tile_moves


@pytest.mark.parametrize("tile, limit", [([4, 8, 2], -1), ([1, 1, 64], 16), ([12, 1, 5, 1], 4), ([7], -1)])
def test_tile_moves_keep_the_product_and_the_innermost_limit(tile, limit):
    moves = tile_moves(tile, limit)
    assert all(math.prod(m) == math.prod(tile) and len(m) == len(tile) for m in moves)
    assert all(m[-1] <= limit for m in moves) if limit > 0 else True
    assert tile not in moves and len({tuple(m) for m in moves}) == len(moves)
    # one prime factor moved: each neighbour differs from the tile in exactly two positions
    assert all(sum(a != b for a, b in zip(m, tile, strict=True)) == 2 for m in moves)
    if tile == [4, 8, 2]:
        assert [2, 16, 2] in moves and [8, 4, 2] in moves and [4, 4, 4] in moves


def test_categorical_moves_are_the_neighbours_without_wrapping_around():
    assert categorical_moves(0, 4) == [1] and categorical_moves(3, 4) == [2] and categorical_moves(2, 4) == [1, 3]
    assert categorical_moves(0, 1) == []


def test_a_move_is_accepted_only_when_the_test_says_it_is_faster():
    """Over 300 noisy comparisons (7 times each, 3 % noise): the same distribution is accepted
    about as often as the significance level allows, a 0.5 % gain rarely, a 20 % gain always,
    a slower candidate never."""
    rng = np.random.default_rng(0)

    def times(mean):
        return list(mean * (1 + 0.03 * rng.standard_normal(7)))

    def rate(factor, n=300):
        return sum(faster(times(1e-3 * factor), times(1e-3)) for _ in range(n)) / n

    assert rate(1.0) <= 0.08  # alpha = 0.05, one-sided
    assert rate(0.995) <= 0.15
    assert rate(0.80) == 1.0
    assert rate(1.05) == 0.0


def test_the_search_descends_a_known_landscape_and_stops_at_its_optimum():
    """Two knobs on a bowl with noisy measurements: coordinate descent walks to the minimum
    (3, 5) and stops there; every accepted step was significant (8 steps at least, from (0, 0))."""
    rng = np.random.default_rng(1)

    def cost(x, y):
        return 1e-3 * (1 + 0.05 * ((x - 3) ** 2 + (y - 5) ** 2))

    def neighbours(point, k):
        return [tuple(v + d if i == k else v for i, v in enumerate(point)) for d in (-1, 1)
                if 0 <= point[k] + d <= 9]

    def measure(points, again=0):
        return [list(cost(*p) * (1 + 0.01 * rng.standard_normal(7))) for p in points]

    start = Candidate((0, 0), measure([(0, 0)])[0])
    out = search(start, 2, neighbours, measure, trials=200)
    assert out.best.trace == (3, 5) and out.stopped.startswith("no move")
    # (the best's own times are taken again at each step, so its mean may wander by the noise)
    assert out.accepted >= 8 and out.history[-1] < 0.5 * out.history[0]
    capped = search(start, 2, neighbours, measure, trials=5)
    assert capped.trials == 5 and capped.stopped == "trial budget reached"


def test_the_best_is_timed_again_beside_its_neighbours_so_a_host_speeding_up_is_not_progress():
    """A flat landscape on a host that gets 10 % faster with every batch: against the best's
    first times every later neighbour looks faster (a descent would walk on noise); timed
    again beside them in each batch, the best ties with every neighbour and no move is taken."""
    calls = []

    def neighbours(point, k):
        return [tuple(v + d if i == k else v for i, v in enumerate(point)) for d in (-1, 1) if 0 <= point[k] + d <= 9]

    def measure(points, again=0):
        calls.append(again)
        return [[1e-3 * 0.9 ** len(calls)] * 5 for _ in points]

    start = Candidate((5, 5), measure([(5, 5)])[0])
    out = search(start, 2, neighbours, measure, trials=100)
    assert out.accepted == 0 and out.best.trace == (5, 5) and out.stopped.startswith("no move")
    assert calls[1:] == [1, 1]  # each knob's batch re-timed the best


def _grid_neighbours(point, k, top=9):
    return [tuple(v + d if i == k else v for i, v in enumerate(point)) for d in (-1, 1) if 0 <= point[k] + d <= top]


def test_kicks_carry_the_search_past_its_first_local_optimum():
    """Two basins: the descent from (0, 0) stops in the near one at (2, 2); kicks of a few random
    moves and descents from there reach the far, deeper one at (6, 2) within the budget, and the
    best is replaced only by a faster optimum (its true cost never rises)."""
    import random

    from tvmbench.tuning.droplet import iterated_search

    rng = np.random.default_rng(2)

    def cost(x, y):
        return 1e-3 * (0.7 + 0.05 * ((x - 6) ** 2 + (y - 2) ** 2) if x >= 4 else 1.0 + 0.05 * ((x - 2) ** 2 + (y - 2) ** 2))

    def measure(points, again=0, afresh=False):
        return [list(cost(*p) * (1 + 0.01 * rng.standard_normal(7))) for p in points]

    start = Candidate((0, 0), measure([(0, 0)])[0])
    assert search(start, 2, _grid_neighbours, measure, trials=300).best.trace == (2, 2)
    out = iterated_search(start, 2, _grid_neighbours, measure, trials=300, rng=random.Random(0))
    assert out.best.trace == (6, 2) and out.trials == 300 and out.stopped == "trial budget reached"


def test_kicks_stop_when_a_small_space_is_all_known_and_measure_nothing_twice():
    """Nine points, each measured once and answered from the database after (free, as a resumed
    search's replay is): the kicks soon find nothing new and the search stops on its own, far
    inside a budget of 1000 trials, having measured each point at most once."""
    import random

    from tvmbench.tuning.droplet import PATIENCE, iterated_search

    known, measured = {}, []

    def measure(points, again=0, afresh=False):
        out = []
        for p in points:
            if p not in known:
                measured.append(p)
                known[p] = [1e-3 * (1 + 0.1 * (p[0] + p[1]))] * 5
            out.append(known[p])
        return out

    start = Candidate((2, 2), measure([(2, 2)])[0])
    out = iterated_search(start, 2, lambda p, k: _grid_neighbours(p, k, top=2), measure, trials=1000,
                          rng=random.Random(0), charged=lambda: len(measured))
    assert out.best.trace == (0, 0) and f"{PATIENCE} kicks in a row" in out.stopped
    assert len(measured) == len(set(measured)) <= 9 and out.trials == len(measured) - 1


def test_tasks_go_by_their_time_in_the_model_and_each_gets_its_share_of_the_budget_left():
    """The order and time shares of a search under a time budget: a 6 ms kernel called once comes
    before a 33 us one called three times (by weight alone it came last, and in a one-minute bert
    tune its turn never came); each task's deadline is its cost's share of the time left."""
    import time
    from types import SimpleNamespace

    from tvmbench.tuning.droplet import by_model_time, task_deadline

    matmul, norm = SimpleNamespace(weight=1, us=6000.0), SimpleNamespace(weight=3, us=33.0)
    assert by_model_time([norm, matmul], lambda t: t.weight * t.us) == [matmul, norm]
    assert by_model_time([matmul, norm]) == [norm, matmul]  # no costs: the weight
    deadline = time.monotonic() + 100.0
    first = task_deadline(deadline, [300.0, 100.0])  # 3/4 of what is left
    assert 74.0 < first - time.monotonic() <= 75.0
    assert abs(task_deadline(deadline, [100.0]) - deadline) < 1e-3  # the last task: all that is left
    assert task_deadline(None, [1.0, 2.0]) is None and task_deadline(deadline, [0.0, 0.0]) == deadline


def test_droplet_times_cold_and_a_database_keeps_the_way_it_was_timed(tmp_path):
    """Droplet, DPMeta and grid time one call after each cache flush (as a kernel meets its
    weights in the model), MetaSchedule's strategies hot; a database remembers which, a database
    from before (records, no mark) was timed hot, and asking for the other way is one line."""
    import shutil
    from dataclasses import replace

    from tvmbench.errors import UserError
    from tvmbench.tuning.config import COLD_REPEATS, TuneConfig
    from tvmbench.tuning.database import TuningDatabase
    from tvmbench.tuning.tuner import database_timing

    droplet, evolutionary = TuneConfig(strategy="droplet"), TuneConfig()
    assert droplet.evaluator() == (1, COLD_REPEATS, 0, True)
    assert evolutionary.evaluator() == (3, 1, 50, False) and replace(evolutionary, cpu_cache_flush=True).cold()
    fresh = TuningDatabase.open(tmp_path / "fresh", create=True)
    assert database_timing(fresh, droplet) and database_timing(fresh, evolutionary)  # it follows the database
    assert TuningDatabase.open(tmp_path / "fresh").meta()["timing"] == "cold"
    shutil.copytree(Path(__file__).with_name("data") / "tuning_db", tmp_path / "old")
    old = TuningDatabase.open(tmp_path / "old")
    assert "timing" not in old.meta() and not database_timing(old, droplet)
    with pytest.raises(UserError, match="timed with warm caches; tune it with --no-cpu-flush or into a new"):
        database_timing(old, replace(droplet, cpu_cache_flush=True))
    assert not database_timing(fresh, droplet, cpu=False)  # a GPU's kernels: no CPU caches to flush


def test_candidate_builds_keep_one_worker_without_torch_and_a_failed_build_costs_only_its_candidate():
    """The builder's worker lasts across batches (MetaSchedule's starts one per batch, 2 s each)
    and never loads torch; a candidate LLVM cannot build is an error, its neighbours are built."""
    import tvm
    from tvm import te
    from tvm.s_tir.meta_schedule.builder import BuilderInput

    from tvmbench.tuning.build import fast_build, local_builder
    from tvmbench.tuning.candidates import remove_artifacts

    a = te.placeholder((64,), name="a")
    mod = tvm.IRModule({"main": te.create_prim_func([a, te.compute((64,), lambda i: a[i] * 2.0)])})
    ok, bad = tvm.target.Target({"kind": "llvm"}), tvm.target.Target({"kind": "llvm", "mtriple": "nonsense-cpu-none"})
    builder = local_builder(f_build=fast_build, max_workers=1, timeout_sec=30)
    pids = []
    for _ in range(2):
        built = builder.build([BuilderInput(mod, ok), BuilderInput(mod, bad), BuilderInput(mod, ok)])
        assert [b.error_msg is None for b in built] == [True, False, True]
        assert "exception" in built[1].error_msg and all(b.artifact_path for b in (built[0], built[2]))
        pids.append([w._proc.pid for w in builder.pool._worker_map.values()])
    assert pids[0] == pids[1] and len(pids[0]) == 1
    with open(f"/proc/{pids[0][0]}/maps") as maps:
        assert "libtorch" not in maps.read()
    remove_artifacts(built)


def test_a_candidate_whose_outputs_differ_from_the_default_schedule_is_a_failed_candidate():
    """A search keeps the fastest candidate that runs; one that races or drops a write (the
    ``reduction_block`` knob inside fused row blocks did) must fail instead. A correct reordering
    of the reference passes with its times; a kernel that drops a term of its sum fails as "wrong
    outputs"; one with other arguments (a rewritten layout) is timed unchecked."""
    import tvm
    from tvm import s_tir, te

    from tvmbench.targets import resolve_target
    from tvmbench.tuning.candidates import CandidateTimer, Reference

    def matmul(n: int, depth: int, summed: int):
        a, b = te.placeholder((n, depth), name="a"), te.placeholder((depth, 48), name="b")
        k = te.reduce_axis((0, summed), name="k")
        c = te.compute((n, 48), lambda i, j: te.sum(a[i, k] * b[k, j], axis=k), name="c")
        return tvm.IRModule({"main": te.create_prim_func([a, b, c])})

    reordered = s_tir.Schedule(matmul(64, 32, 32))
    i, j, k = reordered.get_loops(reordered.get_sblock("c"))
    j0, j1 = reordered.split(j, [None, 8])
    reordered.reorder(j0, k, i, j1)
    timer = CandidateTimer(resolve_target("llvm", gpu_query=lambda: None), number=1, repeat=2, min_repeat_ms=0)
    reference = Reference(matmul(64, 32, 32))
    got = timer.time([reordered.mod, matmul(64, 32, 31), matmul(32, 32, 31)], reference)
    assert list(reference.outputs) == [2] and reference.outputs[2].shape == (64, 48)  # the written argument
    assert isinstance(got[0], list) and len(got[0]) == 2, got[0]
    assert isinstance(got[1], str) and got[1].startswith("wrong outputs: off by up to"), got[1]
    assert isinstance(got[2], list)
    assert timer.dropped() == "; 1 candidate(s) gave wrong outputs and were dropped"  # said where the search stops


def test_metaschedule_searches_never_measure_a_schedule_the_database_holds(tmp_path):
    """The wrapper round MetaSchedule's strategies (tuning/unmeasured.py) on a real database: of a
    batch holding two recorded schedules and one new, only the new one goes on to be measured; a
    batch of recorded schedules only is offered again, then given up as an empty batch (at the
    first one when the budget is spent or the batch was slow to make)."""
    import shutil

    from tvm.s_tir import Schedule
    from tvm.s_tir import meta_schedule as ms

    from tvmbench.tuning.unmeasured import ATTEMPTS, skipping_known

    real = Path(__file__).with_name("data") / "tuning_db"  # a database tvmbench once shipped
    shutil.copytree(real, tmp_path / "db")
    db = ms.database.JSONDatabase(work_dir=str(tmp_path / "db"))
    (record, *_) = db.get_all_tuning_records()
    workload = record.workload

    def candidate(trace, root=False):
        sch = Schedule(workload.mod)
        if trace is not None:
            trace.apply_to_schedule(sch, remove_postproc=False)
        if root:
            sch.get_sblock("root")  # one instruction: a trace of its own
        return ms.MeasureCandidate(sch, ms.arg_info.ArgInfo.from_entry_func(workload.mod))

    # a second record of the workload: the schedule left as it is
    db.commit_tuning_record(ms.database.TuningRecord(candidate(None).sch.trace, workload, [1e-3]))

    class Inner:  # offers the batches given, and counts what it is told
        def __init__(self, batches):
            self.batches, self.notified = list(batches), []

        def _initialize_with_tune_context(self, context):
            pass

        def pre_tuning(self, *args):
            pass

        def generate_measure_candidates(self):
            return self.batches.pop(0) if self.batches else None

        def notify_runner_results(self, candidates, results):
            self.notified.append(len(results))

    known = [candidate(record.trace), candidate(None)]
    inner = Inner([[*known, candidate(None, root=True)], *[known] * ATTEMPTS])
    strategy = skipping_known(inner)
    strategy.mod = workload.mod
    strategy.pre_tuning(64, 16, [], db, None)
    (new,) = strategy.generate_measure_candidates()
    assert len(new.sch.trace.insts) == 1  # the new one: the two recorded are not measured again
    assert list(strategy.generate_measure_candidates()) == [] and inner.notified == [0] * (ATTEMPTS - 1)
    assert strategy.generate_measure_candidates() is None  # the inner search is done: so is the task
    # past the time budget, or when it took long to make, a batch of recorded schedules is not
    # asked for again: one generation of a large kernel's evolutionary search can take minutes
    inner = Inner([known] * ATTEMPTS)
    strategy = skipping_known(inner, stop=lambda seconds: True)
    strategy.mod = workload.mod
    strategy.pre_tuning(64, 16, [], db, None)
    assert list(strategy.generate_measure_candidates()) == [] and inner.notified == []
    assert len(inner.batches) == ATTEMPTS - 1


@pytest.mark.parametrize("extent, factors, limit", [(12, 3, -1), (12, 3, 4), (32, 3, 8), (7, 2, -1), (1, 4, -1)])
def test_grid_tiles_are_every_ordered_split_of_the_extent(extent, factors, limit):
    import itertools

    from tvmbench.tuning.grid import tile_choices

    tiles = tile_choices(extent, factors, limit)
    every = [list(c) for c in itertools.product(range(1, extent + 1), repeat=factors)
             if math.prod(c) == extent and (limit <= 0 or c[-1] <= limit)]
    assert sorted(tiles) == sorted(every) and len({tuple(t) for t in tiles}) == len(tiles)


def test_a_grid_over_the_budget_is_refused_in_one_line_before_measuring(tmp_path, capsys):
    """A row sum's knob space has a few dozen points (the MLP's matmuls ~10^5 per design space):
    refused under --trials 10, naming the size, before any candidate is measured."""
    from tvmbench.cli import main
    from tvmbench.tuning.database import TuningDatabase

    model = str(Path(__file__).with_name("mlp_model.py")) + ":build_row_sum"
    code = main(["tune", "--model", model, "--target", "llvm", "--strategy", "grid", "--trials", "10",
                 "--db", str(tmp_path / "db"), "-q", "--no-history"])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1 and "grid search would measure" in err[0] and "--trials 10" in err[0]
    assert TuningDatabase.open(tmp_path / "db").count_records() == 0  # not even the default schedule's


def test_grid_measures_every_legal_point_once_and_a_rerun_measures_none(tmp_path, capsys):
    from tvmbench.cli import main
    from tvmbench.tuning.database import TuningDatabase

    model = str(Path(__file__).with_name("mlp_model.py")) + ":build_row_sum"
    argv = ["tune", "--model", model, "--target", "llvm", "--strategy", "grid", "--trials", "200",
            "--min-repeat-ms", "1", "--runner-number", "1", "--db", str(tmp_path / "db"), "-q", "--no-history",
            "--no-in-model-check"]
    assert main(argv) == 0
    db = TuningDatabase.open(tmp_path / "db")
    first = db.count_records()
    out = capsys.readouterr().out
    assert "every point of every task's grid measured" in out
    lines = (tmp_path / "db" / "database_tuning_record.json").read_text().splitlines()
    traces = [json.dumps(json.loads(line)[1][0], sort_keys=True) for line in lines]
    assert 10 < first <= 45 and len(set(traces)) == len(traces)  # the default's record + the grid, no repeats
    assert main(argv) == 0 and TuningDatabase.open(tmp_path / "db").count_records() == first
