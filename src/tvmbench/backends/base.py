"""The backend interface every framework implements.

Small on purpose (after optimum-benchmark's backend base class): a backend turns a loaded model
into something it can run (``prepare``: import, convert, compile; its phases are timed), runs one
synchronous inference (``run``: waits for the device, so the timer measures the work), hands back
the outputs as numpy arrays, and releases what it holds. Measurement, isolation and accuracy
checks live outside, identical for every framework.
"""

from __future__ import annotations

import dataclasses
import importlib.util
from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, ClassVar

import numpy as np

from tvmbench.errors import UserError
from tvmbench.models import LoadedModel
from tvmbench.targets import ResolvedTarget

# The operator kinds every framework's per-operator profile is grouped by (``tvmbench explain``).
OP_KINDS = ("conv", "matmul", "norm", "softmax", "pool", "layout", "elementwise")
Paced = Callable[[Callable[[], Any]], Any]  # makes one call of the work given (``lockstep.Pacer``)


def unpaced(fn: Callable[[], Any]) -> Any:
    return fn()


@dataclass(frozen=True)
class OpTime:
    """One operator (layer) of a framework's own per-operator profile: ms per inference."""

    layer: str  # the framework's node or kernel name
    op_type: str  # the framework's op type (ONNX Runtime's Conv, OpenVINO's Convolution, aten::addmm)
    kind: str  # one of OP_KINDS
    ms: float
    order: int | None = None  # position of its first run in one inference; None: the profiler gives none
    out_elements: int | None = None  # elements of its (first) output, where the profiler says
    weight_elements: int | None = None  # its weights' elements, where known (``weight_elements``)
    layers: int = 1  # the model's layers of its kind it computes: more for a primitive that fused several


def weight_elements(kind: str, shapes_in: list[Any], shape_out: Any) -> int | None:
    """The elements of a layer's weights, by which ``tvmbench explain`` tells apart layers of
    equal output size: a matmul's ``K x N`` (its first input's last axis by its output's), the
    same whether a framework lists the weight as an input or not (ONNX Runtime's fused Gemm lists
    its input and bias only, its weight prepacked), transposed it or packed it (TVM's blocks of
    columns); another layer's second input (a convolution's kernel). None where unknown."""
    import math

    try:
        if kind == "matmul":
            return int(shapes_in[0][-1]) * int(shape_out[-1])
        return math.prod(int(d) for d in shapes_in[1])
    except (IndexError, TypeError, ValueError):
        return None


@dataclass(frozen=True)
class BackendOptions:
    """A framework's own settings, typed. Each backend that has any declares a subclass whose
    field names are the run's setting names (``precision``, ``openvino_hint``, ...) and whose
    ``validate`` raises UserError for a bad value; the parent validates them before any worker
    starts (``Backend.check_options``)."""

    @classmethod
    def from_settings(cls, settings: dict[str, Any]) -> BackendOptions:
        """The fields this framework has, from the run's settings (absent ones keep defaults)."""
        names = {f.name for f in dataclasses.fields(cls)}
        options = cls(**{k: v for k, v in settings.items() if k in names and v is not None})
        options.validate()
        return options

    def validate(self) -> None:
        """Raise UserError for a value this framework cannot take."""


@dataclass(frozen=True)
class BackendConfig:
    """What every backend needs from the run, so all frameworks get the same settings."""

    target: ResolvedTarget
    threads: int
    databases: tuple[tuple[str, str], ...] = ()  # (kind, directory) of the tuning databases TVM applies
    use_cache: bool = True
    options: dict[str, Any] = field(default_factory=dict)  # the run's settings; each backend types its own


