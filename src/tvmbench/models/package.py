"""A compiled package (``tvmbench export``) as a model: compile once, run anywhere.

A package folder holds what running it needs and what trusting it needs:

- ``model.so`` (the Relax VM library) and ``params.npz`` (the weights, in the order ``main``
  takes them after the inputs);
- ``inputs.npz``: the seeded inputs the export used, and ``reference.npz``: the model's outputs
  for them from its source framework (PyTorch), when it had one;
- ``package.json``: the format version, the model's name and input specs, the target and the
  machine class it was built for, the TVM and tvmbench versions, the tuning databases applied,
  and a SHA-256 digest of the library and of the weights.

Loading a package imports neither torch nor the model's source. :func:`verify` refuses, each in
one line, a package whose files do not match their digests (truncated, swapped), one built by
another TVM minor version, and one built for a machine class that cannot run here (unless it is
sent to a device over RPC).
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

import numpy as np

from tvmbench.errors import UserError
from tvmbench.models.base import LoadedModel, ModelOptions

FORMAT = 1
SPEC = "package.json"
LIBRARY = "model.so"
PARAMS = "params.npz"
INPUTS = "inputs.npz"
REFERENCE = "reference.npz"


def digest(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def read_spec(folder: Path) -> dict[str, Any]:
    try:
        spec = json.loads((folder / SPEC).read_text())
    except (OSError, ValueError) as e:
        raise UserError(f"{folder / SPEC} is not readable ({type(e).__name__}); export the package again") from None
    if not isinstance(spec, dict) or spec.get("format") != FORMAT:
        raise UserError(f"{folder} is a package of format {spec.get('format') if isinstance(spec, dict) else '?'}, "
                        f"this tvmbench reads format {FORMAT}: export it again with this tvmbench")
    return spec


def verify(folder: Path, spec: dict[str, Any], remote: bool = False) -> None:
    """Refuse, in one line, a package this machine must not load."""
    import tvm

    from tvmbench.targets import isa_class, resolve_target

    for name in (LIBRARY, PARAMS):
        path = folder / name
        if not path.is_file():
            raise UserError(f"package {folder}: {name} is missing; export the package again")
        if digest(path) != spec["digests"][name]:
            raise UserError(f"package {folder}: {name} does not match its digest (truncated or replaced); "
                            "export the package again")
    made, here = spec.get("tvm_version", "?"), tvm.__version__
    if made.split(".")[:2] != here.split(".")[:2]:
        raise UserError(f"package {folder} was built with TVM {made}, this is TVM {here}: a library does not "
                        "load across TVM minor versions; export it again here")
    if remote:
        return
    target = resolve_target(spec["target"], gpu_query=lambda: None)
    if target.kind == "cuda":
        from tvmbench.targets import query_gpu

        if query_gpu() is None:
            raise UserError(f"package {folder} is for a CUDA GPU and this machine has none; run it on the GPU "
                            "machine or through --rpc HOST:PORT --rpc-key KEY")
    elif not target.runs_here:
        emulated = " (or, for aarch64, on an emulated one: tvmbench rpc emulate)" if target.arch == "aarch64" else ""
        raise UserError(f"package {folder} was built for {target.arch}, which cannot run on this machine; run it "
                        f"on such a device with --rpc HOST:PORT --rpc-key KEY{emulated}")
    elif spec.get("isa_class") and spec["isa_class"] != isa_class(resolve_target("llvm").tvm()):
        raise UserError(f"package {folder} was built for {spec['isa_class']} CPUs and this one is "
                        f"{isa_class(resolve_target('llvm').tvm())}: export it again for this machine")
    elif spec.get("precision") == "bf16":
        from tvmbench import targets

        if not targets.has_bf16_dot(resolve_target("llvm").tvm()):  # (its kernels would stop on an illegal instruction)
            raise UserError(f"package {folder} was built with --precision bf16 and this CPU has no AVX-512 BF16: "
                            "export it again at --precision fp32")


def load_package(folder: Path, options: ModelOptions) -> LoadedModel:
    """The package's model: its input specs and its seeded inputs (the caller applies
    ``--inputs`` / ``--fill-mode``); no torch, no model source."""
    spec = read_spec(folder)
    try:
        inputs = dict(np.load(folder / INPUTS, allow_pickle=False))
    except (OSError, ValueError) as e:
        raise UserError(f"package {folder}: {INPUTS} is not readable ({e}); export the package again") from None
    ordered = {s["name"]: inputs[s["name"]] for s in spec["inputs"]}
    return LoadedModel(name=spec["model"], family="package", inputs=ordered, module=None, options=options,
                       param_count=spec.get("param_count"), param_bytes=spec.get("param_bytes"),
                       details={"package": str(folder), "target": spec["target"]})


def reference_outputs(folder: Path) -> list[np.ndarray] | None:
    """The model's outputs for the package's own inputs, when the export had a reference."""
    path = folder / REFERENCE
    if not path.is_file():
        return None
    with np.load(path, allow_pickle=False) as ref:
        return [ref[f"arr_{i}"] for i in range(len(ref.files))]
