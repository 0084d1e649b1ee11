"""``tvmbench compare``: several models, shapes and frameworks in one command, one document.

A comparison is a list of *points* (model x batch size x sequence length), each measured exactly
like ``tvmbench run`` (every framework in its own worker process, PyTorch eager as the reference,
same inputs and thread count for all). Points come from ``--models`` with the sweep flags, or from
a JSON config file in the schema below; command-line flags override the file. The document is
rewritten atomically after every point, so an interrupted comparison keeps what it measured.

Config file (validated; a bad file is one line naming the field and the problem)::

    {"models": [{"name": "resnet50", "type": "resnet", "batch_size": 8,
                 "enable_tuning": true, "tuning_trials": 2000},
                {"name": "bert-large-uncased", "type": "bert", "batch_size": 4, "seq_length": 512}],
     "global_settings": {"target": "cuda", "num_runs": 200, "warmup_runs": 20}}
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, PositiveInt, ValidationError, field_validator

from tvmbench.errors import UserError
from tvmbench.models.zoo import TORCHVISION_PREFIX, torchvision_task


class ModelEntry(BaseModel):
    """One model of a comparison; a list in ``batch_size`` or ``seq_length`` is a sweep."""

    model_config = ConfigDict(extra="forbid")

    name: str = Field(min_length=1)
    type: str | None = None  # groups models in the summary; default from the name (resnet, bert, gpt, ...)
    batch_size: PositiveInt | list[PositiveInt] = 1
    seq_length: PositiveInt | list[PositiveInt] | None = None
    image_size: PositiveInt | None = None
    enable_tuning: bool = False
    tuning_trials: PositiveInt | None = None
    hf_config: dict[str, Any] = Field(default_factory=dict)  # transformers config overrides

    @field_validator("batch_size", "seq_length")
    @classmethod
    def _non_empty(cls, v: Any) -> Any:
        if isinstance(v, list) and not v:
            raise ValueError("an empty list; give a number or a non-empty list")
        return v


class GlobalSettings(BaseModel):
    model_config = ConfigDict(extra="forbid")

    target: str | dict[str, Any] = "auto"
    frameworks: list[str] | None = None  # default: tvm and pytorch
    num_runs: PositiveInt | None = None  # exact timed runs (default: adaptive)
    warmup_runs: int | None = Field(default=None, ge=0)
    threads: PositiveInt | None = None
    rounds: PositiveInt = 1
    tuning_trials: PositiveInt | None = None  # for models with enable_tuning and no tuning_trials


class CompareConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")

    models: list[ModelEntry] = Field(min_length=1)
    global_settings: GlobalSettings = Field(default_factory=GlobalSettings)


def resolve_config(models: Sequence[str] | str | None, config: str | Path | CompareConfig | None
                   ) -> CompareConfig:
    """The comparison from a model list (``"a,b"`` or names) or a config file, exactly one of them."""
    if bool(models) == bool(config):
        raise UserError("give the models either with --models a,b,c or with --config FILE.json (one of the two)")
    if config is not None:
        return config if isinstance(config, CompareConfig) else load_config(config)
    names = [m.strip() for m in (models.split(",") if isinstance(models, str) else list(models or [])) if m.strip()]
    if not names:
        raise UserError(f"--models {models!r} names no model; give names separated by commas, e.g. resnet18,bert-base-uncased")
    return CompareConfig(models=[ModelEntry(name=m) for m in names])


def load_config(path: str | Path) -> CompareConfig:
    """Read and validate a config file; every problem is a one-line UserError."""
    p = Path(path)
    if not p.is_file():
        raise UserError(f"config file {p} does not exist")
    try:
        data = json.loads(p.read_text())
    except json.JSONDecodeError as e:
        raise UserError(f"config file {p} is not valid JSON: {e.msg} at line {e.lineno}, column {e.colno}") from None
    try:
        return CompareConfig.model_validate(data)
    except ValidationError as e:
        first = e.errors()[0]
        where = ".".join(str(x) if not isinstance(x, int) else f"[{x}]" for x in first["loc"]).replace(".[", "[")
        more = f" (and {e.error_count() - 1} more problem(s))" if e.error_count() > 1 else ""
        raise UserError(f"config file {p}: {where or 'top level'}: {first['msg']}{more}") from None


_TYPES = (("resnet", "resnet"), ("wide_resnet", "resnet"), ("resnext", "resnet"), ("distilbert", "bert"),
          ("roberta", "bert"), ("bert", "bert"), ("gpt", "gpt"), ("t5", "t5"), ("vit", "vit"))


def model_type(name: str, family: str | None = None) -> str:
    """The summary group of a model: resnet, bert (BERT, RoBERTa, DistilBERT), gpt, t5, vit; other
    CNNs are "cnn"; torchvision's other families by theirs ("video", "segmentation",
    "optical_flow"; a video's sequence length is its frames); user files by their kind."""
    base = name.lower().rsplit("/", 1)[-1].removeprefix("torchvision:")
    task = torchvision_task(base) if name.startswith(TORCHVISION_PREFIX) else None
    if task not in (None, "cnn"):
        return str(task)
    for prefix, kind in _TYPES:
        if base.startswith(prefix):
            return kind
    if base.endswith((".onnx", ".pt2")) or ".py:" in base:
        return family or "user"
    return "cnn"


