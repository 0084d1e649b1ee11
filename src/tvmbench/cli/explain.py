"""``tvmbench explain``: where TVM wins and loses against a peer, by operator kind."""

from __future__ import annotations

import argparse
from typing import Any

from tvmbench.cli.args import (
    PRECISIONS,
    add_database_args,
    add_model_args,
    model_kwargs,
    positive_float,
    positive_int,
)
from tvmbench.cli.common import EXIT_OK, check_output, make_console, write_json


def add_explain_parser(sub: Any) -> None:
    explain = sub.add_parser("explain", help="where TVM wins and loses against a peer, operator kind by kind, "
                             "from each framework's own profiler")
    add_model_args(explain)
    explain.add_argument("--vs", default="onnxruntime", choices=["onnxruntime", "openvino", "pytorch", "torch_compile"])
    explain.add_argument("--db", default=None, help="MetaSchedule database to apply to TVM (as `run --db`)")
    add_database_args(explain)
    explain.add_argument("--precision", default="fp32", choices=PRECISIONS,
                         help="as for run (bf16: TVM and OpenVINO in bf16 on AVX-512 BF16 CPUs)")
    explain.add_argument("--runs", type=positive_int, default=20, help="profiled runs per framework")
    explain.add_argument("--top", type=positive_int, default=8, help="operators listed per framework")
    explain.add_argument("--json", default=None, metavar="FILE", help="write the document here")
    explain.add_argument("--timeout", type=positive_float, default=3600.0)
    explain.add_argument("--no-lockstep", dest="lockstep", action="store_false",
                         help="profile one framework after the other (default: both at once, measuring in "
                              "alternating turns, so a change of the host's speed falls on both alike)")
    explain.add_argument("--quiet", "-q", action="store_true")
    explain.set_defaults(handler=cmd_explain)


def cmd_explain(args: argparse.Namespace) -> int:
    from tvmbench import api

    console = make_console(stderr=True, quiet=args.quiet)
    check_output(args.json)
    kwargs = {k: v for k, v in model_kwargs(args).items() if k != "input_shapes"}
    with console.status(f"explaining {args.model}") as status:
        doc = api.explain(args.model, args.vs, args.target, threads=args.threads, runs=args.runs, db=args.db,
                          untuned=args.untuned, pretuned=not args.no_pretuned, timeout=args.timeout,
                          lockstep=args.lockstep, precision=args.precision,
                          on_event=lambda fw, msg: status.update(f"{fw}: {msg}"), **kwargs)
    print_explain(doc, make_console(), args.top)
    if args.json:
        console.print(f"written to {write_json(args.json, doc)}")
    return EXIT_OK


def print_explain(doc: dict[str, Any], console: Any, top: int) -> None:
    from rich.table import Table

    vs = doc["vs"]
    # The heading is its own line: a table title wraps to the table's width, and model paths are long.
    console.print(f"[bold]{doc['model']}: TVM vs {vs} by operator kind, ms per inference "
                  f"({doc['threads']} thread{'s' if doc['threads'] != 1 else ''})", soft_wrap=True)
    table = Table()
    for col in ("kind", "TVM", vs, "TVM loses by", "TVM / peer", "TVM % of bound", f"{vs} % of bound"):
        table.add_column(col, justify="left" if col == "kind" else "right")
    for r in doc["kinds"]:
        table.add_row(r["kind"], f"{r['tvm_ms']:.3f}", f"{r['peer_ms']:.3f}", _loss(r["tvm_loss_ms"]),
                      f"{r['ratio']:.2f}x" if r["ratio"] else "-", _percent(r.get("tvm_percent_of_bound")),
                      _percent(r.get("peer_percent_of_bound")))
    console.print(table)
    roof = doc["frameworks"]["tvm"].get("roofline")
    if roof:
        slopes = "".join(f"{c['level']} {c['gbs']:.0f}, " for c in roof.get("caches") or [])
        console.print(f"bound: the least time this machine's roofline allows for TVM's kernels of that kind "
                      f"(roof: the FMA throughput measured here, {roof['peak_gflops']:.0f} GFLOP/s; slope: "
                      f"{slopes}memory {roof['bandwidth_gbs']:.1f} GB/s, each kernel's from the nearest level "
                      "that holds its bytes)", soft_wrap=True)
    _print_layers(doc, console, top)
    for fw, b in doc["frameworks"].items():
        rest = b["end_to_end_ms"] - b["explained_ms"]
        console.print(f"{fw}: end to end {b['end_to_end_ms']:.3f} ms (median, no profiler), its operators "
                      f"{b['explained_ms']:.3f} ms; unexplained {rest:+.3f} ms ({rest / b['end_to_end_ms']:+.0%})",
                      soft_wrap=True)
    for fw, b in doc["frameworks"].items():
        ops = Table(title=f"{fw}: largest operators")
        for col in ("operator", "type", "kind", "ms"):
            ops.add_column(col, justify="right" if col == "ms" else "left")
        for op in b["ops"][:top]:
            ops.add_row(op["layer"][:60], op["op_type"][:30], op["kind"], f"{op['ms']:.3f}")
        console.print(ops)


def _loss(ms: float) -> str:
    return f"[red]{ms:+.3f}[/red]" if ms > 0 else f"[green]{ms:+.3f}[/green]"


def _percent(value: float | None) -> str:
    return f"{value:.0f} %" if value is not None else "-"


def _print_layers(doc: dict[str, Any], console: Any, top: int) -> None:
    """TVM's largest per-layer losses where layers could be paired, and why others could not."""
    from rich.table import Table

    vs = doc["vs"]
    if doc.get("layers"):
        table = Table(title="layer by layer (paired in execution order): TVM's largest losses")
        for col in ("kind", "TVM kernel", f"{vs} layer", "TVM", vs, "TVM loses by"):
            table.add_column(col, justify="right" if col in ("TVM", vs, "TVM loses by") else "left")
        for r in doc["layers"][:top]:
            table.add_row(r["kind"], r["tvm_kernel"][:40], r["peer_layer"][:50], f"{r['tvm_ms']:.3f}",
                          f"{r['peer_ms']:.3f}", _loss(r["tvm_loss_ms"]))
        console.print(table)
    if doc.get("repeated"):
        table = Table(title="the same layers summed over the model's repeated blocks: TVM's largest losses")
        for col in ("kind", "TVM kernel", f"{vs} layers", "blocks", "TVM", vs, "TVM loses by"):
            table.add_column(col, justify="left" if col in ("kind", "TVM kernel", f"{vs} layers") else "right")
        for r in doc["repeated"][:top]:
            table.add_row(r["kind"], r["tvm_kernel"][:40], r["peer_layer"][-50:], str(r["count"]),
                          f"{r['tvm_ms']:.3f}", f"{r['peer_ms']:.3f}", _loss(r["tvm_loss_ms"]))
        console.print(table)
    for kind, reason in doc.get("unmatched", {}).items():
        console.print(f"{kind} layers not paired: {reason}", soft_wrap=True)
