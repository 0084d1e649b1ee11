"""``tvmbench report``: results as one self-contained HTML page (or Markdown for a pull request).

The report is built once as sections of tables and figures, then rendered: to HTML with every
figure embedded as a data URI (no network, one file to mail or attach), or to Markdown with the
same tables and the figures as PNG files beside it. Sections, each where its data exists:

- the environment (machine, versions, target);
- per model point: each framework's median with its 95 % interval and tail percentiles, and
  TVM's speedup over each peer with its interval;
- the host's states, where the probe ran: each framework's median and share of samples per state;
- latency distributions (a violin per framework, from the timed samples);
- throughput against batch size, for models measured at several batch sizes;
- tuning curves of the databases the runs applied (``curves/`` in each database);
- per-operator breakdown and roofline, from the operator store, for models it holds;
- the history trend of these models on this machine.
"""

from __future__ import annotations

import base64
import html
import math
import shutil
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tvmbench.files import write_text_atomic
from tvmbench.measure.accuracy import second_opinion


@dataclass
class Table:
    columns: list[str]
    rows: list[list[Any]]


@dataclass
class Figure:
    path: Path
    caption: str


@dataclass
class Section:
    title: str
    blocks: list[Table | Figure | str] = field(default_factory=list)


def build(runs: list[dict[str, Any]], work: Path, store: Any = None, history: Any = None) -> list[Section]:
    """The report's sections for ``runs`` (run result documents), figures drawn into ``work``."""
    from tvmbench.backends import result_key

    sections = [_environment(runs[0])]
    latency = Section("Latency", [_latency_table(runs, result_key), _speedup_table(runs)])
    sections.append(latency)
    sections.append(_host_states(runs))
    sections.append(_distributions(runs, work, result_key))
    sections += [s for s in (_throughput(runs, work, result_key), _tuning_curves(runs, work),
                             _operators(runs, work, store), _trend(runs, work, history)) if s is not None]
    return [s for s in sections if s.blocks]


def _fmt(v: Any, digits: int = 3) -> str:
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return "-"
    return f"{v:.{digits}f}" if isinstance(v, float) else str(v)


def _bound_by(op: dict[str, Any]) -> str:
    """"compute", or "memory (L2)": memory-bound, its bytes fitting in that level."""
    level = op.get("data_from")
    return f"{op['bound_by']} ({level})" if op["bound_by"] == "memory" and level else str(op["bound_by"])


def _point_name(run: dict[str, Any]) -> str:
    name = Path(str(run.get("model"))).name
    extra = f", seq {run['seq_length']}" if run.get("seq_length") else ""
    return f"{name}, batch {run.get('batch_size')}{extra}"


def _environment(run: dict[str, Any]) -> Section:
    env = run.get("environment") or {}
    keys = ("cpu_model", "machine", "physical_cores", "logical_cores", "threads_used", "memory_total_bytes",
            "governor", "os", "python", "tvmbench_version", "tvmbench_commit", "date")
    rows = [[k, _fmt(env.get(k))] for k in keys if k in env]
    rows.append(["target", _fmt(run.get("target"))])
    rows += [[f"version: {k}", v] for k, v in sorted((env.get("packages") or {}).items())]
    return Section("Environment", [Table(["", "value"], rows)])


def _latency_table(runs: list[dict[str, Any]], result_key: Any) -> Table:
    rows = []
    for run in runs:
        for fw in run.get("frameworks", []):
            r = run.get(result_key(fw)) or {}
            if r.get("status") != "ok":
                rows.append([_point_name(run), fw, r.get("status", "-"), "-", "-", "-", "-", _fmt(r.get("error"))])
                continue
            ci = r.get("median_ci_ms") or [None, None]
            acc = r.get("accuracy") or {}
            rows.append([_point_name(run), fw, _fmt(r.get("median_ms")), f"{_fmt(ci[0])} - {_fmt(ci[1])}",
                         _fmt(r.get("p90_ms")), _fmt(r.get("p99_ms")), _fmt(r.get("throughput_samples_per_sec"), 1),
                         _passed(acc) if acc.get("passed", True) else "outputs differ"])
    return Table(["point", "framework", "median ms", "95 % CI (ms)", "p90 ms", "p99 ms", "samples/s", "outputs"],
                 rows)


def _passed(acc: dict[str, Any]) -> str:
    """How a passing output check passed: plainly, or judged by a second reference."""
    second = second_opinion(acc) if acc.get("judged_by") else None
    if second is None:
        return "ok"
    return "ok against float64" if second["precision"] == "float64" else f"ok within PyTorch's own {second['precision']} error"


