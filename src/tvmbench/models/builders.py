"""Zoo models built as eval-mode ``torch.nn.Module`` with seeded inputs.

No model hub is reachable from the machines this runs on, and weights do not change speed, so
every model is built from its architecture with random (seeded) weights. Transformers are built
from configs that carry the published architecture sizes of the named checkpoint.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import torch

from tvmbench.errors import UserError
from tvmbench.models.base import LoadedModel, ModelOptions
from tvmbench.models.zoo import (
    DEFAULT_FRAMES,
    FLOW_UPDATES,
    MIN_FLOW_SIZE,
    TORCHVISION,
    TORCHVISION_PREFIX,
    ZooEntry,
    check_image_size,
)


def build(entry: ZooEntry, options: ModelOptions) -> LoadedModel:
    """Build the module and its seeded inputs."""
    torch.manual_seed(options.seed)
    builder: Callable[[ZooEntry, ModelOptions], tuple[Any, dict[str, np.ndarray], dict[str, Any]]]
    builder = _build_torchvision if entry.source == TORCHVISION else _build_transformers
    module, inputs, details = builder(entry, options)
    module.eval()
    params = list(module.parameters())
    return LoadedModel(
        name=entry.name,
        family=entry.family,
        inputs=inputs,
        module=module,
        options=options,
        param_count=sum(p.numel() for p in params),
        param_bytes=sum(p.numel() * p.element_size() for p in params),
        details={"description": entry.description, "source": entry.source, **details},
    )


def _rng(options: ModelOptions) -> np.random.Generator:
    return np.random.default_rng(options.seed)


def _image_size(entry: ZooEntry, options: ModelOptions) -> int:
    size = options.image_size or entry.default_image_size or 224
    check_image_size(entry.name, size)
    return size


def size_keyword(tv_name: str) -> str | None:
    """The constructor keyword that sets a torchvision classifier's input size, or None when the
    architecture takes any size (the CNNs and Swin pool adaptively): read from the signature of
    the model class its builder's module defines, so a new architecture needs no entry here."""
    import inspect
    import sys

    import torchvision

    module = sys.modules[torchvision.models.get_model_builder(tv_name).__module__]
    for obj in vars(module).values():
        if inspect.isclass(obj) and issubclass(obj, torch.nn.Module) and obj.__module__ == module.__name__:
            params = inspect.signature(obj.__init__).parameters
            for keyword in ("image_size", "input_size"):
                if keyword in params:
                    return keyword
    return None


def construct_torchvision(tv_name: str, size: int | None, extra_kwargs: dict[str, Any] | None = None,
                          family: str = "cnn") -> Any:
    """The torchvision model ``tv_name`` built for ``size`` x ``size`` images (random weights;
    only image classifiers are told the size, the video and segmentation models take any or fix
    it themselves); a size the architecture refuses is one line saying so."""
    import torchvision

    kwargs = dict(extra_kwargs or {})
    keyword = size_keyword(tv_name) if family == "cnn" else None
    if keyword == "image_size":
        kwargs[keyword] = size
    elif keyword == "input_size":
        kwargs[keyword] = (size, size)
    try:
        return torchvision.models.get_model(tv_name, weights=None, **kwargs)
    except (ValueError, AssertionError, TypeError) as e:
        reason = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        at = f" at image size {size}" if size else ""
        raise UserError(f"cannot build torchvision {tv_name}{at}: {reason}") from None


def _build_torchvision(entry: ZooEntry, options: ModelOptions) -> tuple[Any, dict[str, np.ndarray], dict[str, Any]]:
    tv_name = entry.name.removeprefix(TORCHVISION_PREFIX)
    if entry.family == "detection":
        return _build_detector(entry, tv_name, options)
    size = _image_size(entry, options)
    frames = options.seq_length or DEFAULT_FRAMES
    if tv_name.startswith("mvit") and (size, frames) != (224, DEFAULT_FRAMES):  # its builder fixes both
        raise UserError(f"torchvision's {tv_name} is built for {DEFAULT_FRAMES} frames of 224x224 "
                        f"(asked for {frames} of {size}x{size})")
    if entry.family == "optical_flow" and (size % 8 or size < MIN_FLOW_SIZE):
        raise UserError(f"torchvision's {tv_name} takes images of a multiple of 8 pixels, at least "
                        f"{MIN_FLOW_SIZE} (asked for {size})")
    module = construct_torchvision(tv_name, size, entry.extra_kwargs, entry.family)
    if entry.family == "segmentation":
        module = SegmentationOutput(module)
    elif entry.family == "optical_flow":
        module = FlowOutput(module)
    # Some classifiers zero-initialise their last layer (torchvision's ViT head), which makes every
    # output 0 and any accuracy check meaningless. Give such all-zero weight matrices random values.
    with torch.no_grad():
        for p in module.parameters():
            if p.dim() >= 2 and not p.any():
                torch.nn.init.normal_(p, std=0.02)
    shape = (options.batch_size, 3, *((frames,) if entry.family == "video" else ()), size, size)
    names = ("image1", "image2") if entry.family == "optical_flow" else ("x",)
    rng = _rng(options)
    inputs = {name: rng.standard_normal(shape, dtype=np.float32) for name in names}
    if entry.family != "cnn":
        _calibrate_batch_norms(module, _calibration_inputs(options, shape, len(names)))
    details: dict[str, Any] = {"image_size": size}
    if entry.family == "video":
        details["frames"] = frames
    elif entry.family == "optical_flow":
        details["flow_updates"] = FLOW_UPDATES
    return module, inputs, details


