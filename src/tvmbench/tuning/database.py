"""Persistent MetaSchedule databases: one per target, shared by every model tuned for it.

A database is MetaSchedule's own directory (``database_workload.json`` and
``database_tuning_record.json``, one JSON document per line, appended as trials are measured) plus
``tvmbench_db.json`` with the target and TVM version it was made for.

Why tvmbench wraps it:

* MetaSchedule ignores the target when it looks records up (apache/tvm#15549), so a record tuned
  for another CPU or GPU would be applied silently. Records are filtered by target before a
  database is applied, and a database made with another TVM minor version is not applied at all.
* A killed tuning process can leave a truncated last line, on which MetaSchedule refuses to load
  the file, and a hand-edited or damaged file can hold lines that are not records at all. Readers
  skip such lines (and never rewrite a file: a tuner may be appending to it); a writer repairs
  the files under the database's writer lock, with a warning naming the file and line, so
  nothing else is lost and the run resumes.
* TVM's JSONDatabase numbers workloads per process, so two tuners appending to one database
  corrupt it: writers (``tune``, ``db merge``, ``db prune``) take the writer lock
  (:meth:`TuningDatabase.writing`, a ``filelock`` lock file beside the records); a second one
  waits, or with ``--no-wait`` fails in one line.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tvmbench.errors import UserError
from tvmbench.files import check_writable_dir, replacing, write_text_atomic
from tvmbench.paths import cache_dir
from tvmbench.targets import ResolvedTarget
from tvmbench.version import tvm_version

if TYPE_CHECKING:  # (importing ``tvmbench.compile`` imports TVM, and TVM torch: not for a run's database list)
    from tvmbench.compile.schedules import TunedSchedules

WORKLOADS = "database_workload.json"
RECORDS = "database_tuning_record.json"
META = "tvmbench_db.json"
LOCK = ".tvmbench.lock"


def target_slug(target: ResolvedTarget) -> str:
    """A folder name that says what the target is and differs for any difference in it."""
    readable = target.config.get("mcpu") or target.config.get("arch") or target.kind
    digest = hashlib.sha256(json.dumps([target.config, _tvm_minor(tvm_version())], sort_keys=True,
                                       default=str).encode()).hexdigest()[:10]
    return f"{target.kind}-{readable}-{digest}"


def default_database_dir(target: ResolvedTarget) -> Path:
    return cache_dir("tuning", target_slug(target))


# Databases shipped in the package (tuning/pretuned/<name>/), tuned with ``tvmbench tune`` on a
# known machine class; each applies only where its records' target matches (see view_for).
PRETUNED_ROOT = Path(__file__).with_name("pretuned")


def database_sources(target: ResolvedTarget, db_dir: str | None, use_default: bool = True,
                     use_pretuned: bool = True) -> list[tuple[str, str]]:
    """Which databases a compile applies, as (kind, directory): ``--db`` if given, else the
    target's default database when ``tvmbench tune`` has filled it; plus the shipped ones. When
    several hold a workload, the fastest record wins."""
    sources = []
    if db_dir:
        sources.append(("--db", str(db_dir)))
    elif use_default:
        path = Path(cache_dir("tuning")) / target_slug(target)
        if (path / WORKLOADS).is_file():
            sources.append(("default", str(path)))
    if use_pretuned and PRETUNED_ROOT.is_dir():
        sources += [("pretuned", str(p)) for p in sorted(PRETUNED_ROOT.iterdir()) if (p / WORKLOADS).is_file()]
    return sources


def load_databases(sources: list[tuple[str, str]] | tuple[tuple[str, str], ...], target: ResolvedTarget
                   ) -> TunedSchedules:
    """The MetaSchedule databases of ``sources`` (kind, directory) to apply for ``target``, each
    reduced to its records for this target and TVM version (see ``view_for``), with the digest
    for the compile cache key and one info dict per source: what was applied or why not."""
    from tvmbench.compile.schedules import TunedSchedules

    databases, digests, infos = [], [], []
    for kind, path in sources:
        db = TuningDatabase.open(path)
        view, info = db.view_for(target, by_isa_class=kind == "pretuned")
        info = {"source": kind, **info, "warnings": db.warnings}
        if kind == "pretuned":
            info["made"] = db.meta().get("pretuned", {})  # machine, budget and date of the tuning
        infos.append(info)
        if view is not None:
            viewed = TuningDatabase(view)
            databases.append(viewed.ms_database())
            digests.append(viewed.digest())
    return TunedSchedules(databases, "+".join(digests) or "none", infos)


def _tvm_minor(version: str) -> str:
    return ".".join(version.split(".")[:2])


def _write_lines_atomic(path: Path, lines: list[str]) -> None:
    write_text_atomic(path, "".join(line if line.endswith("\n") else line + "\n" for line in lines))


def _record_target(record_target: Any, cache: dict[str, Any]) -> Any:
    """The ``tvm.target.Target`` of a record (None if it does not parse), parsed once per JSON."""
    import tvm

    key = json.dumps(record_target, sort_keys=True, default=str)
    if key not in cache:
        try:
            cache[key] = tvm.target.Target(record_target)
        except Exception:
            cache[key] = None
    return cache[key]


@dataclass
class TuningDatabase:
    path: Path
    warnings: list[str] = field(default_factory=list)

    @classmethod
    def open(cls, path: str | Path, target: ResolvedTarget | None = None, create: bool = False) -> TuningDatabase:
        """Open a database directory for reading (nothing is rewritten: see :meth:`writing`);
        ``create`` makes a new one for ``target``. A damaged metadata file is a one-line error."""

        p = Path(path).expanduser()
        if not (p / WORKLOADS).is_file():
            if not create:
                raise UserError(f"{p} is not a MetaSchedule database (no {WORKLOADS}); create one with "
                                "'tvmbench tune' or drop --db")
            check_writable_dir(p, "tuning database")
            (p / WORKLOADS).touch()
            (p / RECORDS).touch()
        db = cls(p)
        if not db.meta() and target is not None:
            db.write_meta({"target": target.config, "tvm_version": tvm_version(), "runs": []})
        return db

    def meta(self) -> dict[str, Any]:
        path = self.path / META
        if not path.is_file():
            return {}
        try:
            meta = json.loads(path.read_text())
            if not isinstance(meta, dict):
                raise ValueError("not a JSON object")
            return meta
        except (ValueError, OSError) as e:  # never replaced silently: it holds the run history
            raise UserError(f"{path} is damaged ({type(e).__name__}); it holds the database's target, TVM version "
                            "and run history: restore it from a copy, or move it away to start them afresh "
                            "(the records are kept)") from None

    def write_meta(self, meta: dict[str, Any]) -> None:
        _write_lines_atomic(self.path / META, [json.dumps(meta, indent=2, default=str)])

    @contextlib.contextmanager
    def writing(self, wait: bool = True, on_wait: Callable[[str], None] | None = None) -> Iterator[TuningDatabase]:
        """Hold the database's writer lock (one writer at a time, across processes) and repair
        the files first. A second writer waits, announcing it through ``on_wait``; with
        ``wait=False`` it fails in one line instead."""
        import filelock

        lock = filelock.FileLock(str(self.path / LOCK))
        try:
            lock.acquire(timeout=0)
        except filelock.Timeout:
            if not wait:
                raise UserError(f"the tuning database {self.path} is being written by another tvmbench process; "
                                "wait for it (drop --no-wait) or use another --db") from None
            if on_wait:
                on_wait(f"waiting for another tvmbench process writing {self.path} to finish")
            lock.acquire()
        try:
            self.repair()
            yield self
        finally:
            lock.release()

    def repair(self) -> None:
        """Rewrite the files without the lines readers skip (see :meth:`_scan`), and end them with
        a newline (so the next append is a line of its own); a warning names each file and line.
        Only under :meth:`writing`. A bad workload line with good ones after it cannot be dropped
        (records refer to workloads by position): that is a one-line error."""
        workloads, records, problems = self._scan()
        wl_lines = self._decoded(WORKLOADS)
        if len(workloads) < len(wl_lines) - 1:
            raise UserError(f"{self.path / WORKLOADS} is damaged in the middle ({problems[0]}); restore it "
                            "from a copy or start a new database")
        for name, good in ((WORKLOADS, workloads), (RECORDS, records)):
            path = self.path / name
            raw = path.read_bytes() if path.is_file() else b""
            if len(good) != len(self._decoded(name)) or (raw and not raw.endswith(b"\n")):
                _write_lines_atomic(path, good)
        self.warnings += [f"skipped {p}" for p in problems]

    def mark_postprocs(self, space_kinds: Callable[[str], list[list[str]] | None]) -> int:
        """Put the postprocessor marker back into the records that lack it
        (``space.mark_postproc``; Droplet's refined records before the fix): MetaSchedule's search
        mutates a record's decisions and replays the rest, and without the marker that replay
        failed and stopped the whole tuning run. ``space_kinds(workload hash)`` gives the
        workload's design spaces' instruction kinds (None: leave its records as they are). Only
        under :meth:`writing`; the records file is rewritten atomically. Returns how many changed."""
        from tvmbench.tuning.space import mark_postproc

        workloads, records, _ = self._scan()
        hashes = [json.loads(line)[0] for line in workloads]
        kinds: dict[str, list[list[str]] | None] = {}
        out, changed = [], 0
        for line in records:
            if '"Sample' in line and '"EnterPostproc"' not in line:
                index, record = json.loads(line)
                if hashes[index] not in kinds:
                    kinds[hashes[index]] = space_kinds(hashes[index])
                marked = mark_postproc(record[0], kinds[hashes[index]] or [])
                if marked is not None:
                    line, changed = json.dumps([index, [marked, *record[1:]]], separators=(",", ":")), changed + 1
            out.append(line)
        if changed:
            _write_lines_atomic(self.path / RECORDS, out)
        return changed

    def _decoded(self, name: str) -> list[tuple[int, str | None]]:
        """The file's non-blank lines with their 1-based numbers; None for a line not in UTF-8."""
        path = self.path / name
        if not path.is_file():
            return []
        out: list[tuple[int, str | None]] = []
        for n, raw in enumerate(path.read_bytes().split(b"\n"), 1):
            if raw.strip():
                try:
                    out.append((n, raw.decode()))
                except UnicodeDecodeError:
                    out.append((n, None))
        return out

    def _scan(self) -> tuple[list[str], list[str], list[str]]:
        """(workload lines, record lines, what was skipped): the workloads up to the first line
        that is not one (those after it would be renumbered), and the records that parse as
        ``[index, [trace, run_secs, target, ...]]`` with the index of one of those workloads."""
        workloads: list[str] = []
        problems: list[str] = []
        for n, line in self._decoded(WORKLOADS):
            if line is None or not _is_list(line, 2):
                problems.append(f"{self.path / WORKLOADS} line {n}: " + ("not UTF-8" if line is None else "not a workload"))
                break
            workloads.append(line)
        records: list[str] = []
        for n, line in self._decoded(RECORDS):
            value = _loads(line) if line is not None else None
            if (isinstance(value, list) and len(value) == 2 and isinstance(value[0], int)
                    and 0 <= value[0] < len(workloads) and isinstance(value[1], list) and len(value[1]) >= 3):
                records.append(line)  # type: ignore[arg-type]
            else:
                problems.append(f"{self.path / RECORDS} line {n}: " + ("not UTF-8" if line is None else "not a record "
                                "of a known workload"))
        return workloads, records, problems

    def _lines(self, name: str) -> list[str]:
        """The valid lines of the workloads or records file (see :meth:`_scan`)."""
        workloads, records, _ = self._scan()
        return workloads if name == WORKLOADS else records

    def ms_database(self) -> Any:
        """The MetaSchedule database on these files, the tensor intrinsics its traces name
        registered (``register_tvmbench_intrinsics``)."""
        from tvm.s_tir import meta_schedule as ms

        from tvmbench.compile.intrinsics import register_tvmbench_intrinsics

        path = self.path / RECORDS
        register_tvmbench_intrinsics(path.read_text() if path.is_file() else "")
        return ms.database.JSONDatabase(work_dir=str(self.path))

    def digest(self) -> str:
        h = hashlib.sha256()
        for name in (WORKLOADS, RECORDS):
            path = self.path / name
            h.update(path.read_bytes() if path.is_file() else b"")
        return h.hexdigest()[:16]

    def count_records(self) -> int:
        return len(self._lines(RECORDS))

    def records_per_workload(self) -> dict[str, int]:
        """Records per workload structural hash, failed candidates included.

        MetaSchedule's get_top_k leaves out records whose run failed, so counting through it
        makes a run's trial count disagree with the file whenever a candidate failed.
        """
        hashes: list[str | None] = []
        for line in self._lines(WORKLOADS):
            try:
                hashes.append(str(json.loads(line)[0]))
            except (ValueError, IndexError, TypeError):
                hashes.append(None)
        counts: dict[str, int] = {}
        for line in self._lines(RECORDS):
            head = line[1:line.find(",")] if line.startswith("[") else ""
            if head.isdigit() and int(head) < len(hashes) and hashes[int(head)] is not None:
                key = hashes[int(head)]
                counts[key] = counts.get(key, 0) + 1
        return counts

    def view_for(self, target: ResolvedTarget, by_isa_class: bool = False) -> tuple[Path | None, dict[str, Any]]:
        """A directory holding only this database's records for ``target`` (and this TVM minor
        version), for MetaScheduleApplyDatabase; None when nothing applies. Also says what was
        left out, for the result.

        ``by_isa_class`` (the shipped databases): a CPU record made for another CPU of the same
        ISA class (targets.isa_class: arch and widest vector ISA, e.g. a haswell record for a
        znver3 or skylake user, whatever the core count) applies too, for workloads that have no
        record for this exact target. A shipped database cannot be tuned for every CPU model and
        core count, and the schedules depend on the vector ISA, not on the CPU's name; a user's
        own database keeps exact matching, since it was made for the machine it runs on."""

        from tvmbench.targets import isa_class

        meta = self.meta()
        made_with = meta.get("tvm_version")
        info: dict[str, Any] = {"path": str(self.path), "tvm_version": made_with, "records": self.count_records()}
        if made_with and _tvm_minor(made_with) != _tvm_minor(tvm_version()):
            info["skipped"] = f"made with TVM {made_with}, this is {tvm_version()}: not applied"
            return None, info
        if by_isa_class and (meta.get("pretuned") or {}).get("pipeline") != pipeline_version():
            # A shipped database's records were kept because they beat the default schedules of
            # the pipeline it was judged with; against another pipeline's defaults they can lose
            # (the znver4 database of 2026-11-23 made mobilenet_v2 0.976x as fast by 2026-11-27).
            judged = (meta.get("pretuned") or {}).get("pipeline")
            info["skipped"] = (f"judged against the default schedules of {f'pipeline {judged}' if judged else 'an earlier pipeline'}"
                               f", this tvmbench builds pipeline {pipeline_version()}: not applied until judged "
                               "again (benchmarks/build_pretuned.py --rejudge)")
            return None, info
        stale = stale_verdicts(meta)
        if stale:
            info["stale_in_model"] = len(stale)
            self.warnings.append(
                f"{len(stale)} workloads of {self.path} were judged inside the model against the default schedules "
                f"of an earlier tvmbench pipeline (now {pipeline_version()}), and may now be slower than them: judge "
                f"them again with 'tvmbench db check {self.path} --model MODEL'")
        records = self._lines(RECORDS)
        # both by line position in the file as the check saw it
        losing = losing_lines(meta, self._lines(WORKLOADS), records)
        passed_over = passed_over_lines(meta, self._lines(WORKLOADS), records)
        if losing:
            info["lose_in_model"] = len(losing)
        if passed_over:
            info["passed_over_in_model"] = len(passed_over)
        records = [line for i, line in enumerate(records) if i not in losing and i not in passed_over]
        mine = target.tvm()
        my_class = isa_class(mine) if by_isa_class else None
        exact, same_class = _for_target(records, mine, my_class)
        keep = exact + same_class
        info["applied_records"] = len(keep)
        if by_isa_class:
            info["isa_class"] = my_class
            info["applied_by_isa_class"] = len(same_class)
        info["foreign_target_records"] = len(records) - len(keep)
        if not keep:
            return None, info
        key = hashlib.sha256((self.digest() + json.dumps([target.config, by_isa_class, meta.get(IN_MODEL)],
                                                         sort_keys=True, default=str)).encode())
        view = cache_dir("db-views", key.hexdigest()[:16])
        if not (view / RECORDS).is_file():
            # the valid lines only (a tuner may be appending a line right now), each file written
            # under a unique temporary name: two runs on a fresh cache build one view at once
            _write_lines_atomic(view / WORKLOADS, self._lines(WORKLOADS))
            _write_lines_atomic(view / RECORDS, keep)
        return view, info


def _for_target(records: list[str], mine: Any, my_class: str | None) -> tuple[list[str], list[str]]:
    """The record lines made for target ``mine`` exactly, and (with ``my_class``) those made for
    another target of its ISA class, for workloads with no exact record."""
    from tvmbench.targets import isa_class

    parsed: dict[str, Any] = {}
    exact, same_class = [], []
    for line in records:
        theirs = _record_target(json.loads(line)[1][2], parsed)
        if theirs is None:
            continue
        if str(theirs) == str(mine):
            exact.append(line)
        elif my_class is not None and isa_class(theirs) == my_class:
            same_class.append(line)
    exact_workloads = {json.loads(line)[0] for line in exact}
    return exact, [line for line in same_class if json.loads(line)[0] not in exact_workloads]


def _loads(line: str) -> Any:
    try:
        return json.loads(line)
    except ValueError:
        return None


def _is_list(line: str, min_len: int) -> bool:
    value = _loads(line)
    return isinstance(value, list) and len(value) >= min_len


# -- management (``tvmbench db``): plain line operations on MetaSchedule's files, no TVM needed --


def _record_secs(record_line: str) -> float | None:
    """A record's time (``repeat_stats``' median), seconds; None without times."""
    stats = _record_stats(record_line)
    return stats[0] if stats else None


def _target_label(target_json: Any) -> str:
    if isinstance(target_json, dict):
        return str(target_json.get("mcpu") or target_json.get("arch") or target_json.get("kind"))
    return str(target_json)


def list_databases(root: Path | None = None) -> list[dict[str, Any]]:
    """Every database under the cache's tuning folder, with what it is for and how full it is."""
    root = root or cache_dir("tuning")
    rows = []
    for path in sorted(p for p in root.iterdir() if (p / WORKLOADS).is_file()):
        db = TuningDatabase(path)
        try:
            meta = db.meta()
        except UserError:
            meta = {"target": "(damaged tvmbench_db.json)"}
        runs = meta.get("runs", [])
        rows.append({"path": str(path), "target": meta.get("target"), "tvm_version": meta.get("tvm_version"),
                     "workloads": len(db._lines(WORKLOADS)), "records": db.count_records(),
                     "models": sorted({r.get("model") for r in runs if r.get("model")}),
                     "last_run": runs[-1]["date"] if runs else None})
    return rows


def show_database(db: TuningDatabase) -> list[dict[str, Any]]:
    """Per workload: how many records, the best latency, the targets they were measured for, and
    the default rule's knobs its record kept by the in-model check changed (``rule_knobs_of``)."""
    workloads = db._lines(WORKLOADS)
    chosen = ((db.meta().get(IN_MODEL) or {}).get("chosen")) or {}
    moved = rule_knobs_of(db, {wl: c["record"] for wl, c in chosen.items()})
    per: dict[int, dict[str, Any]] = {i: {"workload": i, "shash": json.loads(w)[0], "records": 0, "best_us": None,
                                          "targets": set(), "rule_knobs": moved.get(str(json.loads(w)[0]))}
                                      for i, w in enumerate(workloads)}
    for line in db._lines(RECORDS):
        index, record = json.loads(line)
        row = per[index]
        row["records"] += 1
        row["targets"].add(_target_label(record[2]))
        secs = _record_secs(line)
        if secs is not None:
            us = secs * 1e6
            row["best_us"] = us if row["best_us"] is None else min(row["best_us"], us)
    return [{**r, "targets": sorted(r["targets"])} for r in per.values()]


def repeat_stats(secs: list[float]) -> tuple[float, float | None]:
    """(median, standard deviation) of a record's repeats (None with one). The median, not
    MetaSchedule's mean: a cold-timed record is single calls, and one preempted call among ten
    (1152 us among 3 us ones, a bf16 cast on the Xeon VM) made its mean 118 us and the task
    "39.55x" faster tuned."""
    import statistics

    return statistics.median(secs), statistics.stdev(secs) if len(secs) > 1 else None


def _record_stats(record_line: str) -> tuple[float, float | None] | None:
    """A record's time and spread (``repeat_stats``), seconds; None without times."""
    secs = [float(s) for s in json.loads(record_line)[1][1] or [] if s is not None]
    return repeat_stats(secs) if secs else None


def _per_layer(db: TuningDatabase) -> dict[str, dict[str, Any]]:
    """Per workload hash: the best record's time and spread, the records, and the meta file's
    facts of the task (name, weight, search seconds, models)."""
    workloads = db._lines(WORKLOADS)
    hashes = [str(json.loads(w)[0]) for w in workloads]
    tasks = db.meta().get("tasks", {})
    out: dict[str, dict[str, Any]] = {}
    for line in db._lines(RECORDS):
        index = json.loads(line)[0]
        if not isinstance(index, int) or index >= len(hashes):
            continue
        wl = hashes[index]
        row = out.setdefault(wl, {"trials": 0, "time": None, "std": None, **tasks.get(wl, {})})
        row["trials"] += 1
        stats = _record_stats(line)
        if stats is not None and (row["time"] is None or stats[0] < row["time"]):
            row["time"], row["std"] = stats
    return out


def layer_table(a: TuningDatabase, b: TuningDatabase, model: str | None = None) -> list[dict[str, Any]]:
    """Bennu's per-layer comparison of two tuning runs: per task (workload), each database's best
    time and its spread, its trials and search minutes, and the speedup of B over A (A's time over
    B's). Rows follow A's order, then B's other tasks; ``model`` keeps the tasks the meta files
    say that model has (a database can hold several models). The last row, ``total``, sums
    weight x time over the tasks both databases have."""
    left, right = _per_layer(a), _per_layer(b)
    rows = []
    for wl in [*left, *(w for w in right if w not in left)]:
        x, y = left.get(wl, {}), right.get(wl, {})
        if model is not None and model not in {*x.get("models", []), *y.get("models", [])}:
            continue
        name = x.get("name") or y.get("name") or wl
        rows.append({"layer": name, "workload": wl, "weight": x.get("weight") or y.get("weight") or 1,
                     **{f"{side}_{k}": d.get(k) for side, d in (("a", x), ("b", y))
                        for k in ("time", "std", "trials")},
                     "a_minutes": _minutes(x), "b_minutes": _minutes(y),
                     "speedup": x["time"] / y["time"] if x.get("time") and y.get("time") else None})
    both = [r for r in rows if r["speedup"] is not None]
    if both:
        ta = sum(r["weight"] * r["a_time"] for r in both)
        tb = sum(r["weight"] * r["b_time"] for r in both)
        rows.append({"layer": "total", "workload": "", "weight": None, "a_time": ta, "a_std": None,
                     "a_trials": sum(r["a_trials"] or 0 for r in rows), "a_minutes": _sum(r["a_minutes"] for r in rows),
                     "b_time": tb, "b_std": None, "b_trials": sum(r["b_trials"] or 0 for r in rows),
                     "b_minutes": _sum(r["b_minutes"] for r in rows), "speedup": ta / tb})
    return rows


def _minutes(row: dict[str, Any]) -> float | None:
    return row["seconds"] / 60 if row.get("seconds") is not None else None


def _sum(values: Any) -> float | None:
    known = [v for v in values if v is not None]
    return sum(known) if known else None


def merge_databases(sources: list[TuningDatabase], dest: TuningDatabase) -> int:
    """Append the sources' workloads and records to ``dest`` (identical lines are not repeated);
    returns the number of records added. Targets stay per record, so merging databases of
    different targets is safe: only matching records are ever applied."""
    dest_wl = dest._lines(WORKLOADS)
    index_of = {line: i for i, line in enumerate(dest_wl)}
    dest_rec = dest._lines(RECORDS)
    seen = set(dest_rec)
    added = 0
    for src in sources:
        src_wl = src._lines(WORKLOADS)
        for line in src._lines(RECORDS):
            index, record = json.loads(line)
            wl_line = src_wl[index]
            if wl_line not in index_of:
                index_of[wl_line] = len(dest_wl)
                dest_wl.append(wl_line)
            new = json.dumps([index_of[wl_line], record], separators=(",", ":"))
            if new not in seen:
                seen.add(new)
                dest_rec.append(new)
                added += 1
    _write_lines_atomic(dest.path / WORKLOADS, dest_wl)
    _write_lines_atomic(dest.path / RECORDS, dest_rec)
    meta = dest.meta()
    for src in sources:  # the tasks' names and weights, so that per-layer tables still name them,
        for wl, facts in src.meta().get("tasks", {}).items():  # and the rule knobs records moved
            meta.setdefault("tasks", {}).setdefault(wl, facts)
        for key, moved in (src.meta().get(RULE_KNOBS) or {}).items():
            meta.setdefault(RULE_KNOBS, {}).setdefault(key, moved)
    dest.write_meta(meta)
    return added


def prune_database(db: TuningDatabase, keep: int = 1) -> int:
    """Keep the ``keep`` fastest valid records per workload and target; returns how many were
    dropped. Note that resumed tuning counts the trials left, so it will tune those tasks again."""
    groups: dict[tuple[int, str], list[tuple[float, str]]] = {}
    for line in db._lines(RECORDS):
        index, record = json.loads(line)
        secs = _record_secs(line)
        if secs is not None:
            key = (index, json.dumps(record[2], sort_keys=True))
            groups.setdefault(key, []).append((secs, line))
    kept = [line for group in groups.values() for _, line in sorted(group)[:keep]]
    before = db.count_records()
    _write_lines_atomic(db.path / RECORDS, kept)
    forget_in_model(db)
    return before - len(kept)


def improvements(db: TuningDatabase, dest: Path, min_gain: float = 0.02,
                 meta_extra: dict[str, Any] | None = None) -> dict[str, int]:
    """Write to ``dest`` a database with, per workload, only the fastest record, and only where it
    beats tvmbench's default schedule (as measured when tuning, ``default_us`` in the meta file)
    by more than ``min_gain``: what a shipped database is made of. A record that merely equals the
    default would freeze today's default schedule in place of tomorrow's better one. Where an
    in-model check chose a workload's winner (``mark_in_model``), that record is taken instead of
    the fastest alone (Droplet's best dense+GELU in bert-base was the second fastest alone), and a
    workload it judged losing is left out."""
    defaults = db.meta().get("default_us", {})
    mark = db.meta().get(IN_MODEL) or {}
    chosen = {wl: c["record"] for wl, c in (mark.get("chosen") or {}).items()}
    losing = set(mark.get("losing") or {})
    workloads = db._lines(WORKLOADS)
    hashes = [str(json.loads(line)[0]) for line in workloads]
    best: dict[tuple[int, str], tuple[float, str]] = {}
    for line in db._lines(RECORDS):
        index, record = json.loads(line)
        secs = _record_secs(line)
        wl = hashes[index] if isinstance(index, int) and index < len(hashes) else None
        if secs is None or wl in losing or (wl in chosen and record_key(line) != chosen[wl]):
            continue
        key = (index, json.dumps(record[2], sort_keys=True))
        if key not in best or secs < best[key][0]:
            best[key] = (secs, line)
    kept: list[tuple[int, list[Any]]] = []
    for (index, _), (secs, line) in sorted(best.items()):
        default_us = defaults.get(json.loads(workloads[index])[0])
        if default_us is None or hashes[index] in chosen or secs * 1e6 < default_us * (1 - min_gain):
            kept.append((index, json.loads(line)[1]))
    dest.mkdir(parents=True, exist_ok=True)
    used = _write_subset(dest, workloads, kept)
    meta = {k: v for k, v in db.meta().items() if k in ("target", "tvm_version")}
    meta["default_us"] = {json.loads(workloads[i])[0]: defaults[json.loads(workloads[i])[0]]
                          for i in used if json.loads(workloads[i])[0] in defaults}
    TuningDatabase(dest).write_meta({**meta, **(meta_extra or {})})
    return {"workloads": len(workloads), "kept": len(kept)}


def _write_subset(dest: Path, workloads: list[str], kept: list[tuple[int, list[Any]]]) -> list[int]:
    """Write the workloads ``kept`` records refer to, renumbered in order, and those records;
    returns the old indices of the workloads written."""
    used = sorted({i for i, _ in kept})
    renumber = {old: new for new, old in enumerate(used)}
    _write_lines_atomic(dest / WORKLOADS, [workloads[i] for i in used])
    _write_lines_atomic(dest / RECORDS, [json.dumps([renumber[i], rec]) for i, rec in kept])
    return used


def drop_workloads(db: TuningDatabase, hashes: set[str]) -> int:
    """Remove the workloads with these structural hashes and all their records (e.g. records that
    won in MetaSchedule's runner but lose inside the model); returns how many workloads went."""
    workloads = db._lines(WORKLOADS)
    gone = {i for i, line in enumerate(workloads) if str(json.loads(line)[0]) in hashes}
    if not gone:
        return 0
    kept = [(index, rec) for index, rec in (json.loads(line) for line in db._lines(RECORDS)) if index not in gone]
    _write_subset(db.path, workloads, kept)
    forget_in_model(db)
    meta = db.meta()
    if "default_us" in meta:
        meta["default_us"] = {h: us for h, us in meta["default_us"].items() if h not in hashes}
        db.write_meta(meta)
    return len(gone)


# The meta file's verdict of the last in-model check (``mark_in_model``).
IN_MODEL = "in_model"


def pipeline_version() -> str:
    """The compile pipeline's version (``compile.pipeline.PIPELINE_VERSION``): the default
    schedules an in-model verdict was judged against."""
    from tvmbench.compile.pipeline import PIPELINE_VERSION

    return PIPELINE_VERSION


def stale_verdicts(meta: dict[str, Any]) -> set[str]:
    """Workloads whose in-model verdict (``mark_in_model``) was judged against another pipeline's
    default schedules than this tvmbench's (or before verdicts recorded the pipeline): a record
    that won against the old defaults can lose against the new ones."""
    mark = meta.get(IN_MODEL) or {}
    judged = set(mark.get("gain") or {}) | set(mark.get("losing") or {})
    stamps = mark.get("pipeline") or {}
    return {wl for wl in judged if stamps.get(wl) != pipeline_version()}


def forget_stale_defaults(db: TuningDatabase) -> set[str]:
    """Before judging stale verdicts again: forget those workloads' default-schedule times alone,
    so the tuner times this pipeline's defaults (and adds them as records) instead of comparing
    with the old ones. Returns the stale workloads. Call under the writer lock."""
    meta = db.meta()
    stale = stale_verdicts(meta)
    defaults = meta.get("default_us") or {}
    if stale & set(defaults):
        meta["default_us"] = {wl: us for wl, us in defaults.items() if wl not in stale}
        db.write_meta(meta)
    return stale


def mark_in_model(db: TuningDatabase, gains: dict[str, float], losing: set[str], lines: int,
                  intervals: dict[str, tuple[float, float]] | None = None,
                  chosen: dict[str, str] | None = None) -> None:
    """Record an in-model check (``profiling.kernels.select_in_model``): per workload its gain
    inside the model (and its interval where there is one), and for each workload whose records
    lose there, how many record lines the file had when the check began (``lines``), so that
    every record judged (at a line before that) is left out when the database is applied, and a
    record found later is applied and judged by the next check. ``chosen``: per winning
    workload the ``record_key`` of the record that won inside the model, when it need not be the
    fastest alone: of the records judged, only it is applied. Call under the writer lock."""
    meta = db.meta()
    mark = meta.get(IN_MODEL) or {"gain": {}, "losing": {}}
    mark.setdefault("interval", {})
    mark.setdefault("chosen", {})
    stamps = mark.setdefault("pipeline", {})
    for wl in {*gains, *losing}:
        stamps[wl] = pipeline_version()
    for wl, gain in gains.items():
        mark["gain"][wl] = round(gain, 4)
        if intervals and wl in intervals:
            mark["interval"][wl] = [round(x, 4) for x in intervals[wl]]
        mark["chosen"].pop(wl, None)
        if wl in losing:
            mark["losing"][wl] = lines
        else:
            mark["losing"].pop(wl, None)
            if chosen and wl in chosen:
                mark["chosen"][wl] = {"record": chosen[wl], "lines": lines}
    for wl in losing - gains.keys():  # losing without a gain measured (the check's builds crashed)
        mark["chosen"].pop(wl, None)
        mark["losing"][wl] = lines
    mark["date"] = time.strftime("%Y-%m-%dT%H:%M:%S%z")
    meta[IN_MODEL] = mark
    db.write_meta(meta)


# The meta file's knobs of the default rules that Droplet's records moved (``KnobSpace``): per
# schedule (``unmeasured.schedule_key``) name -> [default, value], and the pipeline that built it.
RULE_KNOBS = "rule_knobs"


def remember_knobs(meta: dict[str, Any], changes: dict[str, dict[str, list[Any]]]) -> dict[str, Any]:
    """``meta`` with the knob ``changes`` of this run's records added."""
    if changes:
        known = meta.setdefault(RULE_KNOBS, {})
        for key, knobs in changes.items():
            known[key] = {"knobs": knobs, "pipeline": pipeline_version()}
    return meta


def rule_knobs_of(db: TuningDatabase, records: dict[str, str]) -> dict[str, dict[str, list[Any]]]:
    """Per workload, the default rules' knobs its record ``records[workload]`` (a ``record_key``)
    moved, where that record was built from the defaults with knobs moved: what tuning changed
    in tvmbench's own schedule, the change a new rule could make for every model."""
    from tvmbench.tuning.unmeasured import schedule_key

    known = db.meta().get(RULE_KNOBS) or {}
    wanted = {key: wl for wl, key in records.items()}
    out: dict[str, dict[str, list[Any]]] = {}
    if not known or not wanted:
        return out
    for line in db._lines(RECORDS):
        wl = wanted.get(record_key(line))
        if wl is not None and wl not in out:
            entry = known.get(schedule_key(json.loads(line)[1][0]))
            if entry:
                out[wl] = entry["knobs"]
    return out


def losing_lines(meta: dict[str, Any], workloads: list[str], records: list[str]) -> set[int]:
    """Positions of the record lines an in-model check judged losing (``mark_in_model``)."""
    losing = (meta.get(IN_MODEL) or {}).get("losing") or {}
    if not losing:
        return set()
    return {i for i, wl in enumerate(_workload_of(workloads, records)) if wl in losing and i < losing[wl]}


def _workload_of(workloads: list[str], records: list[str]) -> list[str | None]:
    """Each record line's workload structural hash (None where it names no workload line)."""
    hashes = [str(_loads(line)[0]) if _is_list(line, 1) else None for line in workloads]
    out: list[str | None] = []
    for line in records:
        index = line[1:line.find(",")] if line.startswith("[") else ""
        out.append(hashes[int(index)] if index.isdigit() and int(index) < len(hashes) else None)
    return out


def record_key(record_line: str) -> str:
    """A record line's schedule, as a short hash of its trace's JSON: the same schedule in any
    copy of the file, whatever its line number."""
    return hashlib.sha256(json.dumps(json.loads(record_line)[1][0], sort_keys=True).encode()).hexdigest()[:16]


def passed_over_lines(meta: dict[str, Any], workloads: list[str], records: list[str]) -> set[int]:
    """Positions of the record lines an in-model check judged and passed over for another record
    of their workload that won inside the model (``mark_in_model``'s ``chosen``)."""
    chosen = (meta.get(IN_MODEL) or {}).get("chosen") or {}
    if not chosen:
        return set()
    return {i for i, (wl, line) in enumerate(zip(_workload_of(workloads, records), records, strict=True))
            if wl in chosen and i < chosen[wl]["lines"] and record_key(line) != chosen[wl]["record"]}


@dataclass
class Candidates:
    """One candidate database of the in-model check (``ranked_candidates``): its folder, and per
    workload structural hash the schedule it holds (``record_key``) and that record's median
    seconds alone."""

    path: Path
    picks: dict[str, tuple[str, float]]


def ranked_candidates(db: TuningDatabase, target: ResolvedTarget, count: int, root: Path) -> list[Candidates]:
    """Up to ``count`` candidate databases for the in-model check, written under ``root``: the
    i-th holds, per workload, its i-th fastest distinct schedule for ``target`` as timed alone,
    none where it has fewer (its kernel then runs the default schedule in that build)."""
    mine = str(target.tvm())
    parsed: dict[str, Any] = {}
    ranked: dict[int, dict[str, tuple[float, list[Any]]]] = {}
    for line in db._lines(RECORDS):
        secs = _record_secs(line)
        theirs = _record_target(json.loads(line)[1][2], parsed)
        if secs is None or theirs is None or str(theirs) != mine:
            continue
        index, record = json.loads(line)
        key = record_key(line)
        best = ranked.setdefault(index, {})
        if key not in best or secs < best[key][0]:
            best[key] = (secs, record)
    workloads = db._lines(WORKLOADS)
    hashes = [str(json.loads(line)[0]) for line in workloads]
    out = []
    for rank in range(count):
        picked = {index: sorted(by_key.items(), key=lambda kv: kv[1][0])[rank]
                  for index, by_key in sorted(ranked.items()) if len(by_key) > rank}
        if not picked:
            break
        dest = root / f"candidate-{rank + 1}"
        _write_subset(dest, workloads, [(index, record) for index, (_, (_, record)) in picked.items()])
        out.append(Candidates(dest, {hashes[index]: (key, secs) for index, (key, (secs, _)) in picked.items()}))
    return out


def forget_in_model(db: TuningDatabase) -> None:
    """Forget the last in-model check (after the record file was rewritten its line positions
    mean nothing; or to judge every record again). Call under the writer lock."""
    meta = db.meta()
    if meta.pop(IN_MODEL, None) is not None:
        db.write_meta(meta)


def export_database(db: TuningDatabase, archive: Path) -> Path:
    """A .tar.gz with the two MetaSchedule files and tvmbench's meta file (no logs)."""
    import tarfile

    with replacing(archive, suffix=".tar.gz") as tmp, tarfile.open(tmp, "w:gz") as tar:
        for name in (WORKLOADS, RECORDS, META):
            if (db.path / name).is_file():
                tar.add(db.path / name, arcname=f"{db.path.name}/{name}")
    return archive
