"""Issue 19's proof run: collect models' operators, the roofline summary, and explain vs the peers.

    .venv/bin/python benchmarks/ops_lab.py [--models resnet18,mobilenet_v2,bert-base-uncased]
        [--threads 1,2] [--schedules default,tuned,sampled:8] [--peers onnxruntime,openvino] [--store FILE]

1. ``tvmbench ops collect`` of every model at every thread count and schedule source into one
   store (a fresh one under /tmp unless --store is given);
2. per model, at the largest thread count: the operators below 50 % of their roofline bound, by
   their share of the model's kernel time;
3. per model, where the default schedule sits among the sampled ones (operators timed alone, warm);
4. ``tvmbench explain`` against each peer, per model: TVM's loss or win per operator kind, with
   each side's % of the kind's roofline bound, and the layers paired one by one;
5. the three largest per-kind losses of TVM over all models and peers: the next targets for the
   CPU schedules;
6. the latency predictor's held-out error: trained on all models but one, tested on that one.
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
    parser.add_argument("--schedules", default="default,tuned,sampled:8")
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
        _sampled_summary(db, model, top)
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
                bound = (f", {row['tvm_percent_of_bound']:.0f} % / {row['peer_percent_of_bound']:.0f} % of bound"
                         if row.get("tvm_percent_of_bound") and row.get("peer_percent_of_bound") else "")
                print(f"  {row['kind']:12s} TVM {row['tvm_ms']:8.3f} ms  {peer} {row['peer_ms']:8.3f} ms  "
                      f"TVM loses {row['tvm_loss_ms']:+8.3f} ms ({ratio}{bound})")
                losses.append((row["tvm_loss_ms"], model, peer, row["kind"]))
            for layer in doc["layers"][:3]:
                print(f"  layer {layer['peer_layer'][:45]:45s} TVM {layer['tvm_ms']:.3f} ms vs {layer['peer_ms']:.3f} ms "
                      f"({layer['tvm_loss_ms']:+.3f})")
            for kind, reason in doc["unmatched"].items():
                print(f"  {kind} layers not paired: {reason}")
    print("\nlargest per-kind losses of TVM:")
    for loss, model, peer, kind in sorted(losses, reverse=True)[:3]:
        print(f"  {model}, {kind}: {loss:+.3f} ms vs {peer}")

    if len(models) > 1:
        from tvmbench.profiling import predictor

        fitted = predictor.fit(db)
        print(f"\npredictor ({fitted.rows} operator times), each model held out of training in turn:")
        for r in fitted.report:
            print(f"  {r['model']}: {r['operators']} operators, median relative error "
                  f"{r['median_relative_error']:.0%}, R² (log) {r['r2_log']:.2f}, total {r['total_us'] / 1e3:.2f} ms "
                  f"predicted {r['total_predicted_us'] / 1e3:.2f} ms (off by {r['total_relative_error']:.0%})")
    print(f"\ntotal {time.monotonic() - started:.0f} s")


def _sampled_summary(db: object, model: str, threads: int) -> None:
    """Per operator of the model: its default schedule's alone time against the sampled ones'."""
    columns, rows = db.query(  # type: ignore[attr-defined]
        "SELECT o.name, m.schedule, m.median_us FROM measurements m JOIN operators o USING (workload) "
        "JOIN model_ops mo USING (workload) JOIN models md ON md.id = mo.model_id "
        "WHERE md.name = ? AND m.threads = ? AND m.context = 'alone_warm'", (model, threads))
    per: dict[str, dict[str, float]] = {}
    for name, schedule, us in rows:
        per.setdefault(name, {})[schedule] = us
    sampled = {n: [v for k, v in s.items() if k.startswith("sampled:")] for n, s in per.items()}
    pairs = [(per[n]["default"], sorted(v)) for n, v in sampled.items() if v and "default" in per[n]]
    if not pairs:
        return
    beaten = sum(1 for d, v in pairs if d <= v[0])
    ratio = sorted(v[len(v) // 2] / d for d, v in pairs)
    print(f"  sampled schedules: the default beats all {len(pairs[0][1])} samples on {beaten} of {len(pairs)} "
          f"operators; the median sample is {ratio[len(ratio) // 2]:.1f}x the default's time (median over operators)")


if __name__ == "__main__":
    main()
