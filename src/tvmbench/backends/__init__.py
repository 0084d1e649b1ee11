"""Frameworks behind one interface; each is imported only when used (optional extras)."""

from __future__ import annotations

import importlib

from tvmbench.backends.base import Backend, BackendConfig
from tvmbench.errors import FrameworkUnavailableError, MissingFrameworkError, UserError
from tvmbench.targets import ResolvedTarget

# name -> "module:Class"; a module is imported only when its framework is asked for.
REGISTRY = {
    "pytorch": "tvmbench.backends.pytorch:PyTorchBackend",
    "tvm": "tvmbench.backends.tvm:TVMBackend",
    "tvm_untuned": "tvmbench.backends.tvm:TVMUntunedBackend",
    "onnxruntime": "tvmbench.backends.onnxruntime:OnnxRuntimeBackend",
    "openvino": "tvmbench.backends.openvino:OpenVINOBackend",
    "torch_compile": "tvmbench.backends.torch_compile:TorchCompileBackend",
    "tensorrt": "tvmbench.backends.tensorrt:TensorRTBackend",
}
# Variants of a framework (measured as frameworks of their own), left out of --all-frameworks.
VARIANTS = ("tvm_untuned",)
FRAMEWORKS = [name for name in REGISTRY if name not in VARIANTS]
ALIASES = {"torch": "pytorch", "eager": "pytorch", "tvm_relax": "tvm", "relax": "tvm", "ort": "onnxruntime",
           "onnx_runtime": "onnxruntime", "ov": "openvino",
           "inductor": "torch_compile", "torch.compile": "torch_compile", "torchcompile": "torch_compile",
           "trt": "tensorrt"}

__all__ = ["ALIASES", "FRAMEWORKS", "REGISTRY", "VARIANTS", "Backend", "BackendConfig", "backend_class", "default_frameworks", "load_class", "parse_frameworks", "result_key"]


def load_class(name: str) -> type[Backend]:
    """The backend class; importing its module does not import the framework."""
    module, _, cls = REGISTRY[name].partition(":")
    backend: type[Backend] = getattr(importlib.import_module(module), cls)
    return backend


def result_key(name: str) -> str:
    return load_class(name).result_key


def backend_class(name: str, target: ResolvedTarget | None = None) -> type[Backend]:
    """The backend class; MissingFrameworkError when its framework is not installed,
    FrameworkUnavailableError when it cannot run here (for ``target``, when given)."""
    backend = load_class(name)
    reason = backend.unavailable_reason(target)  # first: installing a package would not help
    if reason:
        raise FrameworkUnavailableError(f"framework '{name}' is {reason}")
    missing = backend.missing_requirement()
    if missing:
        raise MissingFrameworkError(name, missing, backend.extra)
    return backend


def parse_frameworks(spec: str) -> list[str]:
    names = []
    for raw in spec.split(","):
        name = ALIASES.get(raw.strip().lower(), raw.strip().lower())
        if not name:
            continue
        if name not in REGISTRY:
            raise UserError(f"unknown framework '{raw.strip()}'; available: {', '.join(REGISTRY)}")
        if name not in names:
            names.append(name)
    if not names:
        raise UserError("--frameworks is empty; e.g. --frameworks tvm,pytorch")
    return names


def default_frameworks(model: str) -> list[str]:
    """TVM and PyTorch, those of them that can run ``model`` (an ONNX file: TVM alone)."""
    return [name for name in ("tvm", "pytorch") if load_class(name).can_run(model)]
