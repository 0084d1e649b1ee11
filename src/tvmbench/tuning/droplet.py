"""Droplet search: coordinate descent over a schedule's decisions, accepting only what is faster
beyond the noise (the Bennu work's Droplet; DPMeta is Droplet started from MetaSchedule's best).

A MetaSchedule trace's sampling instructions are the knobs: each ``SamplePerfectTile`` (a loop's
split factors) and each ``SampleCategorical`` (an unroll depth, a vector width). From the best
schedule so far, one knob at a time is moved to its neighbouring legal values:

- a tile moves one prime factor from one of its positions to another (``[4, 8, 2]`` ->
  ``[2, 16, 2]``): the factors always multiply to the loop's extent, and the innermost factor
  stays within the instruction's ``max_innermost_factor``;
- a categorical decision moves to the candidate before or after it (no wrap-around).

Each neighbour is built and measured several times, with the best so far measured again in the
same batch, and the fastest replaces the best only when Welch's t-test on the two sets of times
says it is faster at the set significance (one-sided): a candidate that is 1 % faster by the luck
of one noisy measurement is not progress, and neither is one measured at a faster moment of a
shared machine than the best's old times (on a 2-vCPU VM whose processes run at two speeds 30 %
apart, the default schedule's time from the start of a tune is no yardstick for times taken
minutes later). The search
moves on to the next knob either way and stops when a full pass over the knobs brings nothing,
or when the trial or time budget is spent.

A descent stops at the first local optimum, often within a few minutes of a 15-minute budget
(bert-base's tasks in 0.8-2.6 minutes, sessions 35-36), and at 5 % significance on noisy times a
real gain can be missed on the way (session 36's descent stopped at the default where session
35's had found a 1.087x kernel). So the descent from the defaults goes on as an iterated local
search (``iterated_search``) while its budget lasts: a kick of a few random moves away from the
best, a descent from there, and the new optimum kept only if it beats the best when both are
timed again together.

The same descent also runs over tvmbench's own default schedules (``KnobSpace``): the rule's
choices (``compile/knobs.py``: register tile rows and vectors, tile order, unrolling, band rows)
are the knobs, each move to the adjacent legal value, and each neighbour is built by the rule
itself, so ``--strategy droplet`` starts from the expert default instead of random points.

TVM 0.27 ships an attempt (``meta_schedule.post_optimization.droplet``): it moves knobs by index
modulo the number of choices (a wrap-around is not a neighbour), accepts any lower mean (its
p-value parameter is unused), and rebuilds decisions from indices in a way that can lose the
product of a tile. None of it is used here; the tests pin the three properties.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

# schedules -> seconds per run, or None: failed; ``again``: the first so many are timed afresh
# (never answered from the database, never committed again)
Measure = Callable[..., list[list[float] | None]]


def prime_factors(n: int) -> list[int]:
    out, p = [], 2
    while p * p <= n:
        while n % p == 0:
            out.append(p)
            n //= p
        p += 1
    if n > 1:
        out.append(n)
    return out


def tile_moves(decision: Sequence[int], max_innermost: int = -1) -> list[list[int]]:
    """Every tile one prime factor away: a prime ``p`` of position ``i`` moved to position ``j``.
    The product stays the loop's extent; the innermost factor stays <= ``max_innermost``."""
    out: list[list[int]] = []
    seen = {tuple(decision)}
    for i, f in enumerate(decision):
        for p in sorted(set(prime_factors(f))):
            for j in range(len(decision)):
                if j == i:
                    continue
                new = list(decision)
                new[i] //= p
                new[j] *= p
                if max_innermost > 0 and new[-1] > max_innermost:
                    continue
                if tuple(new) not in seen:
                    seen.add(tuple(new))
                    out.append(new)
    return out


def categorical_moves(index: int, choices: int) -> list[int]:
    """The candidates next to ``index``: before and after it, never wrapping around."""
    return [i for i in (index - 1, index + 1) if 0 <= i < choices]


