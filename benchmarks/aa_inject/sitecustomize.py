"""Loaded by every Python process started with this folder on PYTHONPATH (benchmarks/regression_aa.py
puts it there for its slowed runs only): TVM's timed call is made slower, so the benchmark can
check that `tvmbench diff` flags a known slowdown. Nothing in tvmbench reads this.

- ``TVMBENCH_AA_SLOWDOWN=0.10``: each call takes 10 % more than its own untouched part took. This
  is code 10 % slower in whatever state the host is in, as a real regression is: on the Ice Lake
  VM a fixed delay was +16 % of a call timed in the host's fast level and +5 % in its slow level
  (session 116).
- ``TVMBENCH_AA_SLEEP_S=0.0011``: each call takes that many seconds more (before session 117).

The extra time is spun on the clock, not slept: `time.sleep` of a millisecond overshoots by most
of another (a "10 %" sleep measured +16 %)."""

import os

_share = float(os.environ.get("TVMBENCH_AA_SLOWDOWN", "0") or 0)
_delay = float(os.environ.get("TVMBENCH_AA_SLEEP_S", "0") or 0)
if _share > 0 or _delay > 0:
    import time

    from tvmbench.backends.tvm import TVMBackend

    _run = TVMBackend.run

    def _slowed(self):  # type: ignore[no-untyped-def]
        start = time.perf_counter()
        _run(self)
        now = time.perf_counter()
        end = now + _delay + _share * (now - start)
        while time.perf_counter() < end:
            pass

    TVMBackend.run = _slowed
