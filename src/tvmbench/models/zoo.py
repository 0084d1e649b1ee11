"""The model zoo's catalog: names, families and input defaults (no torch import; the modules are
built by ``builders.py``).

No model hub is reachable from the machines this runs on, and weights do not change speed, so
every model is built from its architecture with random (seeded) weights. Transformers are built
from configs that carry the published architecture sizes of the named checkpoint.
"""

from __future__ import annotations

import difflib
from dataclasses import dataclass, field
from typing import Any

from tvmbench.errors import UserError


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


TORCHVISION = "torchvision"
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
    **{n: ZooEntry(n, "cnn", TORCHVISION, d, default_image_size=299 if n == "inception_v3" else 224,
                   extra_kwargs=_CNN_KWARGS.get(n, {})) for n, d in _CNNS.items()},
    **{e.name: e for e in _TRANSFORMERS},
}

TORCHVISION_PREFIX = "torchvision:"
# What ``torchvision:NAME`` reaches: classifiers of images ("cnn"), of video clips ([N, 3, T, H,
# W], T from --seq-length, 16 by default), semantic segmentation (the "out" map), optical flow
# (RAFT: two images, the flow after FLOW_UPDATES refinements, torchvision's default) and
# single-stage detection (the network: backbone and heads; see ``builders.DetectionNetwork``).
TORCHVISION_TASKS = {"cnn": "", "video": "video", "segmentation": "segmentation", "optical_flow": "optical_flow",
                     "detection": "detection"}
FLOW_UPDATES = 12
MIN_FLOW_SIZE = 128  # RAFT's features are 1/8 of the image, at least 16 pixels (its pyramid halves them thrice)
# Sizes the video classifiers were defined at (the R(2+1)D/R3D/MC3 family at 112 px).
_VIDEO_SIZES = {"r3d_18": 112, "mc3_18": 112, "r2plus1d_18": 112}
_NOT_REACHED = {"quantization": "quantized models run on PyTorch's own int8 kernels"}
DEFAULT_FRAMES = 16


def listed(module: str) -> list[str]:
    """The models torchvision lists in ``torchvision.models.<module>`` (the classifiers for "")."""
    import torchvision

    return torchvision.models.list_models(module=getattr(torchvision.models, module) if module else torchvision.models)


def torchvision_task(tv_name: str) -> str | None:
    """The family of torchvision model ``tv_name`` ("cnn", "video", "segmentation",
    "optical_flow", "detection"), or None."""
    return next((family for family, module in TORCHVISION_TASKS.items() if tv_name in listed(module)), None)


def two_stage(tv_name: str) -> bool:
    """Whether torchvision detector ``tv_name`` is two-stage (Faster/Mask/Keypoint R-CNN): its
    second stage runs on the regions the first selects by non-maximum suppression, a
    data-dependent number, so no fixed-shape network runs it. Read from the class its builder's
    module defines (a GeneralizedRCNN), so a new architecture needs no entry here."""
    import inspect
    import sys

    import torchvision
    from torchvision.models.detection.generalized_rcnn import GeneralizedRCNN

    module = sys.modules[torchvision.models.get_model_builder(tv_name).__module__]
    return any(inspect.isclass(c) and issubclass(c, GeneralizedRCNN) for c in vars(module).values())


def _torchvision_entry(name: str, tv_name: str) -> ZooEntry:
    family = torchvision_task(tv_name)
    if family == "detection" and two_stage(tv_name):
        raise UserError(f"torchvision's two-stage detector {tv_name} is not in the zoo (its second stage runs on "
                        "the regions non-maximum suppression selects, a data-dependent number); the single-stage "
                        "ones are (torchvision:ssdlite320_mobilenet_v3_large, ssd300_vgg16, retinanet_*, fcos_*)")
    if family is None:
        for module, why in _NOT_REACHED.items():
            if tv_name in listed(module):
                raise UserError(f"torchvision's {module.replace('_', ' ')} model {tv_name} is not in the zoo ({why}); "
                                "export it to ONNX or write a file.py:factory with fixed shapes")
        available = [n for m in TORCHVISION_TASKS.values() for n in listed(m)]
        close = difflib.get_close_matches(tv_name, available, n=3)
        hint = f"; did you mean {', '.join(TORCHVISION_PREFIX + c for c in close)}?" if close else ""
        raise UserError(f"torchvision has no classification, video, segmentation, optical flow or detection model "
                        f"'{tv_name}'{hint}")
    # A detector's size is the one its own transform resizes to (read from the model when built).
    size = None if family == "detection" else 299 if tv_name == "inception_v3" else _VIDEO_SIZES.get(tv_name, 224)
    kwargs: dict[str, Any] = {"weights_backbone": None, "aux_loss": False} if family == "segmentation" else {}
    if family == "detection":
        kwargs = {"weights_backbone": None}
    return ZooEntry(name, family, TORCHVISION, f"torchvision {tv_name}", default_image_size=size, extra_kwargs=kwargs)


MIN_IMAGE_SIZE = 32  # five stride-2 stages leave one pixel


def check_image_size(name: str, size: int) -> None:
    if size < MIN_IMAGE_SIZE:
        raise UserError(f"--image-size {size} is too small for {name}; use at least {MIN_IMAGE_SIZE}")


def lookup(name: str) -> ZooEntry:
    """The zoo entry for ``name``; ``torchvision:NAME`` reaches any torchvision classifier, video,
    segmentation, optical-flow or single-stage detection model."""
    if name in ZOO:
        return ZOO[name]
    lowered = {k.lower(): k for k in ZOO}
    if name.lower() in lowered:
        return ZOO[lowered[name.lower()]]
    if name.startswith(TORCHVISION_PREFIX):
        return _torchvision_entry(name, name[len(TORCHVISION_PREFIX):])
    # Names the input begins (``bert-base`` -> bert-base-uncased) first, then difflib's nearest.
    starts = [k for k in ZOO if k.lower().startswith(name.lower())]
    close = list(dict.fromkeys(starts + difflib.get_close_matches(name, list(ZOO), n=3, cutoff=0.5)))[:3]
    hint = f"did you mean {', '.join(close)}? " if close else ""
    raise UserError(
        f"unknown model '{name}': {hint}Run 'tvmbench models' for the zoo, use torchvision:NAME for any "
        "torchvision classifier, or give a .onnx / .pt2 file"
    )
