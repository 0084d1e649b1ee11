"""The host-state probe: which state the machine's cores were in while each sample was timed, so
two runs can be compared state for state and not hour for hour.

On the 2-vCPU AMD EPYC VM of the development notes the same build's median jumps by about 30 %
between two levels, for tens of seconds at a time, in the middle of a process or between two
(resnet18 11.0 and 14.2 ms, nothing in between). Each core alone never moves (a one-thread
matrix product on either vCPU: 324-326 us all along); what moves is the time for the two cores
to hand a cache line to each other: a C ping-pong between threads pinned to the two vCPUs reads
60-80 ns in one state and 320-350 ns in the other, and flips exactly when the model does
(presumably the hypervisor placing the two vCPUs on one core complex, or on two). Any work the
two threads share pays it: the model's parallel loops, BLAS's threads. Dividing by a probe that
pays it too (a 2-thread matrix product, the first version of this probe) halved the spread but
could not remove it: the product and the model pay it in different proportions.

It runs only where the model runs on TVM's pool (``Backend.tvm_thread_pool``): there it adds no
threads; beside another framework's pool its workers would compete with that pool's.

So this probe does not measure the machine's speed; it names the state. Its work is TVM
fork-joins on TVM's own thread pool (a kernel of ``FORK_JOINS`` parallel loops of two tiny
tasks each): on that VM 0.9-1.1 us per fork-join in the near state, 1.4-1.6 us in the far one.

A third state hides from the fork-joins (session 37): now and then, for seconds, the hypervisor
runs the two vCPUs on one physical core's two hyper-threads. Fork-joins get faster (0.74 us:
the threads share their caches) and the model twice as slow (resnet18 22 ms), because the two
threads share one core's arithmetic. A second reading names it: a parallel loop of two tasks of
more independent multiply-adds than one core holds in flight (``paired_work_kernel``), 10 us
per call on two cores and 18 us on one core's two threads (a watch of 8 minutes on the VM: it
read 18.1 us in 11 % of the turns, with fork-joins of 0.74-0.77 us, and 20.6 us in another 3 %,
with fork-joins of 2.8-6 us; one task alone 9.0 us throughout; docs/performance.md, session 37).

The timer runs a short turn of both between blocks (``reading``), each turn's values are kept
with the number of samples taken before it, and ``tvmbench diff`` groups the turns into states
(``HostStates``: along each reading, clusters separated by a gap of more than ``STATE_GAP``),
labels each sample by the turns around it (``label_samples``) and compares the two runs within
each state both have. On a machine without such states every turn falls in one cluster and
nothing changes.
"""

from __future__ import annotations

import functools
import math
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

PROBE_EVERY_S = 0.25  # timed model work between two probe turns (more when a call is slow)
PROBE_TURN_S = 0.02  # one probe turn: calls timed for this long, at least MIN_CALLS
MIN_CALLS = 3
OVERHEAD = 0.125  # a probe turn and its re-warm-up call cost at most this share of the timed work
FORK_JOINS = 256  # parallel loops per probe call
STATE_GAP = 0.15  # two probe values more than 15 % apart with none between them: two host states
WORK_LANES = 256  # floats per task of the paired-work kernel (16 AVX-512 registers, more than in flight)
WORK_STEPS = 2000  # multiply-adds per float: about 10 us per call on the EPYC VM
WORK_CALLS = 15  # paired-work calls per probe turn (their median is the reading)
WORK_GAP = 0.3  # paired-work readings: two cores 9.6-12.5 us, one core's two hyper-threads 15-22 us
ONE_CORE = 1.6  # a state whose paired work takes this much longer than the fastest's: both threads on one core


@functools.cache
def _fork_join_kernel():  # type: ignore[no-untyped-def]
    """A TVM function of ``FORK_JOINS`` parallel loops in sequence, each two tasks of a few adds:
    its time is the pool's fork-join latency (the cores' hand-over), not compute."""
    import tvm
    from tvm.script import tirx as T

    @T.prim_func(s_tir=True)
    def fork_joins(x: T.Buffer((FORK_JOINS, 2, 16), "float32")) -> None:
        T.func_attr({"global_symbol": "main", "tirx.noalias": True})
        for i in range(FORK_JOINS):
            for p in T.parallel(2):
                for q in range(16):
                    with T.sblock("x"):
                        vi, vp, vq = T.axis.remap("SSS", [i, p, q])
                        x[vi, vp, vq] = x[vi, vp, vq] + T.float32(1)

    return tvm.compile(tvm.IRModule({"main": fork_joins}), target="llvm")["main"]


