"""The model zoo: names mapped to builders of eval-mode ``torch.nn.Module`` with seeded inputs.

No model hub is reachable from the machines this runs on, and weights do not change speed, so
every model is built from its architecture with random (seeded) weights. Transformers are built
from configs that carry the published architecture sizes of the named checkpoint.
"""

from __future__ import annotations

import difflib
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch

from tvmbench.errors import UserError
from tvmbench.models.base import LoadedModel, ModelOptions


@dataclass(frozen=True)
class ZooEntry:
    """One named model: how to build it and what its inputs look like."""

    name: str
    family: str  # "cnn", "transformer", "vision-transformer"
    source: str  # "torchvision" or "transformers"
    description: str
    default_image_size: int | None = None
    default_seq_length: int | None = None
    hf_class: str | None = None  # transformers model class
    hf_config: dict[str, Any] = field(default_factory=dict)  # published architecture sizes
    outputs: tuple[str, ...] = ()  # output fields of a transformers model, in order
    extra_kwargs: dict[str, Any] = field(default_factory=dict)  # torchvision builder kwargs


_TV = "torchvision"
_CNNS = {
    "resnet18": "ResNet-18", "resnet34": "ResNet-34", "resnet50": "ResNet-50", "resnet101": "ResNet-101",
    "resnet152": "ResNet-152", "mobilenet_v2": "MobileNetV2", "squeezenet1_1": "SqueezeNet 1.1",
    "inception_v3": "Inception v3", "googlenet": "GoogLeNet", "vgg11": "VGG-11", "vgg13": "VGG-13",
    "vgg16": "VGG-16", "vgg19": "VGG-19", "alexnet": "AlexNet", "shufflenet_v2_x1_0": "ShuffleNetV2 1.0x",
    "mnasnet1_0": "MNASNet 1.0", "densenet121": "DenseNet-121", "densenet161": "DenseNet-161",
    "densenet169": "DenseNet-169", "densenet201": "DenseNet-201",
}
# The auxiliary classifiers only run in training; building without them gives the inference graph.
_CNN_KWARGS: dict[str, dict[str, Any]] = {
    "inception_v3": {"aux_logits": False, "init_weights": True},
    "googlenet": {"aux_logits": False, "init_weights": True},
}

_BERT_BASE = {"vocab_size": 30522, "hidden_size": 768, "num_hidden_layers": 12, "num_attention_heads": 12,
              "intermediate_size": 3072, "max_position_embeddings": 512, "type_vocab_size": 2}
_TRANSFORMERS = [
    ZooEntry("bert-base-uncased", "transformer", "transformers", "BERT base, uncased (110M)", default_seq_length=128,
             hf_class="BertModel", hf_config=_BERT_BASE, outputs=("last_hidden_state", "pooler_output")),
    ZooEntry("bert-large-uncased", "transformer", "transformers", "BERT large, uncased (340M)",
             default_seq_length=128, hf_class="BertModel",
             hf_config={**_BERT_BASE, "hidden_size": 1024, "num_hidden_layers": 24, "num_attention_heads": 16,
                        "intermediate_size": 4096},
             outputs=("last_hidden_state", "pooler_output")),
    ZooEntry("roberta-base", "transformer", "transformers", "RoBERTa base (125M)", default_seq_length=128,
             hf_class="RobertaModel",
             hf_config={**_BERT_BASE, "vocab_size": 50265, "max_position_embeddings": 514, "type_vocab_size": 1,
                        "pad_token_id": 1, "bos_token_id": 0, "eos_token_id": 2, "layer_norm_eps": 1e-5},
             outputs=("last_hidden_state", "pooler_output")),
    ZooEntry("distilbert-base-uncased", "transformer", "transformers", "DistilBERT base, uncased (66M)",
             default_seq_length=128, hf_class="DistilBertModel",
             hf_config={"vocab_size": 30522, "dim": 768, "n_layers": 6, "n_heads": 12, "hidden_dim": 3072,
                        "max_position_embeddings": 512},
             outputs=("last_hidden_state",)),
    ZooEntry("gpt2", "transformer", "transformers", "GPT-2 small (124M), LM head, no KV cache",
             default_seq_length=128, hf_class="GPT2LMHeadModel",
             hf_config={"vocab_size": 50257, "n_positions": 1024, "n_embd": 768, "n_layer": 12, "n_head": 12},
             outputs=("logits",)),
    ZooEntry("t5-base", "transformer", "transformers",
             "T5 base (223M), encoder-decoder, decoder as long as the input", default_seq_length=128,
             hf_class="T5ForConditionalGeneration",
             hf_config={"vocab_size": 32128, "d_model": 768, "d_kv": 64, "d_ff": 3072, "num_layers": 12,
                        "num_decoder_layers": 12, "num_heads": 12, "relative_attention_num_buckets": 32,
                        "feed_forward_proj": "relu", "decoder_start_token_id": 0, "pad_token_id": 0},
             outputs=("logits",)),
    ZooEntry("google/vit-base-patch16-224", "vision-transformer", "transformers",
             "ViT-B/16 image classifier (86M)", default_image_size=224, hf_class="ViTForImageClassification",
             hf_config={"hidden_size": 768, "num_hidden_layers": 12, "num_attention_heads": 12,
                        "intermediate_size": 3072, "image_size": 224, "patch_size": 16, "num_labels": 1000},
             outputs=("logits",)),
]

