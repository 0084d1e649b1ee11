"""Time one model's kernels alone under knob overrides of tvmbench's schedule rules.

    python benchmarks/kernels_alone.py mnasnet1_0 '{"batch_size":8,"image_size":320}' _conv2d_nhwc \\
        '{}' '{"whole_channels":true,"band_rows":4}'

Arguments: a zoo name, its ModelOptions as JSON, a substring of the kernel names to time, then
one JSON knob override per variant (``{}`` is the default schedule; knob names in
``compile/knobs.py`` and the rules). Each matching kernel is built once per variant by the rule
that schedules it, and only kernels whose knob values differ between variants are timed: 16
copies of the operands rotate (so the weights are not all hot in cache, as in the model), six
rounds alternate the variants' order, and the median of the rounds is printed with the largest
difference of each variant's output from the first variant's. A tool for finding a rule's
choices; the model decides (``benchmarks/rule_ab.py``).
"""

from __future__ import annotations

import argparse
import json
import os
import time

import numpy as np

COPIES = 16
ROUNDS = 6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("model")
    parser.add_argument("options", help="ModelOptions as JSON, e.g. '{\"batch_size\": 8}'")
    parser.add_argument("match", help="substring of the kernel names to time")
    parser.add_argument("variants", nargs="+", help="knob overrides as JSON, one per variant")
    parser.add_argument("--precision", default="fp32", help="TVM's --precision (bf16: on CPUs with AVX-512 BF16)")
    args = parser.parse_args()
    try:
        options, variants = json.loads(args.options), [json.loads(v) for v in args.variants]
    except json.JSONDecodeError as e:
        parser.error(f"options and variants must be JSON objects ({e.msg} in {e.doc!r})")

    from tvmbench.targets import physical_cores

    os.environ.setdefault("TVM_NUM_THREADS", str(physical_cores()))  # (read when TVM's pool starts)
    import tvm

    from tvmbench.compile import codegen, pipeline
    from tvmbench.compile.importer import import_model
    from tvmbench.compile.knobs import knob_set
    from tvmbench.models import ModelOptions, load_model
    from tvmbench.targets import resolve_target

    target = resolve_target("llvm")
    model = load_model(args.model, ModelOptions(**options))
    from tvmbench.compile.precision import apply_precision

    mod = apply_precision(import_model(model).mod, args.precision, target)
    legal = pipeline.per_inference(pipeline.legalized(mod, target))
    kernels = [(gv.name_hint, f) for gv, f in legal.functions.items()
               if isinstance(f, tvm.tirx.PrimFunc) and args.match in gv.name_hint]
    rng = np.random.default_rng(0)
    for name, func in kernels:
        builds = []
        for overrides in variants:
            with knob_set(overrides) as knobs:
                _, sch = pipeline.default_schedule(func, target)
            mod = tvm.IRModule({"main": sch.mod["main"].with_attr("global_symbol", "main")})
            with codegen.lowering_context():  # (lowered as a native build's kernels are)
                builds.append((knobs.values(), tvm.tirx.build(mod, target=target.tvm(), pipeline=codegen.PIPELINE)["main"]))
        if len({json.dumps(v, sort_keys=True, default=str) for v, _ in builds}) < 2:
            continue
        _time_kernel(name, func, builds, rng)


def _time_kernel(name: str, func, builds: list, rng) -> None:
    import ml_dtypes
    import tvm

    dev = tvm.cpu()
    shapes = [([int(d) for d in p.ty.shape], str(p.ty.dtype)) for p in func.params]
    sets = [[tvm.runtime.tensor(rng.standard_normal(s).astype(ml_dtypes.bfloat16 if d == "bfloat16" else d), dev)
             for s, d in shapes] for _ in range(COPIES)]
    outputs, times = [], [[] for _ in builds]
    for _, fn in builds:
        fn(*sets[0])
        outputs.append(sets[0][-1].numpy().astype("float32"))
    for rnd in range(ROUNDS):
        order = range(len(builds)) if rnd % 2 == 0 else reversed(range(len(builds)))
        for i in order:
            fn = builds[i][1]
            for c in range(COPIES):
                fn(*sets[c])
            t0 = time.perf_counter()
            for c in range(3 * COPIES):
                fn(*sets[c % COPIES])
            times[i].append((time.perf_counter() - t0) / (3 * COPIES) * 1e6)
    print(name, [int(d) for d in func.params[-1].ty.shape])
    for (values, _), t, out in zip(builds, times, outputs, strict=True):
        shown = {k: v for k, v in values.items() if not isinstance(v, (list, dict))}
        print(f"   {np.median(t):9.1f} us  diff {np.abs(out - outputs[0]).max():.1e}  {shown}")


if __name__ == "__main__":
    main()