def _calibration_inputs(options: ModelOptions, shape: tuple[int, ...], count: int) -> list[torch.Tensor]:
    """Seeded samples (another seed than the inputs') of ``shape``, two at least: a pooled branch
    has one value a sample, and a batch norm needs two to have a variance."""
    other = np.random.default_rng(options.seed + 1)
    return [torch.from_numpy(other.standard_normal((max(2, shape[0]), *shape[1:]), dtype=np.float32))
            for _ in range(count)]


def _build_detector(entry: ZooEntry, tv_name: str,
                    options: ModelOptions) -> tuple[Any, dict[str, np.ndarray], dict[str, Any]]:
    """A single-stage detector's network (``DetectionNetwork``) at the size its own transform
    resizes images to (SSD's 300 or 320, RetinaNet's and FCOS's shorter side of 800) unless
    --image-size says otherwise; its batch norms calibrated as the other families' are."""
    detector = construct_torchvision(tv_name, None, entry.extra_kwargs, entry.family)
    size = options.image_size or int(detector.transform.min_size[0])
    check_image_size(entry.name, size)
    module = DetectionNetwork(detector)
    # torchvision starts the heads' convolutions at weights of std 0.01 (and the class logits at a
    # prior's bias, -4.6), so with random weights their outputs barely depend on the image:
    # RetinaNet's varied by 0.01 around that bias and any accuracy check would pass on wrong
    # features. A convolution's default initialisation (1/sqrt(fan-in)) is the scale a trained one has.
    for conv in module.head.modules():
        if isinstance(conv, torch.nn.Conv2d):
            conv.reset_parameters()
    shape = (options.batch_size, 3, size, size)
    inputs = {"x": _rng(options).standard_normal(shape, dtype=np.float32)}
    _calibrate_batch_norms(module, _calibration_inputs(options, shape, 1))
    details = {"image_size": size, "measured": "backbone and heads (box decoding and non-maximum suppression, "
                                               "data-dependent post-processing, left out)"}
    return module, inputs, details


def _calibrate_batch_norms(module: torch.nn.Module, inputs: list[torch.Tensor]) -> None:
    """Batch norms' running statistics set to those of one pass over ``inputs`` (seeded random
    samples like the inputs). With random weights and the initial statistics (mean 0, variance
    1) activations shrink layer by layer where no residual path keeps them: S3D's last features were 1e-6, so its output was its classifier's
    bias and the accuracy check compared nothing. Calibrated, every layer's output is of order 1,
    as in a trained network. (The zoo's classifiers, measured for months as they are, are not
    changed.)"""
    norms = [m for m in module.modules() if isinstance(m, torch.nn.modules.batchnorm._BatchNorm)]
    for norm in norms:
        norm.reset_running_stats()
        norm.momentum = None  # a cumulative average: after one pass, that pass's statistics
        norm.train()
    try:
        with torch.no_grad():
            module(*inputs)
    except RuntimeError as e:  # a size the architecture cannot take (S3D pools 7x7 at the end)
        raise UserError(f"cannot run this model on inputs of shape {list(inputs[0].shape[1:])}: "
                        f"{str(e).strip().splitlines()[0]}") from None
    for norm in norms:
        norm.eval()


class SegmentationOutput(torch.nn.Module):
    """A torchvision segmentation model's ``"out"`` map alone (its forward returns a dict)."""

    def __init__(self, model: torch.nn.Module) -> None:
        super().__init__()
        self.model = model

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.model(x)["out"]