def faster(candidate_s: Sequence[float], best_s: Sequence[float], alpha: float = 0.05) -> bool:
    """Whether the candidate is faster than the best, by Welch's t-test (one-sided, level
    ``alpha``): a lower mean alone is not enough."""
    from scipy import stats

    if len(candidate_s) < 2 or len(best_s) < 2 or sum(candidate_s) / len(candidate_s) >= sum(best_s) / len(best_s):
        return False
    if max(candidate_s) < min(best_s):  # no overlap at all (also when both spreads are zero)
        return True
    p = stats.ttest_ind(candidate_s, best_s, equal_var=False, alternative="less").pvalue
    return bool(p < alpha) if not math.isnan(p) else False


def knobs(trace: Any) -> list[Any]:
    """The trace's sampling instructions that Droplet moves (tiles and categorical choices)."""
    return [inst for inst in trace.insts if inst in trace.decisions
            and inst.kind.name in ("SamplePerfectTile", "SampleCategorical")]


def moves(inst: Any, decision: Any) -> list[Any]:
    """The neighbouring decisions of one knob, as TVM values for ``Trace.with_decision``."""
    if inst.kind.name == "SamplePerfectTile":
        max_innermost = int(inst.attrs[1]) if len(inst.attrs) > 1 else -1
        return tile_moves([int(x) for x in decision], max_innermost)
    return categorical_moves(int(decision), len(inst.attrs[0]))


@dataclass
class Candidate:
    trace: Any
    secs: list[float]

    @property
    def mean_s(self) -> float:
        return sum(self.secs) / len(self.secs)


@dataclass
class Outcome:
    best: Candidate
    trials: int
    accepted: int  # moves that passed the test
    stopped: str
    history: list[float] = field(default_factory=list)  # the best mean after each knob visited


def search(start: Candidate, knob_count: int, neighbours: Callable[[Any, int], list[Any]], measure: Measure, *,
           trials: int, deadline: float | None = None, alpha: float = 0.05,
           charged: Callable[[], int] | None = None) -> Outcome:
    """Coordinate descent from ``start`` over ``knob_count`` knobs: ``neighbours(trace, k)`` gives
    the traces one move away on knob ``k``, ``measure`` times them (several runs each) beside the
    best so far, timed again each time (``again=1``), so that the test compares times taken
    together (a trial is a candidate measured: the re-timing is not one, as it is no record). Stops
    after a pass over every knob without an accepted move, or at the budgets. ``charged`` counts
    the candidates really measured so far, when ``measure`` answers some from a database: those
    cost no trial, so a resumed search replays its path for free."""
    best, used, accepted = start, 0, 0
    base = charged() if charged else 0
    history = [start.mean_s]
    while True:
        improved = False
        for position in range(knob_count):
            if used >= trials:
                return Outcome(best, used, accepted, "trial budget reached", history)
            if deadline is not None and time.monotonic() >= deadline:
                return Outcome(best, used, accepted, "time budget reached", history)
            tries = neighbours(best.trace, position)[: trials - used]
            if not tries:
                continue
            again, *times = measure([best.trace, *tries], again=1)  # the best beside its neighbours
            used = charged() - base if charged else used + len(tries)
            if again:
                best = Candidate(best.trace, again)
            timed = [Candidate(t, s) for t, s in zip(tries, times, strict=True) if s]
            winner = min(timed, key=lambda c: c.mean_s, default=None)
            if winner is not None and faster(winner.secs, best.secs, alpha):
                best, improved, accepted = winner, True, accepted + 1
            history.append(best.mean_s)
        if not improved:
            return Outcome(best, used, accepted, "no move of any knob is faster (a local optimum)", history)


KICK_MOVES = 3  # random moves away from a local optimum before the next descent
PATIENCE = 8  # kicks in a row that measure nothing new (a small space, all known): stop


