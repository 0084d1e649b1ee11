"""One ONNX export per (model, shapes, torch version), cached for every framework that needs it.

ONNX Runtime and OpenVINO both read ONNX; exporting once keeps them on the very same graph and
saves the export time on later runs. The TorchScript-based exporter is tried first: it works
offline for every zoo model and is several times faster than the dynamo exporter, which is the
fallback (it handles programs the tracer cannot). The exporter used is recorded in the result.
"""

from __future__ import annotations

import hashlib
import json
import os
import time
import warnings
from dataclasses import dataclass
from pathlib import Path

from tvmbench.errors import headline
from tvmbench.models.base import LoadedModel
from tvmbench.paths import cache_dir
from tvmbench.streams import silenced


@dataclass(frozen=True)
class OnnxFile:
    path: Path
    exporter: str  # "user file", "torchscript", "dynamo"
    export_s: float  # 0 when it came from the cache or from the user
    cache_hit: bool


def _key(model: LoadedModel) -> str:
    import torch

    spec = {"model": model.name, "options": model.options.key(), "inputs": [s.to_json() for s in model.input_specs],
            "torch": torch.__version__}
    return hashlib.sha256(json.dumps(spec, sort_keys=True).encode()).hexdigest()[:20]


def onnx_file(model: LoadedModel) -> OnnxFile:
    """The model as an ONNX file: the user's own, or a cached export of the PyTorch module."""
    if model.onnx_path is not None:
        return OnnxFile(Path(model.onnx_path), "user file", 0.0, True)
    if model.module is None:
        raise RuntimeError(f"{model.name} has neither an ONNX file nor a PyTorch module to export")
    folder = cache_dir("onnx", _key(model))
    path, meta = folder / "model.onnx", folder / "export.json"
    if path.exists() and meta.exists():
        return OnnxFile(path, json.loads(meta.read_text())["exporter"], 0.0, True)
    t0 = time.perf_counter()
    exporter = _export(model, folder)
    meta.write_text(json.dumps({"exporter": exporter}))
    return OnnxFile(path, exporter, time.perf_counter() - t0, False)


def _export(model: LoadedModel, folder: Path) -> str:
    import torch

    names = list(model.inputs)
    errors = []
    for exporter in ("torchscript", "dynamo"):
        tmp = folder / f"model.{os.getpid()}.tmp.onnx"
        try:
            with warnings.catch_warnings(), torch.no_grad(), silenced():
                warnings.simplefilter("ignore")
                torch.onnx.export(model.module, model.torch_inputs(), str(tmp), input_names=names,
                                  dynamo=exporter == "dynamo", opset_version=17 if exporter == "torchscript" else None)
            # Rename last: a half-written export is never mistaken for a finished one.
            os.replace(tmp, folder / "model.onnx")
            for extra in folder.glob(f"model.{os.getpid()}.tmp.onnx.*"):
                os.replace(extra, folder / extra.name.replace(f".{os.getpid()}.tmp", ""))
            return exporter
        except Exception as e:  # noqa: BLE001 - try the next exporter, report both if neither works
            errors.append(f"{exporter}: {type(e).__name__}: {headline(e, 200)}")
            tmp.unlink(missing_ok=True)
    raise RuntimeError(f"ONNX export of {model.name} failed ({'; '.join(errors)})")