class DetectionNetwork(torch.nn.Module):
    """A single-stage detector's network: the backbone (with its feature pyramid) and the heads,
    returning the heads' raw outputs (class logits and box regressions for every anchor or
    location, FCOS's centerness too) in the order of their names. The detector's forward also
    resizes and normalises the images (its transform: the inputs here are that transform's
    output) and then decodes boxes and runs non-maximum suppression on a data-dependent number of
    candidates: post-processing that deployments run apart from the network (often on the host),
    and that no fixed-shape compiled network holds. Every framework runs this same network."""

    def __init__(self, detector: torch.nn.Module) -> None:
        super().__init__()
        self.backbone = detector.backbone
        self.head = detector.head

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, ...]:
        features = self.backbone(x)
        levels = [features] if isinstance(features, torch.Tensor) else list(features.values())
        out = self.head(levels)
        return tuple(out[k] for k in sorted(out))


class FlowOutput(torch.nn.Module):
    """A torchvision RAFT model's last flow field, after ``FLOW_UPDATES`` refinements (its forward
    returns every refinement's field, for training)."""

    def __init__(self, model: torch.nn.Module) -> None:
        super().__init__()
        self.model = model

    def forward(self, image1: torch.Tensor, image2: torch.Tensor) -> torch.Tensor:
        return self.model(image1, image2, num_flow_updates=FLOW_UPDATES)[-1]


class HFWrapper(torch.nn.Module):
    """Calls a transformers model with positional tensors and returns plain tensors (no
    ModelOutput, no KV cache), so torch.export, ONNX and every backend see the same graph."""

    def __init__(self, model: Any, input_names: tuple[str, ...], outputs: tuple[str, ...],
                 use_cache: bool | None) -> None:
        super().__init__()
        self.model = model
        self.input_names = input_names
        self.outputs = outputs
        self.use_cache = use_cache

    def forward(self, *args: torch.Tensor) -> Any:
        kwargs: dict[str, Any] = dict(zip(self.input_names, args, strict=True))
        if self.use_cache is not None:
            kwargs["use_cache"] = self.use_cache
        out = self.model(**kwargs)
        values = tuple(out[k] for k in self.outputs)
        return values[0] if len(values) == 1 else values


def _build_transformers(entry: ZooEntry, options: ModelOptions) -> tuple[Any, dict[str, np.ndarray], dict[str, Any]]:
    import transformers

    assert entry.hf_class is not None
    model_cls = getattr(transformers, entry.hf_class)
    config_kwargs = {**entry.hf_config, **options.config_overrides}
    rng = _rng(options)
    details: dict[str, Any] = {"hf_class": entry.hf_class, "config": config_kwargs}
    if entry.family == "vision-transformer":
        size = _image_size(entry, options)
        patch = int(config_kwargs.get("patch_size", 16))
        if size % patch:
            raise UserError(f"--image-size {size} must be a multiple of the patch size {patch} for {entry.name}")
        config_kwargs["image_size"] = size
        details["image_size"] = size
    config = model_cls.config_class(**config_kwargs)
    try:
        model = model_cls(config)
    except Exception as e:  # bad override values end up here
        raise UserError(f"cannot build {entry.name} with config {options.config_overrides}: {e}") from None

    if entry.family == "vision-transformer":
        inputs = {"pixel_values": rng.standard_normal((options.batch_size, 3, size, size), dtype=np.float32)}
        use_cache = None
    else:
        seq = options.seq_length or entry.default_seq_length or 128
        limit = getattr(config, "max_position_embeddings", None) or getattr(config, "n_positions", None)
        if entry.hf_class == "RobertaModel" and limit:
            limit -= config.pad_token_id + 1  # positions start after the padding index
        if seq < 1 or (limit and seq > limit):
            raise UserError(f"--seq-length {seq} is outside 1..{limit} for {entry.name}")
        # Token ids avoid the special ids at the bottom of the vocabulary (padding for RoBERTa).
        ids = rng.integers(5, config.vocab_size, size=(options.batch_size, seq), dtype=np.int64)
        inputs = {"input_ids": ids}
        if entry.hf_class == "T5ForConditionalGeneration":
            inputs["decoder_input_ids"] = rng.integers(5, config.vocab_size, size=(options.batch_size, seq),
                                                       dtype=np.int64)
        use_cache = False if entry.hf_class in ("GPT2LMHeadModel", "T5ForConditionalGeneration") else None
        details["seq_length"] = seq
    wrapped = HFWrapper(model, tuple(inputs), entry.outputs, use_cache)
    return wrapped, inputs, details
