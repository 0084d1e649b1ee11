"""Every result kept: a history of runs in one SQLite file, with the machine and versions each
came from, for ``tvmbench history``, ``diff`` and ``report``.

SQLite, as the operator store (``profiling/store.py``), for the same reasons: in the standard
library, transactions and a WAL journal so several tvmbench processes append at once (a writer
waits for the other's transaction; readers never block), readable by any SQLite tool.

- ``entries``: one per ``run``, ``compare``, ``tune`` or ``ops collect``: when, the command, the
  machine (CPU model, ISA, cores, memory, governor) and its fingerprint, the versions (tvmbench,
  TVM, the frameworks) and the project's git commit, the target, and the whole result document;
- ``points``: one per model point and framework of a run or comparison entry: its status,
  median, timed samples and round medians (what ``diff`` recomputes its intervals from).

The file is ``$TVMBENCH_HISTORY`` or ``history.sqlite`` in the cache folder; a damaged file or
one of a newer schema is a one-line error, never silently replaced.
"""

from __future__ import annotations

import hashlib
import json
import os
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tvmbench.errors import UserError
from tvmbench.paths import cache_dir
from tvmbench.sqlfile import SQLiteFile

SCHEMA_VERSION = 1
KINDS = ("run", "compare", "tune", "ops collect")

_SCHEMA = """
CREATE TABLE IF NOT EXISTS entries (
    id INTEGER PRIMARY KEY, created TEXT NOT NULL, kind TEXT NOT NULL, command TEXT NOT NULL,
    machine TEXT NOT NULL, machine_key TEXT NOT NULL, versions TEXT NOT NULL, git_commit TEXT, target TEXT,
    document TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS points (
    entry_id INTEGER NOT NULL REFERENCES entries(id), model TEXT NOT NULL, framework TEXT NOT NULL,
    batch_size INTEGER, seq_length INTEGER, image_size INTEGER, status TEXT NOT NULL, median_ms REAL,
    samples_ms TEXT, round_medians_ms TEXT, round_sizes TEXT);
CREATE INDEX IF NOT EXISTS points_by_model ON points (model, framework);
"""

_MACHINE_FIELDS = ("cpu_model", "machine", "physical_cores", "logical_cores", "memory_total_bytes", "governor")


def default_history_path() -> Path:
    env = os.environ.get("TVMBENCH_HISTORY")
    return Path(env).expanduser() if env else cache_dir("history") / "history.sqlite"


def machine_of(environment: dict[str, Any], target: dict[str, Any] | None = None) -> dict[str, Any]:
    """What makes two machines' times comparable: CPU, ISA (the target's -mcpu), cores, memory,
    governor."""
    machine = {k: environment.get(k) for k in _MACHINE_FIELDS}
    machine["isa"] = (target or {}).get("mcpu") or (target or {}).get("arch")
    return machine


def machine_key(machine: dict[str, Any]) -> str:
    return hashlib.sha256(json.dumps(machine, sort_keys=True, default=str).encode()).hexdigest()[:12]


@dataclass(frozen=True)
class Entry:
    id: int
    created: str
    kind: str
    command: list[str]
    machine: dict[str, Any]
    machine_key: str
    versions: dict[str, Any]
    git_commit: str | None
    target: str | None
    document: dict[str, Any]

    def runs(self) -> list[dict[str, Any]]:
        """The run result documents of the entry: the run itself, or a comparison's points."""
        if self.kind == "run":
            return [self.document]
        return list(self.document.get("points", [])) if self.kind == "compare" else []


