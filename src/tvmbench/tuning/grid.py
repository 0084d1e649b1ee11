"""Grid search: every point of a task's knob space, measured, when the space is small enough.

The knobs are Droplet's (``tuning/droplet.py``): the ``SamplePerfectTile`` and
``SampleCategorical`` decisions of each MetaSchedule design space of a task. A tile's legal values
are every ordered factorisation of its loop extent into its number of factors (the innermost
within the instruction's ``max_innermost_factor``), a categorical decision's every candidate; the
space is their product, summed over the task's design spaces (other sampling decisions, such as a
compute location, keep the design space's own). Exhaustive search is only worth it where that
product is small (an elementwise kernel, a small matmul): a conv2d's space has millions of points,
so a grid over more points than the trial budget is refused before anything is measured, with the
size, rather than silently measuring a slice of it.

Every point is replayed with the postprocessors (a point they cannot make legal is skipped, not
run), built and timed with the same runner as Droplet's candidates, and committed to the database;
a point whose schedule the database already has is not measured again, so an interrupted grid
resumes where it stopped.
"""

from __future__ import annotations

import itertools
import math
import time
from collections.abc import Callable, Iterator
from typing import Any

from tvmbench.errors import UserError


def tile_choices(extent: int, factors: int, max_innermost: int = -1) -> list[list[int]]:
    """Every ordered split of ``extent`` into ``factors`` factors whose product is ``extent``."""
    if factors == 1:
        return [[extent]] if max_innermost <= 0 or extent <= max_innermost else []
    out = []
    for d in range(1, extent + 1):
        if extent % d == 0:
            out += [[d, *rest] for rest in tile_choices(extent // d, factors - 1, max_innermost)]
    return out


def knob_values(inst: Any, decision: Any) -> list[Any]:
    """Every legal value of one knob (a tile or a categorical decision)."""
    if inst.kind.name == "SamplePerfectTile":
        tile = [int(x) for x in decision]
        max_innermost = int(inst.attrs[1]) if len(inst.attrs) > 1 else -1
        return tile_choices(math.prod(tile), len(tile), max_innermost)
    return list(range(len(inst.attrs[0])))


def space_points(trace: Any) -> tuple[int, Callable[[], Iterator[Any]]]:
    """The number of points of one design space's knob grid, and an iterator over its traces."""
    from tvmbench.tuning.droplet import knobs

    insts = knobs(trace)
    values = [knob_values(inst, trace.decisions[inst]) for inst in insts]

    def points() -> Iterator[Any]:
        for combo in itertools.product(*values):
            t = trace
            for inst, value in zip(insts, combo, strict=True):
                t = t.with_decision(inst, value, remove_postproc=True)
            yield t

    return math.prod(len(v) for v in values), points


def check_budget(tasks: list[Any], target: Any, trials: int) -> None:
    """Refuse (one line) a grid with more points than the trial budget, before anything is measured."""
    from tvmbench.tuning.space import DesignSpace

    sizes = {t.task_name: sum(space_points(s.trace)[0] for s in DesignSpace(t.dispatched[0], target).spaces)
             for t in tasks}
    total = sum(sizes.values())
    if total > trials:
        worst = max(sizes, key=sizes.get)
        raise UserError(f"grid search would measure {total:.3g} schedules ({worst} alone has {sizes[worst]:.3g}), "
                        f"over the budget of --trials {trials}: raise --trials, tune a smaller model, or use "
                        "--strategy droplet or evolutionary")


def grid_search(tasks: list[Any], ms_db: Any, target: Any, cfg: Any, remaining: int, done: int, start: float,
                on_progress: Callable[[int, int, float | None], None] | None = None,
                task_seconds: dict[str, float] | None = None, budget_s: float | None = None,
                cost: Callable[[Any], float] | None = None) -> tuple[str, list[dict[str, Any]]]:
    """Measure every point of every task's knob grid (``check_budget`` before), in batches of
    ``cfg.trials_per_iter``, the tasks with the most time in the model first (``cost``, as
    Droplet's); returns why it stopped and the curve (one row per task)."""
    from tvmbench.tuning.droplet import by_model_time, candidate_timer, task_space
    from tvmbench.tuning.unmeasured import trace_key

    timer = candidate_timer(target, cfg)
    spaces = {t.task_name: task_space(t, ms_db, target, timer) for t in tasks}
    grids = {name: [space_points(s.trace) for s in space.space.spaces] for name, (_, space) in spaces.items()}
    # the budget is search time, from here (the tune's setup and default schedules come before)
    deadline = time.monotonic() + budget_s if budget_s is not None else None
    curve: list[dict[str, Any]] = []
    used = 0
    for t in by_model_time(tasks, cost):
        began = time.monotonic()
        workload, space = spaces[t.task_name]
        known = {trace_key(r.trace) for r in ms_db.get_all_tuning_records() if r.workload.same_as(workload)}
        batch: list[Any] = []
        best: float | None = None
        for trace in itertools.chain.from_iterable(points() for _, points in grids[t.task_name]):
            sch = space.schedule(trace)
            if sch is None or trace_key(sch.trace) in known:
                continue  # illegal, or measured before this run
            known.add(trace_key(sch.trace))
            batch.append(sch)
            if len(batch) >= cfg.trials_per_iter:
                used, best = used + len(batch), _measure(space, batch, best)
                batch = []
                if on_progress:
                    on_progress(done + used, done + remaining, None)
                if (deadline is not None and time.monotonic() >= deadline) or used >= remaining:
                    break
        if batch:
            used, best = used + len(batch), _measure(space, batch, best)
        if task_seconds is not None:
            task_seconds[t.task_name] = task_seconds.get(t.task_name, 0.0) + time.monotonic() - began
        curve.append({"trials": done + used, "seconds": time.monotonic() - start, "estimate_ms": None,
                      "task": t.task_name, "best_us": best})
        if on_progress:
            on_progress(done + used, done + remaining, None)
        if deadline is not None and time.monotonic() >= deadline:
            return f"time budget of {cfg.time_budget_s:g} s reached{timer.dropped()}", curve
        if used >= remaining:
            return "trial budget reached" + timer.dropped(), curve
    return "every point of every task's grid measured" + timer.dropped(), curve


def _measure(space: Any, schedules: list[Any], best_us: float | None) -> float | None:
    """Time replayed schedules, commit each one timed; the best mean (us) so far."""
    for sch, secs in zip(schedules, space.timer.time([s.mod for s in schedules], space.reference), strict=True):
        if not isinstance(secs, str):
            space.on_measured(sch.trace, secs)
            us = sum(secs) / len(secs) * 1e6
            best_us = us if best_us is None else min(best_us, us)
    return best_us
