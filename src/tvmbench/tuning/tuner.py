"""Tune a model's kernels with MetaSchedule into a persistent database.

Tasks are extracted from exactly the module tvmbench compiles (stages 1-2 of
``compile/pipeline.py``), so every record matches a function the benchmark runs. A run resumes:
the trials already in the database for a task count against the budget, so running the same
command again after an interruption continues where it stopped. The budget can be trials (global
and per task) and wall time; the time budget is enforced after each measured batch, which is already
in the database, so the database always holds whole batches.
"""

from __future__ import annotations

import os
import re
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

from tvmbench.compile import pipeline
from tvmbench.compile.precision import import_at_precision
from tvmbench.errors import UserError
from tvmbench.models import LoadedModel, ModelOptions, load_model
from tvmbench.rpc import check_tracker, parse_tracker
from tvmbench.targets import ResolvedTarget
from tvmbench.tuning.config import COST_MODELS, SCHEDULERS, STRATEGIES, TuneConfig
from tvmbench.tuning.database import TuningDatabase, remember_knobs, repeat_stats

# A batch the search offers with nothing new in it is asked for again (tuning/unmeasured.py) only
# when making it took less than this: a task whose space is exhausted gets no more of the budget.
RETRY_SECONDS = 20.0


def make_scheduler(kind: str, budget_s: float | None, seed: int, on_deadline: Callable[[], None],
                   exclusive: bool = True) -> Any:
    """MetaSchedule's gradient-based or round-robin task scheduler, in Python, with a time budget.

    The algorithms are those of MetaSchedule's C++ schedulers (gradient: after one batch per task,
    the next batch goes to the task whose weighted latency is falling fastest or is largest, as in
    Ansor). What they add is a clean stop: once ``budget_s`` has passed since the search began (the
    first call; setting up the tune contexts takes tens of seconds before it), ``next_task_id`` hands
    out no task, and
    MetaSchedule then joins every batch still being measured, so each one reaches the database. A
    measure callback cannot do this: MetaSchedule has no way to end tuning from one, and an exception
    raised there unwinds past the batches in flight (the gradient scheduler's first round sends one
    batch per task before joining any, so a budget shorter than that round kept nothing).

    ``exclusive`` (local measurement): every batch in flight is joined before the next one is
    generated and built, so candidates are never timed while the search and the compiler use the
    same cores. MetaSchedule overlaps them, which assumes a separate measurement device; on a
    2-core machine the overlap made measured latencies 2-5x too slow and noisy, and the search
    then chased noise. Over RPC the devices are other machines and the overlap is kept.
    """
    import random

    from tvm.ir.utils import derived_object
    from tvm.s_tir.meta_schedule.task_scheduler import PyTaskScheduler

    @derived_object
    class BudgetedScheduler(PyTaskScheduler):
        def __init__(self) -> None:
            super().__init__()
            self.rounds = 0
            self.history: dict[int, list[float]] = {}
            self.rng = random.Random(seed)
            self.deadline: float | None = None
            self.exhausted: set[int] = set()

        def past_deadline(self) -> bool:
            return self.deadline is not None and time.monotonic() >= self.deadline

        def joined(self, task_id: int, best_us: float | None, measured: int) -> None:
            """Called by the measure callback after each batch of ``task_id`` (``measured``
            candidates in it). A batch with nothing to measure means the search found nothing
            new: the task gets no more batches while others have some to offer."""
            self.history.setdefault(task_id, []).append(best_us if best_us is not None else 1e100)
            if not measured:
                self.exhausted.add(task_id)

        def next_task_id(self) -> int:
            outer = self._outer()
            records = outer.tasks_
            n = len(records)
            if budget_s is not None and self.deadline is None:
                self.deadline = time.monotonic() + budget_s
            if self.past_deadline():
                on_deadline()
                return -1
            for i in range(n):
                if exclusive and not records[i].is_terminated and records[i].measure_candidates is not None:
                    outer.join_running_task(i)  # nothing is measured while the next batch is made
                else:
                    outer.touch_task(i)  # joins the tasks whose batch has finished measuring
            alive = [i for i in range(n) if not records[i].is_terminated]
            if not alive:
                return -1
            first_round = [i for i in alive if i >= self.rounds] if self.rounds <= n else []
            if kind == "round-robin":
                task_id = (first_round or alive)[0]
                self.rounds = task_id + 1
            elif first_round:  # one batch per task (measured while the next builds, unless exclusive)
                self.rounds = first_round[0] + 1
                return first_round[0]
            else:
                if self.rounds <= n:  # first round over: wait for all of it
                    for i in alive:
                        if records[i].measure_candidates is not None:
                            outer.join_running_task(i)
                    self.rounds = n + 1
                alive = [i for i in alive if i not in self.exhausted] or alive
                task_id = _steepest(alive, self.history, [float(r.task_weight) for r in records], self.rng)
            if records[task_id].measure_candidates is not None:
                outer.join_running_task(task_id)
            return task_id

    return BudgetedScheduler()


