"""`tvmbench profile`: per-kernel times measured inside the compiled model."""

import json
from pathlib import Path

from tvmbench.cli import main
from tvmbench.profiling.kernels import kernel_kind

MLP = str(Path(__file__).with_name("mlp_model.py")) + ":build"


def test_kernel_kinds_from_names():
    assert kernel_kind("fused_conv2d_nhwc_packed1_subtract1_add2") == "conv"
    assert kernel_kind("fused_matmul_packed_add_gelu") == "matmul"
    assert kernel_kind("max_pool2d") == "pool"
    assert kernel_kind("softmax") == "reduction" and kernel_kind("layer_norm1") == "reduction"
    assert kernel_kind("fused_transpose6_reshape") == "layout"
    assert kernel_kind("add3") == "elementwise"


def test_profile_times_every_kernel_inside_the_model(tmp_path, capsys):
    out = tmp_path / "p.json"
    assert main(["profile", "--model", MLP, "--target", "llvm", "--untuned", "--runs", "5", "--output", str(out),
                 "-q"]) == 0
    printed = capsys.readouterr().out
    doc = json.loads(out.read_text())["tvm_untuned"]
    kernels = doc["kernels"]
    matmuls = [k for k in kernels if k["kind"] == "matmul"]
    assert len(matmuls) == 2  # fc1 and fc2, each once per inference
    for k in matmuls:
        assert k["calls"] == 1 and k["ms"] > 0 and k["schedule"] == "default"
        # 32 x 256 x 512 multiply-adds = 8.4 MFLOP for either layer, plus the bias (and ReLU)
        assert 8.3 < k["mflop"] < 8.7 and k["gflops"] > 0 and k["percent_of_peak"] > 0
        # the cache-aware roofline's bound is at least the FLOPs' at the peak, so its share at least % of peak
        assert k["percent_of_bound"] >= k["percent_of_peak"] - 1e-9
    assert abs(sum(k["share"] for k in kernels) - 1) < 1e-6
    assert 0 < doc["kernels_ms"] and doc["end_to_end_ms"] > 0 and doc["peak_gflops"] > 0
    assert doc["bandwidth"]["memory_gbs"] > 0 and "% bound" in printed
    assert "matmul" in printed and "by kind:" in printed
    assert doc["ceiling"]["speedup"] >= 1.0 and "schedule ceiling: no schedule" in printed


