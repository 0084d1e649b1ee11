"""What is here: ``models`` (the zoo), ``frameworks``, ``target`` (how a --target resolves) and
``doctor`` (what would make a planned comparison slow or misleading)."""

from __future__ import annotations

import argparse
import json
from typing import Any

from tvmbench.cli.args import PRECISIONS, nonneg_int, positive_int
from tvmbench.cli.common import EXIT_FAILED, EXIT_OK, make_console


def add_info_parsers(sub: Any) -> None:
    models = sub.add_parser("models", help="list the model zoo with parameters and FLOPs")
    models.add_argument("--no-stats", action="store_true", help="list names only, without building the models")
    models.add_argument("--json", action="store_true", help="print the list as JSON (for scripts)")
    models.set_defaults(handler=cmd_models)

    frameworks = sub.add_parser("frameworks", help="each framework: installed or not, version, devices it can use")
    frameworks.add_argument("--json", action="store_true", help="print the list as JSON (for scripts)")
    frameworks.set_defaults(handler=cmd_frameworks)

    doctor = sub.add_parser("doctor", help="check this machine and a planned run for what makes TVM slow or "
                            "numbers misleading, with fixes")
    doctor.add_argument("--model", default=None, help="the model you plan to run (for its size)")
    doctor.add_argument("--target", default="auto")
    doctor.add_argument("--precision", default="fp32", choices=PRECISIONS)
    doctor.add_argument("--threads", type=positive_int, default=None)
    doctor.add_argument("--warmup", type=nonneg_int, default=None, help="the warm-up runs you plan to use")
    doctor.add_argument("--db", default=None, help="the tuning database you plan to apply")
    doctor.add_argument("--json", action="store_true", help="facts and findings as JSON")
    doctor.set_defaults(handler=cmd_doctor)

    target = sub.add_parser("target", help="show how a --target value resolves on this machine")
    target.add_argument("spec", nargs="?", default="auto")
    target.set_defaults(handler=cmd_target)


def cmd_models(args: argparse.Namespace) -> int:
    from rich.table import Table

    from tvmbench.models.catalog import zoo_stats

    rows = zoo_stats(with_stats=not args.no_stats, console=make_console(stderr=True))
    if args.json:
        print(json.dumps(rows, indent=2, default=str))
        return EXIT_OK
    table = Table(title="tvmbench model zoo (random weights; any torchvision classifier, video, segmentation, optical-flow or single-stage detection model also as torchvision:NAME)")
    for col in ("name", "family", "description", "default input", "params (M)", "GFLOPs"):
        table.add_column(col, justify="right" if col in ("params (M)", "GFLOPs") else "left")
    for r in rows:
        params = f"{r['param_count'] / 1e6:.1f}" if r.get("param_count") else "-"
        flops = f"{r['flops'] / 1e9:.2f}" if r.get("flops") else "-"
        table.add_row(r["name"], r["family"], r["description"], r["default_input"], params, flops)
    make_console().print(table)
    return EXIT_OK


def cmd_frameworks(args: argparse.Namespace) -> int:
    from rich.markup import escape
    from rich.table import Table

    from tvmbench.backends import FRAMEWORKS, REGISTRY, load_class, registry

    table = Table(title="frameworks")
    for col in ("framework", "installed", "version", "devices", "notes"):
        table.add_column(col)
    found = {}
    for name in [*FRAMEWORKS, *(n for n in registry() if n not in REGISTRY)]:  # then plugins
        try:
            a = load_class(name).availability()
        except Exception as e:  # a broken install is reported, not fatal
            a = {"installed": False, "version": None, "devices": [], "install": f"broken: {e}"}
        found[name] = a
        table.add_row(name, "yes" if a["installed"] else "no", a["version"] or "-", ", ".join(a["devices"]) or "-",
                      escape("; ".join(n for n in (a.get("unavailable"), a["install"]) if n)))
    if args.json:
        print(json.dumps(found, indent=2, default=str))
    else:
        make_console().print(table)
    return EXIT_OK


def cmd_doctor(args: argparse.Namespace) -> int:
    from rich.markup import escape
    from rich.table import Table

    from tvmbench import doctor

    if args.model:
        from tvmbench.models import check_model_name

        check_model_name(args.model)
    facts = doctor.gather(args.target, args.model, args.precision, args.threads, args.warmup, args.db)
    findings = doctor.diagnose(facts)
    if args.json:
        print(json.dumps(doctor.to_json(facts, findings), indent=2, default=str))
    else:
        table = Table(title=f"tvmbench doctor: target {args.target}" + (f", model {args.model}" if args.model else ""))
        for col in ("", "check", "finding", "fix"):
            table.add_column(col)
        marks = {"error": "[red]error[/red]", "warn": "[yellow]warn[/yellow]", "info": "[dim]info[/dim]"}
        for x in findings:
            table.add_row(marks[x.level], x.check, escape(x.message), escape(x.fix))
        make_console().print(table if findings else "no problems found")
    return EXIT_FAILED if any(x.level == "error" for x in findings) else EXIT_OK


def cmd_target(args: argparse.Namespace) -> int:
    from tvmbench.targets import resolve_target

    print(json.dumps(resolve_target(args.spec).to_json(), indent=2, default=str))
    return EXIT_OK
