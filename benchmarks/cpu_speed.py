"""Issue 7's proof: TVM on CPU against PyTorch eager, ONNX Runtime and OpenVINO, side by side.

    .venv/bin/python benchmarks/cpu_speed.py [--models resnet18,resnet50,mobilenet_v2,bert-base-uncased]
                                             [--rounds 2] [--db DIR] [--json out.json]

For each model, one `tvmbench run` measures every framework in its own worker, rounds
alternating (A B C D, D C B A), on the same inputs, fp32, batch 1, with the same thread count.
TVM runs untuned (tvmbench's default CPU schedules) unless --db gives a tuning database.
Prints medians, each framework's speed relative to PyTorch eager (PyTorch median / median),
achieved GFLOP/s and the share of this machine's measured SGEMM peak, and TVM's compile time.
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

FRAMEWORKS = ["tvm", "pytorch", "onnxruntime", "openvino"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default="resnet18,resnet50,mobilenet_v2,bert-base-uncased")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--threads", type=int, default=os.cpu_count() or 1)
    parser.add_argument("--db", default=None, help="tuning database for TVM (default: none, untuned)")
    parser.add_argument("--json", default=None, help="also write all results here")
    args = parser.parse_args()

    from tvmbench.measure.peak import measure_sgemm_peak, percent_of_peak

    peak = measure_sgemm_peak(args.threads)
    print(f"machine: {platform.processor() or platform.machine()}, {args.threads} threads; "
          f"peak {peak.gflops:.0f} GFLOP/s ({peak.method})", flush=True)
    everything = {"peak_gflops": peak.gflops, "peak_method": peak.method, "models": {}}
    with tempfile.TemporaryDirectory() as tmp:
        for model in args.models.split(","):
            out = Path(tmp) / "result.json"
            cmd = [sys.executable, "-m", "tvmbench.cli", "run", "--model", model, "--target", "llvm",
                   "--frameworks", ",".join(FRAMEWORKS), "--rounds", str(args.rounds),
                   "--threads", str(args.threads), "--output", str(out), "--quiet"]
            if args.db:
                cmd += ["--db", args.db]
            proc = subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
            if not out.exists():
                print(f"{model}: run failed: {proc.stderr.strip().splitlines()[-1:]}")
                continue
            result = json.loads(out.read_text())
            everything["models"][model] = result
            ref = result.get("pytorch", {}).get("median_ms")
            print(f"\n{model} (batch 1, fp32), {result.get('model_info', {}).get('flops', 0) / 1e9:.2f} GFLOP")
            print(f"  {'framework':12s} {'median ms':>10s} {'vs PyTorch':>11s} {'GFLOP/s':>8s} {'% peak':>7s}  accuracy")
            for fw in FRAMEWORKS:
                entry = result.get("tvm_relax" if fw == "tvm" else fw, {})
                if "median_ms" not in entry:
                    print(f"  {fw:12s} failed: {entry.get('error', {}).get('message', 'no result')}")
                    continue
                med = entry["median_ms"]
                ratio = f"{ref / med:.2f}x" if ref else "-"
                gf = entry.get("gflops_per_sec")
                pct = percent_of_peak(gf, peak)
                acc = entry.get("accuracy", {})
                ok = "reference" if fw == "pytorch" else ("ok" if acc.get("passed") else f"FAILED {acc}")
                print(f"  {fw:12s} {med:10.2f} {ratio:>11s} {gf or 0:8.1f} {pct or 0:6.1f}%  {ok}")
            phases = result.get("tvm_relax", {}).get("phases_s", {})
            print(f"  tvm compile {phases.get('compile_s', float('nan')):.1f} s "
                  f"(library cache {'hit' if result.get('tvm_relax', {}).get('info', {}).get('cache_hit') else 'miss'})")
    if args.json:
        Path(args.json).write_text(json.dumps(everything, indent=1, default=str))


if __name__ == "__main__":
    main()
