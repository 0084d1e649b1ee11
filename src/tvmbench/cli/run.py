"""``tvmbench run`` (one model, several frameworks) and ``tvmbench export`` (a built package)."""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

from tvmbench.cli.args import (
    PRECISIONS,
    add_database_args,
    add_framework_args,
    add_history_args,
    add_model_args,
    add_probe_arg,
    add_timer_args,
    add_tune_args,
    history_arg,
    model_options,
    positive_float,
    positive_int,
    run_settings,
)
from tvmbench.cli.common import (
    EXIT_FAILED,
    EXIT_OK,
    EXIT_USAGE,
    add_verbose_arg,
    check_output,
    make_console,
    status_events,
    write_json,
)
from tvmbench.errors import UserError


def add_run_parser(sub: Any) -> None:
    from tvmbench.backends import REGISTRY

    run = sub.add_parser("run", help="compile a model with TVM and benchmark it against PyTorch")
    add_model_args(run, package=True)
    add_history_args(run)
    run.add_argument("--frameworks", default=None,
                     help=f"comma-separated from {', '.join(REGISTRY)} "
                          "(default tvm,pytorch; tvm alone for an ONNX file)")
    add_framework_args(run)
    add_timer_args(run)
    run.add_argument("--rounds", type=positive_int, default=1,
                     help="measure every framework N times in alternating order (A B, B A, ...), each "
                          "round's frameworks in alternating quarter-second turns (lockstep)")
    run.add_argument("--no-lockstep", dest="lockstep", action="store_false", default=None,
                     help="with --rounds: one framework after the other within a round")
    add_probe_arg(run)
    run.add_argument("--include-io", action="store_true",
                     help="time the input copies to the device and the output copies back")
    run.add_argument("--db", default=None,
                     help="MetaSchedule database directory to apply (with --tune: to tune into)")
    add_database_args(run)
    run.add_argument("--compile-only", action="store_true",
                     help="build for the target without running (a GPU or cross target this machine lacks): "
                          "writes the library, params and a report (CUDA: PTX, kernels, tensor cores) to "
                          "--artifact-dir")
    run.add_argument("--artifact-dir", default=None, help="where --compile-only writes (default artifacts/MODEL-TARGET)")
    run.add_argument("--precision", default="fp32", choices=PRECISIONS,
                     help="precision of TVM, TensorRT and OpenVINO (fp16: fp16 matmul/conv with fp16 "
                          "accumulation; amp: fp32 accumulation); PyTorch stays the fp32 reference")
    run.add_argument("--cuda-graph", action="store_true",
                     help="CUDA: capture the model's kernel launches in a CUDA graph (Relax RewriteCUDAGraph), "
                          "for launch-bound models")
    run.add_argument("--tune", action="store_true", help="tune with MetaSchedule first, then benchmark")
    add_tune_args(run, trials_default=None)
    run.add_argument("--output", "-o", default=None, help="write the result JSON here")
    run.add_argument("--save-outputs", default=None, metavar="FILE.npz",
                     help="write every framework's outputs (arrays 'FRAMEWORK/INDEX') for the run's inputs")
    run.add_argument("--print-top", type=positive_int, default=None, metavar="N",
                     help="print the top-N classes of a classifier's output, framework by framework")
    run.add_argument("--json", action="store_true",
                     help="print the result document to stdout instead of the table (messages go to stderr)")
    run.add_argument("--no-cache", action="store_true", help="compile again even if a cached library exists")
    run.add_argument("--no-isolation", action="store_true",
                     help="measure in this process instead of one worker process per framework (debugging)")
    run.add_argument("--timeout", type=positive_float, default=3600.0, help="seconds per framework")
    run.add_argument("--memory-limit", type=positive_float, default=None,
                     help="GiB per framework worker (default: 90%% of the machine)")
    run.add_argument("--quiet", "-q", action="store_true", help="no progress, only the table")
    add_verbose_arg(run, "each worker's steps and the compile log (import, passes, kernels, codegen, cache)")
    run.set_defaults(handler=cmd_run)


