"""Droplet: legal neighbouring moves, a statistical test for accepting one, and the search on a
known landscape. (DPMeta on a real database is in test_tune.py, from its tuned MLP.)"""

import math

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
    (3, 5) and stops there; every accepted step was significant."""
    rng = np.random.default_rng(1)

    def cost(x, y):
        return 1e-3 * (1 + 0.05 * ((x - 3) ** 2 + (y - 5) ** 2))

    def neighbours(point, k):
        return [tuple(v + d if i == k else v for i, v in enumerate(point)) for d in (-1, 1)
                if 0 <= point[k] + d <= 9]

    def measure(points):
        return [list(cost(*p) * (1 + 0.01 * rng.standard_normal(7))) for p in points]

    start = Candidate((0, 0), measure([(0, 0)])[0])
    out = search(start, 2, neighbours, measure, trials=200)
    assert out.best.trace == (3, 5) and out.stopped.startswith("no move")
    assert out.accepted >= 8 and all(b <= a for a, b in zip(out.history, out.history[1:], strict=False))
    capped = search(start, 2, neighbours, measure, trials=5)
    assert capped.trials == 5 and capped.stopped == "trial budget reached"


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