def kicked(point: Any, knob_count: int, neighbours: Callable[[Any, int], list[Any]], rng: Any,
           moves: int = KICK_MOVES) -> Any:
    """``point`` after ``moves`` random moves, each to a random neighbour on a random knob."""
    for _ in range(moves):
        options = neighbours(point, rng.randrange(knob_count))
        if options:
            point = rng.choice(options)
    return point


def iterated_search(start: Candidate, knob_count: int, neighbours: Callable[[Any, int], list[Any]],
                    measure: Measure, *, trials: int, rng: Any, deadline: float | None = None,
                    alpha: float = 0.05, charged: Callable[[], int] | None = None) -> Outcome:
    """``search`` from ``start``, then, while the budgets last, iterated local search: from the
    best, a kick (``kicked``), a descent from there, and its optimum taken as the new best only
    when Welch's test says it is faster than the best, the two timed again together
    (``measure(..., again=2, afresh=True)``; not a trial). Every schedule measured on the way is
    the measure's to keep (the database), so the in-model selection sees the optima it did not
    take too. Stops at the budgets or after ``PATIENCE`` kicks in a row that measured nothing."""
    base = charged() if charged else 0
    done = search(start, knob_count, neighbours, measure, trials=trials, deadline=deadline, alpha=alpha,
                  charged=charged)
    best, used, accepted, history = done.best, done.trials, done.accepted, done.history
    stopped, idle = done.stopped, 0
    while stopped.startswith("no move") and idle < PATIENCE:
        if used >= trials or (deadline is not None and time.monotonic() >= deadline):
            stopped = "trial budget reached" if used >= trials else "time budget reached"
            break
        point = kicked(best.trace, knob_count, neighbours, rng)
        before = used
        first = measure([point])[0]
        used = charged() - base if charged else used + 1
        if first is not None:
            other = search(Candidate(point, first), knob_count, neighbours, measure, trials=trials - used,
                           deadline=deadline, alpha=alpha, charged=charged)
            used = charged() - base if charged else used + other.trials
            accepted += other.accepted
            if other.best.trace != best.trace:
                again = measure([best.trace, other.best.trace], again=2, afresh=True)
                if again[0] and again[1] and faster(again[1], again[0], alpha):
                    best, accepted = Candidate(other.best.trace, again[1]), accepted + 1
            stopped = other.stopped if not other.stopped.startswith("no move") else stopped
        history.append(best.mean_s)
        idle = idle + 1 if used == before else 0
    if stopped.startswith("no move") and idle >= PATIENCE:
        stopped = f"no move of any knob is faster, and {PATIENCE} kicks in a row found nothing new"
    return Outcome(best, used, accepted, stopped, history)


# ----- on MetaSchedule traces


class TraceSpace:
    """One tuning task's schedules as Droplet sees them: a trace with new decisions is replayed on
    the task's module (postprocessors included, which refuse what they cannot make legal), built
    and timed by ``timer`` (``tuning/candidates.py``), and every measured candidate is handed to
    ``on_measured`` (the tuner commits it to the database: an interrupted search resumes from it)."""

    def __init__(self, mod: Any, target: Any, timer: Any, on_measured: Callable[[Any, list[float]], None]) -> None:
        from tvmbench.tuning.space import DesignSpace

        self.space, self.timer, self.on_measured = DesignSpace(mod, target), timer, on_measured
        self.reference = reference_of(mod["main"], target)  # candidates' outputs are checked against it

    def schedule(self, trace: Any) -> Any | None:
        return self.space.replay(trace)

    def neighbours(self, trace: Any, position: int) -> list[Any]:
        knob = knobs(trace)[position]
        return [trace.with_decision(knob, value, remove_postproc=True) for value in moves(knob, trace.decisions[knob])]

    def measure(self, traces: list[Any], again: int = 0, afresh: bool = False) -> list[list[float] | None]:
        schedules = [self.schedule(t) for t in traces]  # (every trace is timed: ``afresh`` always holds)
        valid = [(i, s) for i, s in enumerate(schedules) if s is not None]
        out: list[list[float] | None] = [None] * len(traces)
        timed = self.timer.time([s.mod for _, s in valid], self.reference) if valid else []
        for (i, sch), secs in zip(valid, timed, strict=True):
            if not isinstance(secs, str):
                out[i] = secs
                if i >= again:
                    self.on_measured(sch.trace, secs)
        return out