class History(SQLiteFile):
    """One history file (``sqlfile.SQLiteFile``: versioned, shared, transactions)."""

    NAME = "history"
    SCHEMA = _SCHEMA
    VERSION = SCHEMA_VERSION
    MISSING = "run something first, or pass --history FILE"
    ELSEWHERE = "move it away or pass another --history FILE"

    @classmethod
    def default_path(cls) -> Path:
        return default_history_path()

    def add(self, kind: str, document: dict[str, Any], command: list[str] | None = None,
            environment: dict[str, Any] | None = None, target: dict[str, Any] | None = None) -> int:
        """Append one entry (and its points) in one transaction; returns its id."""
        from tvmbench.version import git_commit, package_versions

        env = environment or {}
        machine = machine_of(env, target)
        versions = dict(env.get("packages") or package_versions())
        versions["tvmbench"] = env.get("tvmbench_version") or versions.get("tvmbench")
        with self.transaction() as db:
            cur = db.execute(
                "INSERT INTO entries (created, kind, command, machine, machine_key, versions, git_commit, target, "
                "document) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (time.strftime("%Y-%m-%dT%H:%M:%S%z"), kind, json.dumps(command or []), json.dumps(machine),
                 machine_key(machine), json.dumps(versions, sort_keys=True),
                 env.get("tvmbench_commit") or git_commit(), json.dumps(target) if target else None,
                 json.dumps(document, default=str)))
            entry = int(cur.lastrowid)
            runs = [document] if kind == "run" else document.get("points", []) if kind == "compare" else []
            for run in runs:
                for row in _points(run):
                    db.execute("INSERT INTO points VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)", (entry, *row))
        return entry

    def entry(self, ref: str | int) -> Entry:
        """An entry by id, ``latest`` or ``latest~N`` (N entries before the latest)."""
        text = str(ref)
        if text == "latest" or text.startswith("latest~"):
            back = int(text.partition("~")[2] or 0) if text.partition("~")[2].isdigit() or text == "latest" else -1
            if back < 0:
                raise UserError(f"bad history reference '{text}': use an id, latest or latest~N")
            row = self.db.execute(f"SELECT {_COLUMNS} FROM entries WHERE kind IN ('run', 'compare') "
                                  "ORDER BY id DESC LIMIT 1 OFFSET ?", (back,)).fetchone()
        elif text.isdigit():
            row = self.db.execute(f"SELECT {_COLUMNS} FROM entries WHERE id = ?", (int(text),)).fetchone()
        else:
            raise UserError(f"bad history reference '{text}': use an id, latest, latest~N or a result JSON file")
        if row is None:
            raise UserError(f"no history entry '{text}' in {self.path} ('tvmbench history' lists them)")
        return _entry(row)

    def points(self, model: str | None = None, framework: str | None = None, since: str | None = None,
               machine: str | None = None, limit: int = 200) -> list[dict[str, Any]]:
        """Point rows newest first, with their entry's date, kind, machine key and commit."""
        where, params = ["1 = 1"], []
        for clause, value in (("p.model = ?", model), ("p.framework = ?", framework), ("e.created >= ?", since),
                              ("e.machine_key = ?", machine)):
            if value:
                where.append(clause)
                params.append(value)
        rows = self.db.execute(
            "SELECT e.id, e.created, e.kind, e.machine_key, e.git_commit, p.model, p.framework, p.batch_size, "
            "p.seq_length, p.status, p.median_ms FROM points p JOIN entries e ON e.id = p.entry_id "
            f"WHERE {' AND '.join(where)} ORDER BY e.id DESC LIMIT ?", (*params, limit)).fetchall()
        names = ["entry", "created", "kind", "machine", "commit", "model", "framework", "batch_size",
                 "seq_length", "status", "median_ms"]
        points = [dict(zip(names, r, strict=True)) for r in rows]
        self._add_host_states(points)
        return points

    def runs_on(self, machine: str, models: list[str], limit: int) -> list[dict[str, Any]]:
        """The run documents of the newest ``limit`` run and comparison entries of machine key
        ``machine`` that hold one of ``models`` (what ``diff`` bridges host states with). Entries,
        not points: a run of two frameworks has two points (before session 118, a limit of 20 gave
        10 runs of ``--frameworks tvm,onnxruntime``)."""
        if not models or limit <= 0:
            return []
        rows = self.db.execute(
            f"SELECT {_COLUMNS} FROM entries WHERE id IN (SELECT DISTINCT e.id FROM entries e JOIN points p ON p.entry_id = e.id "
            f"WHERE e.machine_key = ? AND e.kind IN ('run', 'compare') AND p.model IN ({','.join('?' * len(models))}) "
            "ORDER BY e.id DESC LIMIT ?) ORDER BY id DESC", (machine, *models, limit)).fetchall()
        return [run for row in rows for run in _entry(row).runs()]

    def _add_host_states(self, points: list[dict[str, Any]]) -> None:
        """Each point's host states (``host_states``: the probe's level and the point's share of
        samples in each, or None where the run had no probe), read from its entry's document."""
        from tvmbench.results.diff import host_state_split

        ids = sorted({p["entry"] for p in points})
        docs = dict(self.db.execute(f"SELECT id, document FROM entries WHERE id IN ({','.join('?' * len(ids))})",
                                    ids).fetchall()) if ids else {}
        splits: dict[tuple[Any, ...], Any] = {}
        for p in points:
            key = (p["entry"], p["model"], p["batch_size"], p["seq_length"])
            if key not in splits:
                doc = json.loads(docs[p["entry"]])
                runs = [doc] if p["kind"] == "run" else doc.get("points", []) if p["kind"] == "compare" else []
                run = next((r for r in runs if (r.get("model"), r.get("batch_size"), r.get("seq_length")) == key[1:]),
                           None)
                splits[key] = host_state_split(run) if run else None
            by_state = splits[key].frameworks.get(p["framework"]) if splits[key] else None
            p["host_states"] = ", ".join(f"{name} {got[1]:.0%}" for name, got
                                         in zip(splits[key].names, by_state, strict=True)
                                         if got is not None) if by_state else None


_COLUMNS = "id, created, kind, command, machine, machine_key, versions, git_commit, target, document"


def _entry(row: tuple[Any, ...]) -> Entry:
    return Entry(row[0], row[1], row[2], json.loads(row[3]), json.loads(row[4]), row[5], json.loads(row[6]), row[7],
                 row[8], json.loads(row[9]))


def _points(run: dict[str, Any]) -> Iterator[tuple[Any, ...]]:
    """(model, framework, batch, seq, image, status, median, samples, round medians, round sizes)
    per framework of one run result document."""
    from tvmbench.backends import result_key

    for fw in run.get("frameworks", []):
        r = run.get(result_key(fw)) or {}
        rounds = r.get("rounds") or {}
        yield (run.get("model"), fw, run.get("batch_size"), run.get("seq_length"), run.get("image_size"),
               r.get("status", "missing"), r.get("median_ms"), json.dumps(r.get("samples_ms") or []),
               json.dumps(rounds.get("medians_ms")) if rounds else None,
               json.dumps(rounds.get("sizes")) if rounds else None)


def record(kind: str, document: dict[str, Any], *, history: str | Path | None | bool = None,
           command: list[str] | None = None, environment: dict[str, Any] | None = None,
           target: dict[str, Any] | None = None) -> int | None:
    """Append to the history unless ``history`` is False; a history that cannot be written is a
    warning on stderr, never the loss of the result being returned. Returns the entry id."""
    import sys

    if history is False:
        return None
    try:
        h = History.open(None if history in (None, True) else history)  # type: ignore[arg-type]
        try:
            return h.add(kind, document, command if command is not None else sys.argv[1:], environment, target)
        finally:
            h.close()
    except UserError as e:
        print(f"tvmbench: warning: the result was not added to the history: {e}", file=sys.stderr)
        return None
