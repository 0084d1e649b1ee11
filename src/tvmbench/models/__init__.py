"""Models by name or file: the zoo, ONNX files, torch.export programs and Python nn.Modules."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from tvmbench.errors import UserError
from tvmbench.models.base import InputSpec, LoadedModel, ModelOptions
from tvmbench.models.zoo import ZOO, ZooEntry, lookup

__all__ = ["ZOO", "InputSpec", "LoadedModel", "ModelOptions", "ZooEntry", "check_model_name", "count_flops", "load_model",
           "lookup", "parse_input_shapes"]


def load_model(name: str, options: ModelOptions | None = None) -> LoadedModel:
    """A zoo name, ``torchvision:NAME``, a ``.onnx`` / ``.pt2`` file or ``file.py:factory``."""
    from tvmbench.models import builders, files

    options = options or ModelOptions()
    if options.batch_size < 1:
        raise UserError(f"--batch-size must be at least 1, got {options.batch_size}")
    lower = name.lower()
    if lower.endswith(".onnx"):
        return files.load_onnx(_existing(name), options)
    if lower.endswith(".pt2"):
        return files.load_pt2(_existing(name), options)
    if ".py:" in name:
        return files.load_python(name, options)
    return builders.build(lookup(name), options)


def check_model_name(name: str) -> None:
    """Fail fast on an unknown zoo name or a missing file, without building anything."""
    if name.lower().endswith((".onnx", ".pt2")):
        _existing(name)
    elif ".py:" in name:
        _existing(name.rpartition(":")[0])
    else:
        lookup(name)


def _existing(path: str) -> Path:
    p = Path(path).expanduser()
    if not p.is_file():
        raise UserError(f"model file {p} does not exist")
    return p


def parse_input_shapes(specs: list[str] | None) -> dict[str, tuple[int, ...]]:
    """``["x:1x3x224x224", "ids:1x128"]`` -> ``{"x": (1, 3, 224, 224), "ids": (1, 128)}``."""
    shapes: dict[str, tuple[int, ...]] = {}
    for spec in specs or []:
        name, sep, dims = spec.partition(":")
        try:
            shape = tuple(int(d) for d in dims.lower().split("x"))
        except ValueError:
            shape = ()
        if not sep or not name or not shape or any(d < 1 for d in shape):
            raise UserError(f"bad --input-shape '{spec}': expected NAME:DIMxDIM..., e.g. input:1x3x224x224")
        shapes[name] = shape
    return shapes


def count_flops(model: LoadedModel) -> int | None:
    """Forward FLOPs (multiply-add = 2) counted by torch.utils.flop_counter on the model's inputs.

    transformers models run attention through SDPA, which FlopCounterMode does not see; they are
    switched to eager attention for the count so the attention FLOPs are included.
    """
    if model.module is None:
        return None
    import torch
    from torch.utils.flop_counter import FlopCounterMode

    hf = getattr(model.module, "model", None)
    previous: Any = getattr(getattr(hf, "config", None), "_attn_implementation", None)
    switch = previous not in (None, "eager") and hasattr(hf, "set_attn_implementation")
    try:
        if switch:
            hf.set_attn_implementation("eager")
        with torch.no_grad(), FlopCounterMode(display=False) as counter:
            model.module(*model.torch_inputs())
        return int(counter.get_total_flops())
    except Exception:  # counting is informative only; a model the counter cannot trace has no count
        return None
    finally:
        if switch:
            hf.set_attn_implementation(previous)
