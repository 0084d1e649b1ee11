"""Loaded by every Python process started with this folder on PYTHONPATH (benchmarks/regression_aa.py
puts it there for its slowed runs only): TVM's timed call takes TVMBENCH_AA_SLEEP_S more, so the
benchmark can check that `tvmbench diff` flags a known slowdown. The extra time is spun on the
clock, not slept: `time.sleep` of a millisecond overshoots by most of another (a "10 %" sleep
measured +16 %). Nothing in tvmbench reads this."""

import os

_delay = float(os.environ.get("TVMBENCH_AA_SLEEP_S", "0") or 0)
if _delay > 0:
    import time

    from tvmbench.backends.tvm import TVMBackend

    _run = TVMBackend.run

    def _slowed(self):  # type: ignore[no-untyped-def]
        _run(self)
        end = time.perf_counter() + _delay
        while time.perf_counter() < end:
            pass

    TVMBackend.run = _slowed
