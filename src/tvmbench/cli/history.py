"""``tvmbench history`` (past results, newest first, with a trend) and ``tvmbench diff A B``
(regressions that are real; exit status 1 when there is one)."""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from tvmbench.cli.args import nonneg_int, positive_int, since
from tvmbench.cli.common import EXIT_FAILED, EXIT_OK, make_console
from tvmbench.errors import UserError

_SPARKS = "▁▂▃▄▅▆▇█"


def add_history_parsers(sub: Any) -> None:
    hist = sub.add_parser("history", help="past results from the history, newest first, with each series' trend")
    hist.add_argument("--model", default=None)
    hist.add_argument("--framework", default=None)
    hist.add_argument("--since", type=since, default=None, metavar="DATE",
                      help="a date (2026-11-01, 2026-11-01T12:00) or an age (3d, 12h, 2w)")
    hist.add_argument("--machine", default="this", choices=["this", "all"], help="this machine only (default) or all")
    hist.add_argument("--limit", type=positive_int, default=50)
    hist.add_argument("--csv", action="store_true", help="print CSV")
    hist.add_argument("--json", action="store_true", help="print JSON")
    hist.add_argument("--history", default=None, metavar="FILE")
    hist.set_defaults(handler=cmd_history)
    diff = sub.add_parser("diff", help="compare two results: faster, slower or no change, with intervals; exit "
                          "status 1 when anything got slower (a CI gate)")
    diff.add_argument("a", help="the baseline: a history entry id, latest, latest~N, or a result JSON file")
    diff.add_argument("b", help="the candidate, likewise")
    diff.add_argument("--band", type=float, default=3.0, metavar="PERCENT",
                      help="the noise band: a change is a verdict only when its whole 95%% interval lies "
                           "outside +-this (default 3)")
    diff.add_argument("--json", action="store_true", help="print the comparison as JSON")
    diff.add_argument("--history", default=None, metavar="FILE")
    diff.add_argument("--bridges", type=nonneg_int, default=20, metavar="N",
                      help="where the two sides were timed in different host states (the probe of --rounds), "
                           "judge them through the newest N other runs of the same point on this machine in the "
                           "history that saw those states (default 20; 0: never, such a pair is inconclusive); "
                           "with --relative-to or --confirm-with their rounds' spread also moderates each side's own "
                           "over the reference")
    diff.add_argument("--relative-to", default=None, metavar="FRAMEWORK",
                      help="judge each framework by its time over this one's, timed beside it in the same lockstep "
                           "turns (both sides run with --frameworks tvm,FRAMEWORK --rounds N): a machine whose "
                           "speed drifts between runs moves both alike. A change of FRAMEWORK itself reads as the "
                           "opposite change of the others")
    diff.add_argument("--confirm-with", default=None, metavar="FRAMEWORK",
                      help="judge each framework both on its own times and over this one's in the same lockstep "
                           "turns, and give a verdict only where they agree: one beyond the band and the other's "
                           "interval on the same side of 1 and reaching past the band (both sides run with "
                           "--frameworks tvm,FRAMEWORK --rounds N). A machine's drift between runs and a change "
                           "of FRAMEWORK itself each mislead only one of the two")
    diff.set_defaults(handler=cmd_diff)
    report = sub.add_parser("report", help="results as one self-contained HTML page (plots embedded), or Markdown")
    report.add_argument("results", nargs="*", default=["latest"],
                        help="history entry ids, latest, latest~N, or result JSON files (default: latest)")
    report.add_argument("--output", "-o", default="report.html", help="the HTML file (default report.html)")
    report.add_argument("--markdown", default=None, metavar="FILE.md", help="also write Markdown (PNGs beside it)")
    report.add_argument("--store", default=None, help="the operator store for the per-operator sections "
                        "(default: the cache folder's, when it exists)")
    report.add_argument("--history", default=None, metavar="FILE")
    report.add_argument("--title", default="tvmbench report")
    report.set_defaults(handler=cmd_report)


