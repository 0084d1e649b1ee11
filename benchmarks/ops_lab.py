"""Issue 19's proof run: collect models' operators, the roofline summary, and explain vs the peers.

    .venv/bin/python benchmarks/ops_lab.py [--models resnet18,mobilenet_v2,bert-base-uncased]
        [--threads 1,2] [--schedules default,tuned] [--peers onnxruntime,openvino] [--store FILE]

1. ``tvmbench ops collect`` of every model at every thread count and schedule source into one
   store (a fresh one under /tmp unless --store is given);
2. per model, at the largest thread count: the operators below 50 % of their roofline bound, by
   their share of the model's kernel time;
3. ``tvmbench explain`` against each peer, per model: TVM's loss or win per operator kind;
4. the three largest per-kind losses of TVM over all models and peers: the next targets for the
   CPU schedules.
Sampled schedules and the latency predictor (the rest of issue 19) are not in this run yet.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default="resnet18,mobilenet_v2,bert-base-uncased")
    parser.add_argument("--threads", default="1,2")
    parser.add_argument("--schedules", default="default,tuned")
    parser.add_argument("--peers", default="onnxruntime,openvino")
    parser.add_argument("--store", default=None)
    parser.add_argument("--runs", type=int, default=20)
    args = parser.parse_args()

    import tvmbench
    from tvmbench.api import collect_ops, explain
    from tvmbench.profiling import queries
    from tvmbench.profiling.store import OpStore

    models = [m for m in args.models.split(",") if m]
    threads = [int(t) for t in args.threads.split(",") if t]
    store = Path(args.store or Path(tempfile.mkdtemp(prefix="ops-lab-")) / "ops.sqlite")
    started = time.monotonic()
    for c in collect_ops(models, "llvm", threads=threads, schedules=args.schedules.split(","), store=store,
                         runs=args.runs):
        print(f"collected {c['model']} ({c['threads']} threads): {c['operators']} operators, "
              f"{c['measured']} measurements, {c['skipped']} already stored")
    print(f"store {store}, {time.monotonic() - started:.0f} s, tvmbench {tvmbench.__version__}\n")

    db = OpStore.open(store, readonly=True)
    top = max(threads)
    for model in models:
        columns, rows = queries.roofline(db, model, top)
        ops = [dict(zip(columns, r, strict=True)) for r in rows]
        below = [op for op in ops if op["percent_of_bound"] is not None and op["percent_of_bound"] < 50]
        print(f"{model} ({top} threads): {len(below)} of {len(ops)} operators below 50 % of their bound, "
              f"{sum(op['share_percent'] for op in below):.0f} % of its kernel time")
        for op in below[:5]:
            print(f"  {op['kernel'][:50]:50s} {op['kind']:18s} {op['share_percent']:5.1f} % of time, "
                  f"{op['gflops']:6.1f} GFLOP/s, {op['percent_of_bound']:5.1f} % of {op['bound_gflops']:.0f} "
                  f"({op['bound_by']}-bound)")
    print()

    losses = []
    for model in models:
        for peer in [p for p in args.peers.split(",") if p]:
            doc = explain(model, peer, "llvm", threads=top, runs=args.runs)
            fw = doc["frameworks"]
            print(f"{model} vs {peer}: TVM {fw['tvm']['end_to_end_ms']:.2f} ms, {peer} "
                  f"{fw[peer]['end_to_end_ms']:.2f} ms (operators explain {fw['tvm']['explained_ms']:.2f} / "
                  f"{fw[peer]['explained_ms']:.2f} ms)")
            for row in doc["kinds"]:
                ratio = f"{row['ratio']:.2f}x" if row["ratio"] else "-"
                print(f"  {row['kind']:12s} TVM {row['tvm_ms']:8.3f} ms  {peer} {row['peer_ms']:8.3f} ms  "
                      f"TVM loses {row['tvm_loss_ms']:+8.3f} ms ({ratio})")
                losses.append((row["tvm_loss_ms"], model, peer, row["kind"]))
    print("\nlargest per-kind losses of TVM:")
    for loss, model, peer, kind in sorted(losses, reverse=True)[:3]:
        print(f"  {model}, {kind}: {loss:+.3f} ms vs {peer}")


if __name__ == "__main__":
    main()
