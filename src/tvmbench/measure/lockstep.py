"""Lockstep: the frameworks of one round measured in short alternating turns, not one after another.

On a shared machine, interference comes in bursts of a few seconds. Measured one after the other,
a burst lands on whichever framework is being timed and becomes a difference between frameworks.
In lockstep every framework's worker is prepared and warmed up first (all of them alive at once),
then they take turns of about ``TURN_S`` each, in a fixed rotation, so a burst of a few seconds
falls on all of them alike; the first call of each turn is run untimed (the other framework has
just had the caches), or for calls of a tenth of a second and more a short pause instead
(``timer.py``). Only one worker computes at any moment: the others wait for their turn.

The :class:`Baton` lives in shared memory (a condition variable over a small array), handed to
every worker when it is spawned. The parent abandons a worker's place when the worker ends, for
whatever reason (done, failed before it arrived, killed at its timeout), so the others never wait
for a worker that is gone.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

TURN_S = 0.25  # how long a framework measures before handing over
SETTLE_S = 0.05  # a turn's pause before its first profiled call (``Pacer``), as ``timer.py``'s turn_settle_s
_TURN, _ARRIVED = 0, 1  # the array's first two slots; then N arrival flags, then N done flags


class Baton:
    """Whose turn it is among ``n`` workers, in shared memory (create it with the spawn context
    the workers are started with)."""

    def __init__(self, n: int, ctx: Any) -> None:
        self.n = n
        self.cond = ctx.Condition()
        self.state = ctx.Array("i", [0, 0] + [0] * (2 * n), lock=False)

    def _arrived(self, i: int) -> int:
        return 2 + i

    def _done(self, i: int) -> int:
        return 2 + self.n + i

    def arrive(self, i: int) -> None:
        """Worker ``i`` is ready to measure; returns when every worker is (or has gone)."""
        with self.cond:
            self._mark_arrived(i)
            self.cond.wait_for(lambda: self.state[_ARRIVED] >= self.n)

    def acquire(self, i: int) -> None:
        with self.cond:
            self.cond.wait_for(lambda: self.state[_TURN] == i)

    def release(self, i: int) -> None:
        with self.cond:
            self._advance(i)

    def abandon(self, i: int) -> None:
        """Worker ``i`` measures no more (finished, failed or killed): it stops holding anyone up.
        Safe to call more than once, from the worker or from the parent."""
        with self.cond:
            self._mark_arrived(i)
            self.state[self._done(i)] = 1
            if self.state[_TURN] == i:
                self._advance(i)
            self.cond.notify_all()

    def _mark_arrived(self, i: int) -> None:
        if not self.state[self._arrived(i)]:
            self.state[self._arrived(i)] = 1
            self.state[_ARRIVED] += 1
            self.cond.notify_all()

    def _advance(self, i: int) -> None:
        """The turn goes to the next worker after ``i`` still measuring (``i`` again if it is the
        only one left)."""
        for step in range(1, self.n + 1):
            j = (i + step) % self.n
            if not self.state[self._done(j)]:
                self.state[_TURN] = j
                break
        self.cond.notify_all()


@dataclass
class Turns:
    """One worker's place in a :class:`Baton` (picklable at spawn: it is part of the job)."""

    baton: Baton
    index: int
    turn_s: float = TURN_S

    def arrive(self) -> None:
        self.baton.arrive(self.index)

    def acquire(self) -> None:
        self.baton.acquire(self.index)

    def release(self) -> None:
        self.baton.release(self.index)

    def finish(self) -> None:
        self.baton.abandon(self.index)


class TurnClock:
    """The timer's view of lockstep: measured time counts only inside this framework's turns, and
    each turn starts with ``rewarm`` (an untimed call, or a pause for slow calls), not a sample.
    Records each turn's wall clock span (``time.time()``, comparable across processes) and how many
    samples it took: (start, end, samples). The samples are the measurement's, in order, so the
    turns split them, and a turn's median can be set against the other frameworks' turns next to
    it (``stats.turn_paired_ratio``)."""

    def __init__(self, turns: Turns, rewarm: Callable[[], Any]) -> None:
        self.turns, self.rewarm = turns, rewarm
        self.holding = False
        self.started = 0.0
        self.spans: list[tuple[float, float, int]] = []

    def before_block(self) -> None:
        if not self.holding:
            self.turns.acquire()
            self.holding, self.started = True, time.perf_counter()
            self.spans.append((time.time(), time.time(), 0))
            self.rewarm()

    def after_block(self) -> None:
        start, _, n = self.spans[-1]
        self.spans[-1] = (start, time.time(), n + 1)
        if time.perf_counter() - self.started >= self.turns.turn_s:
            self.stop()

    def stop(self) -> None:
        if self.holding:
            start, _, n = self.spans[-1]
            self.spans[-1] = (start, time.time(), n)
            self.turns.release()
            self.holding = False


class Pacer:
    """Calls made in this worker's turns: ``pacer(fn)`` waits for the turn (a turn's first call
    is preceded by ``rewarm``), calls ``fn`` and hands the turn on once it has lasted ``turn_s``;
    ``pacer.profiled(fn)`` the same with a pause of ``SETTLE_S`` instead of the warm-up call
    (for calls a profiler records, which would record the warm-up too). Without turns both just
    call ``fn``.

    For work measured in pieces that are not one timer's samples (``tvmbench explain``'s plain,
    instrumented and profiled runs): two frameworks' profiles taken one after the other each
    land in whatever state the host was in at the time. On the 2-vCPU EPYC VM TVM's small
    kernels ran 2.5x slower in its far state, and explain put BERT's layer norms at 2.6x
    OpenVINO's where, in the near state, they were 1.1-1.2x; taken in turns, both sides see the
    same mix of states."""

    def __init__(self, turns: Turns | None, rewarm: Callable[[], Any] | None = None) -> None:
        self.rewarm, self._warm_up = rewarm, True
        self.clock = TurnClock(turns, self._rewarm) if turns is not None else None

    def _rewarm(self) -> None:
        # (a pause for the other framework's threads to stop spinning, as timer.py's, before the
        # warm-up call too: without it, TVM's pool spinning on into OpenVINO's turn put OpenVINO's
        # resnet18 in explain at 3.9 ms against 2.2, session 87)
        time.sleep(SETTLE_S)
        if self._warm_up and self.rewarm is not None:
            self.rewarm()

    def __call__(self, fn: Callable[[], Any]) -> Any:
        return self._paced(fn, warm_up=True)

    def profiled(self, fn: Callable[[], Any]) -> Any:
        return self._paced(fn, warm_up=False)

    def _paced(self, fn: Callable[[], Any], warm_up: bool) -> Any:
        if self.clock is None:
            return fn()
        self._warm_up = warm_up
        self.clock.before_block()
        try:
            return fn()
        finally:
            self.clock.after_block()

    def arrive(self) -> None:
        """Ready to measure: wait for the other workers (turns begin when all have arrived)."""
        if self.clock is not None:
            self.clock.turns.arrive()

    def finish(self) -> None:
        """Measured all: hand the turn on for good."""
        if self.clock is not None:
            self.clock.stop()
            self.clock.turns.finish()
