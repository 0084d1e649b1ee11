"""Tables for people: one per model, framework by framework."""

from __future__ import annotations

from typing import Any

from rich.console import Console
from rich.table import Table

from tvmbench.backends import result_key


def make_console(stderr: bool = False, quiet: bool = False) -> Console:
    """A console that does not squeeze tables to 80 columns when output goes to a file or pipe."""
    probe = Console(stderr=stderr)
    return Console(stderr=stderr, quiet=quiet, width=None if probe.is_terminal else 160)


def _ms(v: Any) -> str:
    return "-" if v is None else (f"{v:.3f}" if v < 1 else f"{v:.2f}" if v < 100 else f"{v:.1f}")


def _accuracy(acc: dict[str, Any] | None) -> str:
    if not acc:
        return "-"
    if acc.get("reference"):
        return "reference"
    if acc.get("passed") is None:
        return acc.get("reason", "not checked")
    if "max_abs_err" not in acc:
        return "FAIL: " + acc.get("reason", "")
    verdict = "ok" if acc["passed"] else "FAIL"
    return f"{verdict} (abs {acc['max_abs_err']:.1e}, cos {acc['cosine']:.5f})"


def print_run(result: dict[str, Any], console: Console | None = None, errors: Console | None = None) -> None:
    """The table and speedup on ``console``; failures and warnings on ``errors`` (stderr)."""
    console = console or make_console()
    errors = errors or make_console(stderr=True)
    shape = [f"batch {result['batch_size']}"]
    if result.get("seq_length"):
        shape.append(f"seq {result['seq_length']}")
    if result.get("image_size"):
        shape.append(f"image {result['image_size']}")
    title = f"{result['model']} ({', '.join(shape)}) on {result['target']} {result['target_config'].get('mcpu') or result['target_config'].get('arch', '')}"
    table = Table(title=title)
    for col in ("framework", "mean ms", "median ms", "max ms", "min ms", "std ms", "throughput /s", "runs",
                "accuracy"):
        table.add_column(col, justify="left" if col in ("framework", "accuracy") else "right")
    failures = []
    for fw in result["frameworks"]:
        e = result[result_key(fw)]
        if e["status"] != "ok":
            table.add_row(fw, *["-"] * 7, "[dim]unavailable[/dim]" if e["status"] == "unavailable"
                          else "[red]failed[/red]")
            failures.append((fw, e))
            continue
        table.add_row(fw, _ms(e["mean_ms"]), _ms(e["median_ms"]), _ms(e["max_ms"]), _ms(e["min_ms"]),
                      _ms(e["std_ms"]), f"{e['throughput_samples_per_sec']:.2f}", str(e["total_runs"]),
                      _accuracy(e.get("accuracy")))
    console.print(table)
    if result.get("speedup") is not None:
        word = "faster" if result["speedup"] >= 1 else "slower"
        factor = result["speedup"] if result["speedup"] >= 1 else 1 / result["speedup"]
        ci = result.get("speedup_ci95") or [None, None]
        ci_text = f", 95% CI {ci[0]:.3f}-{ci[1]:.3f}" if ci[0] is not None else ""
        console.print(f"TVM is {factor:.2f}x {word} than PyTorch eager (speedup {result['speedup']:.3f}"
                      f"{ci_text}; {result['speedup_basis']})")
    elif "withheld" in result.get("speedup_basis", ""):
        console.print(f"[yellow]No speedup: {result['speedup_basis'].split('; ', 1)[1]}[/yellow]")
    others = {fw: s for fw, s in result.get("tvm_speedups", {}).items() if fw != "pytorch" and s["speedup"]}
    if others:
        console.print("TVM's speedup over " + ", ".join(
            f"{fw} {s['speedup']:.2f}x ({s['ci95'][0]:.2f}-{s['ci95'][1]:.2f})" for fw, s in others.items())
            + " (95% CI; >1: TVM faster)")
    db = result.get("tuning_database") or {}
    if db.get("sources"):
        parts = [f"{src['source']} {src['path']} ({src.get('tasks_covered', 0)} kernels)"
                 if src.get("applied_records") else f"{src['source']} {src['path']} (nothing for this target)"
                 for src in db["sources"]]
        console.print(f"TVM tuning records: {db.get('tasks_with_records', 0)} of {db.get('tasks', '?')} kernels; "
                      + "; ".join(parts), soft_wrap=True)
    for fw in result["frameworks"]:
        rounds = result[result_key(fw)].get("rounds")
        if rounds:
            medians = ", ".join(_ms(m) for m in rounds["medians_ms"])
            console.print(f"{fw}: medians per round {medians} ms (spread {rounds['spread']:.1%})")
    for fw, e in failures:
        word = "note" if e["status"] == "unavailable" else "error"
        errors.print(f"tvmbench: {word}: {fw}: {e['error']}", markup=False, highlight=False, soft_wrap=True)
    for w in result.get("warnings", []):
        errors.print(f"[yellow]warning:[/yellow] {w}", soft_wrap=True)
