"""Which of a TVM build's kernels pay for the host's far state? (issues 21 and 22)

    .venv/bin/python benchmarks/state_kernels.py resnet18 [--minutes 5] [--threads 2] [--top 25] [--precision bf16]

On the 2-vCPU EPYC VM of the development notes the cores' hand-over jumps between a near and a far
state (``measure/probe.py``), and TVM's resnet18 takes 1.38x as long in the far one where ONNX
Runtime and OpenVINO take 1.04x: TVM's default schedules pay for it ten times as much as the
peers, and a schedule that paid less would gain more there than any tuning of inner loops.

One process, one build (tvmbench's default schedules, no database): over and over, a turn of
the host-state probe (TVM fork-joins, microseconds each), one untimed inference, one timed
inference (end to end), then one inference with every kernel timed (the VM's instrument, the
device synchronised after each call). At the end the probe's readings are grouped into states
(``probe.states``) and, per state, each kernel's median time; the table lists the kernels by
what they add in the far state (far - near), with their share of the end-to-end difference,
and "between kernels" is the end-to-end time the kernels' own times do not account for (the
VM's own work, and the instrument's). A state needs at least 5 iterations; with one state seen,
it says so and prints the level.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("model")
    parser.add_argument("--minutes", type=float, default=5.0)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--seq-length", type=int, default=None)
    parser.add_argument("--top", type=int, default=25)
    parser.add_argument("--precision", default="fp32", help="TVM's --precision (bf16: on CPUs with AVX-512 BF16)")
    args = parser.parse_args()
    os.environ["TVM_NUM_THREADS"] = str(args.threads)

    from tvmbench.backends import BackendConfig
    from tvmbench.backends.tvm import TVMBackend
    from tvmbench.measure.probe import HostProbe, state_levels, state_of, states
    from tvmbench.models import ModelOptions, load_model
    from tvmbench.targets import resolve_target

    model = load_model(args.model, ModelOptions(seq_length=args.seq_length))
    backend = TVMBackend(BackendConfig(target=resolve_target("llvm"), threads=args.threads, databases=(),
                                           options={"precision": args.precision}))
    backend.prepare(model)
    probe = HostProbe()
    for _ in range(10):
        backend.run()
    rows: list[tuple[float, float, dict[str, float]]] = []  # (probe us, end to end s, kernel s)
    calls: dict[str, int] = {}
    end = time.monotonic() + args.minutes * 60
    while time.monotonic() < end:
        us = probe.turn() * 1e6
        backend.run()
        t0 = time.perf_counter()
        backend.run()
        whole = time.perf_counter() - t0
        per_run, calls = backend.time_kernels(1)
        rows.append((us, whole, per_run[0]))
    values = [r[0] for r in rows]
    bounds = states(values)
    levels = state_levels(values, bounds)
    by_state: dict[int, list[tuple[float, float, dict[str, float]]]] = {}
    for r in rows:
        by_state.setdefault(state_of(r[0], bounds), []).append(r)
    print(f"{args.model}: {len(rows)} iterations in {args.minutes:g} min; probe states: "
          + ", ".join(f"{lv:.2f} us ({len(by_state.get(k, []))} iterations)" for k, lv in enumerate(levels)
                      if lv is not None))
    seen = [k for k in range(len(levels)) if len(by_state.get(k, [])) >= 5]
    if len(seen) < 2:
        print("one host state with 5 iterations or more: nothing to compare; run longer or at another time")
        return
    near, far = seen[0], seen[-1]
    report(by_state[near], by_state[far], levels[near], levels[far], calls, args.top)


def report(near: list, far: list, near_us: float, far_us: float, calls: dict[str, int], top: int) -> None:
    def med(rows: list, name: str | None) -> float:
        if name is None:
            return statistics.median(r[1] for r in rows) * 1e6
        return statistics.median(r[2].get(name, 0.0) for r in rows) * 1e6

    e2e_near, e2e_far = med(near, None), med(far, None)
    names = list(calls)
    kern = {n: (med(near, n), med(far, n)) for n in names}
    sum_near, sum_far = sum(a for a, _ in kern.values()), sum(b for _, b in kern.values())
    gap = e2e_far - e2e_near
    print(f"end to end: {e2e_near / 1e3:.2f} ms near ({near_us:.2f} us/fork-join, {len(near)} iterations), "
          f"{e2e_far / 1e3:.2f} ms far ({far_us:.2f} us, {len(far)}): far/near {e2e_far / e2e_near:.3f}")
    print(f"kernels' own times (instrumented run): {sum_near / 1e3:.2f} ms near, {sum_far / 1e3:.2f} ms far; "
          f"kernel calls per inference {sum(calls.values())}")
    print(f"{'kernel':58s} {'calls':>5s} {'near us':>9s} {'far us':>9s} {'far/near':>8s} {'adds us':>8s} {'share':>6s}")
    ranked = sorted(names, key=lambda n: -(kern[n][1] - kern[n][0]))
    for n in ranked[:top]:
        a, b = kern[n]
        print(f"{n[:58]:58s} {calls[n]:5d} {a:9.1f} {b:9.1f} {b / a if a else float('nan'):8.3f} {b - a:8.1f} "
              f"{(b - a) / gap if gap else float('nan'):6.1%}")
    rest_near, rest_far = e2e_near - sum_near, e2e_far - sum_far
    print(f"{'between kernels (end to end - kernels)':58s} {'':5s} {rest_near:9.1f} {rest_far:9.1f} {'':8s} "
          f"{rest_far - rest_near:8.1f} {(rest_far - rest_near) / gap if gap else float('nan'):6.1%}")
    small = [n for n in names if kern[n][0] < 50]
    if small:
        adds = sum(kern[n][1] - kern[n][0] for n in small)
        print(f"kernels under 50 us near: {len(small)}, adding {adds:.1f} us in the far state ({adds / gap:.1%})")


if __name__ == "__main__":
    main()
