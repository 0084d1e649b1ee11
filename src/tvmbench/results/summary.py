"""Summaries of a comparison, computed only from measured results.

Per point (model x shape): TVM's speedup over each framework with its 95 % interval
(none where either side failed or did not match the reference). Across points: the geometric mean
of those speedups, unclipped (slowdowns count) and clipped at 1.0 (the TorchInductor dashboard's
convention, labelled as such). Per model type: the range of TVM's speedups, the seed project's
summary form. Per model swept over batch sizes: throughput against batch size and the batch size
with the best throughput, for each framework.
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any

from rich.console import Console
from rich.table import Table

from tvmbench.backends import load_class, result_key
from tvmbench.measure import stats


def _label(point: dict[str, Any]) -> str:
    parts = [point["model"], f"b{point['batch_size']}"]
    if point.get("seq_length"):
        parts.append(f"s{point['seq_length']}")
    frames = (point.get("model_info") or {}).get("frames")
    if frames:  # a video model's clip length (a sweep over --seq-length gives one row per length)
        parts.append(f"f{frames}")
    return " ".join(parts)


def summarize(points: list[dict[str, Any]]) -> dict[str, Any]:
    frameworks = [fw for fw in dict.fromkeys(fw for p in points for fw in p["frameworks"])]
    rows = []
    by_fw: dict[str, list[float]] = defaultdict(list)
    by_type: dict[str, dict[str, list[float]]] = defaultdict(lambda: defaultdict(list))
    for p in points:
        entries = {fw: p[result_key(fw)] for fw in p["frameworks"]}
        speedups = {fw: s for fw, s in p.get("tvm_speedups", {}).items() if s.get("speedup")}
        for fw, s in speedups.items():
            by_fw[fw].append(s["speedup"])
            by_type[p.get("model_type", "other")][fw].append(s["speedup"])
        rows.append({
            "label": _label(p), "model": p["model"], "type": p.get("model_type"), "batch_size": p["batch_size"],
            "seq_length": p.get("seq_length"),
            "median_ms": {fw: e.get("median_ms") for fw, e in entries.items()},
            "throughput": {fw: e.get("throughput_samples_per_sec") for fw, e in entries.items()},
            "status": {fw: e["status"] for fw, e in entries.items()},
            "tvm_speedups": {fw: {"speedup": s["speedup"], "ci95": s["ci95"]} for fw, s in speedups.items()},
        })
    geomean = {fw: {"geomean": stats.geometric_mean(v), "geomean_clipped_at_1": stats.geometric_mean_clipped(v),
                    "points": len(v)} for fw, v in by_fw.items()}
    types = {t: {fw: {"min": min(v), "max": max(v), "points": len(v)} for fw, v in per.items()}
             for t, per in by_type.items()}
    return {"frameworks": frameworks, "points": rows, "tvm_speedup_geomean": geomean, "tvm_speedup_by_type": types,
            "sweeps": _sweeps(points), "note": "speedup = median(framework) / median(TVM); >1: TVM is faster. "
            "geomean_clipped_at_1 counts every slowdown as 1.0 (TorchInductor dashboard convention)."}


def _sweeps(points: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Throughput vs batch size per framework, for each (model, sequence length) run at several batch sizes."""
    groups: dict[tuple[str, Any], list[dict[str, Any]]] = defaultdict(list)
    for p in points:
        groups[(p["model"], p.get("seq_length"))].append(p)
    out = []
    for (model, seq), pts in groups.items():
        if len({p["batch_size"] for p in pts}) < 2:
            continue
        series: dict[str, list[tuple[int, float]]] = defaultdict(list)
        for p in sorted(pts, key=lambda p: p["batch_size"]):
            for fw in p["frameworks"]:
                e = p[result_key(fw)]
                if e["status"] == "ok" and e.get("throughput_samples_per_sec"):
                    series[fw].append((p["batch_size"], e["throughput_samples_per_sec"]))
        best = {fw: max(s, key=lambda x: x[1])[0] for fw, s in series.items() if s}
        out.append({"model": model, "seq_length": seq, "throughput": {fw: s for fw, s in series.items()},
                    "best_batch_size": best})
    return out


def _x(v: float | None) -> str:
    return "-" if v is None else f"{v:.2f}x"


def print_summary(summary: dict[str, Any], console: Console) -> None:
    fws = summary["frameworks"]
    table = Table(title="median latency, ms (one row per model and shape)")
    table.add_column("model")
    for fw in fws:
        table.add_column(fw, justify="right")
    for r in summary["points"]:
        cells = []
        for fw in fws:
            status = r["status"].get(fw)
            ms = r["median_ms"].get(fw)
            cells.append("-" if status is None else f"{ms:.2f}" if status == "ok" and ms else status)
        table.add_row(r["label"], *cells)
    console.print(table)
    peers = [fw for fw in fws if fw != "tvm"]
    if "tvm" in fws and peers:
        sp = Table(title="TVM's speedup over each framework (95% CI); >1: TVM faster")
        sp.add_column("model")
        for fw in peers:
            sp.add_column(f"vs {fw}", justify="right")
        for r in summary["points"]:
            cells = []
            for fw in peers:
                s = r["tvm_speedups"].get(fw)
                cells.append(f"{s['speedup']:.2f}x ({s['ci95'][0]:.2f}-{s['ci95'][1]:.2f})" if s else "-")
            sp.add_row(r["label"], *cells)
        g = summary["tvm_speedup_geomean"]
        sp.add_row("geometric mean", *[_x(g[fw]["geomean"]) if fw in g else "-" for fw in peers], end_section=True)
        sp.add_row("geomean, clipped at 1.0 (TorchInductor convention)",
                   *[_x(g[fw]["geomean_clipped_at_1"]) if fw in g else "-" for fw in peers])
        console.print(sp)
        kinds = summary["tvm_speedup_by_type"]
        if kinds:
            cols = [(fw, f"vs {load_class(fw).label}") for fw in peers]
            bt = Table(title="TVM's speedup by model type (range over that type's models and shapes)")
            bt.add_column("Model type")
            for _, label in cols:
                bt.add_column(label, justify="right")
            for kind, per in sorted(kinds.items()):
                bt.add_row(kind, *[(f"{per[fw]['min']:.2f}x" if per[fw]["min"] == per[fw]["max"]
                                    else f"{per[fw]['min']:.2f}-{per[fw]['max']:.2f}x") if fw in per else "-"
                                   for fw, _ in cols])
            console.print(bt)
    for sweep in summary["sweeps"]:
        st = Table(title=f"throughput (samples/s) vs batch size: {sweep['model']}"
                   + (f", seq {sweep['seq_length']}" if sweep["seq_length"] else ""))
        st.add_column("framework")
        batches = sorted({b for s in sweep["throughput"].values() for b, _ in s})
        for b in batches:
            st.add_column(f"b{b}", justify="right")
        st.add_column("best batch", justify="right")
        for fw, series in sweep["throughput"].items():
            d = dict(series)
            st.add_row(fw, *[f"{d[b]:.1f}" if b in d else "-" for b in batches], str(sweep["best_batch_size"][fw]))
        console.print(st)