@functools.cache  # (compiled once per process)
def paired_work_kernel(tasks: int = 2):  # type: ignore[no-untyped-def]
    """A TVM function of one parallel loop of two tasks, each ``WORK_STEPS`` multiply-adds over
    ``WORK_LANES`` independent floats in L1: more independent work than one core's arithmetic
    units hold, so its time doubles when the two tasks share one physical core (the VM's two
    vCPUs on one core's two hyper-threads) and barely moves otherwise. ``tasks=1``: one task on
    the calling thread, the yardstick (``benchmarks/host_states.py``)."""
    import tvm
    from tvm.script import tirx as T

    from tvmbench.targets import host_cpu

    @T.prim_func(s_tir=True)
    def paired_work(x: T.Buffer((2, WORK_LANES), "float32")) -> None:
        T.func_attr({"global_symbol": "main", "tirx.noalias": True})
        for p in T.parallel(2):
            for r in range(WORK_STEPS):
                for j in T.vectorized(WORK_LANES):
                    with T.sblock("x"):
                        vp, vr, vj = T.axis.remap("SRS", [p, r, j])
                        x[vp, vj] = x[vp, vj] * T.float32(0.999) + T.float32(0.5)

    @T.prim_func(s_tir=True)
    def one_task(x: T.Buffer((2, WORK_LANES), "float32")) -> None:
        T.func_attr({"global_symbol": "main", "tirx.noalias": True})
        for r in range(WORK_STEPS):
            for j in T.vectorized(WORK_LANES):
                with T.sblock("x"):
                    vr, vj = T.axis.remap("RS", [r, j])
                    x[0, vj] = x[0, vj] * T.float32(0.999) + T.float32(0.5)

    # for this CPU's vectors: compiled for the baseline ISA it spills and reads 4x slower, less steadily
    return tvm.compile(tvm.IRModule({"main": paired_work if tasks == 2 else one_task}),
                       target={"kind": "llvm", "mcpu": host_cpu()})["main"]


def median_call_s(kernel: Any, arg: Any, calls: int = WORK_CALLS) -> float:
    """The median seconds of ``calls`` calls of ``kernel(arg)``, after one untimed call."""
    kernel(arg)
    times = []
    for _ in range(calls):
        t0 = time.perf_counter()
        kernel(arg)
        times.append(time.perf_counter() - t0)
    return float(np.median(times))


class HostProbe:
    """``probe()`` runs one call of the fork-join kernel; ``turn()`` times a short series of them
    and returns the median seconds per fork-join; ``reading()`` adds the median seconds of the
    paired-work kernel (both cores computing at once), the second coordinate of a host state."""

    def __init__(self) -> None:
        import tvm

        self.kernel = _fork_join_kernel()
        self.x = tvm.runtime.tensor(np.zeros((FORK_JOINS, 2, 16), dtype="float32"), tvm.cpu())
        self.work = paired_work_kernel()
        self.w = tvm.runtime.tensor(np.ones((2, WORK_LANES), dtype="float32"), tvm.cpu())
        self.last_turn_s = PROBE_TURN_S
        self.probe()  # the first call starts TVM's pool

    def probe(self) -> None:
        self.kernel(self.x)

    def turn(self) -> float:
        clock = time.perf_counter
        start = clock()
        self.probe()  # the model has just had the caches
        times: list[float] = []
        end = clock() + PROBE_TURN_S
        while len(times) < MIN_CALLS or clock() < end:
            t0 = clock()
            self.probe()
            times.append(clock() - t0)
        self.last_turn_s = clock() - start
        return float(np.median(times)) / FORK_JOINS

    def reading(self) -> tuple[float, float]:
        """(seconds per fork-join, seconds per paired-work call): the first tells cores on one
        core complex from cores on two, the second two cores from one core's two hyper-threads."""
        per_fork_join = self.turn()
        start = time.perf_counter()
        paired = median_call_s(self.work, self.w)
        self.last_turn_s += time.perf_counter() - start
        return per_fork_join, paired

    def due(self, since_last_s: float, call_s: float) -> bool:
        """Whether a probe turn is due after ``since_last_s`` of timed model work, when one model
        call (the re-warm-up a turn costs) takes ``call_s``: the last turn and its re-warm-up
        stay within ``OVERHEAD`` of the timed work."""
        return since_last_s >= max(PROBE_EVERY_S, (self.last_turn_s + call_s) / OVERHEAD)


MIN_STATE_SHARE = 0.1  # a state holds at least this share of the probe's turns (and 3 of them)