class KnobSpace:
    """One task's schedules by tvmbench's own rule, as Droplet sees them: a "trace" is an
    assignment of the rule's knobs (``compile/knobs.py``: register tile, tile order, unrolling,
    band), built by the rule, timed by ``timer``; each schedule measured that the database does
    not hold yet is handed to ``on_measured`` as its trace, and the knobs each one timed or
    answered moves off their defaults go to ``changes`` (by ``schedule_key``: what the tune's
    report says a kept record changed in the rule). The start is the default assignment: the
    schedule an untuned build runs, and the reference every candidate's outputs are checked
    against (``CandidateTimer.check``)."""

    def __init__(self, func: Any, target: Any, timer: Any, on_measured: Callable[[Any, list[float]], None],
                 known: dict[str, list[float] | None], changes: dict[str, dict[str, list[Any]]] | None = None
                 ) -> None:
        from tvmbench.tuning.candidates import Reference

        self.func, self.target, self.timer, self.on_measured = func, target, timer, on_measured
        self.known = known  # trace key -> its record's times (None: too few to test against)
        self.changes = changes if changes is not None else {}
        self.timed = 0  # candidates measured (not answered from the database)
        self._built: dict[str, tuple[Any, list[Any]]] = {}
        default, default_knobs = self.build({})
        self.start = {k.name: k.default for k in default_knobs}
        self.reference = Reference(default.mod) if default is not None else None

    def build(self, assignment: dict[str, Any]) -> tuple[Any, list[Any]]:
        """(schedule or None, the knobs the rule read) for an assignment, built once."""
        import json

        from tvmbench.compile import pipeline
        from tvmbench.compile.knobs import knob_set

        key = json.dumps(assignment, sort_keys=True)
        if key not in self._built:
            with knob_set(assignment) as ks:
                _, sch = pipeline.default_schedule(self.func, self.target)
            self._built[key] = (sch, list(ks.seen))
        return self._built[key]

    def knob_count(self) -> int:
        return len(self.start)

    def changed(self, assignment: dict[str, Any]) -> dict[str, list[Any]]:
        """The knobs ``assignment`` moves off the rule's defaults: name -> [default, value]."""
        return {k.name: [k.default, assignment[k.name]] for k in self.build(assignment)[1]
                if assignment.get(k.name, k.default) in k.choices and assignment.get(k.name, k.default) != k.default}

    def neighbours(self, assignment: dict[str, Any], position: int) -> list[dict[str, Any]]:
        knobs = self.build(assignment)[1]
        if position >= len(knobs):
            return []
        k = knobs[position]
        i = k.choices.index(assignment.get(k.name, k.default)) if assignment.get(k.name, k.default) in k.choices \
            else k.choices.index(k.default)
        return [{**assignment, k.name: k.choices[j]} for j in categorical_moves(i, len(k.choices))]

    def measure(self, assignments: list[dict[str, Any]], again: int = 0, afresh: bool = False
                ) -> list[list[float] | None]:
        """Times per assignment (None: it does not build or run). A schedule the database holds
        with several times is answered from it (a resumed search measures nothing twice); the
        others are timed, and committed unless the database has them (the default's record).
        The first ``again`` are timed afresh when any other is timed, or always with ``afresh``:
        times are compared with times taken together, and a replayed path, all of it known,
        stays free."""
        from tvmbench.tuning.unmeasured import schedule_key, trace_key

        out: list[list[float] | None] = [None] * len(assignments)
        built = [(i, sch, trace_key(sch.trace)) for i, a in enumerate(assignments)
                 if (sch := self.build(a)[0]) is not None]

        def known(key: str) -> bool:
            return self.known.get(key) is not None and len(self.known[key] or ()) >= 2

        fresh = afresh or any(not known(key) for i, _, key in built if i >= again)
        todo = []
        for i, sch, key in built:
            if known(key) and not (fresh and i < again):
                out[i] = self.known[key]
            else:
                todo.append((i, sch, key))
        timed = self.timer.time([s.mod for _, s, _ in todo], self.reference) if todo else []
        self.timed += sum(1 for i, _, _ in todo if i >= again)  # candidates; a re-timed best is none
        for (i, sch, key), secs in zip(todo, timed, strict=True):
            if not isinstance(secs, str):
                out[i] = secs
                if key not in self.known:
                    self.on_measured(sch.trace, secs)
                self.known[key] = secs
        for i, sch, _ in built:  # (answered from the database too: a resumed run notes what a killed one did)
            if out[i] is not None and (changed := self.changed(assignments[i])):
                self.changes[schedule_key(sch.trace.as_json())] = changed
        return out


