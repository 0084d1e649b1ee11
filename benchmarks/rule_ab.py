"""Same-process A/B of one default-schedule constant: two builds of a model, run alternately.

    .venv/bin/python benchmarks/rule_ab.py mobilenet_v2 rules.contraction.SHORT_REDUCTION 0 --runs 200
    .venv/bin/python benchmarks/rule_ab.py resnet18 tiles.MAX_ACCUMULATORS_16_REGS 16 \
        --target '{"kind": "llvm", "mcpu": "haswell", "num-cores": 2}'
    .venv/bin/python benchmarks/rule_ab.py bert-base-uncased precision bf16 --block 2 --runs 60

Builds the model twice in one process, once with the constant ``tvmbench.compile.<module>.<NAME>``
(e.g. ``tiles.MAX_ROWS``, ``rules.contraction.UNROLL_REDUCTION``, ``passes.winograd._TILE``) set to the
given value (A; ``--also module.NAME=VALUE`` sets more constants for A, for changes that go
together) and once with its current value (B), then alternates single inferences of A and B
(or blocks of ``--block`` consecutive ones, the warm steady state of a benchmark loop) and prints
both medians and B's speedup. The name ``precision`` A/Bs TVM's ``--precision`` instead: A built
at fp32, B at the value given (``bf16``), so B's speedup is the precision's. Strict alternation starts each inference with the other build's data
in the caches, which exaggerates changes that save memory traffic: use blocks for those. On this shared 2-vCPU VM separate processes drift by up to
40 % against each other, so comparing two `tvmbench profile` runs cannot resolve a 2-5 % change;
alternating inside one process can. ``--probe`` also splits the result by the host's state
(``measure/probe.py``: on that VM the two vCPUs' hand-over jumps between a near and a far state,
and a change to how work is split between the cores can win in one and lose in the other).
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import time
from collections.abc import Sequence


def _number(text: str) -> int | float | tuple[int | float, ...]:
    """An integer constant's value, a fraction's (``dilated_bands.MAX_KEPT 0.9``), a tuple's
    (``rules.attention.ROWS 6,4,2,1``), a flag's (``passes.winograd.DILATED False``: 0) or a
    name's (``tiles.TWO_VECTOR_TIES none,``)."""
    if "," in text:
        return tuple(_number(part) for part in text.split(","))  # type: ignore[misc]
    if text in ("True", "False"):  # (a flag: the name "False" would be a true string)
        return int(text == "True")
    try:
        value = float(text)
    except ValueError:
        return text  # type: ignore[return-value]  (a name: tiles.TWO_VECTOR_TIES none,)
    return int(value) if value.is_integer() and "." not in text else value


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("model")
    parser.add_argument("name", help="module.NAME: a module-level constant of a tvmbench.compile module, e.g. "
                                     "tiles.MAX_ROWS")
    parser.add_argument("value", type=_number, help="its value for build A (B keeps the current one): an integer, a fraction, or a tuple as 6,4,2,1")
    parser.add_argument("--also", action="append", default=[], metavar="module.NAME=VALUE",
                        help="another constant build A sets (repeatable), to A/B changes that go together")
    parser.add_argument("--runs", type=int, default=100, help="inferences of each build")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--batch-size", type=int, default=1)
    parser.add_argument("--image-size", type=int, default=None, help="image height = width (vision models)")
    parser.add_argument("--seq-length", type=int, default=None, help="tokens per sequence (text models)")
    parser.add_argument("--block", type=int, default=1,
                        help="consecutive inferences of one build before switching (1: strict alternation, "
                             "each build starting with the other's data in the caches; 20+: the warm steady "
                             "state a benchmark loop sees)")
    parser.add_argument("--build-order", choices=["ab", "ba"], default="ab",
                        help="which build is made first: on large transformers the second build of a process "
                             "ran 2-5 %% apart from the first with the same code (A/A runs); run both orders "
                             "and take the geometric mean of the two speedups to cancel that")
    parser.add_argument("--probe", action="store_true",
                        help="a turn of the host-state probe (measure/probe.py) before each pair of blocks; "
                             "prints the two medians and the speedup in each host state as well")
    parser.add_argument("--kernels", type=int, default=0, metavar="N",
                        help="then time each kernel inside the model (the VM's instrumented runs, the two "
                             "builds alternating) and print the N whose times differ most: which kernels a "
                             "change moves in the model, where kernels_alone.py times them alone")
    parser.add_argument("--precision", default="fp32", help="both builds at this --precision (e.g. bf16)")
    parser.add_argument("--target", default="llvm",
                        help='as for tvmbench run, e.g. \'{"kind": "llvm", "mcpu": "haswell"}\' for AVX2 code')
    args = parser.parse_args()
    os.environ["TVM_NUM_THREADS"] = str(args.threads)

    import importlib

    from tvmbench.backends import BackendConfig
    from tvmbench.backends.tvm import TVMBackend
    from tvmbench.models import ModelOptions, load_model
    from tvmbench.paths import cache_dir
    from tvmbench.targets import resolve_target

    target = resolve_target(args.target)
    model = load_model(args.model, ModelOptions(batch_size=args.batch_size, image_size=args.image_size,
                                                    seq_length=args.seq_length))
    if args.name == "precision":
        return precision_ab(args, target, model)
    module_name, _, constant = args.name.rpartition(".")
    if not module_name:
        parser.error(f"{args.name}: expected module.NAME, e.g. tiles.MAX_ROWS")
    rules = importlib.import_module(f"tvmbench.compile.{module_name}")
    current = getattr(rules, constant)
    others = []  # (module, NAME, A's value, current value) of each --also
    for item in args.also:
        name, _, value = item.partition("=")
        mod_name, _, const = name.rpartition(".")
        try:
            number = _number(value)
        except ValueError:
            number = None
        if not mod_name or number is None:
            parser.error(f"--also {item}: expected module.NAME=NUMBER")
        mod = importlib.import_module(f"tvmbench.compile.{mod_name}")
        others.append((mod, const, number, getattr(mod, const)))
    root = cache_dir("rule-ab")
    builds = {}
    order = (("A", args.value), ("B", current))
    for label, value in order if args.build_order == "ab" else order[::-1]:
        setattr(rules, constant, value)
        for mod, const, a_value, now in others:
            setattr(mod, const, a_value if label == "A" else now)
        # The compile cache knows neither the constant nor the code of the rules: a fresh folder
        # for each build (a folder kept from an earlier run would hold the code of that run).
        folder = root / f"{args.name}-{value}"
        shutil.rmtree(folder, ignore_errors=True)
        os.environ["TVMBENCH_CACHE"] = str(folder)
        backend = TVMBackend(BackendConfig(target=target, threads=args.threads, databases=(),
                                           options={"precision": args.precision}))
        backend.prepare(model)
        builds[label] = backend
    setattr(rules, constant, current)
    for mod, const, _, now in others:
        setattr(mod, const, now)
    also = "".join(f", {item}" for item in args.also)
    alternate(builds, args, f"A ({args.name}={args.value}{also})", f"B ({args.name}={current})")