def _speedup_table(runs: list[dict[str, Any]]) -> Table:
    rows = []
    for run in runs:
        for peer, s in (run.get("tvm_speedups") or {}).items():
            ci = s.get("ci95") or [None, None]
            rows.append([_point_name(run), peer, _fmt(s.get("speedup"), 2), f"{_fmt(ci[0], 2)} - {_fmt(ci[1], 2)}",
                         s.get("basis", "")])
    return Table(["point", "TVM vs", "speedup", "95 % CI", "basis"], rows)


def _host_states(runs: list[dict[str, Any]]) -> Section:
    """Where the host-state probe ran (``--rounds`` on a CPU): each framework's median and share of
    samples per state of the machine's cores, so a slower run can be told from a slower host."""
    from tvmbench.results.diff import host_state_split

    rows = []
    for run in runs:
        split = host_state_split(run)
        if split is None:
            continue
        for fw, by_state in split.frameworks.items():
            for name, got in zip(split.names, by_state, strict=True):
                if got is not None:
                    rows.append([_point_name(run), fw, name, f"{got[1]:.0%}", _fmt(got[0])])
    if not rows:
        return Section("Host states")
    note = ("The host-state probe times TVM fork-joins between blocks of samples; its readings cluster into "
            "the states of the machine's cores (one state on a steady host). A framework's times differ by "
            "state, so `tvmbench diff` compares runs state with state.")
    return Section("Host states", [note, Table(["point", "framework", "host state (probe: per fork-join / per paired-work call)",
                                                "share of samples", "median ms"], rows)])


def _distributions(runs: list[dict[str, Any]], work: Path, result_key: Any) -> Section:
    from tvmbench.plots import distribution_png

    section = Section("Latency distributions")
    for i, run in enumerate(runs):
        samples = {fw: (run.get(result_key(fw)) or {}).get("samples_ms") or [] for fw in run.get("frameworks", [])}
        png = distribution_png(samples, work / f"distribution-{i}.png", _point_name(run))
        if png:
            section.blocks.append(Figure(png, f"{_point_name(run)}: timed samples per framework"))
    return section


def _throughput(runs: list[dict[str, Any]], work: Path, result_key: Any) -> Section | None:
    from tvmbench.plots import throughput_png

    by_model: dict[tuple[str, Any], dict[str, list[tuple[int, float]]]] = {}
    for run in runs:
        for fw in run.get("frameworks", []):
            r = run.get(result_key(fw)) or {}
            if r.get("status") == "ok" and r.get("throughput_samples_per_sec"):
                by_model.setdefault((run["model"], run.get("seq_length")), {}).setdefault(fw, []).append(
                    (run["batch_size"], r["throughput_samples_per_sec"]))
    section = Section("Throughput against batch size")
    for i, ((model, _), series) in enumerate(by_model.items()):
        if max(len(v) for v in series.values()) < 2:
            continue
        png = throughput_png(series, work / f"throughput-{i}.png", f"{Path(model).name}: throughput")
        if png:
            section.blocks.append(Figure(png, f"{Path(model).name}: samples per second against batch size"))
    return section


def _tuning_curves(runs: list[dict[str, Any]], work: Path) -> Section | None:
    import csv

    from tvmbench.plots import tuning_curve_png

    section = Section("Tuning curves")
    seen: set[Path] = set()
    for run in runs:
        for source in ((run.get("tvm_relax") or {}).get("info", {}).get("database") or {}).get("sources", []):
            if source.get("source") == "pretuned" or not source.get("path"):
                continue
            for curve in sorted((Path(source["path"]) / "curves").glob(f"{Path(str(run['model'])).name}*.csv")):
                if curve in seen:
                    continue
                seen.add(curve)
                with open(curve) as f:
                    points = [{k: float(v) if v not in ("", "None") else None for k, v in row.items()}
                              for row in csv.DictReader(f)]
                png = tuning_curve_png(points, work / f"curve-{len(seen)}.png", curve.stem)
                if png:
                    section.blocks.append(Figure(png, f"tuning curve {curve.stem} ({source['path']})"))
    return section


def _operators(runs: list[dict[str, Any]], work: Path, store: Any) -> Section | None:
    if store is None:
        return None
    from tvmbench.errors import UserError
    from tvmbench.plots import roofline_png
    from tvmbench.profiling import queries

    section = Section("Operators")
    for model in dict.fromkeys(str(r["model"]) for r in runs):
        try:
            columns, rows = queries.roofline(store, model)
        except UserError:
            continue
        if not rows:
            continue
        ops = [dict(zip(columns, r, strict=True)) for r in rows]
        top = sorted(ops, key=lambda o: -(o["share_percent"] or 0))[:12]
        section.blocks.append(Table(
            [f"{Path(model).name}: kernel", "kind", "share %", "GFLOP/s", "% of bound", "bound by"],
            [[o["kernel"], o["kind"], _fmt(o["share_percent"], 1), _fmt(o["gflops"], 1),
              _fmt(o["percent_of_bound"], 0), _bound_by(o)] for o in top]))
        png = roofline_png(ops, ops[0]["peak_gflops"], ops[0]["bandwidth_gbs"], work / f"roofline-{len(section.blocks)}.png",
                           f"{Path(model).name}: operators on the roofline")
        if png:
            section.blocks.append(Figure(png, f"{Path(model).name}: each operator's achieved GFLOP/s against its bound"))
    return section


