"""tvmbench's version and the versions of what it measures with (no heavy import)."""

from __future__ import annotations

import importlib.metadata
import subprocess
from pathlib import Path

__version__ = "0.1.0"

_PACKAGES = ("apache-tvm", "apache-tvm-ffi", "torch", "torchvision", "transformers", "onnx", "onnxruntime",
             "openvino", "xgboost", "numpy")


def package_versions() -> dict[str, str | None]:
    versions: dict[str, str | None] = {}
    for name in _PACKAGES:
        try:
            versions[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            versions[name] = None
    return versions


def tvm_version() -> str:
    """TVM's version (``tvm.__version__``) without importing TVM, which imports torch (seconds): the
    installed distribution's, else (TVM built from source) TVM's own."""
    try:
        return importlib.metadata.version("apache-tvm")
    except importlib.metadata.PackageNotFoundError:
        import tvm

        return str(tvm.__version__)


def git_commit() -> str | None:
    """The tvmbench checkout's commit, when it runs from one."""
    src = Path(__file__).resolve().parent
    try:
        out = subprocess.run(["git", "-C", str(src), "rev-parse", "--short", "HEAD"], capture_output=True,
                             text=True, timeout=5)
        if out.returncode != 0:
            return None
        dirty = subprocess.run(["git", "-C", str(src), "status", "--porcelain", "--untracked-files=no"],
                               capture_output=True, text=True, timeout=5).stdout.strip()
        return out.stdout.strip() + ("-dirty" if dirty else "")
    except (OSError, subprocess.SubprocessError):
        return None
