"""The machine and software a result came from, recorded with every result."""

from __future__ import annotations

import contextlib
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


def _own_processes() -> list[psutil.Process]:
    me = psutil.Process()
    try:
        return [me, *me.children(recursive=True)]
    except psutil.Error:
        return [me]


def _cpu_seconds(procs: list[psutil.Process]) -> dict[int, float]:
    out = {}
    for p in procs:
        try:
            t = p.cpu_times()
            out[p.pid] = t.user + t.system
        except psutil.Error:
            pass
    return out


def busy_sample(interval: float = 0.5) -> tuple[float, list[str]]:
    """The share of the whole machine's CPU (0-100) that other work used over ``interval`` seconds,
    and the three busiest other processes ("name (percent of one core)").

    Other work is everything but this process and its children (its fork server and workers):
    the load average trails by a minute and counts a run that has just ended, so this samples
    instead, and subtracts tvmbench's own use from the machine's."""
    others = [p for p in psutil.process_iter(["name"]) if p.pid != os.getpid()]
    for p in others:
        with contextlib.suppress(psutil.Error):
            p.cpu_percent(None)  # starts each process's sample
    own = _own_processes()
    before = _cpu_seconds(own)
    total = psutil.cpu_percent(interval=interval)
    own_s = sum(t - before.get(pid, 0.0) for pid, t in _cpu_seconds(own).items())
    mine = {p.pid for p in own}
    busiest = []
    for p in others:
        with contextlib.suppress(psutil.Error):
            if p.pid not in mine and p.is_running():
                busiest.append((p.cpu_percent(None), p.info["name"]))
    busiest.sort(reverse=True)
    ours = 100.0 * own_s / (interval * (psutil.cpu_count() or 1))
    return max(0.0, total - ours), [f"{name} ({pct:.0f}%)" for pct, name in busiest[:3] if pct > 5]


def collect(threads: int) -> dict[str, Any]:
    load1 = os.getloadavg()[0] if hasattr(os, "getloadavg") else None
    busy, busiest = busy_sample()
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
        "busy_processes_before": busiest,
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
        who = env.get("busy_processes_before")
        notes.append(f"the machine was busy when the run started ({busy:.0f}% of the CPU used by other work"
                     + (f"; busiest: {', '.join(who)})" if who else ")"))
    gov = env.get("governor")
    if gov and gov != "performance":
        notes.append(f"CPU frequency governor is '{gov}', not 'performance': latencies can vary with clock speed")
    return notes
