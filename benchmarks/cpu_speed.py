"""Issue 7's proof: TVM on CPU against PyTorch eager, ONNX Runtime and OpenVINO, side by side.

    .venv/bin/python benchmarks/cpu_speed.py [--models resnet18,resnet50,mobilenet_v2,bert-base-uncased]
                                             [--rounds 2] [--db DIR] [--json out.json]
                                             [--target '{"kind": "llvm", "mcpu": "haswell"}']

For each model, one `tvmbench run` measures every framework in its own worker, rounds
alternating (A B C D E, E D C B A), on the same inputs, fp32, batch 1, with the same thread count:
TVM untuned (`tvm_untuned`: tvmbench's default CPU schedules, no database), TVM with the tuning
databases shipped in the package (or --db), PyTorch eager, ONNX Runtime, OpenVINO. The run uses a
fresh cache folder, so no database left by earlier tuning on this machine is applied. Prints
medians, speed relative to PyTorch eager (PyTorch median / median), achieved GFLOP/s and the share
of this machine's measured FMA peak, and TVM's compile time.

--target builds TVM for another CPU of the same family, e.g. AVX2 code on an AVX-512 machine. For a
target without AVX-512, PyTorch is held to AVX2 as well (ATEN_CPU_CAPABILITY, ONEDNN_MAX_CPU_ISA,
which OpenVINO's oneDNN may also honour); ONNX Runtime's MLAS picks its kernels from the CPU and
has no such switch, so it keeps AVX-512 and the script says so.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
from pathlib import Path

FRAMEWORKS = ["tvm_untuned", "tvm", "pytorch", "onnxruntime", "openvino"]
KEYS = {"tvm": "tvm_relax"}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default="resnet18,resnet50,mobilenet_v2,bert-base-uncased")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--threads", type=int, default=os.cpu_count() or 1)
    parser.add_argument("--db", default=None, help="tuning database for `tvm` (default: the shipped ones)")
    parser.add_argument("--json", default=None, help="also write all results here")
    parser.add_argument("--target", default="llvm", help="TVM's target (default: this CPU)")
    args = parser.parse_args()

    env = {**os.environ}
    if args.target != "llvm":
        from tvmbench.errors import UserError
        from tvmbench.targets import has_feature, resolve_target

        try:
            target = resolve_target(args.target)
        except UserError as err:
            sys.exit(f"cpu_speed.py: {err}")
        if not has_feature(target.tvm(), "avx512f"):
            env.update(ATEN_CPU_CAPABILITY="avx2", ONEDNN_MAX_CPU_ISA="AVX2")
            print("target without AVX-512: PyTorch held to AVX2 (ATEN_CPU_CAPABILITY, ONEDNN_MAX_CPU_ISA); "
                  "ONNX Runtime keeps the CPU's own ISA")

    from tvmbench.measure.peak import measure_compute_peak, percent_of_peak

    peak = measure_compute_peak(args.threads)
    print(f"machine: {platform.processor() or platform.machine()}, {args.threads} threads; "
          f"peak {peak.gflops:.0f} GFLOP/s ({peak.method})", flush=True)
    everything = {"peak_gflops": peak.gflops, "peak_method": peak.method, "models": {}}
    with tempfile.TemporaryDirectory() as tmp:
        env["TVMBENCH_CACHE"] = str(Path(tmp) / "cache")
        for model in args.models.split(","):
            out = Path(tmp) / "result.json"
            cmd = [sys.executable, "-m", "tvmbench.cli", "run", "--model", model, "--target", args.target,
                   "--frameworks", ",".join(FRAMEWORKS), "--rounds", str(args.rounds),
                   "--threads", str(args.threads), "--output", str(out), "--quiet"]
            if args.db:
                cmd += ["--db", args.db]
            proc = subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, env=env)
            if not out.exists():
                print(f"{model}: run failed: {proc.stderr.strip().splitlines()[-1:]}")
                continue
            result = json.loads(out.read_text())
            everything["models"][model] = result
            ref = result.get("pytorch", {}).get("median_ms")
            print(f"\n{model} (batch 1, fp32), {result.get('model_info', {}).get('flops', 0) / 1e9:.2f} GFLOP")
            print(f"  {'framework':12s} {'median ms':>10s} {'vs PyTorch':>11s} {'GFLOP/s':>8s} {'% peak':>7s}  accuracy")
            for fw in FRAMEWORKS:
                entry = result.get(KEYS.get(fw, fw), {})
                if "median_ms" not in entry:
                    print(f"  {fw:12s} {entry.get('status', 'failed')}: {entry.get('error', 'no result')}")
                    continue
                med = entry["median_ms"]
                ratio = f"{ref / med:.2f}x" if ref else "-"
                gf = entry.get("gflops_per_sec")
                pct = percent_of_peak(gf, peak)
                acc = entry.get("accuracy", {})
                ok = "reference" if fw == "pytorch" else ("ok" if acc.get("passed") else f"FAILED {acc}")
                print(f"  {fw:12s} {med:10.2f} {ratio:>11s} {gf or 0:8.1f} {pct or 0:6.1f}%  {ok}")
            phases = result.get("tvm_untuned", {}).get("phases_s", {})
            db = result.get("tuning_database") or {}
            print(f"  tvm compile {phases.get('compile_s', float('nan')):.1f} s (untuned); tuning records for "
                  f"{db.get('tasks_with_records', 0)} of {db.get('tasks', '?')} kernels: "
                  + (", ".join(f"{s['source']} {Path(s['path']).name}" for s in db.get("sources", [])
                               if s.get("tasks_covered")) or "none"))
            for fw in ("onnxruntime", "openvino", "tvm_untuned"):
                sp = result.get("tvm_speedups", {}).get(fw) or {}
                if sp.get("speedup"):
                    print(f"  tvm vs {fw}: {sp['speedup']:.2f}x (95% CI {sp['ci95'][0]:.2f}-{sp['ci95'][1]:.2f})")
    if args.json:
        Path(args.json).write_text(json.dumps(everything, indent=1, default=str))


if __name__ == "__main__":
    main()
