"""Can a fixed probe workload divide the host's noise out of a model's time? (issue 22)

    .venv/bin/python benchmarks/host_probe.py [--model resnet18] [--processes 8] [--seconds 12]

`tvmbench diff` compares two runs made at different times, so it cannot pair their samples; on a
shared VM the same build's median moves by 5-10 % between processes. If that movement were the
host's speed, a fixed workload timed beside the model (in alternating quarter-second turns, in
the same process) would move with it, and the model's time over the probe's would be steadier
than the model's time. This measures that, in ``--processes`` fresh processes, for three probes:
a 256x256 float32 matmul (NumPy's BLAS), a 3 MB stream (NumPy add), a small TVM kernel run
by TVM's own thread pool (a parallel matmul and stream), and a 96 MB stream (``dram``: two 32 MB
arrays added into a third, past any L3 this VM has, as resnet18's 45 MB of weights are: the TVM
kernel, in cache, hardly moved while the model moved 8 %, so the model's movement may be the
memory system's). It prints each process's medians and,
per probe, the spread (standard deviation of the logs) of the model's median alone and over the
probe's: a probe that helps makes the second smaller than the first.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import subprocess
import sys
import time

PROBES = ("gemm", "stream", "gemm+stream", "tvm", "dram")


def _tvm_probe():  # type: ignore[no-untyped-def]
    import numpy as np
    import tvm
    from tvm.script import tirx as T

    @T.prim_func(s_tir=True)
    def probe(a: T.Buffer((256, 256), "float32"), b: T.Buffer((256, 256), "float32"),
              c: T.Buffer((256, 256), "float32"), x: T.Buffer((1 << 19,), "float32"),
              y: T.Buffer((1 << 19,), "float32")) -> None:
        T.func_attr({"global_symbol": "main", "tirx.noalias": True})
        for i in T.parallel(256):
            for j0 in range(16):
                for k in range(256):
                    for j1 in T.vectorized(16):
                        with T.sblock("c"):
                            vi = T.axis.spatial(256, i)
                            vj = T.axis.spatial(256, j0 * 16 + j1)
                            vk = T.axis.reduce(256, k)
                            with T.init():
                                c[vi, vj] = T.float32(0)
                            c[vi, vj] = c[vi, vj] + a[vi, vk] * b[vk, vj]
        for p in T.parallel(512):
            for q in T.vectorized(1024):
                with T.sblock("y"):
                    v = T.axis.spatial(1 << 19, p * 1024 + q)
                    y[v] = x[v] * T.float32(1.0001) + y[v]

    f = tvm.compile(tvm.IRModule({"main": probe}), target="llvm")["main"]
    rng = np.random.default_rng(0)
    args = [tvm.runtime.tensor(rng.standard_normal(s).astype("float32"), tvm.cpu())
            for s in [(256, 256)] * 3 + [(1 << 19,)] * 2]
    return lambda: f(*args)


def child(model_name: str, seconds: float) -> None:
    """One process: the model and the probes timed in alternating quarter-second turns."""
    import numpy as np

    from tvmbench.backends import BackendConfig
    from tvmbench.backends.tvm import TVMBackend
    from tvmbench.models import ModelOptions, load_model
    from tvmbench.targets import resolve_target

    backend = TVMBackend(BackendConfig(target=resolve_target("llvm"), threads=2, databases=()))
    backend.prepare(load_model(model_name, ModelOptions()))
    rng = np.random.default_rng(0)
    a, b = (rng.standard_normal((256, 256), dtype=np.float32) for _ in range(2))
    x, y = (rng.standard_normal(1 << 18, dtype=np.float32) for _ in range(2))
    z = np.empty_like(x)
    big_x, big_y = (rng.standard_normal(1 << 23, dtype=np.float32) for _ in range(2))
    big_z = np.empty_like(big_x)

    def gemm() -> None:
        a @ b

    def stream() -> None:
        np.add(x, y, out=z)

    def dram() -> None:
        np.add(big_x, big_y, out=big_z)

    def both() -> None:
        gemm()
        stream()

    work = {"model": backend.run, "gemm": gemm, "stream": stream, "gemm+stream": both, "tvm": _tvm_probe(),
            "dram": dram}
    times: dict[str, list[float]] = {k: [] for k in work}
    for fn in work.values():
        for _ in range(5):
            fn()
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        for name, fn in work.items():
            fn()  # the other workload just had the caches
            stop = time.perf_counter() + 0.25
            while time.perf_counter() < stop:
                t0 = time.perf_counter()
                fn()
                times[name].append(time.perf_counter() - t0)
    print(json.dumps({k: statistics.median(v) * 1e3 for k, v in times.items()}))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="resnet18")
    parser.add_argument("--processes", type=int, default=8)
    parser.add_argument("--seconds", type=float, default=12.0)
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(args.model, args.seconds)
        return
    env = {**os.environ, "TVM_NUM_THREADS": "2", "OPENBLAS_NUM_THREADS": "2", "OMP_NUM_THREADS": "2"}
    rows = []
    for i in range(args.processes):
        out = subprocess.run([sys.executable, __file__, "--child", "--model", args.model, "--seconds",
                              str(args.seconds)], capture_output=True, text=True, check=True, env=env).stdout
        rows.append(json.loads(out.strip().splitlines()[-1]))
        print(f"  process {i}: " + ", ".join(f"{k} {v:.3f} ms" for k, v in rows[-1].items()), flush=True)

    def spread(values: list[float]) -> float:
        return statistics.stdev(math.log(v) for v in values)

    print(f"{args.model}: spread of the median over {args.processes} processes (sd of logs): "
          f"{spread([r['model'] for r in rows]):.4f}")
    for probe in PROBES:
        print(f"  over {probe:12s} {spread([r['model'] / r[probe] for r in rows]):.4f}"
              f"   (the probe itself {spread([r[probe] for r in rows]):.4f})")


if __name__ == "__main__":
    main()
