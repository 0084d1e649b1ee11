"""The timing loop.

Method, in the spirit of ``torch.utils.benchmark.Timer``:

* **Warm-up** runs until both a minimum count and a minimum time are reached, so lazy
  initialisation, JIT compilation, allocator growth and cache warm-up are over before timing. It
  is capped by a maximum time (a model that takes 30 s per call does not warm up for minutes),
  but at least one warm-up run always happens. Slow calls (the median of the last
  ``slow_warmup_runs`` warm-up calls at least ``slow_call_s``) stop after that many: a call that
  long has no cache state to warm and its one-time costs are in the first call (which the median
  ignores). Warm-ups were 30 of the ~160 minutes of the zoo sweep, 14 of them beyond the third
  call of such slow calls (docs/performance.md, session 29). Warm-up times are kept and reported
  separately.
* **Timed phase** runs until both a minimum count and a minimum duration are met; then, in
  adaptive mode, it continues until the 95 % confidence interval of the median is within the
  asked relative width (±2 % by default) or a maximum duration is hit. Why it stopped is recorded.
* **Blocks** for fast calls: when one call takes less than ``block_target_s`` (1 ms), calls are
  timed in blocks of k back-to-back calls and the per-call latency is the block time / k, so the
  clock read (~50 ns) stays under 0.1 % of what is measured.
* The callable must be **synchronous**: backends wait for the device inside ``run()`` (device
  events or a stream sync on GPUs), so a host clock around it measures the work, not the launch.

When the user fixes ``--warmup N`` / ``--runs N``, exactly those counts run, one call per sample,
with no time rules.

In lockstep (``lockstep.py``, several frameworks of a round taking turns), warm-up is one turn,
the timed phase many short ones, and the timed phase's durations count only this framework's
turns. Each turn starts with an untimed call (the other framework has just had the caches),
except for calls of ``pause_turn_call_s`` (0.1 s) or more, whose turns start after a pause of
``turn_settle_s`` instead, long enough for the other framework's threads to stop spinning. The
untimed call doubled the time of points whose calls take 1-3 s (877 s of the session-29 zoo
sweep) and a third to a half of the turns of 0.06-0.25 s calls (460 s of session 30's sweep),
while the first call after another framework's turn is at most 2 % slower than the next
(``benchmarks/turn_switch_cost.py``: ONNX Runtime, 2 threads, after a quarter second of VGG-11;
ResNet-50 at 38 and 150 ms 1.00-1.02x, DenseNet-121 at 57 ms 1.00-1.01x over two runs;
``docs/performance.md``, session 31), and of a 0.1 s call's turn of two or three samples only
the first pays it: the median hardly moves.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Any

from tvmbench.measure.lockstep import SETTLE_S, TurnClock, Turns
from tvmbench.measure.probe import HostProbe
from tvmbench.measure.stats import median_ci


@dataclass(frozen=True)
class TimerConfig:
    min_warmup_runs: int = 10
    min_warmup_s: float = 1.0
    max_warmup_s: float = 30.0
    slow_call_s: float = 0.25
    slow_warmup_runs: int = 3
    pause_turn_call_s: float = 0.1  # lockstep: calls this long start a turn with a pause, not an untimed call
    turn_settle_s: float = SETTLE_S  # ... that pause
    min_runs: int = 30
    min_time_s: float = 3.0
    max_time_s: float = 60.0
    target_ci_rel: float = 0.02  # stop when the 95 % CI of the median is within +-2 %
    min_timed_runs_always: int = 3  # even a very slow model gets this many timed runs
    block_target_s: float = 1e-3
    # Exact counts requested by the user (``--warmup`` / ``--runs``): disable the time rules.
    fixed_warmup_runs: int | None = None
    fixed_runs: int | None = None

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class Measurement:
    samples_s: list[float]  # per-call latency of each timed sample (block time / block size)
    warmup_s: list[float]  # per-call latency of each warm-up sample
    block_size: int
    stop_reason: str
    total_calls: int  # warm-up and timed calls
    timed_calls: int
    timed_wall_s: float
    config: dict[str, Any] = field(default_factory=dict)
    turns: list[tuple[float, float, int]] = field(default_factory=list)  # lockstep: each turn's span, samples
    # the host-state probe's turns, if it ran: (samples taken before the turn, seconds per fork-join,
    # seconds per paired-work call; ``HostProbe.reading``)
    probe_turns: list[tuple[int, float, float]] = field(default_factory=list)


def _ci_rel(samples: list[float]) -> float:
    if len(samples) < 6:
        return math.inf
    lo, hi = median_ci(samples)
    mid = sorted(samples)[len(samples) // 2]
    return max(mid - lo, hi - mid) / mid if mid > 0 else math.inf


def measure(fn: Callable[[], Any], config: TimerConfig | None = None,
            on_progress: Callable[[str, int], None] | None = None,
            block_timer: Callable[[int], float] | None = None, turns: Turns | None = None,
            probe: HostProbe | None = None) -> Measurement:
    """Time ``fn`` (one synchronous inference) by the method described in the module docstring.

    ``block_timer(k)``, when given, runs ``k`` calls and returns seconds per call from the device's
    own clock (a remote device); the warm-up, blocking and stopping rules are the same. With
    ``turns`` the calls run only during this framework's turns (lockstep); with ``probe`` its
    turns are timed between blocks."""
    cfg = config or TimerConfig()
    # The stopping rule's first interval would import scipy.stats between two timed blocks: 0.9 s
    # of the time budget (measured), and possibly caches left cold for the next block. Imported
    # now (a no-op in a worker from the preloaded fork server).
    import scipy.stats  # noqa: F401
    if on_progress:  # at most 4 messages a second: they cross a pipe from the process being measured
        on_progress = _at_most_every(0.25, on_progress)
    blocks = _Blocks(fn, block_timer)
    warmup = _warm_up(blocks, cfg, turns, on_progress)
    estimate = _steady(warmup)
    # With a fixed run count the user asked for that many samples: one call each.
    fast = 0 < estimate < cfg.block_target_s and cfg.fixed_runs is None
    block = math.ceil(cfg.block_target_s / estimate) if fast else 1
    if 0 < cfg.pause_turn_call_s <= estimate:
        def rewarm() -> None:
            time.sleep(cfg.turn_settle_s)
    else:
        def rewarm() -> None:  # the model's data back in the caches, untimed
            blocks.run(1)
    lockstep = TurnClock(turns, rewarm) if turns is not None else None
    timed = _timed_phase(blocks, block, cfg, lockstep, probe, rewarm, on_progress)
    if lockstep is not None:
        lockstep.stop()
    return Measurement(samples_s=timed.samples, warmup_s=warmup, block_size=block, stop_reason=timed.reason,
                       total_calls=blocks.calls, timed_calls=timed.calls, timed_wall_s=timed.wall_s,
                       config=cfg.to_json(), turns=lockstep.spans if lockstep is not None else [],
                       probe_turns=timed.probe_turns)


class _Blocks:
    """Runs ``k`` back-to-back calls and returns seconds per call (from ``block_timer`` when the
    device keeps its own clock), counting every call made."""

    def __init__(self, fn: Callable[[], Any], block_timer: Callable[[int], float] | None) -> None:
        self.fn, self.block_timer, self.calls = fn, block_timer, 0

    def run(self, k: int) -> float:
        self.calls += k
        if self.block_timer is not None:
            return self.block_timer(k)
        t0 = time.perf_counter()
        for _ in range(k):
            self.fn()
        return (time.perf_counter() - t0) / k


def _warm_up(blocks: _Blocks, cfg: TimerConfig, turns: Turns | None,
             on_progress: Callable[[str, int], None] | None) -> list[float]:
    """Warm-up, one call at a time (a call's first runs are the ones that differ); in lockstep
    the whole warm-up is one turn."""
    warmup: list[float] = []
    if turns is not None:
        turns.acquire()
    start = time.perf_counter()
    while not _warm(warmup, time.perf_counter() - start, cfg):
        warmup.append(blocks.run(1))
        if on_progress:
            on_progress("warmup", len(warmup))
    if turns is not None:
        turns.release()
    return warmup


def _warm(warmup: list[float], elapsed: float, cfg: TimerConfig) -> bool:
    """Whether the warm-up calls so far are enough (the module docstring's rules)."""
    if cfg.fixed_warmup_runs is not None:
        return len(warmup) >= cfg.fixed_warmup_runs
    if not warmup:  # at least one warm-up call, whatever the times
        return False
    slow = cfg.slow_warmup_runs  # (the last few only: a fast call warms up 1000s of times)
    return ((len(warmup) >= cfg.min_warmup_runs and elapsed >= cfg.min_warmup_s)
            or elapsed >= cfg.max_warmup_s
            or (len(warmup) >= slow and sorted(warmup[-slow:])[slow // 2] >= cfg.slow_call_s))


def _steady(warmup: list[float]) -> float:
    """The steadiest warm-up estimate of one call: the median of the last five."""
    recent = sorted(warmup[-5:])
    return recent[len(recent) // 2] if recent else 0.0


@dataclass
class _Timed:
    samples: list[float] = field(default_factory=list)
    calls: int = 0
    reason: str = ""
    wall_s: float = 0.0
    probe_turns: list[tuple[int, float, float]] = field(default_factory=list)


def _timed_phase(blocks: _Blocks, block: int, cfg: TimerConfig, lockstep: TurnClock | None,
                 probe: HostProbe | None, rewarm: Callable[[], None],
                 on_progress: Callable[[str, int], None] | None) -> _Timed:
    """Blocks of ``block`` calls until the stopping rule holds. In lockstep, or with probe turns,
    only the model's own timed work counts towards the phase's durations."""
    clock = time.perf_counter
    out = _Timed()
    start = clock()
    own = 0.0  # seconds spent timing (in lockstep, only inside this framework's turns)
    probed_at = -math.inf  # ``own`` at the last probe turn
    while True:
        elapsed = own if lockstep is not None or probe is not None else clock() - start
        out.reason = _stop_reason(out.samples, out.calls, elapsed, cfg)
        if out.reason:
            break
        if lockstep is not None:
            lockstep.before_block()
        t0 = clock()
        out.samples.append(blocks.run(block))
        own += clock() - t0
        out.calls += block
        if probe is not None and probe.due(own - probed_at, out.samples[-1]):
            out.probe_turns.append((len(out.samples), *probe.reading()))
            probed_at = own
            rewarm()
        if lockstep is not None:
            lockstep.after_block()
        if on_progress:
            on_progress("timed", out.calls)
    out.wall_s = clock() - start
    return out


def _stop_reason(samples: list[float], calls: int, elapsed: float, cfg: TimerConfig) -> str:
    """Why the timed phase stops now, or "" to go on."""
    if cfg.fixed_runs is not None:
        return f"fixed count of {cfg.fixed_runs} runs" if calls >= cfg.fixed_runs else ""
    n = len(samples)
    if n < cfg.min_timed_runs_always:
        return ""
    enough = n >= cfg.min_runs and elapsed >= cfg.min_time_s
    if enough and _ci_rel(samples) <= cfg.target_ci_rel:
        return f"95% CI of the median within +-{cfg.target_ci_rel:.0%}"
    if elapsed >= cfg.max_time_s:
        return f"maximum time {cfg.max_time_s:g} s reached" + (
            "" if enough else f" before {cfg.min_runs} runs / {cfg.min_time_s:g} s")
    return ""


def _at_most_every(seconds: float, fn: Callable[[str, int], None]) -> Callable[[str, int], None]:
    """``fn``, dropping calls that come less than ``seconds`` after the last one passed on."""
    last = [-math.inf]

    def call(phase: str, count: int) -> None:
        now = time.monotonic()
        if now - last[0] >= seconds:
            last[0] = now
            fn(phase, count)

    return call
