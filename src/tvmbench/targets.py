"""Resolve the user's ``--target`` into a TVM 0.27 target dict.

TVM 0.27 rejects the option strings found in most users' scripts (``"llvm -mcpu=skylake-avx512"``)
and silently compiles a bare ``{"kind": "cuda"}`` for sm_50, which is the classic reason for "TVM
is slow on my GPU". This module accepts every form users have (``auto``, ``llvm``, ``cuda``, JSON
dicts, tags, legacy strings), converts it to a dict TVM accepts, fills in what can be detected on
this machine (CPU name and physical cores; the GPU's arch and limits) and refuses a CUDA target it
cannot give an arch to. The resolved dict is what every result records.
"""

from __future__ import annotations

import functools
import json
import os
import platform
import shlex
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tvmbench.errors import UserError

# Short names users type, mapped to TVM target kinds.
_KIND_ALIASES = {"llvm": "llvm", "cpu": "llvm", "x86": "llvm", "cuda": "cuda", "nvidia": "cuda", "gpu": "cuda"}

# LLVM CPU names that only exist on aarch64: a legacy string naming one without -mtriple means a
# cross target (on an x86 host, LLVM would otherwise ignore the CPU and emit x86 code).
_AARCH64_CPU_PREFIXES = ("a64fx", "neoverse", "cortex-a", "cortex-x", "apple-", "thunderx", "ampere", "carmel",
                         "tsv110", "kryo", "exynos", "falkor", "saphira", "generic-arm")


@dataclass(frozen=True)
class GpuInfo:
    """What the target needs to know about one NVIDIA GPU."""

    name: str
    compute_capability: str  # "8.0"
    max_threads_per_block: int = 1024
    max_shared_memory_per_block: int = 49152
    warp_size: int = 32
    registers_per_block: int = 65536
    total_memory_bytes: int | None = None

    @property
    def arch(self) -> str:
        return "sm_" + self.compute_capability.replace(".", "")


def query_gpu() -> GpuInfo | None:
    """Device 0 as TVM's CUDA runtime sees it, or None without a usable NVIDIA GPU. On Linux a
    machine without NVIDIA's device nodes (``/dev/nvidia*``; WSL's ``/dev/dxg``) has none, and
    TVM is not asked: importing it imports torch, seconds of every ``--target auto`` run's start."""
    if platform.system() == "Linux" and not (any(Path("/dev").glob("nvidia*")) or Path("/dev/dxg").exists()):
        return None
    try:
        import tvm

        dev = tvm.cuda(0)
        if not dev.exist:
            return None
        return GpuInfo(
            name=str(dev.device_name),
            compute_capability=str(dev.compute_version),
            max_threads_per_block=int(dev.max_threads_per_block),
            max_shared_memory_per_block=int(dev.max_shared_memory_per_block),
            warp_size=int(dev.warp_size),
        )
    except Exception:  # no driver, no runtime: there is no GPU to use
        return None


def host_cpu() -> str:
    """The LLVM name of this machine's CPU (e.g. ``znver4``), as ``-mcpu=native`` would pick."""
    return _tvm_fact("llvm-system-cpu", lambda: str(_codegen().llvm_get_system_cpu()), this_machine=True)


def _codegen() -> Any:
    from tvm.target import codegen

    return codegen


# The L2 size assumed when the code is not for this machine (a cross or named target): one core's
# L2 on current server parts (Zen 4/5 1 MB; Intel's 1.25-2 MB).
DEFAULT_L2_BYTES = 1 << 20


def host_l2_bytes() -> int | None:
    """One core's L2 cache (data or unified) on this machine, from sysfs; None where unknown."""
    return _sysfs_l2_bytes()


