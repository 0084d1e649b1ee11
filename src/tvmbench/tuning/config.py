"""The options of a tuning run (no TVM import: the CLI builds its flags from them)."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

MS_STRATEGIES = ("evolutionary", "replay-trace")  # MetaSchedule's own search strategies, by its names
# Droplet: coordinate descent with a statistical test (tuning/droplet.py); DPMeta: Droplet from
# MetaSchedule's K best records (a MetaSchedule search first where a task has none).
# random: MetaSchedule's replay-trace (random points of the design space, no cost model), by its usual name.
# grid: every point of each task's knob space (tuning/grid.py), refused when that is over the budget.
STRATEGIES = (*MS_STRATEGIES, "random", "grid", "droplet", "dpmeta")
COST_MODELS = ("xgb", "mlp", "random")
SCHEDULERS = ("gradient", "round-robin")
PRECISIONS = ("fp32", "fp16", "amp", "bf16")  # (``compile.precision.PRECISIONS``, without importing TVM's side)
# Strategies whose candidates are timed with cold caches unless told otherwise (``TuneConfig.cold``).
COLD_STRATEGIES = ("droplet", "dpmeta", "grid")
COLD_REPEATS = 10  # single cold calls per candidate (each after a flush)


@dataclass(frozen=True)
class TuneConfig:
    trials: int = 1000  # max_trials_global for this model, counting trials already in the database
    trials_per_task: int | None = None  # default: 2 * trials / tasks, at least 64
    trials_per_iter: int = 32  # candidates measured per batch
    time_budget_s: float | None = None
    strategy: str = "evolutionary"
    cost_model: str = "xgb"
    task_scheduler: str = "gradient"
    threads: int = 1
    builder_timeout_s: float = 60.0
    runner_timeout_s: float = 30.0
    runner_number: int = 3
    runner_repeat: int = 1
    runner_min_repeat_ms: int = 50
    cpu_cache_flush: bool | None = None  # None: cold for COLD_STRATEGIES (or as the database was tuned)
    seed: int = 0
    rpc_tracker: str | None = None  # "host:port" of a TVM RPC tracker: measure on its devices
    rpc_key: str | None = None
    rpc_workers: int = 1  # candidates measured in parallel (one per remote device)
    top_k: int = 3  # dpmeta: records per task Droplet starts from
    alpha: float = 0.05  # droplet / dpmeta: significance of Welch's test for accepting a move
    # evolutionary: schedules per generation (MetaSchedule's population_size). Each batch scores
    # and mutates the whole population with the cost model; smaller is a faster, coarser search.
    population: int = 512
    # The build's precision (``--precision``): its kernels are the tasks, and the in-model check
    # builds it so (a bf16 build's kernels are other workloads than fp32's).
    precision: str = "fp32"

    def __post_init__(self) -> None:
        """Counts and times checked when the options are made (the CLI's argument types do it
        for flags; the API's callers get the same one line)."""
        from tvmbench.errors import UserError, check_numbers

        check_numbers(trials_per_task=self.trials_per_task, trials_per_iter=self.trials_per_iter,
                      threads=self.threads, runner_number=self.runner_number, runner_repeat=self.runner_repeat,
                      rpc_workers=self.rpc_workers, top_k=self.top_k, population=self.population,
                      time_budget_s=self.time_budget_s,
                      builder_timeout_s=self.builder_timeout_s, runner_timeout_s=self.runner_timeout_s,
                      times=("time_budget_s", "builder_timeout_s", "runner_timeout_s"))
        check_numbers(minimum=0, trials=self.trials, runner_min_repeat_ms=self.runner_min_repeat_ms)  # 0: judge only
        for name, value, allowed in (("strategy", self.strategy, STRATEGIES), ("cost_model", self.cost_model, COST_MODELS),
                                     ("task_scheduler", self.task_scheduler, SCHEDULERS)):
            if value not in allowed:
                raise UserError(f"--{name.replace('_', '-')} must be one of {', '.join(allowed)}, got '{value}'")
        if not 0 < self.alpha < 1:
            raise UserError(f"--alpha must be between 0 and 1, got {self.alpha}")
        if self.precision not in PRECISIONS:
            raise UserError(f"--precision must be one of {', '.join(PRECISIONS)}, got '{self.precision}'")

    def cold(self) -> bool:
        """Whether candidates are timed with cold caches. Inside a model a kernel reads weights
        that the layers before it have pushed out of the caches; MetaSchedule's runner times a
        kernel alone, over and over, its weights hot. On bert-base's four dense kernels
        (session 38, a Droplet database's default and three fastest records each, 6 alternations)
        the hot ratios to the default read 0.99-1.07x and did not predict the in-model check's
        (0.80x, 0.895x, 1.025x for the second-fastest, 1.062x); timed cold, one call after each
        flush, they did, task by task (0.90x, 0.93x, 1.05x for the second, 1.07x)."""
        return self.strategy in COLD_STRATEGIES if self.cpu_cache_flush is None else self.cpu_cache_flush

    def evaluator(self) -> tuple[int, int, int, bool]:
        """(calls per repeat, repeats, minimum ms per repeat, flush) of the runner: cold is one
        call per repeat after a flush (a repeat of several calls would time one cold call and
        the rest hot), ``COLD_REPEATS`` of them at least; else the runner settings as given."""
        if self.cold():
            return 1, max(self.runner_repeat, COLD_REPEATS), 0, True
        return self.runner_number, self.runner_repeat, self.runner_min_repeat_ms, False

    def to_json(self) -> dict[str, Any]:
        return asdict(self)