def _steepest(alive: list[int], history: dict[int, list[float]], weights: list[float], rng: Any,
              alpha: float = 0.2, window: int = 3) -> int:
    """The task whose weighted best latency is falling fastest or is largest (MetaSchedule's
    gradient rule and its defaults ``alpha`` and ``window``); a random one when all are equal."""
    grads = []
    for i in alive:
        hist = history.get(i) or [1e100]
        latest = hist[-1]
        g1 = (hist[-1 - window] - latest) / window if len(hist) > window else 0.0
        grads.append((alpha * g1 + (1 - alpha) * latest / len(hist)) * weights[i])
    if max(grads) == min(grads):
        return rng.choice(alive)
    return alive[grads.index(max(grads))]


@dataclass
class TaskReport:
    name: str
    weight: int
    flops: float
    trials: int
    best_us: float | None
    default_us: float | None = None  # tvmbench's default schedule, measured the same way
    workload: str | None = None  # its structural hash, as the database and the profiles key it
    # The best record's kernel inside the model over the default schedule's (drift-corrected,
    # ``api.tune``'s in-model check); None when not checked
    in_model_gain: float | None = None
    in_model_interval: tuple[float, float] | None = None  # its 95 % interval (paired blocks)
    kept_in_model: bool | None = None  # whether its records are applied (False: they lose in the model)
    in_model_rank: int | None = None  # the winner's rank among the task's schedules timed alone (1: fastest)
    std_us: float | None = None  # the spread of the best record's repeats (None: it has one)
    minutes: float | None = None  # search time spent on this task, over every tuning run of the database
    # The default rule's knobs the kept record moved (name -> [default, value]; in-model check)
    rule_knobs: dict[str, list[Any]] | None = None

    @property
    def gflops(self) -> float | None:
        return self.flops / (self.best_us * 1e-6) / 1e9 if self.best_us and self.flops else None

    @property
    def speedup(self) -> float | None:
        """How much faster the best record is than the default schedule (1.0: tuning found nothing better)."""
        return self.default_us / self.best_us if self.default_us and self.best_us else None


