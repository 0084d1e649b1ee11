"""Figures, drawn with matplotlib when it is installed (the `plot` extra); without it the caller
gets ``None`` and says so, and every number stays in the JSON/CSV next to the figure."""

from __future__ import annotations

import importlib.util
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from tvmbench.files import replacing


def available() -> bool:
    return importlib.util.find_spec("matplotlib") is not None


def _save(fig: Any, path: Path) -> Path:
    with replacing(path, suffix=".png") as tmp:
        fig.savefig(tmp, dpi=120, bbox_inches="tight")
    return path


def _pyplot() -> Any:
    import matplotlib

    matplotlib.use("Agg")  # files only: no display on servers and CI
    import matplotlib.pyplot as plt

    return plt


def tuning_curve_png(curve: Sequence[dict[str, Any]], path: str | Path, title: str) -> Path | None:
    """Estimated tuned-kernel time per inference against trials and against minutes, side by side."""
    if not available():
        return None
    points = [p for p in curve if p.get("estimate_ms") is not None]
    plt = _pyplot()
    fig, (by_trials, by_time) = plt.subplots(1, 2, figsize=(10, 3.8), sharey=True)
    by_trials.plot([p["trials"] for p in points], [p["estimate_ms"] for p in points], drawstyle="steps-post")
    by_time.plot([p["seconds"] / 60 for p in points], [p["estimate_ms"] for p in points], drawstyle="steps-post")
    by_trials.set_xlabel("trials (including those already in the database)")
    by_time.set_xlabel("minutes of this run")
    by_trials.set_ylabel("tuned kernels, ms per inference (estimate)")
    for ax in (by_trials, by_time):
        ax.grid(alpha=0.3)
        ax.set_ylim(bottom=0)
    fig.suptitle(title)
    try:
        return _save(fig, Path(path))
    finally:
        plt.close(fig)


def throughput_png(series: dict[str, list[tuple[int, float]]], path: str | Path, title: str,
                   xlabel: str = "batch size") -> Path | None:
    """Throughput against batch size (or sequence length), one line per framework."""
    if not available():
        return None
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(6.5, 4))
    for name, pts in sorted(series.items()):
        pts = sorted(pts)
        ax.plot([x for x, _ in pts], [y for _, y in pts], marker="o", label=name)
    ax.set_xscale("log", base=2)
    ax.set_xlabel(xlabel)
    ax.set_ylabel("throughput (samples/s)")
    ax.grid(alpha=0.3)
    ax.legend()
    ax.set_title(title)
    try:
        return _save(fig, Path(path))
    finally:
        plt.close(fig)


def roofline_png(points: Sequence[dict[str, Any]], peak_gflops: float, bandwidth_gbs: float, path: str | Path,
                 title: str) -> Path | None:
    """Operators on the machine's roofline: intensity (FLOP/byte) against achieved GFLOP/s, log
    scales, each point's area proportional to its share of the model's time; the roof is
    min(peak, intensity x bandwidth), memory's slope solid and, where the points carry them
    (``data_from``, ``slope_gbs``: the cache-aware roofline), each cache level's dashed."""
    if not available():
        return None
    import numpy as np

    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(7, 4.5))
    xs = [p["intensity"] for p in points]
    lo, hi = min([*xs, 0.1]) / 2, max([*xs, 2 * peak_gflops / bandwidth_gbs]) * 2
    grid = np.geomspace(lo, hi, 200)
    ax.plot(grid, np.minimum(peak_gflops, grid * bandwidth_gbs), color="black", linewidth=1.2,
            label=f"roof: {peak_gflops:.0f} GFLOP/s, memory {bandwidth_gbs:.0f} GB/s")
    levels = {p["data_from"]: p["slope_gbs"] for p in points if p.get("data_from") not in (None, "DRAM")}
    for level, gbs in sorted(levels.items()):
        ax.plot(grid, np.minimum(peak_gflops, grid * gbs), color="black", linewidth=0.8, linestyle="--",
                alpha=0.6, label=f"{level} {gbs:.0f} GB/s (operators whose bytes fit there)")
    kinds = sorted({p["kind"] for p in points})
    for kind in kinds:
        mine = [p for p in points if p["kind"] == kind]
        ax.scatter([p["intensity"] for p in mine], [p["gflops"] for p in mine],
                   s=[max(8.0, 12 * p["share_percent"]) for p in mine], alpha=0.6, label=kind)
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("arithmetic intensity (FLOP per compulsory byte)")
    ax.set_ylabel("achieved GFLOP/s (inside the model)")
    ax.grid(alpha=0.3, which="both")
    ax.legend(fontsize=7, loc="lower right", markerscale=0.4)
    ax.set_title(title)
    try:
        return _save(fig, Path(path))
    finally:
        plt.close(fig)


def distribution_png(samples_ms: dict[str, Sequence[float]], path: str | Path, title: str) -> Path | None:
    """Each framework's timed samples as a violin (the shape of its latency distribution), with
    its median marked; one row per framework, on a shared log time axis."""
    if not available():
        return None
    series = {k: list(v) for k, v in samples_ms.items() if len(v) >= 2}
    if not series:
        return None
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(7, 0.7 + 0.6 * len(series)))
    names = list(series)
    ax.violinplot([series[n] for n in names], orientation="horizontal", showmedians=True, showextrema=False)
    ax.set_yticks(range(1, len(names) + 1), names)
    ax.set_xscale("log")
    ax.set_xlabel("latency per inference (ms, log scale)")
    ax.grid(alpha=0.3, axis="x", which="both")
    ax.set_title(title, fontsize=10)
    try:
        return _save(fig, Path(path))
    finally:
        plt.close(fig)


def trend_png(series: dict[str, Sequence[tuple[str, float]]], path: str | Path, title: str) -> Path | None:
    """Median latency of each series over the history entries, oldest first (x: entry order,
    labelled with dates)."""
    if not available():
        return None
    series = {k: list(v) for k, v in series.items() if v}
    if not series:
        return None
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(7, 3.5))
    for name, points in sorted(series.items()):
        ax.plot(range(len(points)), [m for _, m in points], marker="o", label=name)
    longest = max(series.values(), key=len)
    step = max(1, len(longest) // 6)
    ax.set_xticks(range(0, len(longest), step), [d[:10] for d, _ in longest][::step], fontsize=7)
    ax.set_ylabel("median latency (ms)")
    ax.set_ylim(bottom=0)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7)
    ax.set_title(title, fontsize=10)
    try:
        return _save(fig, Path(path))
    finally:
        plt.close(fig)