def precision_ab(args: argparse.Namespace, target: object, model: object) -> None:
    """A: TVM at fp32, B: at ``--precision args.value``, both from this run's code."""
    from tvmbench.backends import BackendConfig
    from tvmbench.backends.tvm import TVMBackend

    builds = {}
    order = (("A", "fp32"), ("B", args.value))
    for label, precision in order if args.build_order == "ab" else order[::-1]:
        backend = TVMBackend(BackendConfig(target=target, threads=args.threads, databases=(), use_cache=False,
                                           options={"precision": precision}))
        backend.prepare(model)
        builds[label] = backend
    alternate(builds, args, "A (fp32)", f"B (--precision {args.value})")


def alternate(builds: dict, args: argparse.Namespace, a_name: str, b_name: str) -> None:
    """Warm both builds, then run them alternately (``--block``) and print the medians."""
    for backend in builds.values():
        for _ in range(10):
            backend.run()
    times: dict[str, list[float]] = {"A": [], "B": []}
    probe = None
    if args.probe:
        from tvmbench.measure.probe import HostProbe

        probe = HostProbe()
    turns: list[float] = []  # probe reading before each pair of blocks
    for i in range(max(args.runs // args.block, 1)):
        if probe is not None:
            turns.append(probe.turn() * 1e6)
        for label in ("A", "B") if i % 2 == 0 else ("B", "A"):
            # in a block, a first inference brings the build's data back into the caches, untimed
            warm = 1 if args.block > 1 else 0
            for j in range(args.block + warm):
                t0 = time.perf_counter()
                builds[label].run()
                if j >= warm:
                    times[label].append(time.perf_counter() - t0)
    a, b = (statistics.median(times[k]) * 1e3 for k in ("A", "B"))
    print(f"{args.model}: {a_name} {a:.3f} ms, {b_name} {b:.3f} ms, "
          f"B speedup {a / b:.3f}{_interval(times, args.block, range(len(times['A']) // args.block))} "
          f"(medians of {len(times['A'])} runs, alternating "
          f"{'single runs' if args.block == 1 else f'blocks of {args.block}'}, built {args.build_order})")
    if turns:
        by_state(turns, times, args.block)
    if args.kernels:
        by_kernel(builds, args.kernels)


def by_kernel(builds: dict, top: int, rounds: int = 6, runs: int = 5) -> None:
    """Per-kernel milliseconds per inference inside the model for both builds: ``rounds`` turns
    of ``runs`` instrumented inferences each, alternating (a kernel's time there includes the
    caches its neighbours leave it, which a kernel timed alone does not see: ResNet-50's 1x1
    convolutions over 1 MB of weights ran 8 % faster channel-outer in the model)."""
    per: dict[str, list[dict[str, float]]] = {"A": [], "B": []}
    for r in range(rounds):
        for label in ("A", "B") if r % 2 == 0 else ("B", "A"):
            timed, _ = builds[label].time_kernels(runs, None)
            per[label] += timed
    med = {label: {name: statistics.median(run.get(name, 0.0) for run in timed) * 1e3 for name in timed[0]}
           for label, timed in per.items()}
    print(f"  kernels in the model: A {sum(med['A'].values()):.3f} ms, B {sum(med['B'].values()):.3f} ms")
    names = sorted(set(med["A"]) | set(med["B"]), key=lambda n: -abs(med["A"].get(n, 0.0) - med["B"].get(n, 0.0)))
    for name in names[:top]:
        a, b = med["A"].get(name, 0.0), med["B"].get(name, 0.0)
        print(f"  {name[:60]:60s} A {a:8.3f} B {b:8.3f}" + (f"  B speedup {a / b:.2f}" if a and b else ""))


def by_state(turns: list[float], times: dict[str, list[float]], block: int) -> None:
    """Each host state's medians and speedup: pair ``i`` of blocks is labelled by the probe turn
    before it (``probe.states`` groups the turns)."""
    from tvmbench.measure.probe import state_levels, state_of, states

    bounds = states(turns)
    for k, level in enumerate(state_levels(turns, bounds)):
        pairs = [i for i, us in enumerate(turns) if state_of(us, bounds) == k]
        if level is None or not pairs:
            continue
        mine = {label: [t for i in pairs for t in times[label][i * block:(i + 1) * block]] for label in times}
        a, b = (statistics.median(mine[x]) * 1e3 for x in ("A", "B"))
        print(f"  host state {level:.2f} us per fork-join ({len(pairs)} pairs of blocks): A {a:.3f} ms, "
              f"B {b:.3f} ms, B speedup {a / b:.3f}{_interval(times, block, pairs)}")


def _interval(times: dict[str, list[float]], block: int, pairs: Sequence[int]) -> str:
    """`` [lo-hi]``: the 95 % interval of B's speedup over the given pairs of blocks, the pairs
    as the units (``stats.paired_ratio_ci`` over the blocks' medians). Without it a short run's
    split by host state read as a result: an A/A of two identical resnet18 builds (150 runs in
    blocks of 5) read 0.959x over its 19 near-state pairs and 1.025x over its 11 far-state ones
    (docs/performance.md, session 74)."""
    from tvmbench.measure.stats import paired_ratio_ci

    medians = {label: [statistics.median(times[label][i * block:(i + 1) * block]) for i in pairs] for label in times}
    if len(medians["A"]) < 2:
        return ""
    _, lo, hi = paired_ratio_ci(medians["A"], medians["B"])
    return f" [95 % CI {lo:.3f}-{hi:.3f}]"


if __name__ == "__main__":
    main()
