"""The machine and software a result came from, recorded with every result."""

from __future__ import annotations

import datetime as dt
import os
import platform
from pathlib import Path
from typing import Any

import psutil

from tvmbench.version import __version__, git_commit, package_versions


def cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def governor() -> str | None:
    path = Path("/sys/devices/system/cpu/cpu0/cpufreq/scaling_governor")
    try:
        return path.read_text().strip()
    except OSError:
        return None


def collect(threads: int) -> dict[str, Any]:
    load1 = os.getloadavg()[0] if hasattr(os, "getloadavg") else None
    # What other processes use right now: the load average trails by a minute and also counts a
    # run that just ended, so the warning below is based on a half-second sample instead.
    busy = psutil.cpu_percent(interval=0.5)
    return {
        "cpu_model": cpu_model(),
        "machine": platform.machine(),
        "physical_cores": psutil.cpu_count(logical=False),
        "logical_cores": psutil.cpu_count(logical=True),
        "threads_used": threads,
        "memory_total_bytes": psutil.virtual_memory().total,
        "governor": governor(),
        "load_avg_1min": load1,
        "cpu_busy_percent_before": busy,
        "os": platform.platform(),
        "python": platform.python_version(),
        "packages": package_versions(),
        "tvmbench_version": __version__,
        "tvmbench_commit": git_commit(),
        "date": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
    }


def warnings_for(env: dict[str, Any]) -> list[str]:
    """Reasons the numbers may be noisy, shown with the results."""
    notes = []
    busy = env.get("cpu_busy_percent_before")
    if busy is not None and busy > 25:
        notes.append(f"the machine was busy when the run started ({busy:.0f}% of the CPU used by other work)")
    gov = env.get("governor")
    if gov and gov != "performance":
        notes.append(f"CPU frequency governor is '{gov}', not 'performance': latencies can vary with clock speed")
    return notes
