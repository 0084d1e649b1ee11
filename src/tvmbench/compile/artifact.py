"""Build for a device this machine cannot run, and write what ships: ``--compile-only``/``export``.

* CUDA without a GPU: the Relax VM executable is built with the same pipeline as a benchmark
  (DLight GPU schedules, a tuning database where one applies, mixed precision when asked), the
  generated CUDA C is compiled to PTX with nvcc for the target's arch, and a report says what the
  kernels are: how many, whether they use tensor cores (``mma.sync``/``wmma`` instructions), how
  much shared memory each declares. This is how a build is checked before it goes to a GPU box,
  and how this path is tested on machines without one.
* CPU cross targets (``llvm -mtriple=aarch64-linux-gnu``): the library is exported with the cross
  compiler and its ELF machine type is checked.

Every artifact folder holds the library, the parameters (``params.npz``, in the order ``main``
takes them after the model's inputs) and ``report.json``; and it is a package that ``tvmbench run
--package`` runs without the model's source (``models/package.py``): the seeded inputs, the
reference outputs for them, and ``package.json`` with the input specs, target, versions and the
digests of the library and weights.
"""

from __future__ import annotations

import os
import re
import shutil
import time
from pathlib import Path
from typing import Any

import numpy as np

from tvmbench.compile import pipeline
from tvmbench.compile.codegen import Built
from tvmbench.compile.precision import import_at_precision
from tvmbench.compile.schedules import TunedSchedules
from tvmbench.errors import UserError
from tvmbench.files import write_json_atomic
from tvmbench.models import LoadedModel
from tvmbench.targets import ResolvedTarget

_ELF_MACHINES = {62: "x86-64", 183: "aarch64", 40: "arm"}
_CROSS_COMPILERS = {"aarch64": "aarch64-linux-gnu-g++"}


def _find(module: Any, kind: str) -> Any | None:
    if module.kind == kind:
        return module
    for sub in module.imports:
        found = _find(sub, kind)
        if found is not None:
            return found
    return None


def cuda_report(source: str, ptx: str | None) -> dict[str, Any]:
    """What the generated kernels are, read from the CUDA C and the PTX."""
    kernels = re.findall(r"\.entry\s+(\w+)", ptx or "") or re.findall(r"__global__\s+void\s+(?:__launch_bounds__\(\d+\)\s+)?(\w+)", source)
    shared = {}
    if ptx:
        # per kernel: the bytes of its .shared declarations
        for name, body in re.findall(r"\.entry\s+(\w+)(.*?)(?=\.entry|\Z)", ptx, flags=re.S):
            shared[name] = sum(int(n) for n in re.findall(r"\.shared\s+\.align\s+\d+\s+\.b8\s+\w+\[(\d+)\]", body))
    mma = len(re.findall(r"\bmma\.sync|\bwmma\.mma", ptx or "")) if ptx else None
    return {
        "kernels": len(kernels),
        "kernel_names": kernels,
        "tensor_core_instructions_ptx": mma,
        "tensor_core_calls_source": len(re.findall(r"wmma::mma_sync|mma_sync|__hmma|mma\.sync", source)),
        "uses_tensor_cores": bool(mma) if ptx else bool(re.search(r"wmma::mma_sync|mma\.sync", source)),
        "shared_memory_bytes": shared,
        "max_shared_memory_bytes": max(shared.values(), default=0),
        "half_precision_in_source": "half" in source,
    }


def _elf_machine(path: Path) -> str:
    head = path.read_bytes()[:20]
    if head[:4] != b"\x7fELF":
        return "not an ELF file"
    code = int.from_bytes(head[18:20], "little")
    return _ELF_MACHINES.get(code, f"e_machine {code}")


def build_artifact(model: LoadedModel, target: ResolvedTarget, out_dir: str | Path, precision: str = "fp32",
                   schedules: TunedSchedules | None = None, cuda_graph: bool = False) -> dict[str, Any]:
    """Build ``model`` for ``target`` without running it; write library, params and report."""

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    imported = import_at_precision(model, target, precision)
    mod = imported.mod
    schedules = schedules or TunedSchedules()
    database = schedules.union()
    built = pipeline.build(mod, target, database, cuda_graph=cuda_graph)
    compile_s = time.perf_counter() - t0
    report: dict[str, Any] = {"model": model.name, "target": target.config, "precision": precision,
                              "compile_s": compile_s, "cuda_graph": cuda_graph,
                              "pipeline": pipeline.describe(target, database, cuda_graph),
                              "databases": schedules.infos}
    np.savez(out / "params.npz", *[p.numpy() for p in imported.params])
    if target.kind == "cuda":
        report.update(_cuda_outputs(built, target, out))
    else:
        report.update(_cpu_outputs(built, target, out))
    write_json_atomic(out / "report.json", report)
    _write_package(model, target, out, report)
    return report