class Backend(ABC):
    name: ClassVar[str]  # as given to --frameworks
    result_key: ClassVar[str]  # key of this framework's entry in the result JSON
    label: ClassVar[str]  # for people: table columns, summaries
    requires: ClassVar[tuple[str, ...]] = ()  # importable modules it needs
    extra: ClassVar[str | None] = None  # pip extra that installs them
    distribution: ClassVar[str | None] = None  # pip distribution name, when not requires[0]
    runs_onnx_files: ClassVar[bool] = True  # can run a model given as a .onnx file
    runs_packages: ClassVar[bool] = False  # can run a package written by ``tvmbench export`` (TVM only)
    # Its model runs on TVM's thread pool, so the host-state probe (TVM fork-joins between blocks,
    # ``measure/probe.py``) adds no threads to it. Elsewhere it would: beside ONNX Runtime's pool,
    # TVM's yielding workers made a quarter of ORT's resnet18 samples 3.5x slower (64 ms, not 18.5).
    tvm_thread_pool: ClassVar[bool] = False
    # honours --precision (fp16/bf16/amp); its outputs are then checked at the fp16 tolerance
    reduced_precision: ClassVar[bool] = False
    options_type: ClassVar[type[BackendOptions]] = BackendOptions  # its settings, typed

    def __init__(self, config: BackendConfig) -> None:
        self.config = config
        self.options = self.options_type.from_settings(config.options)
        self.phases_s: dict[str, float] = {}  # convert/import/compile/load..., seconds
        self.info: dict[str, Any] = {}  # device, versions, settings: recorded in the result
        self.log: Callable[[str], None] = lambda message: None  # steps worth a line with --verbose

    @classmethod
    def missing_requirement(cls) -> str | None:
        """The first required module that is not installed, or None."""
        for module in cls.requires:
            if importlib.util.find_spec(module) is None:
                return module
        return None

    @classmethod
    def check_options(cls, settings: dict[str, Any]) -> None:
        """UserError when the run's settings hold a value this framework cannot take."""
        cls.options_type.from_settings(settings)

    @classmethod
    def can_run(cls, model: str) -> bool:
        """Whether this framework can run the model named ``model`` at all."""
        from tvmbench.models import is_package

        if is_package(model):
            return cls.runs_packages
        return cls.runs_onnx_files or not model.lower().endswith(".onnx")

    @classmethod
    def unavailable_reason(cls, target: ResolvedTarget | None = None) -> str | None:
        """Why the framework cannot run here although it is installed (no suitable device, a
        target it does not support), as a sentence starting with "unavailable:"; None if it can."""
        return None

    @classmethod
    def availability(cls) -> dict[str, Any]:
        """Installed?, version, devices it can use here: for ``tvmbench frameworks``.

        Only looks at package metadata (importing the frameworks would take seconds each);
        backends that can tell their devices cheaply override ``devices``.
        """
        from importlib import metadata

        missing = cls.missing_requirement()
        version = None
        if missing is None and cls.requires:
            try:
                version = metadata.version(cls.distribution or cls.requires[0])
            except metadata.PackageNotFoundError:
                version = "unknown"
        return {"framework": cls.name, "installed": missing is None, "version": version,
                "devices": cls.devices() if missing is None else [],
                "install": None if missing is None else f"pip install 'tvmbench[{cls.extra}]'" if cls.extra
                else f"pip install {missing}",
                "unavailable": cls.unavailable_reason()}

    @classmethod
    def lockstep_env(cls) -> dict[str, str]:
        """Environment for its worker when it measures in lockstep turns with other frameworks
        (``measure/lockstep.py``): what keeps its idle threads out of the others' turns."""
        return {}

    @classmethod
    def devices(cls) -> list[str]:
        return ["cpu"]

    @abstractmethod
    def prepare(self, model: LoadedModel) -> None:
        """Convert/compile the model and place inputs on the device."""

    @abstractmethod
    def run(self) -> None:
        """One synchronous inference on the prepared inputs."""

    @abstractmethod
    def run_with_io(self) -> None:
        """One inference that also copies the inputs from host memory to the device and the outputs
        back (``--include-io``), the same way for every framework."""

    @abstractmethod
    def outputs(self) -> list[np.ndarray]:
        """Outputs of the last ``run`` as numpy arrays, flattened in the model's output order."""

    def op_profile(self, runs: int, paced: Paced | None = None) -> list[OpTime]:
        """Per-operator times from the framework's own profiler over ``runs`` inferences (after
        ``prepare``), each made through ``paced`` when given (``lockstep.Pacer``: in this
        worker's turns); frameworks without one raise UserError."""
        raise UserError(f"{self.label} has no per-operator profile in tvmbench")

    def block_timer(self) -> Callable[[int], float] | None:
        """Seconds per call of ``k`` back-to-back inferences measured by the device itself, for
        backends whose calls cannot be timed with this process's clock (a remote device); None
        means the timer's host clock around synchronous ``run`` calls is right."""
        return None

    def close(self) -> None:  # noqa: B027 - optional hook, nothing to release by default
        """Release what the backend holds."""


def inputs_by_name(graph_names: list[str], inputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """The model's inputs for an exported graph's inputs, by name: the ONNX exporters drop an
    input the model never reads (an optional mask), so the graph may take fewer than the model
    has; a graph whose names are not the model's (a user's ONNX file) takes them in order."""
    if set(graph_names) <= set(inputs):
        return {n: inputs[n] for n in graph_names}
    if len(graph_names) == len(inputs):
        return dict(zip(graph_names, inputs.values(), strict=True))
    raise RuntimeError(f"the ONNX graph takes inputs {graph_names}, the model has {list(inputs)}")