ZOO: dict[str, ZooEntry] = {
    **{n: ZooEntry(n, "cnn", _TV, d, default_image_size=299 if n == "inception_v3" else 224,
                   extra_kwargs=_CNN_KWARGS.get(n, {})) for n, d in _CNNS.items()},
    **{e.name: e for e in _TRANSFORMERS},
}

TORCHVISION_PREFIX = "torchvision:"


def lookup(name: str) -> ZooEntry:
    """The zoo entry for ``name``; ``torchvision:NAME`` reaches any torchvision classifier."""
    if name in ZOO:
        return ZOO[name]
    lowered = {k.lower(): k for k in ZOO}
    if name.lower() in lowered:
        return ZOO[lowered[name.lower()]]
    if name.startswith(TORCHVISION_PREFIX):
        import torchvision

        tv_name = name[len(TORCHVISION_PREFIX):]
        available = torchvision.models.list_models(module=torchvision.models)
        if tv_name not in available:
            close = difflib.get_close_matches(tv_name, available, n=3)
            hint = f"; did you mean {', '.join(TORCHVISION_PREFIX + c for c in close)}?" if close else ""
            raise UserError(f"torchvision has no classification model '{tv_name}'{hint}")
        size = 299 if tv_name == "inception_v3" else 224
        return ZooEntry(name, "cnn", _TV, f"torchvision {tv_name}", default_image_size=size)
    close = difflib.get_close_matches(name, list(ZOO), n=3, cutoff=0.5)
    hint = f"did you mean {', '.join(close)}? " if close else ""
    raise UserError(
        f"unknown model '{name}': {hint}Run 'tvmbench models' for the zoo, use torchvision:NAME for any "
        "torchvision classifier, or give a .onnx / .pt2 file"
    )


def build(entry: ZooEntry, options: ModelOptions) -> LoadedModel:
    """Build the module and its seeded inputs."""
    torch.manual_seed(options.seed)
    builder: Callable[[ZooEntry, ModelOptions], tuple[Any, dict[str, np.ndarray], dict[str, Any]]]
    builder = _build_torchvision if entry.source == _TV else _build_transformers
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
    if size < 32:
        raise UserError(f"--image-size {size} is too small for {entry.name}; use at least 32")
    return size


def _build_torchvision(entry: ZooEntry, options: ModelOptions) -> tuple[Any, dict[str, np.ndarray], dict[str, Any]]:
    import torchvision

    tv_name = entry.name.removeprefix(TORCHVISION_PREFIX)
    size = _image_size(entry, options)
    kwargs = dict(entry.extra_kwargs)
    if tv_name.startswith(("vit_", "swin", "maxvit")):
        kwargs["image_size"] = size
    try:
        module = torchvision.models.get_model(tv_name, weights=None, **kwargs)
    except (ValueError, AssertionError, TypeError) as e:
        raise UserError(f"cannot build torchvision {tv_name} at image size {size}: {e}") from None
    # Some classifiers zero-initialise their last layer (torchvision's ViT head), which makes every
    # output 0 and any accuracy check meaningless. Give such all-zero weight matrices random values.
    with torch.no_grad():
        for p in module.parameters():
            if p.dim() >= 2 and not p.any():
                torch.nn.init.normal_(p, std=0.02)
    x = _rng(options).standard_normal((options.batch_size, 3, size, size), dtype=np.float32)
    return module, {"x": x}, {"image_size": size}


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