def test_profile_of_a_cuda_target_without_a_gpu_is_one_line(capsys):
    assert main(["profile", "--model", MLP, "--target", "cuda -arch=sm_80", "-q"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "no CUDA device" in err[0]


def test_gains_are_corrected_for_the_drift_of_unchanged_kernels():
    from tvmbench.profiling.kernels import KernelProfile, ModelProfile, compare_profiles

    def profile(times, schedules):
        ks = [KernelProfile(name=f"k{i}", kind="conv", calls=1, ms=t, share=0.0, schedule=s)
              for i, (t, s) in enumerate(zip(times, schedules, strict=True))]
        return ModelProfile(model="m", target={}, variant="v", end_to_end_ms=sum(times), kernels_ms=sum(times),
                            runs=1, threads=1, peak_gflops=None, peak_method=None, database=None, kernels=ks)

    tuned = profile([1.0, 1.0, 1.0, 2.0], ["default", "default", "default", "tuning record"])
    # the untuned process ran everything 10 % slower; the tuned kernel itself gained 1.5x
    untuned = profile([1.1, 1.1, 1.1, 3.3], ["default"] * 4)
    rows, drift = compare_profiles(tuned, untuned)
    assert abs(drift - 1.1) < 1e-9
    k3 = rows[3]
    assert abs(k3["gain"] - 1.65) < 1e-9 and abs(k3["corrected_gain"] - 1.5) < 1e-9


def test_the_schedule_ceiling_puts_every_kernel_at_the_peak_and_leaves_the_vm_alone():
    from tvmbench.profiling.kernels import KernelProfile, ModelProfile

    ks = [KernelProfile(name="conv", kind="conv", calls=2, ms=1.0, share=0.0, mflop=50.0),  # floor 0.5 ms
          KernelProfile(name="copy", kind="layout", calls=1, ms=0.2, share=0.0),  # no FLOPs: floor 0
          KernelProfile(name="dense", kind="matmul", calls=1, ms=0.1, share=0.0, mflop=20.0),  # above the peak
          KernelProfile(name="vm.builtin.alloc_tensor", kind="vm", calls=9, ms=0.3, share=0.0)]
    p = ModelProfile(model="m", target={}, variant="v", end_to_end_ms=1.8, kernels_ms=1.6, runs=1, threads=1,
                     peak_gflops=100.0, peak_method="test", database=None, kernels=ks)
    c = p.ceiling()
    # saved: 0.5 (conv) + 0.2 (copy) + 0 (dense already "faster" than the peak, never negative)
    assert abs(c.saved_ms - 0.7) < 1e-9 and abs(c.speedup - 1.6 / 0.9) < 1e-9
    assert abs(c.end_to_end_ms - 1.8 / c.speedup) < 1e-9
    assert [name for name, _ in c.headroom] == ["conv", "copy"]
    assert p.to_json()["ceiling"]["speedup"] == c.speedup
    # a kernel faster than the measured peak (measured at a slow moment) raises the roof
    ks[2].gflops = 200.0
    assert abs(p.ceiling().saved_ms - (0.75 + 0.2)) < 1e-9  # conv's floor: 50 MFLOP at 200 GFLOP/s
    no_peak = ModelProfile(**{**p.__dict__, "peak_gflops": None})
    assert no_peak.ceiling() is None and no_peak.to_json()["ceiling"] is None
    # a bf16 dot-product kernel's peak is twice the FMA's (compile/bf16.py): at 200 GFLOP/s it
    # sits at the FMA peak, and its floor is its FLOPs at twice that
    ks[2].peak_rate = 2.0
    assert abs(p.floor_ms(ks[2]) - 20.0 * 1e6 / (200e9) * 1e3) < 1e-9
    assert abs(p.floor_ms(ks[0]) - 0.5) < 1e-9  # (the fp32 conv's roof back at the measured peak)


def test_timing_kernels_leaves_the_build_uninstrumented():
    """After ``time_kernels`` the VM's instrument is removed: a later run of the same build (an
    end-to-end timing, say) must not pay a Python callback per kernel."""
    from tvmbench.backends import BackendConfig
    from tvmbench.backends.tvm import TVMBackend
    from tvmbench.models import ModelOptions, load_model
    from tvmbench.targets import resolve_target

    backend = TVMBackend(BackendConfig(target=resolve_target("llvm"), threads=1, databases=()))
    backend.prepare(load_model(MLP, ModelOptions()))
    installed = []
    vm = backend.vm

    class Spy:
        def set_instrument(self, f):
            installed.append(f)
            vm.set_instrument(f)

        def __getattr__(self, name):
            return getattr(vm, name)

    backend.vm = Spy()
    per_run, calls = backend.time_kernels(2)
    assert len(per_run) == 2 and calls and installed[0] is not None and installed[-1] is None
    backend.close()


def test_plain_and_instrumented_runs_alternate_so_a_change_of_host_speed_falls_on_both():
    """``interleaved_runs`` times plain and instrumented inferences in alternating blocks. The
    fake backend's host doubles its speed after its 20th inference: timed one set after the
    other, every plain run would be slow and every instrumented one fast."""
    from tvmbench.profiling.kernels import interleaved_runs

    class Backend:
        def __init__(self):
            self.log = []

        def speed(self):
            return 1.0 if len(self.log) < 20 else 0.5

        def run(self):
            self.log.append("plain")

        def time_kernels(self, n, sequence=None, paced=None):
            runs = []
            for _ in range(n):
                runs.append({"k": self.speed()})
                self.log.append("kernels")
            return runs, {"k": 1}

    b = Backend()
    plain, per_run, calls = interleaved_runs(b, warmup=2, runs=12, block=5)
    assert len(plain) == 12 and len(per_run) == 12 and calls == {"k": 1}
    timed = b.log[2:]  # after the warm-up
    blocks = [timed[0:5], timed[5:10], timed[10:15], timed[15:20], timed[20:22], timed[22:24]]
    assert blocks == [["plain"] * 5, ["kernels"] * 5] * 2 + [["plain"] * 2, ["kernels"] * 2]
    # both sets saw both speeds
    assert {r["k"] for r in per_run} == {1.0, 0.5}
