"""Frameworks behind one interface; each is imported only when used (optional extras)."""

from __future__ import annotations

import functools
import importlib
import os

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

# Frameworks from outside tvmbench, by the same "module:Class": an installed package declares them
# as entry points of this group, and TVMBENCH_BACKENDS="name=module:Class,..." adds them for a
# session (a worker process reads the same variable, so it finds the same class).
ENTRY_POINT_GROUP = "tvmbench.backends"
PLUGINS_ENV = "TVMBENCH_BACKENDS"

__all__ = ["ALIASES", "ENTRY_POINT_GROUP", "FRAMEWORKS", "PLUGINS_ENV", "REGISTRY", "VARIANTS", "Backend",
           "BackendConfig", "backend_class", "default_frameworks", "load_class", "parse_frameworks", "registry",
           "result_key"]


@functools.cache
def _entry_points() -> tuple[tuple[str, str], ...]:
    from importlib import metadata

    return tuple((ep.name.lower(), ep.value) for ep in metadata.entry_points(group=ENTRY_POINT_GROUP))


def registry() -> dict[str, str]:
    """Every framework by name: tvmbench's own, then installed plugins, then TVMBENCH_BACKENDS.
    A plugin cannot take the name of one of tvmbench's frameworks (UserError)."""
    found = dict(REGISTRY)
    given = [item.strip() for item in os.environ.get(PLUGINS_ENV, "").split(",") if item.strip()]
    for item in given:
        name, eq, spec = item.partition("=")
        if not eq or ":" not in spec:
            raise UserError(f"{PLUGINS_ENV} entry '{item}' is not name=module:Class")
    for name, spec in [*_entry_points(), *(item.split("=", 1) for item in given)]:
        name, spec = name.strip().lower(), spec.strip()
        if name in REGISTRY or name in ALIASES:
            raise UserError(f"framework plugin '{name}' ({spec}) takes the name of a tvmbench framework; rename it")
        found[name] = spec
    return found


def load_class(name: str) -> type[Backend]:
    """The backend class; importing its module does not import the framework. A plugin that
    cannot be imported or is not a Backend is a UserError naming it."""
    spec = registry()[name]
    module, _, cls = spec.partition(":")
    try:
        backend = getattr(importlib.import_module(module), cls)
    except (ImportError, AttributeError) as e:
        raise UserError(f"framework '{name}' ({spec}) cannot be loaded: {e}") from e
    if not (isinstance(backend, type) and issubclass(backend, Backend)):
        raise UserError(f"framework '{name}' ({spec}) is not a tvmbench.backends.Backend subclass")
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
    known = registry()
    for raw in spec.split(","):
        name = ALIASES.get(raw.strip().lower(), raw.strip().lower())
        if not name:
            continue
        if name not in known:
            raise UserError(f"unknown framework '{raw.strip()}'; available: {', '.join(known)}")
        if name not in names:
            names.append(name)
    if not names:
        raise UserError("--frameworks is empty; e.g. --frameworks tvm,pytorch")
    return names


def default_frameworks(model: str) -> list[str]:
    """TVM and PyTorch, those of them that can run ``model`` (an ONNX file: TVM alone)."""
    return [name for name in ("tvm", "pytorch") if load_class(name).can_run(model)]