@dataclass
class TuneReport:
    database: str
    tasks: list[TaskReport]
    trials_before: int
    trials_after: int
    wall_s: float
    stop_reason: str
    curve: list[dict[str, float]] = field(default_factory=list)  # trials, seconds, estimate_ms
    curve_files: list[str] = field(default_factory=list)  # where write_curve put it
    untunable: list[str] = field(default_factory=list)  # kernels left to the default schedules (extract_tasks)
    # From the in-model check (``api.check_in_model``), when it ran: the tuned build against the
    # untuned one end to end (``profiling.kernels.EndToEnd``: gain, low, high from paired blocks,
    # and the gain per host state), when any record won in the model, and the most any schedule
    # could give (``Ceiling``).
    end_to_end: Any = None
    ceiling: float | None = None

    @property
    def estimated_ms(self) -> float | None:
        """Sum over tasks of weight x best latency: the tuned kernels' share of one inference."""
        if any(t.best_us is None for t in self.tasks):
            return None
        return sum(t.weight * (t.best_us or 0) for t in self.tasks) / 1e3

    def write_curve(self, model: str) -> list[Path]:
        """The tuning curve as CSV, and as PNG when matplotlib is installed, in the database's
        ``curves/`` folder; returns the files written."""
        from tvmbench.files import write_csv_atomic
        from tvmbench.plots import tuning_curve_png

        if not self.curve:
            return []
        name = re.sub(r"[^A-Za-z0-9_.-]+", "_", model)
        stem = str(Path(self.database) / "curves" / f"{name}-{time.strftime('%Y%m%d-%H%M%S')}")
        files = [write_csv_atomic(stem + ".csv", self.curve, ["trials", "seconds", "estimate_ms"])]
        png = tuning_curve_png(self.curve, stem + ".png",
                               f"{model}: {self.trials_after} trials, {self.wall_s / 60:.1f} min")
        return files + ([png] if png else [])

    def to_json(self) -> dict[str, Any]:
        return {"database": self.database, "trials_before": self.trials_before, "trials_after": self.trials_after,
                "wall_s": self.wall_s, "stop_reason": self.stop_reason, "estimated_kernel_ms": self.estimated_ms,
                "end_to_end": self.end_to_end._asdict() if self.end_to_end else None, "ceiling": self.ceiling,
                "tasks": [{**asdict(t), "gflops": t.gflops, "speedup": t.speedup} for t in self.tasks], "curve": self.curve,
                "untunable": self.untunable}


def extract_tasks(model: LoadedModel, target: ResolvedTarget, precision: str = "fp32") -> tuple[list[Any], list[str]]:
    """The model's tuning tasks in a build at ``precision``, and the names of the kernels
    MetaSchedule cannot tune, which keep the default schedules: those computing with ``Let``
    expressions (``passes/fast_math.py``'s exponential: softmax, SiLU, joined attentions), for
    which its task scheduler's FLOP estimate has no rule ("Do not have a default for prim.Let":
    ``tvmbench tune`` failed on every transformer)."""
    from tvm.s_tir import meta_schedule as ms

    from tvmbench.compile.tir import has_let

    def has_lets(task: Any) -> bool:
        return any(has_let(func.body) for func in task.dispatched[0].functions.values())

    mod = pipeline.per_inference(pipeline.legalized(import_at_precision(model, target, precision).mod, target))
    # (hand-scheduled kernels, the recurrent layers' time loops, are not tasks: MetaSchedule skips them too)
    tasks = [t for t in ms.relax_integration.extract_tasks(mod, target.tvm())
             if not t.mod.attrs.get("tirx.is_scheduled", False)]
    lets = [has_lets(t) for t in tasks]
    return [t for t, let in zip(tasks, lets, strict=True) if not let], [t.task_name for t, let in zip(tasks, lets, strict=True) if let]


def _task_records(ms_db: Any, task: Any, counts: dict[str, int] | None = None
                  ) -> tuple[int, float | None, float | None]:
    """Trials in the database for a task (failed ones included when ``counts`` comes from the
    file), its best measured latency (the median of a record's repeats) and that record's
    standard deviation, in microseconds."""
    mod = task.dispatched[0]
    if not ms_db.has_workload(mod):
        return 0, None, None
    records = ms_db.get_top_k(ms_db.commit_workload(mod), 1 << 30)
    best: tuple[float, float | None] | None = None
    for r in records:
        if r.run_secs:
            median, std = repeat_stats([float(s) for s in r.run_secs])
            best = (median, std) if best is None or median < best[0] else best
    trials = counts.get(_workload_key(task), len(records)) if counts is not None else len(records)
    if best is None:
        return trials, None, None
    return trials, best[0] * 1e6, (best[1] * 1e6 if best[1] is not None else None)


def _flops(task: Any) -> float:
    from tvm.s_tir.analysis import estimate_tir_flops

    try:
        return float(estimate_tir_flops(task.dispatched[0]))
    except Exception:
        return 0.0