@dataclass(frozen=True)
class ComparePoint:
    model: str
    type: str
    batch_size: int
    seq_length: int | None
    image_size: int | None
    tune: bool
    trials: int | None
    hf_config: tuple[tuple[str, Any], ...] = ()


def _as_list(v: int | list[int] | None) -> list[int | None]:
    return list(v) if isinstance(v, list) else [v]


def plan(config: CompareConfig, batch_sizes: list[int] | None = None, seq_lengths: list[int] | None = None,
         tune: bool | None = None, trials: int | None = None) -> list[ComparePoint]:
    """Points in order: model by model, then batch size, then sequence length. Flags (when given)
    override the file's values for every model."""
    points = []
    for m in config.models:
        kind = m.type or model_type(m.name)
        seqs = seq_lengths if seq_lengths is not None else _as_list(m.seq_length)
        if kind in ("resnet", "cnn", "segmentation", "optical_flow") and seq_lengths is not None:
            seqs = [None]  # a sequence-length sweep does not apply to image models
        do_tune = m.enable_tuning if tune is None else tune
        n_trials = trials or m.tuning_trials or config.global_settings.tuning_trials
        for b in batch_sizes or _as_list(m.batch_size):
            for s in seqs:
                points.append(ComparePoint(m.name, kind, int(b or 1), s, m.image_size, do_tune,
                                           n_trials if do_tune else None, tuple(sorted(m.hf_config.items()))))
    return points


def parse_int_list(text: str, flag: str) -> list[int]:
    """``"1,2,4"`` -> ``[1, 2, 4]``; a bad value is a one-line error naming the flag."""
    try:
        values = [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        values = []
    if not values or any(v < 1 for v in values):
        raise UserError(f"bad {flag} '{text}': expected positive integers separated by commas, e.g. 1,2,4")
    return values


def point_key(point: ComparePoint, image_size: int | None) -> str:
    """What makes two comparison points the same measurement (for ``compare --resume``)."""
    return json.dumps([point.model, point.batch_size, point.seq_length, image_size or point.image_size,
                       list(point.hf_config), point.tune, point.trials], default=str)


def options_key(frameworks: list[str], target: dict[str, Any], settings: dict[str, Any], seed: int,
                image_size: int | None) -> str:
    """What every point of a comparison shares; a resumed comparison must have the same."""
    spec = {"frameworks": frameworks, "target": target, "settings": settings, "seed": seed, "image_size": image_size}
    return hashlib.sha256(json.dumps(spec, sort_keys=True, default=str).encode()).hexdigest()[:16]


def resumable_points(output: str | Path | None, key: str) -> dict[str, dict[str, Any]]:
    """The points an interrupted comparison with the same options wrote to ``output``, by
    point key; a missing file resumes nothing, a file of other options is a UserError."""
    if not output or not Path(output).is_file():
        return {}
    try:
        prior = json.loads(Path(output).read_text())
    except ValueError:
        raise UserError(f"--resume: {output} is not a comparison document; drop --resume or use another "
                        "--output") from None
    if not isinstance(prior, dict) or prior.get("options_key") != key:
        raise UserError(f"--resume: {output} was made with other options (frameworks, target, threads or "
                        "measurement settings); run with the same ones, or drop --resume")
    return {p["point_key"]: p for p in prior.get("points", []) if isinstance(p, dict) and "point_key" in p}
