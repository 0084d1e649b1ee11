"""One ONNX export per (model, shapes, torch version), cached for every framework that needs it.

A model from a user's file (``file.py:factory``, ``.pt2``) is keyed by its content too (its
architecture's text and a digest of its weights), so an edited factory or a replaced file is
exported again; ``--no-cache`` exports again in any case. An export is written in a private
folder and moved into the cache entry last, external-data files first, under the names the ONNX
file refers to, so a kill halfway never leaves a broken entry; a lock file beside it makes a second
process that wants the same export (ONNX Runtime's and OpenVINO's workers prepare at once) wait for
the first one's and read it.

ONNX Runtime and OpenVINO both read ONNX; exporting once keeps them on the very same graph and
saves the export time on later runs. The TorchScript-based exporter is tried first: it works
offline for every zoo model and is several times faster than the dynamo exporter, which is the
fallback (it handles programs the tracer cannot). The exporter used is recorded in the result.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile
import time
import warnings
from dataclasses import dataclass
from pathlib import Path

from tvmbench.errors import headline
from tvmbench.files import write_text_atomic
from tvmbench.models.base import LoadedModel
from tvmbench.paths import cache_dir
from tvmbench.streams import silenced

EXPORTERS = ("torchscript", "dynamo")  # in the order they are tried


@dataclass(frozen=True)
class OnnxFile:
    path: Path
    exporter: str  # "user file", "torchscript", "dynamo"
    export_s: float  # 0 when it came from the cache or from the user
    cache_hit: bool


def _key(model: LoadedModel) -> str:
    import torch

    # The content too, for every model: a user's file can change under the same name, and so can
    # a zoo model when its builder changes (session 47 calibrated the video and segmentation
    # models' batch norms, and exports cached before made both peers "fail" against PyTorch).
    spec = {"model": model.name, "options": model.options.key(), "inputs": [s.to_json() for s in model.input_specs],
            "torch": torch.__version__, "content": content_digest(model.module)}
    return hashlib.sha256(json.dumps(spec, sort_keys=True).encode()).hexdigest()[:20]


def content_digest(module: object) -> str:
    """The module's architecture (its printed form) and every parameter and buffer, hashed
    (bert-large's 1.3 GB in about a second)."""
    import torch

    h = hashlib.sha256(repr(module).encode())
    for name, tensor in module.state_dict().items():  # type: ignore[attr-defined]
        h.update(name.encode())
        h.update(tensor.detach().cpu().contiguous().view(-1).view(torch.uint8).numpy())  # no copy
    return h.hexdigest()[:20]


def onnx_file(model: LoadedModel, use_cache: bool = True) -> OnnxFile:
    """The model as an ONNX file: the user's own, or a cached export of the PyTorch module
    (exported again when ``use_cache`` is False)."""
    if model.onnx_path is not None:
        return OnnxFile(Path(model.onnx_path), "user file", 0.0, True)
    if model.module is None:
        raise RuntimeError(f"{model.name} has neither an ONNX file nor a PyTorch module to export")
    import filelock

    folder = cache_dir("onnx", _key(model))
    cached = _cached(folder) if use_cache else None
    if cached is not None:
        return cached
    # One export at a time per entry: unlocked, both workers exported the same model side by side
    # (vgg13 at batch 8, 320 px: 19 s each, on the cores TVM was compiling on).
    with filelock.FileLock(str(folder / ".export.lock")):
        cached = _cached(folder) if use_cache else None
        if cached is not None:
            return cached
        t0 = time.perf_counter()
        exporter = _export(model, folder)
        write_text_atomic(folder / "export.json", json.dumps({"exporter": exporter}))
        return OnnxFile(folder / "model.onnx", exporter, time.perf_counter() - t0, False)


def _cached(folder: Path) -> OnnxFile | None:
    """The cache entry in ``folder``, or None when it is missing or damaged (exported again)."""
    path, meta = folder / "model.onnx", folder / "export.json"
    if not (path.exists() and meta.exists()):
        return None
    try:
        return OnnxFile(path, json.loads(meta.read_text())["exporter"], 0.0, True)
    except (ValueError, KeyError, TypeError, OSError):
        return None


def _export(model: LoadedModel, folder: Path) -> str:
    import torch

    names = list(model.inputs)
    errors = []
    for exporter in EXPORTERS:
        private = Path(tempfile.mkdtemp(prefix=".export-", dir=folder))
        try:
            with warnings.catch_warnings(), torch.no_grad(), silenced():
                warnings.simplefilter("ignore")
                torch.onnx.export(model.module, model.torch_inputs(), str(private / "model.onnx"), input_names=names,
                                  dynamo=exporter == "dynamo", opset_version=17 if exporter == "torchscript" else None)
            # External data first, the ONNX file last: a reader that sees model.onnx finds its data.
            for extra in sorted(p for p in private.iterdir() if p.name != "model.onnx"):
                os.replace(extra, folder / extra.name)
            os.replace(private / "model.onnx", folder / "model.onnx")
            return exporter
        except Exception as e:  # noqa: BLE001 - try the next exporter, report both if neither works
            errors.append(f"{exporter}: {type(e).__name__}: {headline(e, 200)}")
        finally:
            shutil.rmtree(private, ignore_errors=True)
    raise RuntimeError(f"ONNX export of {model.name} failed ({'; '.join(errors)})")
