"""Models by name or file: the zoo, ONNX files, torch.export programs and Python nn.Modules."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from tvmbench.errors import UserError
from tvmbench.models.base import InputSpec, LoadedModel, ModelOptions
from tvmbench.models.zoo import ZOO, ZooEntry, check_image_size, lookup

__all__ = ["ZOO", "InputSpec", "LoadedModel", "ModelOptions", "ZooEntry", "check_model_name",
           "check_shape_flags", "count_flops", "load_model",
           "lookup", "parse_input_shapes"]


def load_model(name: str, options: ModelOptions | None = None) -> LoadedModel:
    """A zoo name, ``torchvision:NAME``, a ``.onnx`` / ``.pt2`` file, ``file.py:factory`` or a
    package folder (which needs no torch: the builders, which import it, load only when used)."""
    options = options or ModelOptions()
    if options.batch_size < 1:
        raise UserError(f"--batch-size must be at least 1, got {options.batch_size}")
    if options.fill_mode not in FILL_MODES:
        raise UserError(f"--fill-mode must be one of {', '.join(FILL_MODES)}, got '{options.fill_mode}'")
    lower = name.lower()
    if is_package(name):
        from tvmbench.models import package

        model = package.load_package(Path(name).expanduser(), options)
    elif lower.endswith((".onnx", ".pt2")) or ".py:" in name:
        from tvmbench.models import files

        if lower.endswith(".onnx"):
            model = files.load_onnx(_existing(name), options)
        elif lower.endswith(".pt2"):
            model = files.load_pt2(_existing(name), options)
        else:
            model = files.load_python(name, options)
    else:
        from tvmbench.models import builders

        model = builders.build(lookup(name), options)
    return with_inputs(model, options)


FILL_MODES = ("random", "zeros", "ones")


def is_package(name: str) -> bool:
    """A folder written by ``tvmbench export`` (it holds package.json)."""
    return (Path(name).expanduser() / "package.json").is_file()


def with_inputs(model: LoadedModel, options: ModelOptions) -> LoadedModel:
    """The model with the input values the options ask for: its seeded random ones, all zeros,
    all ones, or the arrays of ``options.inputs_file`` (each checked against the model's input:
    a missing, extra or mis-shaped array is a one-line error naming it)."""
    import dataclasses

    import numpy as np

    if options.inputs_file:
        path = Path(options.inputs_file).expanduser()
        try:
            given = dict(np.load(path, allow_pickle=False))
        except (OSError, ValueError) as e:
            raise UserError(f"--inputs {path}: not a readable .npz file ({e})") from None
        for spec in model.input_specs:
            if spec.name not in given:
                raise UserError(f"--inputs {path} has no array '{spec.name}' (the model's inputs: "
                                f"{', '.join(s.name for s in model.input_specs)})")
            a = given[spec.name]
            if tuple(a.shape) != tuple(spec.shape) or str(a.dtype) != spec.dtype:
                raise UserError(f"--inputs {path}: '{spec.name}' is {str(a.dtype)} {list(a.shape)}, the model "
                                f"takes {spec.dtype} {list(spec.shape)}")
        extra = sorted(set(given) - {s.name for s in model.input_specs})
        if extra:
            raise UserError(f"--inputs {path} has arrays the model does not take: {', '.join(extra)}")
        inputs = {s.name: np.ascontiguousarray(given[s.name]) for s in model.input_specs}
    elif options.fill_mode == "zeros":
        inputs = {k: np.zeros_like(v) for k, v in model.inputs.items()}
    elif options.fill_mode == "ones":
        inputs = {k: np.ones_like(v) for k, v in model.inputs.items()}
    else:
        return model
    return dataclasses.replace(model, inputs=inputs)


def check_model_name(name: str) -> None:
    """Fail fast on an unknown zoo name or a missing file, without building anything."""
    if is_package(name):
        return
    if name.lower().endswith((".onnx", ".pt2")):
        _existing(name)
    elif ".py:" in name:
        _existing(name.rpartition(":")[0])
    else:
        lookup(name)


def check_shape_flags(name: str, seq_length: int | None, image_size: int | None) -> None:
    """Fail fast on a shape flag the zoo model named cannot take: ``--seq-length`` for a model
    of images, ``--image-size`` for one of tokens, an image smaller than the stems allow. Each
    would otherwise be silently ignored or fail in every framework's worker alike. Files and
    packages are not checked here (their inputs say what they take)."""
    if is_package(name) or name.lower().endswith((".onnx", ".pt2")) or ".py:" in name:
        return
    entry = lookup(name)
    if entry.family == "transformer" and image_size is not None:
        raise UserError(f"--image-size applies to models of images; {entry.name} takes tokens (use --seq-length)")
    if entry.family not in ("transformer", "video") and seq_length is not None:
        raise UserError(f"--seq-length applies to models of tokens (and the frames of a video model); "
                        f"{entry.name} takes images (use --image-size)")
    if image_size is not None:
        check_image_size(entry.name, image_size)


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