@functools.cache
def _sysfs_l2_bytes() -> int | None:
    root = Path("/sys/devices/system/cpu/cpu0/cache")
    for index in sorted(root.glob("index*")) if root.is_dir() else []:
        try:
            level, kind = (index / "level").read_text().strip(), (index / "type").read_text().strip()
            size = (index / "size").read_text().strip().upper()
        except OSError:
            continue
        if level == "2" and kind in ("Unified", "Data"):
            scale = {"K": 1 << 10, "M": 1 << 20}.get(size[-1:], 1)
            digits = size.rstrip("KM")
            if digits.isdigit():
                return int(digits) * scale
    return None


@functools.cache
def _process_host_cpu() -> str:
    """``host_cpu`` kept for the process: reading the facts file takes a millisecond, and the
    schedule rules ask for every kernel (``cpu_l2_bytes``)."""
    return host_cpu()


def _l2_bytes(kind: str, arch: str, mcpu: Any) -> int:
    mine = kind == "llvm" and _same_arch(arch, platform.machine()) and (not mcpu or str(mcpu) == _process_host_cpu())
    return (host_l2_bytes() if mine else None) or DEFAULT_L2_BYTES


def cpu_l2_bytes(target: Any) -> int:
    """``ResolvedTarget.l2_bytes`` of a ``tvm.target.Target`` (what a schedule rule is given):
    this machine's L2 when the target is this machine's CPU, else DEFAULT_L2_BYTES."""
    attrs = target.attrs
    triple = str(attrs["mtriple"]) if "mtriple" in attrs else ""
    mcpu = str(attrs["mcpu"]) if "mcpu" in attrs else None
    return _l2_bytes(target.kind.name, (triple or platform.machine()).split("-")[0], mcpu)


AMD_CPUS = ("znver", "bdver", "btver", "amdfam")  # LLVM's names of AMD's x86 CPUs begin so


def near_l3(target: Any) -> bool:
    """Whether a ``tvm.target.Target``'s cores have their L3 near (AMD's Zen: the CCX's own L3,
    which streams to a core at a good part of L2's speed), as opposed to Intel's server cores,
    which reach L3 over a mesh (the 2-vCPU Xeon VM's roofline: L3 36 GB/s, the memory's speed,
    against L2's 172). Judged by the CPU LLVM is given (``znver*``: near); a target naming no
    CPU is taken as near, the rules' measured default."""
    attrs = target.attrs
    mcpu = str(attrs["mcpu"]) if "mcpu" in attrs else ""
    return not mcpu or mcpu.startswith(AMD_CPUS)


def physical_cores() -> int:
    """Physical cores available to this process (not SMT threads): the default thread count."""
    import psutil

    logical_available = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    physical = psutil.cpu_count(logical=False) or logical_available
    return max(1, min(physical, logical_available))


