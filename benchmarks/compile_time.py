"""TVM compile time of zoo models, untuned and not from the compile cache, stage by stage.

    .venv/bin/python benchmarks/compile_time.py                      # every zoo model, batch 1
    .venv/bin/python benchmarks/compile_time.py --models densenet201,vgg19 --image-size 320

Issue 20 asks that every zoo model compile in under 60 s at batch 1 (untuned). Each model is
imported and compiled in a fresh process (as a benchmark worker does), with nothing from the
compile cache, and its stages are timed from the compile log: import (torch.export or the ONNX
importer), the Relax passes (simplify, legalize, fuse), scheduling (tuning records and the
default rules) and lowering with code generation (TIR lowering and LLVM, on every core, and the
library written). "compile" is the last three: what `tvmbench run` records as TVM's compile phase. Run it with nothing else on the machine: the numbers are seconds of wall time.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time

STAGES = [("import", "imported"), ("passes", "simplified"), ("schedule", "scheduled"), ("codegen", "compiled in")]


def one(name: str, batch_size: int, image_size: int | None) -> dict:
    """Import and compile one model here; the seconds of each stage."""
    from tvmbench.compile import compile_model, import_model
    from tvmbench.models import ModelOptions, load_model
    from tvmbench.targets import resolve_target

    model = load_model(name, ModelOptions(batch_size=batch_size, image_size=image_size))
    target = resolve_target("llvm")
    marks = [("start", time.perf_counter())]
    imported = import_model(model)
    marks.append(("imported", time.perf_counter()))
    compiled = compile_model(imported, target, use_cache=False,
                             log=lambda message: marks.append((message, time.perf_counter())))
    # compile_s: what `tvmbench run` records as TVM's compile phase (passes to library, not import)
    out = {"model": name, "batch_size": batch_size, "image_size": image_size, "compile_s": compiled.compile_s}
    last = marks[0][1]
    for stage, prefix in STAGES:
        at = next((t for message, t in marks if message.startswith(prefix)), None)
        if at is not None:
            out[f"{stage}_s"], last = at - last, at
    return out


def main() -> int:
    from tvmbench.models import ZOO

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", help="comma-separated zoo names (default: the whole zoo)")
    parser.add_argument("--batch-size", type=int, default=1)
    parser.add_argument("--image-size", type=int, default=None, help="for the CNNs (default: each one's own)")
    parser.add_argument("--limit", type=float, default=60.0, help="the goal, seconds")
    parser.add_argument("--one", help=argparse.SUPPRESS)  # the worker: one model, JSON on stdout
    args = parser.parse_args()
    if args.one:
        print(json.dumps(one(args.one, args.batch_size, args.image_size)))
        return 0
    names = args.models.split(",") if args.models else list(ZOO)
    unknown = [n for n in names if n not in ZOO]
    if unknown:
        parser.error(f"not zoo models: {', '.join(unknown)}")
    print(f"{'model':30} {'import':>7} {'passes':>7} {'sched':>7} {'codegen':>8} {'compile':>8}  (s)", flush=True)
    rows = []
    for name in names:
        size = args.image_size if ZOO[name].family == "cnn" else None
        cmd = [sys.executable, __file__, "--one", name, "--batch-size", str(args.batch_size)]
        done = subprocess.run(cmd + (["--image-size", str(size)] if size else []), capture_output=True, text=True)
        if done.returncode != 0:
            print(f"{name:30} failed: {(done.stderr.strip().splitlines() or ['?'])[-1]}", flush=True)
            continue
        r = json.loads(done.stdout.strip().splitlines()[-1])
        rows.append(r)
        print(f"{name:30} " + " ".join(f"{r.get(f'{s}_s', 0):{8 if s == 'codegen' else 7}.1f}" for s, _ in STAGES)
              + f" {r['compile_s']:8.1f}", flush=True)
    if not rows:
        return 1
    slowest = max(rows, key=lambda r: r["compile_s"])
    over = [r["model"] for r in rows if r["compile_s"] >= args.limit]
    print(f"\nslowest compile: {slowest['model']} {slowest['compile_s']:.1f} s (its import {slowest.get('import_s', 0):.1f} s more); "
          f"goal under {args.limit:.0f} s: {'met' if not over else 'missed by ' + ', '.join(over)}")
    return 0 if not over else 1


if __name__ == "__main__":
    sys.exit(main())