def states(values: Sequence[float], gap: float = STATE_GAP, min_share: float = MIN_STATE_SHARE) -> list[float]:
    """The boundaries between host states among probe ``values`` (all the turns of the runs to be
    compared, pooled): the widest gap between consecutive sorted values, if wider than ``gap``
    and with ``min_share`` of the values (and 3) on each side, split in two at its geometric
    midpoint, and each side split again the same way. A value's state is how many boundaries lie
    below it; no boundaries, one state. (Stray turns, a preempted thread's, stay in the state next
    to them rather than found one: on the EPYC VM 3 of 44 turns read 0.7 us beside the 1.0 us
    near state.)"""
    ordered = sorted(v for v in values if v > 0)
    least = max(3, math.ceil(min_share * len(ordered)))

    def split(lo: int, hi: int) -> list[float]:  # boundaries within ordered[lo:hi]
        cuts = [i for i in range(lo + least, hi - least + 1) if ordered[i] > ordered[i - 1] * (1 + gap)]
        if not cuts:
            return []
        i = max(cuts, key=lambda c: ordered[c] / ordered[c - 1])
        return [*split(lo, i), math.sqrt(ordered[i - 1] * ordered[i]), *split(i, hi)]

    return split(0, len(ordered))


def strays(values: Sequence[float], gap: float = STATE_GAP, min_share: float = MIN_STATE_SHARE
           ) -> list[tuple[float, float]]:
    """Ranges of probe values set apart from all the others by gaps wider than ``gap`` but too few
    to be a state (``states``' share and count): the host somewhere else for a second or two.
    Filed with the state next to them, the samples around them were timed in a state the other
    side may never have seen: on the Zen 5 VM three turns of one round read 0.58-0.89 us among
    1.27-1.78 us ones, that round's 5th percentile came out 12 % below its three others', and a
    10 % slowdown read "no change" (docs/performance.md, session 52). Only while such ranges hold
    under ``min_share`` of the turns in all: a spread with no clear states marks nothing."""
    ordered = sorted(v for v in values if v > 0)
    least = max(3, math.ceil(min_share * len(ordered)))
    runs: list[list[float]] = []
    for i, v in enumerate(ordered):
        if i == 0 or v > ordered[i - 1] * (1 + gap):
            runs.append([])
        runs[-1].append(v)
    found = [r for r in runs if len(r) < least] if len(runs) > 1 else []
    return [(r[0], r[-1]) for r in found] if sum(map(len, found)) < min_share * len(ordered) else []


def state_of(value: float, bounds: Sequence[float]) -> int:
    return sum(value > b for b in bounds)


# A probe turn as stored: (samples taken before it, microseconds per fork-join[, microseconds per
# paired-work call]); runs from before the paired-work reading have the first two only.
Turn = Sequence[float]


@dataclass(frozen=True)
class HostStates:
    """The host states among a set of probe turns: ``states`` found along each reading separately
    (fork-join microseconds; paired-work microseconds when every turn has it), a turn's state the
    combination of its two. On the EPYC VM the fork-joins split the cores on one core complex
    (0.8-1.0 us) from two (1.4-2.0 us), and the paired work splits two cores (10 us) from one
    core's two hyper-threads (18 us, the model twice as slow, with fork-joins of 0.74 us that
    the first reading alone files with the near state)."""

    bounds: tuple[list[float], ...]
    names: tuple[str | None, ...]
    strays: tuple[tuple[float, float], ...] = ()  # fork-join readings of no state (``strays``)

    @classmethod
    def of(cls, turns: Sequence[Turn]) -> HostStates:
        dims = 2 if turns and all(len(t) > 2 for t in turns) else 1
        columns = [[float(t[1 + d]) for t in turns] for d in range(dims)]
        # a stretch on one core's hyper-threads is a state however short: no share asked of it
        bounds = tuple(states(c) if d == 0 else states(c, WORK_GAP, min_share=0) for d, c in enumerate(columns))
        sizes = [len(b) + 1 for b in bounds]
        by_state: dict[int, list[Turn]] = {}
        for t in turns:
            by_state.setdefault(cls._index(t, bounds, sizes), []).append(t)
        levels = [tuple(float(np.median([t[1 + d] for t in by_state[k]])) for d in range(dims))
                  if k in by_state else None for k in range(int(np.prod(sizes)))]
        least_work = min((lv[1] for lv in levels if lv is not None), default=0.0) if dims > 1 else 0.0
        names = []
        for lv in levels:
            if lv is None:
                names.append(None)
            elif len(sizes) < 2 or sizes[1] < 2:
                names.append(f"{lv[0]:.2f} us")
            else:  # the paired work split the states: say which state had the two threads on one core
                names.append(f"{lv[0]:.2f} us/{lv[1]:.1f} us" + (" (one core)" if lv[1] >= ONE_CORE * least_work else ""))
        return cls(bounds, tuple(names), tuple(strays(columns[0])) if columns else ())

    @staticmethod
    def _index(turn: Turn, bounds: tuple[list[float], ...], sizes: list[int]) -> int:
        k = 0
        for d, b in enumerate(bounds):
            k = k * sizes[d] + state_of(float(turn[1 + d]), b)
        return k

    def of_turn(self, turn: Turn) -> int:
        return self._index(turn, self.bounds, [len(b) + 1 for b in self.bounds])

    def is_stray(self, turn: Turn) -> bool:
        return any(lo <= float(turn[1]) <= hi for lo, hi in self.strays)

    def __len__(self) -> int:
        return len(self.names)