def from_defaults(space: KnobSpace, trials: int, deadline: float | None = None, alpha: float = 0.05,
                  seed: str = "0") -> Outcome | None:
    """Droplet from the default rule's own choices, iterated (``iterated_search``, kicks drawn
    from ``seed``) while the budgets last; None when the rule has no knobs or the default
    schedule cannot run."""
    import random

    if not space.knob_count() or trials < 2:
        return None
    measured = space.measure([space.start])[0]
    if measured is None:
        return None
    done = iterated_search(Candidate(space.start, measured), space.knob_count(), space.neighbours, space.measure,
                           trials=trials - 1, rng=random.Random(seed), deadline=deadline, alpha=alpha,
                           charged=lambda: space.timed)
    done.trials = space.timed
    return done


def refine(space: TraceSpace, starts: list[Any], trials: int, deadline: float | None = None,
           alpha: float = 0.05) -> Outcome | None:
    """Droplet from each of ``starts`` (traces, best first) in turn, within ``trials`` in all:
    each start is measured again by the same timer (a record's own time is one number, and the
    test needs the spread), then descended. The best outcome, or None when no start could run."""
    best: Outcome | None = None
    used = 0
    for trace in starts:
        if used >= trials or (deadline is not None and time.monotonic() >= deadline):
            break
        measured = space.measure([trace])[0]
        used += 1
        if measured is None:
            continue
        start = Candidate(trace, measured)
        done = search(start, len(knobs(trace)), space.neighbours, space.measure, trials=trials - used,
                      deadline=deadline, alpha=alpha)
        used += done.trials
        done.trials = used
        if best is None or done.best.mean_s < best.best.mean_s:
            best = done
    if best is not None:
        best.trials = used
    return best


def _starts(ms_db: Any, workload: Any, task: Any, target: Any, top_k: int, sample: bool = True) -> list[Any]:
    """Where Droplet starts on a task: its ``top_k`` best records that have knobs (the default
    schedule's record has none), else (with ``sample``) points drawn from MetaSchedule's design space."""
    records = [r.trace for r in ms_db.get_top_k(workload, max(top_k * 4, 8)) if knobs(r.trace)][:top_k]
    if records or not sample:
        return records
    from tvmbench.tuning.space import sampled_schedules

    return [sch.trace for _, sch in sampled_schedules(task.dispatched[0]["main"], target, max(top_k, 4))]


