"""GPU and cross targets, checked without the device: generated CUDA (tensor cores for fp16 at
sm_80 and sm_90), PTX from nvcc, mixed precision, the aarch64 export's ELF type. What needs the
device itself is skipped with the reason."""

import json
import shutil
from pathlib import Path

import pytest

from tvmbench.cli import main
from tvmbench.compile.artifact import cuda_report
from tvmbench.targets import query_gpu

MLP = str(Path(__file__).with_name("mlp_model.py")) + ":build"
GEMM = str(Path(__file__).with_name("mlp_model.py")) + ":build_gemm"  # large enough for tensor cores
CONV = str(Path(__file__).with_name("mlp_model.py")) + ":build_conv"
needs_nvcc = pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc (CUDA toolkit) is not installed")


@needs_nvcc
@pytest.mark.parametrize("arch", ["sm_80", "sm_90"])
def test_fp16_cuda_build_uses_tensor_cores_and_compiles_to_ptx(arch, tmp_path, capsys):
    out = tmp_path / arch
    assert main(["run", "--model", GEMM, "--target", f"cuda -arch={arch}", "--compile-only", "--precision", "fp16",
                 "--artifact-dir", str(out)]) == 0
    report = json.loads((out / "report.json").read_text())
    assert report["ptx_compiled"], report["ptx_error"]
    assert report["kernels"] >= 2 and report["uses_tensor_cores"]
    assert report["tensor_core_instructions_ptx"] > 0
    ptx = (out / "kernels.ptx").read_text()
    assert f".target {arch}" in ptx and "mma" in ptx
    assert (out / "model.so").stat().st_size > 0 and (out / "params.npz").is_file()
    assert "tensor-core instructions: yes" in capsys.readouterr().out


@needs_nvcc
def test_fp32_cuda_build_has_no_tensor_cores(tmp_path):
    assert main(["export", "--model", GEMM, "--target", "cuda -arch=sm_80", "--output-dir", str(tmp_path)]) == 0
    report = json.loads((tmp_path / "report.json").read_text())
    assert report["ptx_compiled"] and report["kernels"] >= 2
    assert not report["uses_tensor_cores"] and report["tensor_core_instructions_ptx"] == 0
    assert any(name.startswith("DLight(") for name in report["pipeline"])


def test_cuda_graph_is_in_the_cuda_pipeline_only_when_asked(capsys):
    from tvmbench.compile import pipeline
    from tvmbench.targets import resolve_target

    target = resolve_target("cuda -arch=sm_80")
    assert "RewriteCUDAGraph" in pipeline.describe(target, None, cuda_graph=True)
    assert "RewriteCUDAGraph" not in pipeline.describe(target, None, cuda_graph=False)
    assert main(["export", "--model", MLP, "--target", "llvm", "--cuda-graph", "--output-dir", "/tmp/x"]) == 2
    assert "needs a CUDA target" in capsys.readouterr().err


def test_ptx_report_reads_kernels_shared_memory_and_mma():
    ptx = """
.visible .entry matmul_kernel(
.shared .align 16 .b8 A_shared[8192];
.shared .align 16 .b8 B_shared[4096];
wmma.mma.sync.aligned.row.col.m16n16k16.f16.f16 {%r1}, ...;
mma.sync.aligned.m16n8k16.row.col.f16.f16.f16.f16 ...;
.visible .entry add_kernel(
ld.global.f32 %f1, [%rd1];
"""
    r = cuda_report("__global__ void matmul_kernel() {}", ptx)
    assert r["kernel_names"] == ["matmul_kernel", "add_kernel"] and r["kernels"] == 2
    assert r["shared_memory_bytes"] == {"matmul_kernel": 12288, "add_kernel": 0}
    assert r["tensor_core_instructions_ptx"] == 2 and r["uses_tensor_cores"]


def test_mixed_precision_runs_on_cpu_and_is_checked_at_fp16_tolerance(tmp_path):
    out = tmp_path / "amp.json"
    assert main(["run", "--model", MLP, "--target", "llvm", "--frameworks", "tvm,pytorch", "--precision", "amp",
                 "--warmup", "1", "--runs", "3", "--untuned", "--output", str(out), "-q"]) == 0
    tvm = json.loads(out.read_text())["tvm_relax"]
    assert tvm["info"]["precision"] == "amp"
    acc = tvm["accuracy"]
    assert acc["passed"] and acc["max_abs_err"] > 0  # fp16 inputs: not bit-identical to fp32
    assert acc["tolerance"]["min_cosine"] == pytest.approx(0.995)