@dataclass(frozen=True)
class ResolvedTarget:
    """A target TVM 0.27 accepts, plus where it came from and how it can be used here."""

    config: dict[str, Any]
    source: str
    notes: tuple[str, ...] = field(default=())
    # Convolution activation layout the pipeline converts to: None = the target's default (NHWC
    # on CPU, which the CPU rules need; the model's own, NCHW, on CUDA); "NHWC" on CUDA is the
    # layout fp16 tensor-core convolutions want. Not a TVM target option, hence kept apart.
    conv_layout: str | None = None

    @property
    def layouts(self) -> dict[str, list[str]] | None:
        """ConvertLayout's desired layouts for convolutions, or None to keep the model's.

        Transposed convolutions stay NCHW: TVM 0.27 legalizes no other layout, and ConvertLayout
        handed an NHWC input on to one after an NHWC convolution, which then reached the VM
        unlowered ("CodeGenVM cannot emit this Relax operator": a U-Net did not compile)."""
        transposed = {"relax.nn.conv2d_transpose": ["NCHW", "IOHW"]}
        if self.kind == "llvm":  # (3-d convolutions become 2-d ones: ``passes/conv3d.py``)
            return {"relax.nn.conv2d": ["NHWC", "HWIO"], "relax.nn.conv3d": ["NDHWC", "DHWIO"], **transposed}
        if self.conv_layout == "NHWC":
            return {"relax.nn.conv2d": ["NHWC", "OHWI"], **transposed}
        return None

    @property
    def kind(self) -> str:
        return str(self.config["kind"])

    @property
    def device(self) -> str:
        """``cpu`` or ``cuda``: where tensors for this target live."""
        return "cuda" if self.kind == "cuda" else "cpu"

    @property
    def arch(self) -> str:
        """The machine architecture the code is for (``x86_64``, ``aarch64``, ``sm_80``)."""
        if self.kind == "cuda":
            return str(self.config.get("arch", ""))
        triple = str(self.config.get("mtriple", "")) or platform.machine()
        return triple.split("-")[0]

    @property
    def is_native(self) -> bool:
        """Whether code for this target can run in this process (CPU of this machine's arch)."""
        if self.kind != "llvm":
            return False
        return _same_arch(self.arch, platform.machine())

    @property
    def l2_bytes(self) -> int:
        """One core's L2 cache of the CPU the code is for: this machine's (read from sysfs) when the
        target is this machine's CPU, else DEFAULT_L2_BYTES (a named CPU may be another machine's).
        Rules that keep a tile in L2 size it by this."""
        return _l2_bytes(self.kind, self.arch, self.config.get("mcpu"))

    @property
    def runs_here(self) -> bool:
        """Whether a model built for this target can run on this machine: a CPU of its arch, or
        CUDA with an NVIDIA GPU present."""
        if self.kind == "cuda":
            return query_gpu() is not None
        return self.is_native

    def tvm(self) -> Any:
        """The ``tvm.target.Target`` object."""
        import tvm

        return tvm.target.Target(self.config)

    def to_json(self) -> dict[str, Any]:
        return {"config": self.config, "source": self.source, "notes": list(self.notes),
                "conv_layout": self.conv_layout}


def has_feature(target: Any, feature: str) -> bool:
    """Whether a ``tvm.target.Target`` (llvm) has an ISA feature such as ``avx512f``, as LLVM
    derives it from the target's CPU and attributes."""
    from tvm.target.codegen import target_has_features

    try:
        return bool(target_has_features(feature, target))
    except Exception:
        return False


def has_bf16_dot(target: Any) -> bool:
    """Whether a ``tvm.target.Target`` is a CPU with AVX-512 BF16's dot product (``vdpbf16ps``:
    Zen 4 and 5, Cooper Lake, Sapphire Rapids and later), which ``--precision bf16`` needs."""
    return target.kind.name == "llvm" and has_feature(target, "avx512bf16")


# The ISA levels a CPU schedule depends on, widest first: vector width and register count decide
# the register tiles (compile/tiles.py), so schedules transfer within a level and not across.
_ISA_LEVELS = {"x86_64": ("avx512f", "avx2", "avx", "sse2"), "aarch64": ("sve", "neon")}


def isa_class(target: Any) -> str | None:
    """The ISA class of a ``tvm.target.Target`` for reusing CPU schedules: arch and widest vector
    ISA, e.g. ``x86_64-avx512f`` for znver4 and Sapphire Rapids, ``x86_64-avx2`` for haswell to
    znver3. None for a GPU target."""
    if str(target.kind.name) != "llvm":
        return None
    triple = str(target.attrs.get("mtriple", "") or "") or platform.machine()
    arch = _ARCH_ALIASES.get(triple.split("-")[0], triple.split("-")[0])
    for feature in _ISA_LEVELS.get(arch, ()):
        if has_feature(target, feature):
            return f"{arch}-{feature}"
    return arch


_ARCH_ALIASES = {"amd64": "x86_64", "x86-64": "x86_64", "arm64": "aarch64"}


def _same_arch(a: str, b: str) -> bool:
    return _ARCH_ALIASES.get(a, a) == _ARCH_ALIASES.get(b, b)