def cmd_history(args: argparse.Namespace) -> int:
    from tvmbench.results.history import History, machine_key, machine_of

    history = History.open(args.history, readonly=True)
    machine = None
    if args.machine == "this":
        from tvmbench import api
        from tvmbench.measure.environment import collect

        machine = machine_key(machine_of(collect(1), api.target("auto").config))
    rows = history.points(args.model, args.framework, args.since, machine, args.limit)
    if args.json:
        print(json.dumps(rows, indent=2))
    elif args.csv:
        import csv
        import sys

        writer = csv.DictWriter(sys.stdout, fieldnames=list(rows[0]) if rows else ["entry"])
        writer.writeheader()
        writer.writerows(rows)
    else:
        _print_history(rows, make_console())
    return EXIT_OK


def _print_history(rows: list[dict[str, Any]], console: Any) -> None:
    from rich.table import Table

    if not rows:
        console.print("no results in the history for that selection")
        return
    trend: dict[tuple[Any, ...], list[float]] = {}
    for r in reversed(rows):  # oldest first for the trend
        if r["median_ms"]:
            trend.setdefault((r["model"], r["framework"], r["batch_size"], r["seq_length"]), []).append(r["median_ms"])
    table = Table(title="history, newest first")
    probed = any(r.get("host_states") for r in rows)
    for col in ("entry", "date", "kind", "commit", "model", "framework", "batch", "median ms", "trend") + (
            ("host states (probe, share)",) if probed else ()):
        table.add_column(col, justify="right" if col in ("entry", "median ms") else "left")
    for r in rows:
        series = trend.get((r["model"], r["framework"], r["batch_size"], r["seq_length"]), [])
        table.add_row(str(r["entry"]), r["created"][:16], r["kind"], r["commit"] or "", r["model"], r["framework"],
                      str(r["batch_size"]), f"{r['median_ms']:.3f}" if r["median_ms"] else r["status"],
                      sparkline(series[-20:]), *((r.get("host_states") or "",) if probed else ()))
    console.print(table)


def sparkline(values: list[float]) -> str:
    """The series as block characters, lowest to highest (lower is faster)."""
    if len(values) < 2:
        return ""
    lo, hi = min(values), max(values)
    span = hi - lo or 1.0
    return "".join(_SPARKS[min(len(_SPARKS) - 1, int((v - lo) / span * len(_SPARKS)))] for v in values)


def cmd_diff(args: argparse.Namespace) -> int:
    from tvmbench.results.diff import comparability, compare_runs, confirmed_changes

    if not 0 <= args.band < 100:
        raise UserError(f"--band is a percentage from 0 to 100, got {args.band}")
    if args.relative_to and args.confirm_with:
        raise UserError("--relative-to and --confirm-with are two ways to judge over a reference: give one")
    option = "--confirm-with" if args.confirm_with else "--relative-to"
    reference = _framework_name(args.relative_to or args.confirm_with, option)
    args.relative_to, args.confirm_with = (None, reference) if args.confirm_with else (reference, None)
    a, b = (_side(ref, args.history) for ref in (args.a, args.b))
    notes = comparability(a["environment"], b["environment"], a["machine"], b["machine"])
    bridges = _bridges(a, b, args.history, args.bridges)
    changes = (confirmed_changes(a["runs"], b["runs"], reference, args.band / 100, bridges) if args.confirm_with else
               compare_runs(a["runs"], b["runs"], args.band / 100, bridges, reference))
    if not changes and reference:
        raise UserError(f"{option} {reference}: no point of {args.a} and {args.b} has {reference} and another "
                        f"framework timed on both sides; run both with --frameworks tvm,{reference} --rounds N")
    if not changes:
        raise UserError(f"{args.a} and {args.b} have no model point and framework in common to compare")
    regressed = [c for c in changes if c.verdict == "slower"]
    if args.json:
        print(json.dumps({"a": args.a, "b": args.b, "band": args.band / 100, "notes": notes,
                          "changes": [c.to_json() for c in changes], "regressed": bool(regressed)}, indent=2))
    else:
        _print_diff(args, notes, changes, make_console())
    return EXIT_FAILED if regressed else EXIT_OK