def make_runner(cfg: TuneConfig) -> Any:
    """Measure locally, or on the devices registered with an RPC tracker under ``rpc_key``."""
    from tvm.s_tir import meta_schedule as ms

    from tvmbench.tvm_exec import light_workers

    light_workers()

    number, repeat, min_repeat_ms, flush = cfg.evaluator()
    evaluator = ms.runner.EvaluatorConfig(number=number, repeat=repeat, min_repeat_ms=min_repeat_ms,
                                          enable_cpu_cache_flush=flush)
    if not cfg.rpc_tracker:
        return ms.runner.LocalRunner(timeout_sec=cfg.runner_timeout_s, evaluator_config=evaluator)
    if not cfg.rpc_key:
        raise UserError("--rpc needs --rpc-key, the key the devices registered with")
    host, port = parse_tracker(cfg.rpc_tracker)
    check_tracker(host, port, cfg.rpc_key)
    rpc = ms.runner.RPCConfig(tracker_host=host, tracker_port=port, tracker_key=cfg.rpc_key, session_priority=1,
                              session_timeout_sec=int(cfg.runner_timeout_s))
    return ms.runner.RPCRunner(rpc_config=rpc, evaluator_config=evaluator, max_workers=cfg.rpc_workers)


def report_tasks(tasks: list[Any], ms_db: Any, defaults: dict[str, float] | None = None,
                 counts: dict[str, int] | None = None, known: dict[str, Any] | None = None) -> list[TaskReport]:
    """Each task's state in the database; ``known`` is the meta file's ``tasks`` (search minutes)."""
    out = []
    for t in tasks:
        trials, best, std = _task_records(ms_db, t, counts)
        key = _workload_key(t)
        seconds = ((known or {}).get(key) or {}).get("seconds")
        out.append(TaskReport(name=t.task_name, weight=int(t.weight), flops=_flops(t), trials=trials, best_us=best,
                              default_us=(defaults or {}).get(key), workload=key, std_us=std,
                              minutes=seconds / 60 if seconds is not None else None))
    return out


# The meta file's per-workload facts of the tasks tuned into it: name, weight and FLOPs as the
# task was extracted (a per-layer table needs no model to name its rows), and the search seconds
# spent on it over every run.
TASKS = "tasks"


def remember_tasks(meta: dict[str, Any], tasks: list[Any], seconds: dict[str, float], model: str) -> dict[str, Any]:
    """``meta`` with each task's facts and this run's search ``seconds`` (by task name) added."""
    known = meta.setdefault(TASKS, {})
    for t in tasks:
        entry = known.setdefault(_workload_key(t), {"name": t.task_name, "weight": int(t.weight),
                                                    "flops": _flops(t), "seconds": 0.0, "models": []})
        entry["seconds"] = round(entry.get("seconds", 0.0) + seconds.get(t.task_name, 0.0), 3)
        if model not in entry.setdefault("models", []):
            entry["models"].append(model)
    return meta


def _workload_key(task: Any) -> str:
    import tvm_ffi

    return str(tvm_ffi.structural_hash(task.dispatched[0]))


def _mark_postprocs(db: TuningDatabase, tasks: list[Any], target: ResolvedTarget) -> int:
    """Records of these tasks that lack the postprocessor marker get it back (``mark_postprocs``),
    before a search loads them."""
    from tvmbench.tuning.space import DesignSpace

    by_key = {_workload_key(t): t for t in tasks}

    def kinds(key: str) -> list[list[str]] | None:
        task = by_key.get(key)
        return DesignSpace(task.dispatched[0], target).kinds() if task is not None else None

    return db.mark_postprocs(kinds)


def database_timing(db: TuningDatabase, cfg: TuneConfig, cpu: bool = True) -> bool:
    """Whether this tune times cold (``TuneConfig.cold``), kept in the database's meta file: one
    database holds records timed one way, since a cold time and a hot one do not compare (the
    ranking of records, their speedups over the default's record, the in-model check's
    candidates). A database with records and no mark was timed hot (every one before session
    38). Asked for the other way explicitly: one line saying so. Not ``cpu`` (a GPU's kernels):
    hot, the CPU caches' flush is no part of their time."""
    if not cpu:
        if cfg.cpu_cache_flush:
            raise UserError("--cpu-flush times CPU kernels with cold caches; a GPU's candidates are timed as they are")
        return False
    meta = db.meta()
    held = meta.get("timing") or ("warm" if db.count_records() else None)
    if cfg.cpu_cache_flush is None and held:
        cold = held == "cold"
    else:
        cold = cfg.cold()
        if held and cold != (held == "cold"):
            raise UserError(f"{db.path} holds records timed with {held} caches; tune it with "
                            f"{'--cpu-flush' if held == 'cold' else '--no-cpu-flush'} or into a new database")
    if meta.get("timing") != ("cold" if cold else "warm"):
        meta["timing"] = "cold" if cold else "warm"
        db.write_meta(meta)
    return cold