def _tvm_fact(key: str, ask: Callable[[], Any], this_machine: bool = False) -> Any:
    """What TVM answers for ``key`` (``ask()``), kept in the cache folder per TVM version (and per
    machine where the answer is this machine's): asking TVM means importing it, and TVM imports
    torch, 4-8 s of the start of every ``tvmbench run`` on these hosts, in a process that measures
    nothing. A lost race, a damaged file or a cache folder that cannot be written only means
    asking again."""
    import hashlib

    from tvmbench.files import write_json_atomic
    from tvmbench.paths import cache_dir
    from tvmbench.version import tvm_version

    if this_machine:
        key += "@" + hashlib.sha256(repr((platform.node(), platform.machine(), _cpuinfo())).encode()).hexdigest()[:16]
    try:
        path: Path | None = cache_dir("tvm-facts") / f"{tvm_version()}.json"
    except OSError:
        path = None  # (a cache folder that cannot be made)
    try:
        facts = json.loads(path.read_text()) if path is not None else {}
    except (OSError, ValueError):
        facts = {}
    if not isinstance(facts, dict):
        facts = {}
    if key not in facts:
        facts[key] = ask()
        try:
            if path is not None:
                write_json_atomic(path, facts)
        except OSError:
            pass  # (asked again next time)
    return facts[key]


# /proc/cpuinfo flags -> LLVM features that tvmbench's code generation uses, for CPUs whose name
# LLVM's host detection gets from a model number a hypervisor made up: a 2-vCPU Xeon VM with
# AVX-512 BF16 reports Rocket Lake's model (167), LLVM names it ``rocketlake``, which has none,
# and ``--precision bf16`` was refused there.
HOST_FEATURES = {"avx512_bf16": "avx512bf16", "amx_bf16": "amx-bf16", "amx_tile": "amx-tile"}


def host_features_beyond(mcpu: str) -> list[str]:
    """LLVM features (of HOST_FEATURES) this machine's CPU has that the CPU named ``mcpu`` lacks."""
    flags = set(next((line.split(":", 1)[1].split() for line in _cpuinfo().splitlines() if line.startswith("flags")), []))
    wanted = sorted(llvm for flag, llvm in HOST_FEATURES.items() if flag in flags)
    if not wanted:
        return []

    def ask() -> list[str]:
        from tvm.target import Target

        return sorted(str(f) for f in _codegen().llvm_get_cpu_features(Target({"kind": "llvm", "mcpu": mcpu})))

    named = _tvm_fact(f"llvm-cpu-features/{mcpu}", ask)
    return [f for f in wanted if f not in named]


def _cpuinfo() -> str:
    """The first processor's model name and flags (what LLVM reads to name the host CPU)."""
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        return platform.processor()
    return "\n".join(line for line in text.split("\n\n")[0].splitlines()
                     if line.startswith(("model name", "flags", "Features", "CPU part", "cpu family", "model\t")))


def _kind_options(kind: str) -> dict[str, str]:
    """The options TVM's target ``kind`` takes (name -> type)."""

    def ask() -> dict[str, str]:
        import tvm

        return {str(k): str(v) for k, v in tvm.target._ffi_api.ListTargetKindOptionsFromName(kind).items()}

    return _tvm_fact(f"kind-options/{kind}", ask)


def _convert_value(key: str, value: str | None, type_name: str) -> Any:
    if type_name == "bool":
        if value is None:
            return True
        return value.lower() in ("1", "true", "yes", "on")
    if value is None:
        raise UserError(f"target option '-{key}' needs a value, e.g. -{key}=VALUE")
    if type_name == "int":
        try:
            return int(value)
        except ValueError:
            raise UserError(f"target option '-{key}' takes an integer, got '{value}'") from None
    if type_name.startswith("Array"):
        return [v for v in value.split(",") if v]
    return value