def _ratio_ci(ratio: float | None, ci: Any) -> str:
    return "-" if ratio is None or ratio != ratio else f"{ratio:.3f}" + (f" [{ci[0]:.3f}-{ci[1]:.3f}]" if ci else "")


def _framework_name(name: str | None, option: str) -> str | None:
    """A framework name as the results spell it (an alias resolved); one clear line when unknown."""
    from tvmbench.backends import ALIASES, REGISTRY

    if name is None:
        return None
    name = ALIASES.get(name, name)
    if name not in REGISTRY:
        raise UserError(f"{option}: unknown framework {name!r}; choose from {', '.join(REGISTRY)}")
    return name


def _bridges(a: dict[str, Any], b: dict[str, Any], history_path: str | None, limit: int) -> list[dict[str, Any]]:
    """Other runs of the sides' models on their machine, from the history (none when the sides
    come from two machines or there is no history)."""
    from tvmbench.results.history import History, default_history_path, machine_key

    path = Path(history_path) if history_path else default_history_path()
    if not limit or a["machine"] != b["machine"] or not path.is_file():
        return []
    models = sorted({r.get("model") for r in a["runs"] + b["runs"] if isinstance(r, dict) and r.get("model")})
    return History.open(path, readonly=True).runs_on(machine_key(a["machine"]), models, limit)


def _side(ref: str, history_path: str | None) -> dict[str, Any]:
    """A diff side: its run documents, environment and machine, from the history or a file."""
    from tvmbench.results.history import History, machine_of

    if Path(ref).is_file():
        try:
            doc = json.loads(Path(ref).read_text())
        except (ValueError, OSError) as e:
            raise UserError(f"{ref} is not a tvmbench result JSON ({e})") from None
        if not isinstance(doc, dict) or not ("points" in doc or "frameworks" in doc):
            raise UserError(f"{ref} is not a tvmbench result JSON (a 'run -o' or 'compare -o' document)")
        runs = doc.get("points", []) if "points" in doc else [doc]
        env = (runs[0].get("environment") if runs and isinstance(runs[0], dict) else None) or {}
        return {"runs": runs, "environment": env, "machine": machine_of(env, runs[0].get("target_config") if runs
                                                                         else None)}
    history = History.open(history_path, readonly=True)
    entry = history.entry(ref)
    runs = entry.runs()
    env = (runs[0].get("environment") if runs else None) or {}
    return {"runs": runs, "environment": env, "machine": entry.machine}


