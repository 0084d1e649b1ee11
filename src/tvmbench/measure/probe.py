"""The host-speed probe: a fixed piece of work timed beside the model, so two runs can be compared
for the code and not for the hour.

On a shared machine the same build's median moves by 5-15 % from one process to the next, minutes
apart (a neighbour's load, the host's clock), while two builds timed side by side in one process
move together (their ratio holds within 1-2 %). A diff of two runs made at different times cannot
pair them, so it pairs each with the machine: every worker times this probe in short turns
between its own blocks, and ``tvmbench diff`` compares model time over probe time. A slowdown
of the model's own code moves only the numerator; a slower hour moves both.

The work is a small single-precision matrix product on the run's threads (NumPy's BLAS, seeded
inputs, warm in cache): the probe does not change with tvmbench's code, only with NumPy's, whose
version the run records. A memory stream and a TVM kernel on TVM's own thread pool were tried
beside it (``benchmarks/host_probe.py``) and tracked the model's movement less well.
"""

from __future__ import annotations

import time

import numpy as np

PROBE_EVERY_S = 0.25  # timed model work between two probe turns (more when a call is slow)
PROBE_TURN_S = 0.02  # one probe turn: calls timed for this long, at least MIN_CALLS
MIN_CALLS = 3
OVERHEAD = 0.125  # a probe turn and its re-warm-up call cost at most this share of the timed work


class HostProbe:
    """``probe()`` runs one unit of the fixed work; ``turn()`` times a short series of them and
    returns their per-call seconds."""

    def __init__(self, gemm: int = 256) -> None:
        rng = np.random.default_rng(0)
        self.a = rng.standard_normal((gemm, gemm), dtype=np.float32)
        self.b = rng.standard_normal((gemm, gemm), dtype=np.float32)
        self.c = np.empty((gemm, gemm), dtype=np.float32)
        self.last_turn_s = PROBE_TURN_S
        self.probe()  # first calls allocate and spin up BLAS's threads

    def probe(self) -> None:
        np.matmul(self.a, self.b, out=self.c)

    def turn(self) -> list[float]:
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
        return times

    def due(self, since_last_s: float, call_s: float) -> bool:
        """Whether a probe turn is due after ``since_last_s`` of timed model work, when one model
        call (the re-warm-up a turn costs) takes ``call_s``: the last turn and its re-warm-up
        stay within ``OVERHEAD`` of the timed work."""
        return since_last_s >= max(PROBE_EVERY_S, (self.last_turn_s + call_s) / OVERHEAD)