def parse_legacy_string(spec: str) -> dict[str, Any]:
    """Convert a pre-0.20 target string (``"llvm -mcpu=skylake-avx512 -num-cores 4"``) to a dict.

    Options may be written ``-k=v``, ``-k v``, ``--k=v``, with ``-`` or ``_`` in the name; the name
    is matched against the options TVM 0.27 lists for the kind, so a typo is reported, not ignored.
    """
    try:
        tokens = shlex.split(spec)
    except ValueError as e:
        raise UserError(f"cannot parse target string {spec!r}: {e}") from None
    if not tokens:
        raise UserError("empty --target; use auto, llvm, cuda, a JSON dict or a string like 'llvm -mcpu=znver4'")
    kind = _KIND_ALIASES.get(tokens[0].lower())
    if kind is None:
        raise UserError(
            f"unknown target kind '{tokens[0]}' in {spec!r}; supported kinds are llvm (CPU) and cuda (NVIDIA GPU)"
        )
    options = _kind_options(kind)
    by_norm = {k.replace("_", "-"): k for k in options}
    config: dict[str, Any] = {"kind": kind}
    i = 1
    while i < len(tokens):
        tok = tokens[i]
        if not tok.startswith("-"):
            raise UserError(f"unexpected '{tok}' in target {spec!r}; options look like -key=value")
        name, eq, value = tok.lstrip("-").partition("=")
        key = by_norm.get(name.replace("_", "-"))
        if key is None:
            raise UserError(
                f"unknown option '-{name}' for target kind '{kind}' in {spec!r}; known options: "
                + ", ".join(sorted(k for k in options if k not in ("kind", "host", "tag")))
            )
        if not eq:
            nxt = tokens[i + 1] if i + 1 < len(tokens) else None
            if options[key] != "bool" and nxt is not None and not nxt.startswith("-"):
                value, i = nxt, i + 1
            else:
                value = None
        config[key] = _convert_value(key, value, options[key])
        i += 1
    return config


def _fill_cpu(config: dict[str, Any], notes: list[str]) -> None:
    mcpu = str(config.get("mcpu", ""))
    detected = mcpu == "native"  # (this machine's CPU, named by LLVM from its model number)
    if detected:
        config["mcpu"] = host_cpu()
        notes.append(f"mcpu=native resolved to {config['mcpu']}")
    if "mtriple" not in config and mcpu.lower().startswith(_AARCH64_CPU_PREFIXES):
        config["mtriple"] = "aarch64-linux-gnu"
        notes.append(f"mcpu={mcpu} is an aarch64 CPU: added mtriple=aarch64-linux-gnu (cross target)")
    native = "mtriple" not in config or _same_arch(str(config["mtriple"]).split("-")[0], platform.machine())
    if native and "mcpu" not in config:
        config["mcpu"] = host_cpu()
        notes.append(f"mcpu detected from this machine: {config['mcpu']}")
        detected = True
    if detected and "mattr" not in config and (extra := host_features_beyond(str(config["mcpu"]))):
        config["mattr"] = [f"+{f}" for f in extra]
        notes.append(f"features of this CPU its name ({config['mcpu']}) lacks, added: {', '.join(extra)}")
    if native and "num-cores" not in config:
        config["num-cores"] = physical_cores()
    if "mcpu" in config:
        triple = str(config.get("mtriple") or _tvm_fact("llvm-system-triple", lambda: str(
            _codegen().llvm_get_system_triple()), this_machine=True))
        mcpu = str(config["mcpu"])
        if not _tvm_fact(f"llvm-valid-cpu/{triple}/{mcpu}", lambda: bool(_codegen().llvm_is_valid_cpu(mcpu, triple))):
            raise UserError(
                f"LLVM does not know the CPU '{config['mcpu']}' for {triple}; use an LLVM CPU name such as "
                f"{host_cpu()} (this machine), skylake-avx512, znver3, neoverse-v1"
            )


