"""How repeatable is `tvmbench run`? Five invocations on resnet18; the spread of the medians.

    .venv/bin/python benchmarks/repeatability.py [--invocations 5] [--model resnet18] [-- extra run flags]

Each invocation is a separate `tvmbench run` process (fresh workers, cached TVM library after the
first), as a user would repeat it. Prints each invocation's medians and, per framework, the spread
(max - min) / median across invocations.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--invocations", type=int, default=5)
    parser.add_argument("--model", default="resnet18")
    parser.add_argument("extra", nargs="*", help="more flags for tvmbench run (after --)")
    args = parser.parse_args()
    medians: dict[str, list[float]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        for i in range(args.invocations):
            out = Path(tmp) / f"{i}.json"
            cmd = [sys.executable, "-m", "tvmbench.cli", "run", "--model", args.model, "--target", "llvm",
                   "--output", str(out), "--quiet", *args.extra]
            subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
            result = json.loads(out.read_text())
            row = []
            for fw in result["frameworks"]:
                entry = result["tvm_relax" if fw == "tvm" else fw]
                medians.setdefault(fw, []).append(entry["median_ms"])
                row.append(f"{fw} {entry['median_ms']:.2f} ms ({entry['total_runs']} runs)")
            print(f"invocation {i + 1}: " + ", ".join(row), flush=True)
    for fw, values in medians.items():
        mid = statistics.median(values)
        print(f"{fw}: medians {', '.join(f'{v:.2f}' for v in values)} ms; spread (max-min)/median "
              f"{(max(values) - min(values)) / mid:.1%}")


if __name__ == "__main__":
    main()
