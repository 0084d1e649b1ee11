"""Tables for people: one per model, framework by framework."""

from __future__ import annotations

import sys
from typing import Any

from rich.console import Console
from rich.table import Table

from tvmbench.backends import result_key
from tvmbench.measure.accuracy import second_opinion


def make_console(stderr: bool = False, quiet: bool = False) -> Console:
    """A console that does not squeeze tables to 80 columns when output goes to a file or pipe.

    Whether the stream is a terminal is asked of the stream itself, not of rich: rich counts
    ``FORCE_COLOR`` (set by many CI systems) as a terminal and then falls back to 80 columns,
    which cut structural hashes and knob names short in a CI log."""
    stream = sys.stderr if stderr else sys.stdout
    tty = bool(getattr(stream, "isatty", lambda: False)())
    return Console(stderr=stderr, quiet=quiet, width=None if tty else 160)


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
    second = second_opinion(acc) or {}
    if second.get("passed") is None:
        unjudged = f"; no {second['precision']} check: {second['reason']}" if second else ""
        return f"{verdict} (abs {acc['max_abs_err']:.1e}, cos {acc['cosine']:.5f}{unjudged})"
    if second["precision"] == "float64":  # a narrow miss judged again against float64 outputs
        return (f"{verdict} against float64 (rel {second['max_rel_err']:.1e}, PyTorch fp32's "
                f"{second['reference_fp32_max_rel_err']:.1e}; fp32 rel {acc['max_rel_err']:.1e})")
    return (f"{verdict} {'within' if acc['passed'] else 'beyond'} {second['factor']:g}x PyTorch's own "
            f"{second['precision']} error (cos {acc['cosine']:.4f}, PyTorch's {second['pytorch_cosine']:.4f}; "
            f"rel {acc['max_rel_err']:.1e}, PyTorch's {second['pytorch_max_rel_err']:.1e})")


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
    for col in ("framework", "mean ms", "median ms", "p90 ms", "p99 ms", "max ms", "min ms", "std ms",
                "throughput /s", "runs", "accuracy"):
        table.add_column(col, justify="left" if col in ("framework", "accuracy") else "right")
    failures = []
    for fw in result["frameworks"]:
        e = result[result_key(fw)]
        if e["status"] != "ok":
            table.add_row(fw, *["-"] * 9, "[dim]unavailable[/dim]" if e["status"] == "unavailable"
                          else "[red]failed[/red]")
            failures.append((fw, e))
            continue
        table.add_row(fw, _ms(e["mean_ms"]), _ms(e["median_ms"]), _ms(e.get("p90_ms")), _ms(e.get("p99_ms")),
                      _ms(e["max_ms"]), _ms(e["min_ms"]),
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
        count = f"{db.get('tasks_with_records', 0)} of {db['tasks']} kernels" if "tasks" in db else "none"
        console.print(f"TVM tuning records: {count}; " + "; ".join(parts), soft_wrap=True)
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


def print_profile(profile: Any, console: Console | None = None, top: int = 25,
                  gains: list[dict[str, Any]] | None = None, untuned: Any | None = None,
                  drift: float | None = None) -> None:
    """Per-kernel table of a ModelProfile (slowest first), then time by kind of kernel."""
    console = console or make_console()
    peak = f", peak {profile.peak_gflops:.0f} GFLOP/s" if profile.peak_gflops else ""
    table = Table(title=f"{profile.model} on {profile.target.get('kind')} {profile.target.get('mcpu') or profile.target.get('arch', '')}"
                        f" ({profile.variant}, {profile.threads} threads, median of {profile.runs} runs{peak})")
    cols = ["kernel", "kind", "calls", "ms", "%", "MFLOP", "GFLOP/s", "% peak", "% bound", "schedule"]
    if gains is not None:
        cols += ["untuned ms", "gain", "corrected"]
    for col in cols:
        table.add_column(col, justify="left" if col in ("kernel", "kind", "schedule") else "right")
    by_name = {g["name"]: g for g in gains or []}
    for k in profile.kernels[:top]:
        row = [k.name[:60], k.kind, str(k.calls), _ms(k.ms), f"{100 * k.share:.1f}",
               "-" if k.mflop is None else f"{k.mflop:.1f}", "-" if k.gflops is None else f"{k.gflops:.1f}",
               "-" if k.percent_of_peak is None else f"{k.percent_of_peak:.0f}",
               "-" if k.percent_of_bound is None else f"{k.percent_of_bound:.0f}", k.schedule or "-"]
        if gains is not None:
            g = by_name.get(k.name, {})
            row += [_ms(g.get("untuned_ms")), "-" if g.get("gain") is None else f"{g['gain']:.2f}x",
                    "-" if g.get("corrected_gain") is None else f"{g['corrected_gain']:.2f}x"]
        table.add_row(*row)
    console.print(table)
    if len(profile.kernels) > top:
        console.print(f"[dim]{len(profile.kernels) - top} more kernels ({_ms(sum(k.ms for k in profile.kernels[top:]))}"
                      " ms) in --output[/dim]")
    kinds: dict[str, list[Any]] = {}
    for k in profile.kernels:
        kinds.setdefault(k.kind, []).append(k)
    parts = []
    for kind, ks in sorted(kinds.items(), key=lambda kv: -sum(k.ms for k in kv[1])):
        ms = sum(k.ms for k in ks)
        flops = sum((k.mflop or 0) for k in ks) * 1e6
        rate = f", {flops / (ms * 1e6):.0f} GFLOP/s" if flops and ms else ""
        parts.append(f"{kind} {_ms(ms)} ms ({100 * ms / profile.kernels_ms:.0f} %{rate})")
    console.print("by kind: " + "; ".join(parts), soft_wrap=True)
    slopes = profile.bandwidth
    if slopes:
        levels = "".join(f"{c['level']} {c['gbs']:.0f}, " for c in slopes.get("caches") or [])
        console.print(f"% bound: of the least time the FMA peak and the bandwidth of the nearest level that holds a "
                      f"kernel's bytes allow ({levels}memory {slopes['memory_gbs']:.0f} GB/s)", soft_wrap=True)
    console.print(f"end to end {_ms(profile.end_to_end_ms)} ms (median, no instrumentation); kernels "
                  f"{_ms(profile.kernels_ms)} ms; not in kernels {_ms(profile.unexplained_ms)} ms")
    print_ceiling(profile, console)
    tuned = [k for k in profile.kernels if k.schedule == "tuning record"]
    if any(k.schedule for k in profile.kernels):
        console.print(f"{len(tuned)} of {sum(1 for k in profile.kernels if k.schedule)} kernels ran a tuning record "
                      f"({_ms(sum(k.ms for k in tuned))} ms)")
    if untuned is not None:
        gain = untuned.end_to_end_ms / profile.end_to_end_ms
        console.print(f"without any database: end to end {_ms(untuned.end_to_end_ms)} ms, kernels "
                      f"{_ms(untuned.kernels_ms)} ms; tuning gain end to end {gain:.2f}x"
                      + (f", {gain / drift:.2f}x corrected for drift" if drift else ""))
    if drift is not None:
        console.print(f"[dim]drift: kernels with the same (default) schedule in both builds ran {drift:.2f}x as "
                      "fast in the untuned build's process; 'corrected' divides each gain by it[/dim]")


def print_ceiling(profile: Any, console: Console) -> None:
    """The profile's schedule ceiling (``ModelProfile.ceiling``) in two lines, when it has one."""
    ceiling = profile.ceiling()
    if ceiling is None:
        return
    most = ", ".join(f"{name[:40]} {_ms(ms)} ms" for name, ms in ceiling.headroom)
    console.print(f"schedule ceiling: no schedule of these kernels makes the model more than {ceiling.speedup:.2f}x "
                  f"faster end to end ({_ms(ceiling.end_to_end_ms)} ms): every kernel at the FMA peak would save "
                  f"{_ms(ceiling.saved_ms)} ms" + (f"; most above it: {most}" if most else ""), soft_wrap=True)
    console.print("[dim]a bound for tuning (same kernels, same FLOPs), generous on purpose; a different algorithm, "
                  "layout or fusion can go past it[/dim]", soft_wrap=True)


def save_outputs(path: str, outputs: dict[str, list[Any]]) -> str:
    """Every framework's outputs in one .npz, written atomically: array ``FRAMEWORK/INDEX``."""
    import numpy as np

    from tvmbench.files import replacing

    arrays = {f"{fw}/{i}": np.asarray(a) for fw, outs in outputs.items() for i, a in enumerate(outs)}
    with replacing(path, suffix=".npz") as tmp:
        np.savez(tmp, **arrays)
    return path


def print_top(outputs: dict[str, list[Any]], n: int, console: Console) -> None:
    """The top-``n`` classes of the first output (first item of the batch), each framework's
    class index and score side by side, as tvmc run printed them."""
    import numpy as np

    tops = {}
    for fw, outs in outputs.items():
        first = np.asarray(outs[0]) if outs else None
        if first is None or first.ndim != 2 or first.shape[1] < 2:
            continue
        row = first[0].astype("float64")
        order = np.argsort(-row, kind="stable")[:n]
        tops[fw] = [(int(i), float(row[i])) for i in order]
    if not tops:
        console.print("--print-top: the first output is not a batch of class scores (rows x classes)")
        return
    table = Table(title=f"top {n} classes of the first output (first item of the batch)")
    table.add_column("rank", justify="right")
    for fw in tops:
        table.add_column(f"{fw}: class", justify="right")
        table.add_column(f"{fw}: score", justify="right")
    for rank in range(min(n, min(len(t) for t in tops.values()))):
        table.add_row(str(rank + 1), *[v for fw in tops for v in (str(tops[fw][rank][0]), f"{tops[fw][rank][1]:.4f}")])
    console.print(table)