def _trend(runs: list[dict[str, Any]], work: Path, history: Any) -> Section | None:
    if history is None:
        return None
    from tvmbench.plots import trend_png
    from tvmbench.results.history import machine_key, machine_of

    section = Section("History on this machine")
    for i, run in enumerate(runs):
        key = machine_key(machine_of(run.get("environment") or {}, run.get("target_config")))
        rows = [r for r in history.points(str(run["model"]), machine=key, limit=500)
                if r["batch_size"] == run.get("batch_size") and r["seq_length"] == run.get("seq_length")
                and r["median_ms"]]
        series: dict[str, list[tuple[str, float]]] = {}
        for r in reversed(rows):
            series.setdefault(r["framework"], []).append((r["created"], r["median_ms"]))
        if max((len(v) for v in series.values()), default=0) < 2:
            continue
        png = trend_png(series, work / f"trend-{i}.png", f"{_point_name(run)}: median over the history")
        if png:
            section.blocks.append(Figure(png, f"{_point_name(run)}: every result in the history, oldest first"))
    return section


# ----- rendering

_CSS = """body{font-family:system-ui,sans-serif;margin:2em auto;max-width:1100px;color:#222}
table{border-collapse:collapse;margin:1em 0;font-size:14px}th,td{border:1px solid #ccc;padding:3px 8px;
text-align:left}th{background:#f3f3f3}figure{margin:1em 0}img{max-width:100%}figcaption{color:#555;font-size:13px}"""


def render_html(sections: list[Section], title: str) -> str:
    parts = [f"<!DOCTYPE html><html><head><meta charset='utf-8'><title>{html.escape(title)}</title>"
             f"<style>{_CSS}</style></head><body><h1>{html.escape(title)}</h1>"]
    for s in sections:
        parts.append(f"<h2>{html.escape(s.title)}</h2>")
        for b in s.blocks:
            if isinstance(b, Table):
                head = "".join(f"<th>{html.escape(c)}</th>" for c in b.columns)
                body = "".join("<tr>" + "".join(f"<td>{html.escape(str(v))}</td>" for v in row) + "</tr>"
                               for row in b.rows)
                parts.append(f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>")
            elif isinstance(b, Figure):
                data = base64.b64encode(b.path.read_bytes()).decode()
                parts.append(f"<figure><img src='data:image/png;base64,{data}' alt='{html.escape(b.caption)}'>"
                             f"<figcaption>{html.escape(b.caption)}</figcaption></figure>")
            else:
                parts.append(f"<p>{html.escape(b)}</p>")
    parts.append("</body></html>")
    return "\n".join(parts)


def render_markdown(sections: list[Section], title: str, md_path: Path) -> str:
    """Markdown with the figures copied into ``<name>_files/`` beside ``md_path``."""
    folder = md_path.with_name(md_path.stem + "_files")
    parts = [f"# {title}"]
    for s in sections:
        parts.append(f"\n## {s.title}\n")
        for b in s.blocks:
            if isinstance(b, Table):
                parts.append("| " + " | ".join(b.columns) + " |")
                parts.append("|" + "---|" * len(b.columns))
                parts += ["| " + " | ".join(str(v).replace("|", "\\|") for v in row) + " |" for row in b.rows]
                parts.append("")
            elif isinstance(b, Figure):
                folder.mkdir(parents=True, exist_ok=True)
                shutil.copyfile(b.path, folder / b.path.name)
                parts.append(f"![{b.caption}]({folder.name}/{b.path.name})\n")
            else:
                parts.append(b + "\n")
    return "\n".join(parts) + "\n"


def write_report(runs: list[dict[str, Any]], html_path: str | Path | None, md_path: str | Path | None,
                 title: str, store: Any = None, history: Any = None) -> list[Path]:
    """Build the report once and write the forms asked for; returns the files written."""
    written = []
    with tempfile.TemporaryDirectory(prefix="tvmbench-report-") as tmp:
        sections = build(runs, Path(tmp), store, history)
        if html_path:
            written.append(write_text_atomic(html_path, render_html(sections, title)))
        if md_path:
            written.append(write_text_atomic(md_path, render_markdown(sections, title, Path(md_path))))
    return written
