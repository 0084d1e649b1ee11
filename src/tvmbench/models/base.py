"""What a loaded model is, independent of where it came from (zoo, ONNX file, torch.export file)."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np


@dataclass(frozen=True)
class ModelOptions:
    """Shape and construction options the user can set on the command line."""

    batch_size: int = 1
    seq_length: int | None = None  # None: the model's default (128 for text models)
    image_size: int | None = None  # None: the model's default (224, 299 for inception_v3)
    # Overrides for a transformers config (e.g. {"num_hidden_layers": 2}) for quick or tiny runs.
    config_overrides: dict[str, Any] = field(default_factory=dict)
    # Shapes for dynamic inputs of user files: {"input": (1, 3, 224, 224)}.
    input_shapes: dict[str, tuple[int, ...]] = field(default_factory=dict)
    seed: int = 0
    # The input values: "random" (seeded, the default), "zeros" or "ones"; or arrays by input name
    # from an .npz file (``--inputs``), checked against the model's input specs.
    fill_mode: str = "random"
    inputs_file: str | None = None

    def key(self) -> dict[str, Any]:
        """The options as plain data, for cache keys and results (the input values only when
        they are not the default seeded ones)."""
        key: dict[str, Any] = {
            "batch_size": self.batch_size,
            "seq_length": self.seq_length,
            "image_size": self.image_size,
            "config_overrides": dict(sorted(self.config_overrides.items())),
            "input_shapes": {k: list(v) for k, v in sorted(self.input_shapes.items())},
            "seed": self.seed,
        }
        if self.fill_mode != "random":
            key["fill_mode"] = self.fill_mode
        if self.inputs_file:
            key["inputs_file"] = self.inputs_file
        return key


@dataclass(frozen=True)
class InputSpec:
    name: str
    shape: tuple[int, ...]
    dtype: str

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "shape": list(self.shape), "dtype": self.dtype}


@dataclass
class LoadedModel:
    """A model ready for every backend: the same seeded inputs go to all of them.

    ``module`` is the eval-mode ``torch.nn.Module`` (the PyTorch reference); it is None for ONNX
    files, which only ONNX-capable backends can run. ``exported`` is set for ``.pt2`` files so the
    TVM importer does not export again.
    """

    name: str
    family: str  # "cnn", "transformer", "vision-transformer", "onnx", "pt2", "module"
    inputs: dict[str, np.ndarray]
    module: Any | None = None
    onnx_path: Path | None = None
    exported: Any | None = None
    options: ModelOptions = field(default_factory=ModelOptions)
    param_count: int | None = None
    param_bytes: int | None = None
    details: dict[str, Any] = field(default_factory=dict)

    @property
    def input_specs(self) -> list[InputSpec]:
        return [InputSpec(n, tuple(a.shape), str(a.dtype)) for n, a in self.inputs.items()]

    @property
    def batch_size(self) -> int:
        first = next(iter(self.inputs.values()), None)
        return int(first.shape[0]) if first is not None and first.ndim else self.options.batch_size

    def torch_inputs(self) -> tuple[Any, ...]:
        import torch

        return tuple(torch.from_numpy(a) for a in self.inputs.values())

    def reference_outputs(self) -> list[np.ndarray] | None:
        """The PyTorch module's outputs for the model's inputs (None without a module)."""
        if self.module is None:
            return None
        import torch

        with torch.inference_mode():
            out = self.module(*self.torch_inputs())
        return [t.detach().float().cpu().numpy() if t.dtype.is_floating_point else t.detach().cpu().numpy()
                for t in flatten(out)]

    def describe(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "family": self.family,
            "inputs": [s.to_json() for s in self.input_specs],
            "param_count": self.param_count,
            "param_bytes": self.param_bytes,
            **self.details,
        }


def flatten(value: Any) -> list[Any]:
    """Nested tuples/lists of tensors to a flat list, in order."""
    if isinstance(value, list | tuple):
        out: list[Any] = []
        for v in value:
            out.extend(flatten(v))
        return out
    return [value]