def commit_default_schedules(tasks: list[Any], ms_db: Any, target: ResolvedTarget, builder: Any, runner: Any,
                             known: dict[str, float]) -> dict[str, float]:
    """Measure tvmbench's default schedule of every task not measured yet and commit it as a record.

    Search starts from random points of MetaSchedule's space and, with a small budget, can end
    below the hand-written default; a record of the default itself makes the database's best for
    each workload at least as good as no database, and gives each task's speedup over it.
    Returns the measured default latencies (us) by workload key, including ``known`` ones.
    """
    from tvm.s_tir.meta_schedule.arg_info import ArgInfo
    from tvm.s_tir.meta_schedule.builder import BuilderInput
    from tvm.s_tir.meta_schedule.database import TuningRecord
    from tvm.s_tir.meta_schedule.runner import RunnerInput

    out = dict(known)
    todo = []
    for t in tasks:
        key = _workload_key(t)
        if key in out:
            continue
        with target.tvm():
            _, sch = pipeline.default_schedule(t.dispatched[0]["main"], target)
        if sch is not None:
            todo.append((t, key, sch))
    if not todo:
        return out
    tvm_target = target.tvm()
    built = builder.build([BuilderInput(sch.mod, tvm_target) for _, _, sch in todo])
    device = "cuda" if target.kind == "cuda" else "cpu"
    inputs, kept = [], []
    for (t, key, sch), b in zip(todo, built, strict=True):
        if b.error_msg is None:
            inputs.append(RunnerInput(b.artifact_path, device, ArgInfo.from_prim_func(sch.mod["main"])))
            kept.append((t, key, sch))
    for (t, key, sch), future in zip(kept, runner.run(inputs), strict=True):
        result = future.result()
        if result.error_msg is not None or not result.run_secs:
            continue
        mod = t.dispatched[0]
        ms_db.commit_tuning_record(TuningRecord(sch.trace, ms_db.commit_workload(mod), run_secs=result.run_secs,
                                                target=tvm_target, args_info=ArgInfo.from_prim_func(mod["main"])))
        out[key] = repeat_stats([float(x) for x in result.run_secs])[0] * 1e6
    return out


@dataclass(frozen=True)
class TuneJob:
    """A tuning run for a worker process (picklable)."""

    model: str
    options: ModelOptions
    target: ResolvedTarget
    db_path: str
    config: TuneConfig
    verbose: bool = False  # MetaSchedule's stdout tables to stderr instead of /dev/null


def run_tune_job(job: TuneJob, progress: Callable[[Any], None]) -> TuneReport:
    """Worker entry: tuning runs in its own process so that MetaSchedule's process-wide state
    (logging configuration, thread pools, the stubbed CUDA intrinsics) starts fresh every time, a
    crash inside it is reported instead of killing tvmbench, and Ctrl-C can stop it at once; the
    database keeps every batch measured so far.

    MetaSchedule prints per-task tables to stdout at every batch; the full logs also go to the
    database's ``logs/`` folder, so stdout is pointed at /dev/null (at stderr with ``verbose``:
    stdout stays the caller's, for results) and progress comes back as messages.
    """
    os.dup2(2 if job.verbose else os.open(os.devnull, os.O_WRONLY), 1)
    model = load_model(job.model, job.options)
    db = TuningDatabase.open(job.db_path, job.target, create=True)
    return tune_model(model, job.target, db, job.config, lambda done, total, est: progress((done, total, est)))


