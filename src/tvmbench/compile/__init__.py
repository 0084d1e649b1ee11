"""Compile a model with TVM Relax, reusing a cached library when nothing that matters changed.

The cache key is the structural hash of the imported Relax module (weights detached, so it is a
function of the architecture and shapes only), the resolved target dict, the TVM version, the
pipeline version and the digest of the applied tuning database. A second run of the same model
skips compilation; any change to one of these compiles again.
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tvmbench.compile import pipeline
from tvmbench.compile.importer import ImportedModel, import_model
from tvmbench.errors import UserError
from tvmbench.paths import cache_dir
from tvmbench.targets import ResolvedTarget

__all__ = ["CompiledModel", "ImportedModel", "compile_model", "import_model", "load_database"]


@dataclass
class CompiledModel:
    library: Any  # tvm.runtime.Module loaded from the cached shared library
    cache_key: str
    cache_hit: bool
    path: Path
    compile_s: float  # 0 on a cache hit: the time to build, not to load
    load_s: float
    pipeline: list[str] = field(default_factory=list)
    database: dict[str, Any] = field(default_factory=dict)  # what of --db was applied


def load_database(db_dir: str | Path | None, target: ResolvedTarget) -> tuple[Any | None, str, dict[str, Any]]:
    """The MetaSchedule database to apply for ``target``: only its records for this target and
    TVM version (see tune/database.py). Returns (database or None, digest for the cache key, info)."""
    if db_dir is None:
        return None, "none", {}
    from tvmbench.tune.database import TuningDatabase

    db = TuningDatabase.open(db_dir)
    view, info = db.view_for(target)
    info["warnings"] = db.warnings
    if view is None:
        return None, "none", info
    from tvm.s_tir import meta_schedule as ms

    view_db = TuningDatabase(view)
    return ms.database.JSONDatabase(work_dir=str(view)), view_db.digest(), info


def cache_key(imported: ImportedModel, target: ResolvedTarget, db_digest: str, cuda_graph: bool) -> str:
    import tvm
    import tvm_ffi

    parts = {
        "mod": int(tvm_ffi.structural_hash(imported.mod)),
        "target": target.config,
        "tvm": tvm.__version__,
        "pipeline": pipeline.PIPELINE_VERSION,
        "db": db_digest,
        "cuda_graph": cuda_graph,
    }
    return hashlib.sha256(json.dumps(parts, sort_keys=True, default=str).encode()).hexdigest()[:24]


def compile_model(imported: ImportedModel, target: ResolvedTarget, db_dir: str | Path | None = None,
                  cuda_graph: bool = False, use_cache: bool = True) -> CompiledModel:
    import tvm

    if not target.is_native:
        raise UserError(
            f"target {target.source!r} builds code for {target.arch}, which cannot run on this machine; "
            "use a CPU target of this machine (--target llvm) or a machine with that device"
        )
    database, digest, db_info = load_database(db_dir, target)
    key = cache_key(imported, target, digest, cuda_graph)
    folder = cache_dir("compiled") / key
    lib_path = folder / "model.so"
    names = pipeline.describe(target, database, cuda_graph)
    hit = use_cache and lib_path.is_file()
    compile_s = 0.0
    if not hit:
        t0 = time.perf_counter()
        executable = pipeline.build(imported.mod, target, database, cuda_graph)
        compile_s = time.perf_counter() - t0
        folder.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(suffix=".so", dir=folder)
        os.close(fd)
        try:
            executable.export_library(tmp)
            os.replace(tmp, lib_path)  # atomic: a crash never leaves a half-written library
        finally:
            if os.path.exists(tmp):
                os.unlink(tmp)
        (folder / "meta.json").write_text(json.dumps(
            {"target": target.config, "tvm": tvm.__version__, "pipeline": names, "compile_s": compile_s,
             "database": db_info}, indent=2, default=str))
    t0 = time.perf_counter()
    library = tvm.runtime.load_module(str(lib_path))
    load_s = time.perf_counter() - t0
    return CompiledModel(library=library, cache_key=key, cache_hit=hit, path=lib_path, compile_s=compile_s,
                         load_s=load_s, pipeline=names, database=db_info)