def _print_diff(args: argparse.Namespace, notes: list[str], changes: list[Any], console: Any) -> None:
    from rich.table import Table

    from tvmbench.results.diff import ROUND_LEVEL

    for note in notes or ["same machine and versions"]:
        console.print(f"[bold]{note}[/bold]" if notes else note, soft_wrap=True)
    probed = any(c.host is not None for c in changes)
    over = [f"over {args.confirm_with}: B / A [95 %]"] if args.confirm_with else []
    table = Table(title=f"{args.a} -> {args.b} (band +-{args.band:g} %)")
    for col in ("model", "batch", "framework", "A median ms", "B median ms", "B / A", "95 % interval", *over,
                "verdict", *(["host states (rounds)"] if probed else [])):
        table.add_column(col, justify="right" if col not in ("model", "framework", "verdict") else "left")
    colour = {"slower": "red", "faster": "green", "no change": "dim", "inconclusive": "yellow"}
    for c in changes:
        ci = f"{c.ci95[0]:.3f}-{c.ci95[1]:.3f}" if c.ci95 else "-"
        second = c.confirm or {}
        table.add_row(c.model, str(c.batch_size), c.framework, f"{c.a_ms:.3f}", f"{c.b_ms:.3f}", f"{c.ratio:.3f}",
                      ci, *([_ratio_ci(second.get("ratio"), second.get("ci95"))] if over else []),
                      f"[{colour[c.verdict]}]{c.verdict}[/{colour[c.verdict]}]",
                      *([c.host or "-"] if probed else []))
    console.print(table)
    if args.relative_to:
        console.print(f"B / A: each framework's time over {args.relative_to}'s in the same lockstep turns, B's "
                      f"over A's (the medians shown are the plain ones): a machine that drifted between the runs "
                      f"moved both alike; a change of {args.relative_to} itself reads as the opposite change here",
                      soft_wrap=True)
    else:
        console.print(f"B / A: the ratio of the rounds' {ROUND_LEVEL}s where both sides ran --rounds (interference "
                      "on a shared machine only adds time, so a round's fastest samples are the code's own), of the "
                      "medians otherwise", soft_wrap=True)
    if args.confirm_with:
        console.print(f"verdict: where the two judgements agree, one beyond the band and the other's interval on the "
                      f"same side of 1 and reaching past the band; the time over {args.confirm_with}'s in the same "
                      "lockstep turns does not move with the machine's drift between runs, the plain time does not "
                      f"move with a change of {args.confirm_with}", soft_wrap=True)
    if probed:
        console.print("B / A compares the rounds state with state: the host-state probe (TVM fork-joins and paired work, "
                      "microseconds each) told which state the cores were in for each sample, and a host that "
                      "jumped between states is not read as a change of the code", soft_wrap=True)
    bridged = [c for c in changes if "bridged by" in c.basis]
    if bridged:
        console.print(f"{len(bridged)} change(s) bridged: A and B were timed in different host states, so each state's "
                      "effect on the model was estimated from other runs of the point in the history that saw "
                      "both (" + "; ".join(f"{c.model} {c.framework}: {c.basis.split('bridged by ')[1].split(' of')[0]}"
                                           for c in bridged) + ")", soft_wrap=True)
    slower = sum(c.verdict == "slower" for c in changes)
    unknown = [c for c in changes if c.verdict == "inconclusive"]
    console.print((f"{slower} regression(s)" if slower else "no regression")
                  + (f"; {len(unknown)} inconclusive ({'; '.join(sorted({_why_inconclusive(c) for c in unknown}))})"
                     if unknown else ""), soft_wrap=True)


def _why_inconclusive(change: Any) -> str:
    """What left a change without a verdict: a side without lockstep rounds beside the reference
    (the basis says so, with what to run), or sides timed in different host states."""
    from tvmbench.results.diff import NO_RELATIVE_ROUNDS

    lacking = NO_RELATIVE_ROUNDS.split("{")[0]
    return next((b for b in (change.basis, (change.confirm or {}).get("basis")) if b and b.startswith(lacking)),
                "the sides were timed in different host states: run again")


def cmd_report(args: argparse.Namespace) -> int:
    from tvmbench.cli.common import check_output
    from tvmbench.profiling.store import OpStore, default_store_path
    from tvmbench.results.history import History, default_history_path
    from tvmbench.results.html import write_report

    check_output(args.output, args.markdown)
    runs = [run for ref in args.results for run in _side(ref, args.history)["runs"]]
    runs = [r for r in runs if isinstance(r, dict) and r.get("frameworks")]
    if not runs:
        raise UserError("nothing to report: the results hold no model runs")
    store_path = Path(args.store) if args.store else default_store_path()
    store = OpStore.open(store_path, readonly=True) if args.store or store_path.is_file() else None
    history_path = Path(args.history) if args.history else default_history_path()
    history = History.open(history_path, readonly=True) if history_path.is_file() else None
    written = write_report(runs, args.output, args.markdown, args.title, store, history)
    make_console(stderr=True).print("written: " + ", ".join(str(p) for p in written))
    return EXIT_OK