def label_samples(count: int, turns: Sequence[Turn], host: HostStates) -> list[int | None]:
    """Each of a round's ``count`` samples labelled with the host state of the probe turns around
    it. A sample between two turns of different states is None (the state changed somewhere in
    between), and so is one next to a stray turn (``strays``); samples before the first turn or
    after the last take that turn's state (a state lasts seconds, a stretch 0.25 s)."""
    if not turns:
        return [None] * count
    marks = [(int(t[0]), -1 if host.is_stray(t) else host.of_turn(t)) for t in turns]
    labels: list[int | None] = []
    k = 0  # marks[k - 1] is the last turn at or before the sample, marks[k] the next
    for s in range(count):
        while k < len(marks) and marks[k][0] <= s:
            k += 1
        before, after = (marks[k - 1][1] if k > 0 else None), (marks[k][1] if k < len(marks) else None)
        label = before if after is None else after if before is None or before == after else None
        labels.append(None if label == -1 or -1 in (before, after) else label)
    return labels


def state_levels(values: Sequence[float], bounds: Sequence[float]) -> list[float | None]:
    """Each state's typical value along one reading (the median of its turns; None for a state no
    value fell in): ``benchmarks/state_kernels.py``'s near and far."""
    by_state: dict[int, list[float]] = {}
    for v in values:
        by_state.setdefault(state_of(v, bounds), []).append(v)
    return [float(np.median(by_state[k])) if k in by_state else None for k in range(len(bounds) + 1)]


def round_states(samples: Sequence[float], sizes: Sequence[int], turns: Sequence[Sequence[Turn]],
                 host: HostStates) -> list[dict[int, list[float]]]:
    """Per round (``sizes`` samples each, in order, with its probe ``turns``), its samples by host
    state (``label_samples``; a sample between turns of two states is in none)."""
    out, start = [], 0
    for size, round_turns in zip(sizes, turns, strict=True):
        by_state: dict[int, list[float]] = {}
        for value, label in zip(samples[start:start + size], label_samples(size, round_turns, host), strict=True):
            if label is not None:
                by_state.setdefault(label, []).append(value)
        out.append(by_state)
        start += size
    return out


def turn_states(sizes: Sequence[int], lockstep_turns: Sequence[Sequence[float]], turns: Sequence[Sequence[Turn]],
                host: HostStates) -> list[int | None]:
    """The host state of each lockstep turn that took samples (``stats.turn_medians``' turns, in
    order): the state of all its samples (``label_samples``), None when they are not all in one."""
    labels = [label for size, round_turns in zip(sizes, turns, strict=True)
              for label in label_samples(size, round_turns, host)]
    out, start = [], 0
    for turn in lockstep_turns:
        count = int(turn[2])
        if count:
            mine = set(labels[start:start + count])
            out.append(mine.pop() if len(mine) == 1 else None)
        start += count
    return out


# One framework's timed samples in order, its rounds' sizes, and each round's probe turns.
Timed = tuple[Sequence[float], Sequence[int], Sequence[Sequence[Turn]]]


@dataclass
class StateSplit:
    """How one run's samples fell into the host's states: each state's name (the probe's readings
    there, ``HostStates``) and, per framework, its median (ms) and share of its samples in each
    state (None where it has none). One state when the host never moved."""

    names: list[str]
    frameworks: dict[str, list[tuple[float, float] | None]]


def split_by_state(runs: Mapping[str, Timed]) -> StateSplit | None:
    """The states of the probe turns of all ``runs`` (frameworks of one run, probed alike), and
    each framework's samples split by them; None without probe turns."""
    turns = [t for _, _, per_round in runs.values() for r in per_round for t in r]
    if not turns:
        return None
    host = HostStates.of(turns)
    frameworks: dict[str, list[tuple[float, float] | None]] = {}
    for fw, (samples, sizes, per_round) in runs.items():
        pooled: dict[int, list[float]] = {}
        for by_state in round_states(samples, sizes, per_round, host):
            for k, mine in by_state.items():
                pooled.setdefault(k, []).extend(mine)
        frameworks[fw] = [(float(np.median(pooled[k])), len(pooled[k]) / len(samples)) if k in pooled else None
                          for k in range(len(host))]
    keep = [k for k in range(len(host)) if host.names[k] is not None]  # combinations no turn fell in
    return StateSplit([host.names[k] or "" for k in keep], {fw: [v[k] for k in keep] for fw, v in frameworks.items()})
