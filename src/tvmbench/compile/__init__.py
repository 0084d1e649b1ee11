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


def database_digest(db_dir: Path | None) -> str:
    if db_dir is None:
        return "none"
    h = hashlib.sha256()
    for name in sorted(p.name for p in db_dir.glob("database_*.json")):
        h.update(name.encode())
        h.update((db_dir / name).read_bytes())
    return h.hexdigest()[:16]


def load_database(db_dir: str | Path | None) -> tuple[Any | None, Path | None]:
    """A MetaSchedule JSON database from a directory given with ``--db`` (must exist)."""
    if db_dir is None:
        return None, None
    path = Path(db_dir).expanduser()
    if not (path / "database_workload.json").is_file():
        raise UserError(f"--db {path} is not a MetaSchedule database (no database_workload.json); "
                        "create one with 'tvmbench tune' or drop --db")
    from tvm.s_tir import meta_schedule as ms

    try:
        return ms.database.JSONDatabase(work_dir=str(path)), path
    except Exception as e:
        raise UserError(f"cannot read tuning database {path}: {str(e).strip().splitlines()[-1]}") from None


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
    database, db_path = load_database(db_dir)
    key = cache_key(imported, target, database_digest(db_path), cuda_graph)
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
             "db": str(db_path) if db_path else None}, indent=2, default=str))
    t0 = time.perf_counter()
    library = tvm.runtime.load_module(str(lib_path))
    load_s = time.perf_counter() - t0
    return CompiledModel(library=library, cache_key=key, cache_hit=hit, path=lib_path, compile_s=compile_s,
                         load_s=load_s, pipeline=names)