def test_bf16_for_a_cpu_without_avx512_bf16_is_a_clear_usage_error(capsys, tmp_path):
    assert main(["export", "--model", MLP, "--target", "llvm -mcpu=skylake-avx512", "--precision", "bf16",
                 "--output-dir", str(tmp_path)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "AVX-512 BF16" in err[0] and "skylake-avx512" in err[0], err


@pytest.mark.skipif(shutil.which("aarch64-linux-gnu-g++") is None,
                    reason="the aarch64 cross compiler is not installed (apt-get install g++-aarch64-linux-gnu)")
@pytest.mark.parametrize("target", ["llvm -mtriple=aarch64-linux-gnu", "llvm -mcpu=neoverse-v1"])
def test_aarch64_export_is_an_arm64_elf_library(target, tmp_path):
    assert main(["export", "--model", MLP, "--target", target, "--output-dir", str(tmp_path)]) == 0
    report = json.loads((tmp_path / "report.json").read_text())
    assert report["elf_machine"] == "aarch64" and report["arch"] == "aarch64"
    head = (tmp_path / "model.so").read_bytes()[:20]
    assert head[:4] == b"\x7fELF" and int.from_bytes(head[18:20], "little") == 183


@pytest.mark.gpu
@pytest.mark.skipif(query_gpu() is None, reason="needs an NVIDIA GPU (none on this machine)")
def test_benchmark_on_the_gpu_matches_pytorch(tmp_path):
    out = tmp_path / "gpu.json"
    assert main(["run", "--model", MLP, "--target", "cuda", "--frameworks", "tvm,pytorch", "--output", str(out),
                 "-q"]) == 0
    assert json.loads(out.read_text())["tvm_relax"]["accuracy"]["passed"]


def _conv_layouts(target):
    import tvm

    from tvmbench.compile import import_model, pipeline
    from tvmbench.models import ModelOptions, load_model

    mod = import_model(load_model(CONV, ModelOptions())).mod
    with target.tvm():
        mod = tvm.transform.Sequential(pipeline.simplify_passes(target))(mod)
    layouts = []

    def visit(expr):
        if hasattr(expr, "op") and getattr(expr.op, "name", "") == "relax.nn.conv2d":
            layouts.append(str(expr.attrs.data_layout))

    tvm.relax.analysis.post_order_visit(mod["main"], visit)
    return layouts


def test_layout_nhwc_converts_cuda_convolutions_and_auto_keeps_nchw(monkeypatch):
    import dataclasses
    import importlib

    from tvmbench.targets import resolve_target

    cuda = resolve_target("cuda -arch=sm_80")
    assert _conv_layouts(cuda) == ["NCHW", "NCHW"]
    assert _conv_layouts(dataclasses.replace(cuda, conv_layout="NHWC")) == ["NHWC", "NHWC"]
    # the CPU rules need NHWC; the first convolution, over the 3-channel image, is a packed kernel
    # that reads the NCHW image itself (test_compile's stem test), no relax conv2d any more; the
    # second stays a convolution where Winograd takes 3x3 ones from 32 channels only (from 16
    # where the outputs are whole vectors, as 16 are on AVX2)
    monkeypatch.setattr(importlib.import_module("tvmbench.compile.passes.winograd"), "_MIN_WHOLE_VECTOR_CHANNELS", 32)
    assert _conv_layouts(resolve_target("llvm")) == ["NHWC"]


@needs_nvcc
def test_nhwc_cuda_build_compiles_to_ptx(tmp_path):
    assert main(["export", "--model", CONV, "--target", "cuda -arch=sm_80", "--layout", "nhwc", "--output-dir",
                 str(tmp_path)]) == 0
    report = json.loads((tmp_path / "report.json").read_text())
    assert report["ptx_compiled"] and "ConvertLayout" in report["pipeline"]


def test_layout_nchw_on_cpu_is_a_usage_error(capsys):
    assert main(["run", "--model", CONV, "--target", "llvm", "--layout", "nchw", "-q"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "NHWC" in err[0]


def test_tensor_intrinsics_import_with_bare_frames_and_inspect_is_restored():
    import inspect

    from tvm.s_tir import TensorIntrin

    from tvmbench.compile.intrinsics import CUDA_INTRIN, import_tensor_intrin, stub_cuda_tensor_intrin

    stack = inspect.stack
    stub_cuda_tensor_intrin()  # what a CPU tuning run leaves behind in the same process
    import_tensor_intrin("cuda")
    import sys

    cuda = sys.modules[CUDA_INTRIN]
    assert getattr(cuda, "__file__", None), "the stub was not replaced by the real module"
    # The intrinsics parsed under bare frames are the real ones: a registered ldmatrix with a body.
    desc = TensorIntrin.get(cuda.LDMATRIX_f16_A_INTRIN).desc
    assert "ldmatrix" in cuda.LDMATRIX_f16_A_INTRIN and desc.body is not None
    assert inspect.stack is stack and inspect.stack()[0].code_context is not None