def _fill_cuda(config: dict[str, Any], notes: list[str], gpu: GpuInfo | None, source: str) -> None:
    if gpu is not None:
        if "arch" not in config:
            config["arch"] = gpu.arch
            notes.append(f"arch {gpu.arch} from GPU 0 ({gpu.name})")
        elif config["arch"] != gpu.arch:
            notes.append(f"arch {config['arch']} differs from GPU 0 ({gpu.name}, {gpu.arch})")
        config.setdefault("max_threads_per_block", gpu.max_threads_per_block)
        config.setdefault("max_shared_memory_per_block", gpu.max_shared_memory_per_block)
        config.setdefault("thread_warp_size", gpu.warp_size)
        config.setdefault("registers_per_block", gpu.registers_per_block)
    elif "arch" not in config:
        raise UserError(
            f"CUDA target {source!r} has no GPU architecture and no NVIDIA GPU was found to detect it "
            "(TVM would silently use sm_50); give one, e.g. --target 'cuda -arch=sm_80' or "
            '\'{"kind": "cuda", "arch": "sm_80"}\''
        )


def resolve_target(spec: str | dict[str, Any] | None = "auto", gpu_query: Callable[[], GpuInfo | None] = query_gpu
                   ) -> ResolvedTarget:
    """Turn any accepted ``--target`` form into a :class:`ResolvedTarget`.

    ``gpu_query`` is injectable so the arch logic can be tested without a GPU.
    """
    source = json.dumps(spec, sort_keys=True) if isinstance(spec, dict) else ("auto" if spec is None else spec).strip()
    notes: list[str] = []
    gpu: GpuInfo | None = None
    gpu_known = False

    def get_gpu() -> GpuInfo | None:
        nonlocal gpu, gpu_known
        if not gpu_known:
            gpu, gpu_known = gpu_query(), True
        return gpu

    if isinstance(spec, dict):
        config = dict(spec)
    elif source.startswith("{"):
        try:
            config = json.loads(source)
        except json.JSONDecodeError as e:
            raise UserError(f"--target looks like JSON but does not parse: {e.msg} at column {e.colno}") from None
        if not isinstance(config, dict):
            raise UserError("--target JSON must be an object like {\"kind\": \"llvm\", \"mcpu\": \"znver4\"}")
    elif source.lower() == "auto":
        config = {"kind": "cuda" if get_gpu() is not None else "llvm"}
        notes.append("auto: " + ("NVIDIA GPU found" if config["kind"] == "cuda" else "no NVIDIA GPU, using the CPU"))
    elif "/" in source and " " not in source:
        config = _from_tag(source)
    else:
        config = parse_legacy_string(source)

    kind = _KIND_ALIASES.get(str(config.get("kind", "")).lower())
    if kind is None:
        raise UserError(f"target {source!r} has kind {config.get('kind')!r}; supported kinds are llvm and cuda")
    config["kind"] = kind
    unknown = set(config) - set(_kind_options(kind))
    if unknown:
        raise UserError(f"unknown option(s) {sorted(unknown)} for target kind '{kind}' in {source!r}")
    if kind == "llvm":
        _fill_cpu(config, notes)
    else:
        _fill_cuda(config, notes, get_gpu(), source)
        config.setdefault("host", {"kind": "llvm", "mcpu": host_cpu(), "num-cores": physical_cores()})
    resolved = ResolvedTarget(config=config, source=source, notes=tuple(notes))

    def accepted() -> bool:
        try:
            resolved.tvm()
        except Exception as e:  # TVM's own validation (bad value types, unknown CPU, ...)
            raise UserError(f"TVM rejects target {source!r}: {str(e).strip().splitlines()[-1]}") from None
        return True

    _tvm_fact("accepts/" + json.dumps(config, sort_keys=True), accepted)  # (a rejection is not kept)
    return resolved


def _from_tag(tag: str) -> dict[str, Any]:
    import tvm

    try:
        target = tvm.target.Target(tag)
    except Exception:
        raise UserError(f"unknown target tag {tag!r}; see tvm.target.tag.list_tags() for the known tags") from None
    config = {k: _plain(v) for k, v in dict(target.export()).items() if k not in ("tag", "keys", "host")}
    return config


def _plain(value: Any) -> Any:
    if isinstance(value, str | int | float | bool):
        return value
    try:
        return [str(v) for v in value]
    except TypeError:
        return str(value)
