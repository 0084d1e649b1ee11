"""Compile a model with TVM Relax, reusing a cached library when nothing that matters changed.

The cache key is the structural hash of the imported Relax module (weights detached, so it is a
function of the architecture and shapes only), the resolved target dict, the TVM version, the
tvmbench version, a digest of the compile package's own sources (an edited pass or rule compiles
again without anyone bumping a version), the pipeline version and the digest of the applied tuning
database. A second run of the same model skips compilation; any change to one of these compiles
again. A damaged cache entry (a truncated ``meta.json``, say) is rebuilt with a warning.
"""

from __future__ import annotations

import functools
import hashlib
import json
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tvmbench.compile.importer import ImportedModel, import_model
from tvmbench.compile.schedules import TunedSchedules
from tvmbench.errors import UserError
from tvmbench.files import replacing, write_text_atomic
from tvmbench.paths import cache_dir
from tvmbench.targets import ResolvedTarget

__all__ = ["CompiledModel", "ImportedModel", "TunedSchedules", "compile_model", "import_model"]


@dataclass
class CompiledModel:
    library: Any  # tvm.runtime.Module loaded from the cached shared library (None if remote)
    cache_key: str
    cache_hit: bool
    path: Path
    compile_s: float  # 0 on a cache hit: the time to build, not to load
    load_s: float
    pipeline: list[str] = field(default_factory=list)
    database: dict[str, Any] = field(default_factory=dict)  # what of --db was applied
    warnings: list[str] = field(default_factory=list)


@functools.cache
def sources_digest() -> str:
    """SHA-256 of the compile package's Python sources (paths and contents): what tvmbench's own
    code does to a model, for the cache key."""
    root = Path(__file__).parent
    h = hashlib.sha256()
    for path in sorted(root.rglob("*.py")):
        h.update(str(path.relative_to(root)).encode() + b"\0" + path.read_bytes() + b"\0")
    return h.hexdigest()[:16]


def cache_key(imported: ImportedModel, target: ResolvedTarget, db_digest: str, cuda_graph: bool) -> str:
    import tvm
    import tvm_ffi

    from tvmbench.compile import tir
    from tvmbench.compile.pipeline import PIPELINE_VERSION
    from tvmbench.version import __version__

    parts = {
        "mod": int(tvm_ffi.structural_hash(imported.mod)),
        "target": target.config,
        "layouts": target.layouts,
        "l2": target.l2_bytes,  # rules size tiles and joins by it (this machine's, for a native target)
        "fuse_expansion": tir.FUSE_EXPANSION_BYTES,  # its override (benchmarks/rule_ab.py)
        "tvm": tvm.__version__,
        "tvmbench": __version__,
        "sources": sources_digest(),
        "pipeline": PIPELINE_VERSION,
        "db": db_digest,
        "cuda_graph": cuda_graph,
    }
    return hashlib.sha256(json.dumps(parts, sort_keys=True, default=str).encode()).hexdigest()[:24]


class _BuildChecks:
    """``pipeline.build``'s hooks that catch a kernel scheduled many times slower than it should
    be, as warnings kept in the cached build's meta.json: a matmul or convolution left without
    vectors (``vector_check.py``, CPU targets) and, for ``--precision bf16``, a kernel whose
    products read bf16 left without the dot product (``bf16.without_dot``). Each asks which
    kernels to watch before scheduling and checks them after."""

    def __init__(self, mod: Any, then: Callable[[Any], None], target: ResolvedTarget) -> None:
        from tvmbench.compile.bf16 import slower_than_fp32
        from tvmbench.compile.passes.bf16_dense import marked

        self.bf16, self.then = marked(mod), then  # (then: the legalized module's other hook)
        self.cpu = target.kind == "llvm"
        self.kernels: list[str] = []
        self.contractions: dict[str, float] = {}
        slow = slower_than_fp32(target.tvm()) if self.bf16 else None
        self.warnings: list[str] = [slow] if slow else []

    def legalized(self, mod: Any) -> None:
        from tvmbench.compile import pipeline, vector_check
        from tvmbench.compile.bf16 import bf16_kernels

        if self.bf16 or self.cpu:
            kernels = pipeline.per_inference(mod)
            self.kernels = bf16_kernels(kernels) if self.bf16 else []
            self.contractions = vector_check.contraction_flops(kernels) if self.cpu else {}
        self.then(mod)

    def scheduled(self, mod: Any) -> None:
        from tvmbench.compile import vector_check
        from tvmbench.compile.bf16 import without_dot

        slow = without_dot(self.kernels, mod)
        if slow:
            self.warnings.append(
                f"{len(slow)} kernel(s) read bf16 without the bf16 dot product and run many times slower than "
                f"they should ({', '.join(slow[:3])}{', ...' if len(slow) > 3 else ''}): please report the model; "
                "--precision fp32 avoids it")
        scalar = [n for n in vector_check.scalar_contractions(self.contractions, mod) if n not in slow]
        if scalar:
            self.warnings.append(vector_check.warning(scalar, self.contractions))