def _droplet_task(t: Any, ms_db: Any, target: Any, timer: Any, cfg: Any, trials: int, deadline: float | None,
                  changes: dict[str, dict[str, list[Any]]] | None = None) -> Outcome | None:
    """One task's Droplet: with ``cfg.strategy`` "droplet", first from tvmbench's default schedule
    (its rule's knobs, the records' moves off their defaults put in ``changes``; half the trials
    when the task also has MetaSchedule records to refine), then from the task's best record;
    DPMeta from its ``top_k`` best records only. The best outcome."""
    from tvmbench.tuning.unmeasured import trace_key

    workload, space = task_space(t, ms_db, target, timer)
    outcomes: list[Outcome] = []
    used = 0
    if cfg.strategy == "droplet":
        starts = _starts(ms_db, workload, t, target, 1, sample=False)
        known: dict[str, list[float] | None] = {
            trace_key(r.trace): [float(x) for x in r.run_secs] if r.run_secs else None
            for r in ms_db.get_all_tuning_records() if r.workload.same_as(workload)}
        defaults = KnobSpace(t.dispatched[0]["main"], target, timer, space.on_measured, known, changes)
        half = deadline if deadline is None or not starts else (time.monotonic() + deadline) / 2
        first = from_defaults(defaults, trials // 2 if starts else trials, half, cfg.alpha,
                              seed=f"{cfg.seed}:{t.task_name}")
        if first is not None:
            outcomes.append(first)
            used = first.trials
        elif not starts:
            starts = _starts(ms_db, workload, t, target, 1)  # no knobs: points of MetaSchedule's space
    else:
        starts = _starts(ms_db, workload, t, target, cfg.top_k)
    if starts and used < trials:
        more = refine(space, starts, trials - used, deadline, cfg.alpha)
        if more is not None:
            more.trials += used
            outcomes.append(more)
    if not outcomes:
        return None
    best = min(outcomes, key=lambda o: o.best.mean_s)
    best.trials = max(o.trials for o in outcomes)
    best.accepted = sum(o.accepted for o in outcomes)
    return best


def droplet_needs_records(tasks: list[Any], ms_db: Any) -> bool:
    """Whether some task has no record Droplet could start from (DPMeta then searches first)."""
    for t in tasks:
        workload = ms_db.commit_workload(t.dispatched[0])
        if not any(knobs(r.trace) for r in ms_db.get_top_k(workload, 8)):
            return True
    return False


def reference_of(func: Any, target: Any) -> Any:
    """What a task's candidates are checked against: its default schedule (tvmbench's rule, the
    schedule the suite checks against PyTorch), or the function as written where no rule applies."""
    import tvm

    from tvmbench.compile import pipeline
    from tvmbench.compile.knobs import knob_set
    from tvmbench.tuning.candidates import Reference

    with knob_set({}):
        _, sch = pipeline.default_schedule(func, target)
    return Reference(sch.mod if sch is not None else tvm.IRModule({"main": func}))


def candidate_timer(target: Any, cfg: Any) -> Any:
    """The timer of Droplet and grid candidates: MetaSchedule's runner as the tuning run sets it
    (``TuneConfig.evaluator``: cold by default for these strategies) with at least 5 repeats (the
    test of a move needs a spread)."""
    from tvmbench.tuning.candidates import CandidateTimer

    number, repeat, min_repeat_ms, flush = cfg.evaluator()
    return CandidateTimer(target, number=number, repeat=max(5, repeat), min_repeat_ms=min_repeat_ms, flush=flush,
                          build_timeout_s=cfg.builder_timeout_s, run_timeout_s=cfg.runner_timeout_s)


def task_space(task: Any, ms_db: Any, target: Any, timer: Any) -> tuple[Any, TraceSpace]:
    """A task's workload in ``ms_db`` and its TraceSpace, every measured candidate committed to
    ``ms_db`` as a tuning record (an interrupted search resumes from the database)."""
    from tvm.s_tir.meta_schedule.arg_info import ArgInfo
    from tvm.s_tir.meta_schedule.database import TuningRecord

    mod = task.dispatched[0]
    workload = ms_db.commit_workload(mod)
    tvm_target = target.tvm()

    def commit(trace: Any, secs: list[float]) -> None:
        ms_db.commit_tuning_record(TuningRecord(trace, workload, run_secs=[float(s) for s in secs],
                                                target=tvm_target, args_info=ArgInfo.from_prim_func(mod["main"])))

    return workload, TraceSpace(mod, target, timer, commit)