@dataclass(frozen=True)
class _SearchPlan:
    todo: list[Any]  # (task, TaskReport) pairs still below the per-task budget
    before: list[Any]  # TaskReport per task before this run
    per_task: int
    remaining: int  # trials this search may spend
    done: int  # trials already in the database
    start: float  # when the run began (monotonic)


def _metaschedule_search(tasks: list[Any], plan: _SearchPlan, ms_db: Any, db: TuningDatabase, cfg: TuneConfig,
                         builder: Any, runner: Any, on_progress: Callable[[int, int, float | None], None] | None,
                         task_seconds: dict[str, float]) -> tuple[str, list[dict[str, float]]]:
    """MetaSchedule's own search (evolutionary or replay-trace) over the tasks below their
    budget; returns why it stopped and the tuning curve. The time from one measured batch to the
    next is added to ``task_seconds`` for the batch's task (batches are generated, built and
    measured one at a time when measuring locally; over RPC they overlap and this is rougher)."""
    from tvm.ir.utils import derived_object
    from tvm.s_tir import meta_schedule as ms

    from tvmbench.tuning.unmeasured import skipping_known

    todo, before, per_task, remaining, done, start = (plan.todo, plan.before, plan.per_task, plan.remaining,
                                                      plan.done, plan.start)
    curve: list[dict[str, float]] = []
    state: dict[str, Any] = {"trials": done, "stopped": "", "last": time.monotonic()}
    # Best latency per task so far (us), to estimate the tuned kernels' time after every batch:
    # sum of weight x best over all tasks, once every task has a measurement.
    best = {i: r.best_us for i, r in enumerate(before)}
    task_index = [tasks.index(t) for t, _ in todo]  # tune-context id -> index into tasks

    def estimate_ms() -> float | None:
        if any(v is None for v in best.values()):
            return None
        return sum(before[i].weight * (best[i] or 0.0) for i in best) / 1e3

    @derived_object
    class Progress(ms.measure_callback.PyMeasureCallback):
        """Counts measured trials, reports progress, and feeds the scheduler each task's best latency."""

        def apply(self, task_scheduler: Any, task_id: int, candidates: Any, builds: Any, runs: Any) -> None:
            state["trials"] += len(candidates)
            i = task_index[task_id]
            now = time.monotonic()
            name = tasks[i].task_name
            task_seconds[name] = task_seconds.get(name, 0.0) + now - state["last"]
            state["last"] = now
            for r in runs:
                if r.error_msg is None and r.run_secs:
                    us = sum(float(x) for x in r.run_secs) / len(r.run_secs) * 1e6
                    best[i] = us if best[i] is None else min(best[i], us)
            scheduler.joined(task_id, best[i], len(candidates))
            estimate = estimate_ms()
            curve.append({"trials": state["trials"], "seconds": time.monotonic() - start, "estimate_ms": estimate})
            if on_progress:
                on_progress(state["trials"], cfg.trials, estimate)

    def at_deadline() -> None:
        state["stopped"] = f"time budget of {cfg.time_budget_s:g} s reached"

    # The budget is search time: extracting tasks, measuring the default schedules and setting up
    # the search (a fixed cost per model, a minute or two) come first and are not counted.
    scheduler = make_scheduler(cfg.task_scheduler, cfg.time_budget_s, cfg.seed, at_deadline,
                               exclusive=not cfg.rpc_tracker)
    work_dir = str(db.path)
    ctxs, weights = ms.relax_integration.extracted_tasks_to_tune_contexts(
        [t for t, _ in todo], work_dir=work_dir, num_threads=cfg.threads,
        strategy=skipping_known(search_strategy(cfg),
                                lambda seconds: seconds > RETRY_SECONDS or scheduler.past_deadline()),
        seed=cfg.seed)
    cost_model = ms.cost_model.CostModel.create(cfg.cost_model, num_tuning_cores=cfg.threads) \
        if cfg.cost_model != "xgb" else ms.cost_model.XGBModel(num_tuning_cores=cfg.threads)
    callbacks = [*ms.measure_callback.MeasureCallback.create("default"), Progress()]
    state["last"] = time.monotonic()
    ms.tune.tune_tasks(tasks=ctxs, task_weights=weights, work_dir=work_dir, max_trials_global=remaining,
                       max_trials_per_task=per_task, num_trials_per_iter=cfg.trials_per_iter, builder=builder,
                       runner=runner, database=ms_db, cost_model=cost_model, measure_callbacks=callbacks,
                       task_scheduler=scheduler)
    return state["stopped"] or "trial budget reached", curve