def cmd_run(args: argparse.Namespace) -> int:
    from tvmbench import api
    from tvmbench.backends import default_frameworks, parse_frameworks, result_key
    from tvmbench.results.history import record
    from tvmbench.results.report import print_run, print_top, save_outputs

    console = make_console(stderr=True, quiet=args.quiet)
    check_output(args.output, args.save_outputs)
    history = history_arg(args)
    if args.package:
        args.model = _package_target(args)
    frameworks = parse_frameworks(args.frameworks) if args.frameworks else default_frameworks(args.model)
    options = model_options(args)
    target = api.target(args.target, args.layout)
    if args.compile_only:
        args.output_dir = args.artifact_dir
        return cmd_export(args)
    remote = api.check_rpc(args.rpc, args.rpc_key)
    if remote is None:
        api.require_device(target)
    if args.untuned and (args.db or args.tune or args.trials):
        raise UserError("--untuned applies no tuning database; it cannot be combined with --db, --tune or --trials")
    if args.cuda_graph and target.kind != "cuda":
        raise UserError("--cuda-graph captures CUDA kernel launches; it needs a CUDA target (--target cuda)")
    db = args.db
    if args.tune or args.trials is not None:
        from tvmbench.cli.tune import print_tune_report, tune_with_progress

        report, path = tune_with_progress(args, args.model, console, target)
        print_tune_report(report, console)
        db = str(path)
    cfg = api.run_config(args.model, options, target, frameworks, db=db, remote=remote, **run_settings(args))
    for note in target.notes:
        console.print(f"[dim]target: {note}[/dim]")
    with console.status("starting") as status:
        log = console if getattr(args, "verbose", False) else None
        result = api.run_benchmark(cfg, status_events(status, time.monotonic(), log,
                                                      total=len(cfg.frameworks) * cfg.rounds))
    _raise_shared_mistake(result.results.values())
    doc = result.to_json()
    entry = record("run", doc, history=history, environment=result.environment,
                   target=result.target_config)
    if entry is not None:
        doc["history_entry"] = entry
    if args.json:
        print(json.dumps(doc, indent=2, default=str))
        for fw in doc["frameworks"]:  # failures still reach stderr, one line each
            entry = doc[result_key(fw)]
            if entry["status"] == "failed":
                print(f"tvmbench: {fw}: {entry['error']}", file=sys.stderr)
    else:
        print_run(doc)
    if args.print_top:
        print_top(result.outputs, args.print_top, make_console(stderr=args.json))
    if args.save_outputs:
        console.print(f"outputs written to {save_outputs(args.save_outputs, result.outputs)}")
    if args.output:
        console.print(f"results written to {write_json(args.output, doc)}")
    failed = [r for r in result.results.values() if not r.ok]
    if any(r.error_kind in ("user", "missing") for r in failed):
        return EXIT_USAGE
    return EXIT_FAILED if failed else EXIT_OK


def _raise_shared_mistake(results: Any) -> None:
    """When every framework failed with the same mistake in the user's input (a shape the model
    refuses, found only while building it), that is one usage error: one line, no table of
    failures, nothing kept in the history."""
    from tvmbench.errors import UserError

    errors = {(r.error_kind, r.error) for r in results}
    if len(errors) == 1 and next(iter(errors))[0] == "user":
        raise UserError(next(iter(errors))[1])


def _package_target(args: argparse.Namespace) -> str:
    """``--package DIR``: the model is the package; its target is the one it was built for."""
    from tvmbench.errors import UserError
    from tvmbench.models import is_package
    from tvmbench.models.package import read_spec

    if not is_package(args.package):
        raise UserError(f"{args.package} is not a package (no package.json); write one with 'tvmbench export' "
                        "or 'run --compile-only'")
    if args.target == "auto":
        args.target = json.dumps(read_spec(Path(args.package).expanduser())["target"])
    if args.tune or args.trials is not None or args.db:
        raise UserError("a package runs as it was built: --tune, --trials and --db apply when exporting it")
    return args.package


def add_export_parser(sub: Any) -> None:
    export = sub.add_parser("export", help="build a deployable artifact (library + params + report) for a target, "
                            "without running it")
    add_model_args(export)
    export.add_argument("--precision", default="fp32", choices=PRECISIONS)
    export.add_argument("--output-dir", "-o", default=None, help="default artifacts/MODEL-TARGET")
    export.add_argument("--db", default=None, help="MetaSchedule database to apply")
    export.add_argument("--cuda-graph", action="store_true", help="CUDA: capture kernel launches in a CUDA graph")
    add_database_args(export)
    export.set_defaults(handler=cmd_export)


def cmd_export(args: argparse.Namespace) -> int:
    from tvmbench import api
    from tvmbench.compile.artifact import build_artifact
    from tvmbench.files import check_writable_dir
    from tvmbench.models import load_model
    from tvmbench.tuning.database import database_sources, load_databases

    console = make_console(stderr=True, quiet=getattr(args, "quiet", False))
    options = model_options(args)
    target = api.target(args.target, args.layout)
    if args.cuda_graph and target.kind != "cuda":
        raise UserError("--cuda-graph captures CUDA kernel launches; it needs a CUDA target (--target cuda)")
    out = args.output_dir or os.path.join(
        "artifacts", f"{os.path.basename(args.model).replace(':', '_')}-{target.kind}-{target.arch}-{args.precision}")
    check_writable_dir(out)
    sources = database_sources(target, args.db, not args.untuned, not (args.untuned or args.no_pretuned))
    with console.status(f"building {args.model} for {target.kind} {target.arch} ({args.precision})"):
        report = build_artifact(load_model(args.model, options), target, out, args.precision,
                                load_databases(sources, target), cuda_graph=args.cuda_graph)
    for line in _export_lines(args.model, target, args.precision, out, report):
        print(line)
    return EXIT_OK


def _export_lines(model: str, target: Any, precision: str, out: str, report: dict[str, Any]) -> list[str]:
    lines = [f"{model} for {target.kind} {target.arch}, {precision}: built in {report['compile_s']:.1f} s -> {out}"]
    if target.kind == "cuda":
        tc = "yes" if report["uses_tensor_cores"] else "no"
        lines.append(f"{report['kernels']} CUDA kernels; tensor-core instructions: {tc}"
                     + (f" ({report['tensor_core_instructions_ptx']} mma in the PTX)" if report["ptx_compiled"] else "")
                     + f"; largest shared-memory use {report['max_shared_memory_bytes']} B")
        lines.append("PTX: compiled with nvcc" if report["ptx_compiled"] else f"PTX: not built ({report['ptx_error']})")
    else:
        lines.append(f"library {report['library']} ({report['library_bytes']} B, ELF {report['elf_machine']})")
    return lines