def by_model_time(tasks: list[Any], cost: Callable[[Any], float] | None = None) -> list[Any]:
    """Tasks in the order of their time in the model, most first: ``cost(task)`` is its weight
    times its default schedule's time (the weight alone without ``cost``). A search that runs out
    of budget has then spent it where there was the most to gain."""
    return sorted(tasks, key=lambda t: -(cost(t) if cost else t.weight))


def task_deadline(deadline: float | None, costs: list[float]) -> float | None:
    """The first of ``costs``' tasks' deadline: its share, by cost, of the time left to all of
    them (the whole budget left when none has a cost). A task that stops early, at a local
    optimum, leaves its time to the rest; one that would take it all cannot starve them."""
    if deadline is None or not costs or sum(costs) <= 0:
        return deadline
    now = time.monotonic()
    return now + max(0.0, deadline - now) * costs[0] / sum(costs)


def droplet_search(tasks: list[Any], ms_db: Any, target: Any, cfg: Any, remaining: int, done: int, start: float,
                   on_progress: Callable[[int, int, float | None], None] | None = None,
                   task_seconds: dict[str, float] | None = None, budget_s: float | None = None,
                   cost: Callable[[Any], float] | None = None,
                   knob_changes: dict[str, dict[str, list[Any]]] | None = None) -> tuple[str, list[dict[str, float]]]:
    """Droplet (``cfg.strategy`` "droplet": from the default schedule's knobs, then each task's
    best record) or the Droplet half of DPMeta (from its ``cfg.top_k`` best), every task in turn,
    the most time in the model first (``by_model_time``), each with an equal share of the
    ``remaining`` trials and its share by ``cost`` of the ``budget_s`` seconds left
    (``task_deadline``); every candidate measured is committed to ``ms_db`` as a tuning record.
    Returns why it stopped and the curve (trials, seconds, the task's best us); each task's search
    time is added to ``task_seconds`` (by task name), and the rule knobs each record built from the
    defaults moved to ``knob_changes`` (``KnobSpace``)."""
    timer = candidate_timer(target, cfg)
    # the budget is search time, from here (the tune's setup and default schedules come before)
    deadline = time.monotonic() + budget_s if budget_s is not None else None
    curve: list[dict[str, float]] = []
    used, share = 0, max(1, remaining // max(1, len(tasks)))
    order = by_model_time(tasks, cost)
    costs = [cost(t) for t in order] if cost else []
    for i, t in enumerate(order):
        if used >= remaining or (deadline is not None and time.monotonic() >= deadline):
            break
        began = time.monotonic()
        outcome = _droplet_task(t, ms_db, target, timer, cfg, min(share, remaining - used),
                                task_deadline(deadline, costs[i:]), knob_changes)
        if task_seconds is not None:
            task_seconds[t.task_name] = task_seconds.get(t.task_name, 0.0) + time.monotonic() - began
        used += outcome.trials if outcome else 0
        best_us = outcome.best.mean_s * 1e6 if outcome else None
        curve.append({"trials": done + used, "seconds": time.monotonic() - start, "estimate_ms": None,
                      "task": t.task_name, "best_us": best_us, "accepted": outcome.accepted if outcome else 0})
        if on_progress:
            on_progress(done + used, done + remaining, None)
    if deadline is not None and time.monotonic() >= deadline:
        return f"time budget of {cfg.time_budget_s:g} s reached{timer.dropped()}", curve
    return ("trial budget reached" if used >= remaining else "every task reached a local optimum") + timer.dropped(), curve