def search_strategy(cfg: TuneConfig) -> Any:
    """MetaSchedule's search strategy for ``cfg.strategy`` (droplet and grid search on their own;
    dpmeta's first search, where a task has no records, is evolutionary)."""
    from tvm.s_tir import meta_schedule as ms

    if {"random": "replay-trace"}.get(cfg.strategy, cfg.strategy) == "replay-trace":
        return ms.search_strategy.ReplayTrace()
    # (its first generation keeps 50 unmeasured schedules at least: no more than it holds)
    return ms.search_strategy.EvolutionarySearch(population_size=cfg.population,
                                                 init_min_unmeasured=min(50, cfg.population))


def _search(tasks: list[Any], plan: _SearchPlan, ms_db: Any, db: TuningDatabase, cfg: TuneConfig,
            target: ResolvedTarget, builder: Any, runner: Any, defaults: dict[str, float],
            on_progress: Callable[[int, int, float | None], None] | None, seconds: dict[str, float],
            changes: dict[str, dict[str, list[Any]]] | None = None) -> tuple[str, list[dict[str, Any]]]:
    """The strategy's search; returns why it stopped and the curve, adds search time per task to
    ``seconds`` and Droplet's moves of the default rules' knobs to ``changes``."""
    remaining, done, start = plan.remaining, plan.done, plan.start
    keys = {id(t): _workload_key(t) for t in tasks}

    def cost(t: Any) -> float:
        """The task's time per inference with the default schedule (us); without one measured,
        its FLOPs at 100 GFLOP/s (1 us at least): a task is never left no time at all."""
        return t.weight * (defaults.get(keys[id(t)]) or max(1.0, _flops(t) / 1e5))

    if cfg.strategy == "grid":
        from tvmbench.tuning.grid import grid_search

        return grid_search(tasks, ms_db, target, cfg, remaining, done, start, on_progress, seconds,
                           cfg.time_budget_s, cost)
    if cfg.strategy not in ("droplet", "dpmeta"):
        return _metaschedule_search(tasks, plan, ms_db, db, cfg, builder, runner, on_progress, seconds)
    from tvmbench.tuning.droplet import droplet_needs_records, droplet_search

    curve: list[dict[str, Any]] = []
    searching = time.monotonic()
    if cfg.strategy == "dpmeta" and droplet_needs_records(tasks, ms_db):
        # DPMeta refines MetaSchedule's best records: a task without any gets a search first,
        # with half the trials and half the time
        half = replace(plan, remaining=remaining // 2)
        ms_cfg = replace(cfg, time_budget_s=cfg.time_budget_s / 2 if cfg.time_budget_s else None)
        _, curve = _metaschedule_search(tasks, half, ms_db, db, ms_cfg, builder, runner, on_progress, seconds)
        done = sum(t.trials for t in report_tasks(tasks, ms_db, defaults, db.records_per_workload()))
    left_s = max(0.0, cfg.time_budget_s - (time.monotonic() - searching)) if cfg.time_budget_s else None
    stop, more = droplet_search(tasks, ms_db, target, cfg, cfg.trials - done, done, start, on_progress, seconds,
                                left_s, cost, changes)
    return stop, curve + more


def tune_model(model: LoadedModel, target: ResolvedTarget, db: TuningDatabase, cfg: TuneConfig,
               on_progress: Callable[[int, int, float | None], None] | None = None) -> TuneReport:
    """Tune ``model``'s tasks for ``target`` into ``db`` within the budgets of ``cfg``."""
    if target.kind == "cuda":
        from tvmbench.targets import query_gpu

        if query_gpu() is None:
            raise UserError("tuning a CUDA target measures candidates on a GPU, and this machine has none; "
                            "tune on a machine with the GPU (remote measurement over RPC is planned)")
    elif not target.is_native and not cfg.rpc_tracker:
        raise UserError(f"tuning {target.arch} needs that device to measure on: register it with a TVM RPC "
                        "tracker ('tvmbench rpc server') and pass --rpc HOST:PORT --rpc-key KEY")
    if cfg.strategy not in STRATEGIES or cfg.cost_model not in COST_MODELS or cfg.task_scheduler not in SCHEDULERS:
        raise UserError(f"unknown tuning option: strategy one of {list(STRATEGIES)}, cost model one of "
                        f"{list(COST_MODELS)}, scheduler one of {list(SCHEDULERS)}")
    if not 0 < cfg.alpha < 1:
        raise UserError(f"--alpha is a significance level between 0 and 1, got {cfg.alpha}")
    from tvmbench.compile.intrinsics import import_tensor_intrin

    import_tensor_intrin(target.kind)  # the tuning context imports them otherwise, slowly
    os.environ["TVM_NUM_THREADS"] = str(cfg.threads)  # the runner measures with the benchmark's threads

    from tvmbench.tuning.build import cross_export, fast_build, local_builder

    start = time.monotonic()
    tasks, untunable = extract_tasks(model, target, cfg.precision)
    if cfg.strategy == "grid":
        from tvmbench.tuning.grid import check_budget

        check_budget(tasks, target, cfg.trials)
    _mark_postprocs(db, tasks, target)
    cfg = replace(cfg, cpu_cache_flush=database_timing(db, cfg, cpu=target.kind != "cuda"))
    ms_db = db.ms_database()
    builder = local_builder(f_build=fast_build, max_workers=cfg.threads, timeout_sec=cfg.builder_timeout_s,
                            f_export=None if target.is_native or target.kind == "cuda" else cross_export)
    runner = make_runner(cfg)
    meta = db.meta()
    defaults = commit_default_schedules(tasks, ms_db, target, builder, runner, meta.get("default_us", {}))
    if defaults != meta.get("default_us"):
        meta["default_us"] = defaults
        db.write_meta(meta)
    before = report_tasks(tasks, ms_db, defaults, db.records_per_workload(), meta.get(TASKS))
    done = before_total = sum(t.trials for t in before)
    per_task = cfg.trials_per_task or max(64, 2 * cfg.trials // max(1, len(tasks)))
    todo = [(t, r) for t, r in zip(tasks, before, strict=True) if r.trials < per_task]
    remaining = cfg.trials - done
    seconds: dict[str, float] = {}  # search time per task name, this run
    changes: dict[str, dict[str, list[Any]]] = {}  # the rule knobs each record from the defaults moved
    stop = ""
    if cfg.strategy == "grid":
        todo = list(zip(tasks, before, strict=True))  # a grid is whole, not per-task budgets
    if not todo:
        stop = f"every task already has {per_task} trials"
    elif remaining <= 0:
        stop = f"the database already holds {done} trials for this model (budget {cfg.trials})"
    if stop:
        return TuneReport(str(db.path), before, done, done, time.monotonic() - start, stop, untunable=untunable)

    try:
        stop, curve = _search(tasks, _SearchPlan(todo, before, per_task, remaining, done, start), ms_db, db, cfg,
                              target, builder, runner, defaults, on_progress, seconds, changes)
    finally:  # (an interrupted run keeps its search minutes and knob changes too)
        meta = remember_knobs(remember_tasks(db.meta(), tasks, seconds, model.name), changes)
        db.write_meta(meta)
    after = report_tasks(tasks, db.ms_database(), defaults, db.records_per_workload(), meta[TASKS])
    report = TuneReport(str(db.path), after, before_total, sum(t.trials for t in after), time.monotonic() - start,
                        stop, curve, untunable=untunable)
    meta.setdefault("runs", []).append({"model": model.name, "date": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
                                        "trials_before": before_total, "trials_after": report.trials_after,
                                        "wall_s": report.wall_s, "config": cfg.to_json()})
    db.write_meta(meta)
    return report