def _cached_meta(folder: Path, warnings: list[str]) -> dict[str, Any] | None:
    """The metadata of the cached build in ``folder``, or None when there is none (or it is
    damaged: said in ``warnings``, and the model is compiled again)."""
    if not (folder / "model.so").is_file() or not (folder / "meta.json").is_file():
        return None
    try:
        meta = json.loads((folder / "meta.json").read_text())
        damage = None if isinstance(meta, dict) else "not an object"
    except (ValueError, OSError) as e:  # truncated, not UTF-8
        damage = type(e).__name__
    if damage is not None:
        warnings.append(f"the cached build {folder} was damaged ({damage}); compiled again")
        return None
    return meta


def compile_model(imported: ImportedModel, target: ResolvedTarget, schedules: TunedSchedules | None = None,
                  cuda_graph: bool = False, use_cache: bool = True, remote: bool = False,
                  log: Callable[[str], None] | None = None) -> CompiledModel:
    """Compile (or load from the cache) with the tuned schedules where they have them and
    tvmbench's default schedules elsewhere. ``remote``: the library is for a device behind an RPC
    tracker; it is cross-compiled where needed and not loaded here. ``log`` hears each stage
    (``--verbose``)."""
    import tvm

    from tvmbench.compile import pipeline
    from tvmbench.compile.artifact import export_library

    if not target.runs_here and not remote:
        raise UserError(
            f"target {target.source!r} builds code for {target.arch}, which cannot run on this machine; "
            "use a CPU target of this machine (--target llvm), run it on such a device through a TVM RPC "
            "tracker (--rpc HOST:PORT --rpc-key KEY; for aarch64 an emulated one: tvmbench rpc emulate), or "
            "build it here without running it with --compile-only"
        )
    say = log or (lambda message: None)
    schedules = schedules or TunedSchedules()
    dbs, infos = schedules.databases, schedules.infos
    database = schedules.union()
    key = cache_key(imported, target, schedules.digest, cuda_graph)
    folder = cache_dir("compiled") / key
    lib_path = folder / "model.so"
    names = pipeline.describe(target, database, cuda_graph)
    compile_s = 0.0
    db_info: dict[str, Any] = {"sources": infos} if infos else {}
    warnings: list[str] = [w for info in infos for w in info.get("warnings") or []]  # e.g. stale verdicts
    meta = _cached_meta(folder, warnings) if use_cache else None
    hit = meta is not None
    if meta is not None:
        db_info = meta.get("database", db_info)
        warnings += [str(w) for w in meta.get("warnings") or []]  # (the build's own, below)

    def count_tuned(legal: Any) -> None:
        """Per source and together: how many of the model's kernels have a tuning record."""
        if not dbs:
            return
        total, per, together = pipeline.coverage(legal, dbs)
        say(f"tuning records for {together} of the {total} kernels")
        applied = iter(per)
        for info in infos:
            info["tasks_covered"] = next(applied) if info.get("applied_records") else 0
        db_info.update({"tasks": total, "tasks_with_records": together})

    check = _BuildChecks(imported.mod, count_tuned, target)
    if not hit:
        t0 = time.perf_counter()
        built = pipeline.build(imported.mod, target, database, cuda_graph, on_legalized=check.legalized,
                               on_stage=say, on_scheduled=check.scheduled)
        warnings += check.warnings
        with replacing(lib_path, suffix=".so") as tmp:  # a crash never leaves a half-written library
            export_library(built, tmp, target)
        compile_s = time.perf_counter() - t0  # LLVM writes most of the machine code on export
        write_text_atomic(folder / "meta.json", json.dumps(
            {"target": target.config, "tvm": tvm.__version__, "pipeline": names, "compile_s": compile_s,
             "database": db_info, "warnings": check.warnings}, indent=2, default=str))
        say(f"compiled in {compile_s:.1f} s into {lib_path}")
    else:
        say(f"compiled library taken from the cache: {lib_path}")
    for warning in warnings:
        say(f"warning: {warning}")
    t0 = time.perf_counter()
    library = None if remote else tvm.runtime.load_module(str(lib_path))
    load_s = time.perf_counter() - t0
    return CompiledModel(library=library, cache_key=key, cache_hit=hit, path=lib_path, compile_s=compile_s,
                         load_s=load_s, pipeline=names, database=db_info, warnings=warnings)
