"""``tvmbench ops import-db``: a tuning database's records as rows of the operator store.

Lorien's idea: tuning results are operator performance data, and belong where they can be
queried beside everything else. Each record becomes a ``tuning_records`` row keyed by the same
workload hash as the store's operators (so a record joins the operator a collection measured in
a model), with its target, its measured time and its trace's decisions. A workload the store has
not seen yet gets an ``operators`` row with its features, named after its blocks (tuning keeps
no kernel names). Importing the same database twice adds nothing.

The database is only read: its files are not repaired or rewritten (a tuner may be appending).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from tvmbench.errors import UserError
from tvmbench.profiling.store import OpStore


def read_records(path: Path) -> list[dict[str, Any]]:
    """Every record of the MetaSchedule database in ``path``, each with its workload's features."""
    from tvm.s_tir import meta_schedule as ms
    from tvm.s_tir.schedule import Schedule

    from tvmbench.profiling.collect import features, workload_key
    from tvmbench.profiling.sources import decisions

    files = [path / "database_workload.json", path / "database_tuning_record.json"]
    if not all(f.is_file() for f in files):
        raise UserError(f"{path} is not a MetaSchedule database (it needs {files[0].name} and {files[1].name})")
    try:
        db = ms.database.JSONDatabase(path_workload=str(files[0]), path_tuning_record=str(files[1]),
                                      allow_missing=False)
        records = list(db.get_all_tuning_records())
    except Exception as e:  # TVM's parse errors are long: the first line says what
        raise UserError(f"cannot read the tuning database {path}: {str(e).strip().splitlines()[0]}") from None
    out = []
    for rec in records:
        func = rec.workload.mod["main"]
        sch = Schedule(rec.workload.mod)
        try:
            rec.trace.apply_to_schedule(sch, remove_postproc=False)
        except Exception:
            sch = None  # a trace this TVM cannot replay: the record is kept, without decisions
        secs = [float(s) for s in rec.run_secs or []]
        out.append({"workload": workload_key(func), "features": features(_name(func), func),
                    "target": _target_label(rec.target), "run_us": sum(secs) / len(secs) * 1e6 if secs else None,
                    "decisions": decisions(sch) if sch is not None else None, "trace": str(rec.trace)})
    return out


def import_database(store: OpStore, path: str | Path) -> dict[str, int]:
    """Import one database directory; returns how many records it had and how many were new."""
    p = Path(path).expanduser()
    records = read_records(p)
    ops = {r["workload"]: {**r["features"], "workload": r["workload"]} for r in records}
    store.add_workloads(list(ops.values()))
    new = store.add_tuning_records(str(p.resolve()), records)
    return {"records": len(records), "new": new, "workloads": len(ops)}


def _name(func: Any) -> str:
    """A kernel-like name from the function's block names (``conv2d_nchw_T_add_compute``)."""
    from tvm import s_tir

    sch = s_tir.Schedule(func)
    names = [sch.get(b).name_hint for b in sch.get_child_blocks(sch.get_sblock("root"))]
    return "_".join(dict.fromkeys(names)) or "imported"


def _target_label(target: Any) -> str:
    if target is None:
        return ""
    attrs = target.attrs
    return str(attrs["mcpu"]) if "mcpu" in attrs else str(target.kind.name)
