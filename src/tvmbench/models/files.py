"""User models: ONNX files, saved torch.export programs (.pt2) and Python nn.Modules."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from typing import Any

import numpy as np

from tvmbench.errors import MissingFrameworkError, UserError
from tvmbench.models.base import LoadedModel, ModelOptions

_ONNX_DTYPES = {1: np.float32, 2: np.uint8, 3: np.int8, 5: np.int16, 6: np.int32, 7: np.int64, 9: np.bool_,
                10: np.float16, 11: np.float64}


def random_input(shape: tuple[int, ...], dtype: Any, rng: np.random.Generator) -> np.ndarray:
    """Seeded data for an input we know only by shape and dtype (token ids stay small)."""
    dtype = np.dtype(dtype)
    if dtype == np.bool_:
        return np.ones(shape, dtype=dtype)
    if np.issubdtype(dtype, np.integer):
        return rng.integers(0, 100, size=shape).astype(dtype)
    return rng.standard_normal(shape).astype(dtype)


def _resolve_shape(name: str, dims: list[Any], options: ModelOptions, where: str) -> tuple[int, ...]:
    if name in options.input_shapes:
        return tuple(options.input_shapes[name])
    shape = []
    for i, d in enumerate(dims):
        if isinstance(d, int) and d > 0:
            shape.append(d)
        elif i == 0:
            shape.append(options.batch_size)  # a symbolic leading dim is the batch
        else:
            raise UserError(
                f"input '{name}' of {where} has a dynamic dimension {i} ({d}); give its shape with "
                f"--input-shape {name}:" + "x".join(str(x) if isinstance(x, int) and x > 0 else "N" for x in dims)
            )
    return tuple(shape)


def load_onnx(path: Path, options: ModelOptions) -> LoadedModel:
    try:
        import onnx
    except ImportError:
        raise MissingFrameworkError("onnx", "onnx", "onnx") from None
    try:
        model = onnx.load(str(path), load_external_data=False)
    except Exception as e:
        raise UserError(f"cannot read ONNX file {path}: {e}") from None
    initializers = {i.name for i in model.graph.initializer}
    rng = np.random.default_rng(options.seed)
    inputs: dict[str, np.ndarray] = {}
    for inp in model.graph.input:
        if inp.name in initializers:
            continue
        ttype = inp.type.tensor_type
        dims = [d.dim_value if d.HasField("dim_value") else (d.dim_param or "?") for d in ttype.shape.dim]
        dtype = _ONNX_DTYPES.get(ttype.elem_type)
        if dtype is None:
            raise UserError(f"input '{inp.name}' of {path} has an ONNX element type {ttype.elem_type} tvmbench "
                            "cannot generate data for")
        inputs[inp.name] = random_input(_resolve_shape(inp.name, dims, options, str(path)), dtype, rng)
    unknown = set(options.input_shapes) - set(inputs)
    if unknown:
        raise UserError(f"--input-shape names {sorted(unknown)}, but {path} has inputs {list(inputs)}")
    count = sum(int(np.prod(i.dims)) for i in model.graph.initializer)
    return LoadedModel(name=path.name, family="onnx", inputs=inputs, onnx_path=path, options=options,
                       param_count=count, details={"source": "onnx", "path": str(path)})


def load_pt2(path: Path, options: ModelOptions) -> LoadedModel:
    import torch

    try:
        ep = torch.export.load(str(path))
    except Exception as e:
        raise UserError(f"cannot load torch.export program {path}: {type(e).__name__}: {e}") from None
    rng = np.random.default_rng(options.seed)
    inputs: dict[str, np.ndarray] = {}
    example = getattr(ep, "example_inputs", None)
    user_inputs = [s for s in ep.graph_signature.input_specs if s.kind == torch.export.graph_signature.InputKind.USER_INPUT]
    placeholders = {n.name: n for n in ep.graph.nodes if n.op == "placeholder"}
    for i, spec in enumerate(user_inputs):
        name = spec.arg.name
        val = placeholders[name].meta.get("val")
        if name in options.input_shapes or val is None:
            shape = _resolve_shape(name, list(val.shape) if val is not None else [], options, str(path))
            dtype = str(val.dtype).removeprefix("torch.") if val is not None else "float32"
            inputs[name] = random_input(shape, dtype, rng)
        elif example and i < len(example[0]) and isinstance(example[0][i], torch.Tensor):
            inputs[name] = example[0][i].detach().cpu().numpy()
        else:
            dims = [int(d) if isinstance(d, int) else str(d) for d in val.shape]
            shape = _resolve_shape(name, dims, options, str(path))
            inputs[name] = random_input(shape, str(val.dtype).removeprefix("torch."), rng)
    module = ep.module()
    params = list(ep.state_dict.values())
    return LoadedModel(name=path.name, family="pt2", inputs=inputs, module=module, exported=ep, options=options,
                       param_count=sum(p.numel() for p in params),
                       param_bytes=sum(p.numel() * p.element_size() for p in params),
                       details={"source": "torch.export", "path": str(path)})


def _batched(spec: str, inputs: dict[str, np.ndarray], batch: int) -> dict[str, np.ndarray]:
    """A factory's example inputs at ``--batch-size``: each repeated along its leading axis when
    every one has a leading dimension of 1 (the batch axis, then); otherwise that axis cannot be
    told, and asking for a batch size is a one-line error, not a silent batch of 1."""
    if batch == 1:
        return inputs
    shapes = {n: a.shape for n, a in inputs.items()}
    if not all(len(s) and s[0] == 1 for s in shapes.values()):
        raise UserError(f"--batch-size {batch}: the example inputs of {spec} do not all have a leading dimension of 1 "
                        f"({', '.join(f'{n} {list(s)}' for n, s in shapes.items())}), so their batch axis is unknown; "
                        "return them at the batch size you want from the factory")
    return {n: np.repeat(a, batch, axis=0) for n, a in inputs.items()}


def load_python(spec: str, options: ModelOptions) -> LoadedModel:
    """``file.py:factory``: ``factory()`` returns an nn.Module (shapes from --input-shape) or a
    ``(module, example_inputs)`` pair (at ``--batch-size``: ``_batched``)."""
    file, _, attr = spec.rpartition(":")
    path = Path(file).expanduser()
    if not path.exists():
        raise UserError(f"Python model file {path} does not exist")
    mod_spec = importlib.util.spec_from_file_location(path.stem, path)
    assert mod_spec is not None and mod_spec.loader is not None
    module_ns = importlib.util.module_from_spec(mod_spec)
    mod_spec.loader.exec_module(module_ns)
    factory = getattr(module_ns, attr, None)
    if factory is None:
        raise UserError(f"{path} has no '{attr}'; expected a function returning an nn.Module or (module, inputs)")
    import torch

    torch.manual_seed(options.seed)
    built = factory() if callable(factory) and not isinstance(factory, torch.nn.Module) else factory
    module, example = (built if isinstance(built, tuple) else (built, None))
    if not isinstance(module, torch.nn.Module):
        raise UserError(f"{spec} returned {type(module).__name__}, not a torch.nn.Module")
    rng = np.random.default_rng(options.seed)
    if example is not None:
        example = example if isinstance(example, tuple | list) else (example,)
        inputs = _batched(spec, {f"input{i}": t.detach().cpu().numpy() for i, t in enumerate(example)},
                          options.batch_size)
    elif options.input_shapes:
        inputs = {n: random_input(tuple(s), np.float32, rng) for n, s in options.input_shapes.items()}
    else:
        raise UserError(f"{spec} returned a module without example inputs; give them with --input-shape NAME:1x3x224x224")
    module.eval()
    params = list(module.parameters())
    return LoadedModel(name=spec, family="module", inputs=inputs, module=module, options=options,
                       param_count=sum(p.numel() for p in params),
                       param_bytes=sum(p.numel() * p.element_size() for p in params),
                       details={"source": "python", "path": str(path)})
