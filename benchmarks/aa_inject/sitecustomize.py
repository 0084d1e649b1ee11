"""Loaded by every Python process started with this folder on PYTHONPATH (benchmarks/regression_aa.py
puts it there for its slowed runs only): TVM's timed call sleeps TVMBENCH_AA_SLEEP_S more, so the
benchmark can check that `tvmbench diff` flags a known slowdown. Nothing in tvmbench reads this."""

import os

_delay = float(os.environ.get("TVMBENCH_AA_SLEEP_S", "0") or 0)
if _delay > 0:
    import time

    from tvmbench.backends.tvm import TVMBackend

    _run = TVMBackend.run

    def _slowed(self):  # type: ignore[no-untyped-def]
        _run(self)
        time.sleep(_delay)

    TVMBackend.run = _slowed