def _write_package(model: LoadedModel, target: ResolvedTarget, out: Path, report: dict[str, Any]) -> None:
    """What ``run --package`` needs to run the artifact and to trust it (``models/package.py``)."""
    import tvm

    from tvmbench.models import package
    from tvmbench.targets import isa_class
    from tvmbench.version import __version__

    np.savez(out / package.INPUTS, **model.inputs)
    reference = model.reference_outputs()
    if reference is not None:
        np.savez(out / package.REFERENCE, *reference)
    elif (out / package.REFERENCE).exists():
        (out / package.REFERENCE).unlink()  # a stale one from an earlier export of another model
    write_json_atomic(out / package.SPEC, {
        "format": package.FORMAT, "model": model.name, "options": model.options.key(),
        "inputs": [s.to_json() for s in model.input_specs],
        "outputs": len(reference) if reference is not None else None,
        "target": target.config, "arch": target.arch,
        "isa_class": isa_class(target.tvm()) if target.kind == "llvm" else None,
        "precision": report["precision"], "tvm_version": tvm.__version__, "tvmbench_version": __version__,
        "databases": report["databases"], "param_count": model.param_count, "param_bytes": model.param_bytes,
        "digests": {name: package.digest(out / name) for name in (package.LIBRARY, package.PARAMS)}})


def _cuda_outputs(built: Built, target: ResolvedTarget, out: Path) -> dict[str, Any]:
    cuda = _find(built.executable.mod, "cuda")
    if cuda is None:
        raise RuntimeError("the build produced no CUDA module")
    source = cuda.inspect_source("cuda")
    (out / "kernels.cu").write_text(source)
    arch = str(target.config.get("arch", ""))
    ptx, ptx_error = None, None
    if shutil.which("nvcc"):
        from tvm.support import nvcc

        for candidate in ("/usr/local/cuda", *sorted(Path("/usr/local").glob("cuda-*"))):
            if (Path(candidate) / "include" / "cuda.h").is_file():
                os.environ.setdefault("CUDA_PATH", str(candidate))
                break
        t0 = time.perf_counter()
        try:
            with target.tvm():
                ptx = nvcc.compile_cuda(source, target_format="ptx", arch=arch, compiler="nvcc")
            ptx = ptx.decode() if isinstance(ptx, bytes) else str(ptx)
            (out / "kernels.ptx").write_text(ptx)
        except Exception as e:
            ptx_error = str(e).strip().splitlines()[-1] if str(e).strip() else type(e).__name__
        ptx_s = time.perf_counter() - t0
    else:
        ptx_error, ptx_s = "nvcc not found: install the CUDA toolkit to check the PTX", 0.0
    lib = out / "model.so"
    export_library(built, lib, target)  # host code + the CUDA source; loads on a machine with a GPU
    return {"arch": arch, "ptx_compiled": ptx is not None, "ptx_error": ptx_error, "ptx_s": ptx_s,
            "library": str(lib), "cuda_source": str(out / "kernels.cu"),
            "ptx": str(out / "kernels.ptx") if ptx else None, **cuda_report(source, ptx)}


def export_library(built: Built, lib: Path, target: ResolvedTarget) -> None:
    """Write the build as a shared library for ``target``: with the host compiler when the
    target is this machine or CUDA (the host side runs here), else with the cross compiler."""
    from tvm.support import cc

    if target.is_native or target.kind == "cuda":
        built.export_library(str(lib))
        return
    arch = target.arch
    compiler = _CROSS_COMPILERS.get(arch)
    if compiler is None:
        raise UserError(f"no cross compiler known for {arch}; tvmbench cross-compiles to "
                        f"{', '.join(_CROSS_COMPILERS)}")
    if shutil.which(compiler) is None:
        raise UserError(f"exporting for {arch} needs the cross compiler {compiler}: "
                        "sudo apt-get install g++-aarch64-linux-gnu (or `make cross`)")
    built.export_library(str(lib), fcompile=cc.cross_compiler(compiler))


def _cpu_outputs(built: Built, target: ResolvedTarget, out: Path) -> dict[str, Any]:
    lib = out / "model.so"
    export_library(built, lib, target)
    return {"arch": target.arch, "library": str(lib), "elf_machine": _elf_machine(lib),
            "library_bytes": lib.stat().st_size}
