"""Does the host's core-to-core hand-over jump between states, and does the probe see it? (issue 22)

    .venv/bin/python benchmarks/host_states.py [--seconds 120] [--every 1.0]

Every ``--every`` seconds, one after the other: a C ping-pong between two threads pinned to CPUs
0 and 1 (one cache line handed back and forth 200 000 times; nanoseconds per round trip; built
with the system's C compiler, left out when there is none), a turn of tvmbench's host-state
probe (``measure/probe.py``: microseconds per TVM fork-join on TVM's pool, and per call of its
paired work, two tasks of multiply-adds at once), the same work as one task on this thread, and
a 256x256 float32 matrix product on two BLAS threads (microseconds). On the 2-vCPU EPYC VM of
the development notes the ping-pong reads 60-80 or 320-350 ns, and the fork-joins and the
product jump with it; the paired work doubles (18 us, the one task unmoved) when the two vCPUs
sit on one core's two hyper-threads. At the end: the states ``probe.HostStates`` finds among the
probe's readings, and per state the other readings' range, so a state the probe names can be
checked against the ping-pong's and the one task's.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

PING_PONG_C = r"""
#define _GNU_SOURCE
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <time.h>
static _Atomic int flag __attribute__((aligned(64)));
enum { N = 200000 };
static void pin(int c) { cpu_set_t s; CPU_ZERO(&s); CPU_SET(c, &s); pthread_setaffinity_np(pthread_self(), sizeof s, &s); }
static void *other(void *x) {
  pin(1);
  for (int i = 0; i < N; i++) {
    while (atomic_load_explicit(&flag, memory_order_acquire) != 1) {}
    atomic_store_explicit(&flag, 0, memory_order_release);
  }
  return x;
}
int main(void) {
  pin(0);
  pthread_t th; pthread_create(&th, 0, other, 0);
  struct timespec a, b; clock_gettime(CLOCK_MONOTONIC, &a);
  for (int i = 0; i < N; i++) {
    atomic_store_explicit(&flag, 1, memory_order_release);
    while (atomic_load_explicit(&flag, memory_order_acquire) != 0) {}
  }
  clock_gettime(CLOCK_MONOTONIC, &b); pthread_join(th, 0);
  printf("%.0f\n", ((b.tv_sec - a.tv_sec) * 1e9 + (b.tv_nsec - a.tv_nsec)) / N);
  return 0;
}
"""


def ping_pong_binary(work: Path) -> Path | None:
    cc = shutil.which("cc") or shutil.which("gcc") or shutil.which("clang")
    if cc is None or (os.cpu_count() or 1) < 2:
        return None
    (work / "pp.c").write_text(PING_PONG_C)
    subprocess.run([cc, "-O2", "-pthread", str(work / "pp.c"), "-o", str(work / "pp")], check=True)
    return work / "pp"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=120.0)
    parser.add_argument("--every", type=float, default=1.0)
    args = parser.parse_args()
    os.environ.setdefault("TVM_NUM_THREADS", "2")
    import numpy as np
    import tvm

    from tvmbench.measure.probe import WORK_LANES, HostProbe, HostStates, median_call_s, paired_work_kernel

    probe = HostProbe()
    one_task, w = paired_work_kernel(tasks=1), tvm.runtime.tensor(np.ones((2, WORK_LANES), np.float32), tvm.cpu())
    a = np.random.default_rng(0).standard_normal((256, 256), dtype=np.float32)

    def matmul_us() -> float:
        times, end = [], time.perf_counter() + 0.3
        while time.perf_counter() < end:
            t0 = time.perf_counter()
            a @ a
            times.append(time.perf_counter() - t0)
        return float(np.median(times)) * 1e6

    rows = []
    with tempfile.TemporaryDirectory() as work:
        pp = ping_pong_binary(Path(work))
        end = time.time() + args.seconds
        while time.time() < end:
            ns = float(subprocess.run([str(pp)], capture_output=True, text=True).stdout) if pp else float("nan")
            probe.turn()  # (after the sleep: TVM's worker sleeping, this thread maybe on its core)
            fork_join, paired = probe.reading()
            row = (ns, fork_join * 1e6, matmul_us(), paired * 1e6, median_call_s(one_task, w) * 1e6)
            rows.append(row)
            print(f"{time.strftime('%H:%M:%S')}  ping-pong {row[0]:5.0f} ns  fork-join {row[1]:.2f} us  "
                  f"matmul {row[2]:.0f} us  paired work {row[3]:.1f} us  one task {row[4]:.1f} us", flush=True)
            time.sleep(args.every)
    host = HostStates.of([(0, r[1], r[3]) for r in rows])
    print(f"{len(rows)} readings; the probe's states (fork-join / paired work): "
          f"{', '.join(n for n in host.names if n)}")

    def span(values: list[float], fmt: str) -> str:
        q = np.percentile(values, [5, 95])
        return f"{q[0]:{fmt}}-{q[1]:{fmt}}"

    for k, name in enumerate(host.names):
        mine = [r for r in rows if host.of_turn((0, r[1], r[3])) == k]
        if mine:
            print(f"  {name}: {len(mine)} readings ({len(mine) / len(rows):.0%}); 5th-95th percentiles: fork-join "
                  f"{span([r[1] for r in mine], '.2f')} us, paired work {span([r[3] for r in mine], '.1f')} us, one "
                  f"task {span([r[4] for r in mine], '.1f')} us, ping-pong {span([r[0] for r in mine], '.0f')} ns, "
                  f"matmul {span([r[2] for r in mine], '.0f')} us")


if __name__ == "__main__":
    main()
