"""The operator store: every operator tvmbench has measured, with its features, in one SQLite file.

SQLite, not DuckDB: it is in Python's standard library (no dependency to install or pin), its
transactions and WAL journal let several tvmbench processes write one file safely (a writer
waits for the other's transaction, readers never block), and the store holds thousands of rows,
not millions, so an analytical engine would buy nothing. Any SQLite tool can read the file.

Tables (schema version in ``meta``):

- ``machines``: CPU model, ISA level, cores;
- ``rooflines``: per machine and thread count, the measured compute peak (GFLOP/s, vector FMAs
  in registers on every thread) and memory bandwidth (GB/s, a STREAM-triad-like kernel): the roofline's roof and slope;
- ``cache_slopes``: per machine and thread count, each cache level's capacity (what the threads
  hold together) and bandwidth: the cache-aware roofline's nearer slopes (``peak.Bandwidth``);
- ``versions``: tvmbench and TVM versions a measurement was made with;
- ``models``: a model name with its shape options;
- ``operators``: one row per workload (the structural hash of the kernel as MetaSchedule
  normalises it, the key tuning records use), with its features: kind, shapes, FLOPs, bytes,
  arithmetic intensity, epilogue;
- ``model_ops``: which model runs which workload, under which kernel name, how often;
- ``measurements``: a workload's time on a machine with given versions, schedule, thread count
  and context (``in_model``, ``alone_warm``, ``alone_cold``), with the schedule's decisions;
- ``tuning_records``: every record of the tuning databases imported with ``ops import-db``: its
  workload, database, target, measured time (MetaSchedule's runner: alone, caches flushed or
  not as that run was set) and trace decisions (Lorien's idea: tuning results as queryable rows).

Every write is one transaction: a kill loses at most the operator in flight, and a second
collection skips what is already stored for this machine, these versions and that schedule.
"""

from __future__ import annotations

import json
import sqlite3
import time
from pathlib import Path
from typing import Any

from tvmbench.errors import UserError
from tvmbench.paths import cache_dir
from tvmbench.sqlfile import SQLiteFile

SCHEMA_VERSION = 3  # 2: tuning_records, 3: cache_slopes (an older store gains them when opened for writing)

_SCHEMA = """
CREATE TABLE IF NOT EXISTS machines (
    id INTEGER PRIMARY KEY, fingerprint TEXT UNIQUE NOT NULL, cpu_model TEXT, isa TEXT, cores INTEGER);
CREATE TABLE IF NOT EXISTS rooflines (
    machine_id INTEGER NOT NULL REFERENCES machines(id), threads INTEGER NOT NULL, peak_gflops REAL NOT NULL,
    peak_method TEXT, bandwidth_gbs REAL NOT NULL, bandwidth_method TEXT, created TEXT NOT NULL,
    PRIMARY KEY (machine_id, threads));
CREATE TABLE IF NOT EXISTS cache_slopes (
    machine_id INTEGER NOT NULL REFERENCES machines(id), threads INTEGER NOT NULL, level TEXT NOT NULL,
    capacity_bytes INTEGER NOT NULL, gbs REAL NOT NULL, PRIMARY KEY (machine_id, threads, level));
CREATE TABLE IF NOT EXISTS versions (
    id INTEGER PRIMARY KEY, tvmbench TEXT NOT NULL, tvm TEXT NOT NULL, UNIQUE (tvmbench, tvm));
CREATE TABLE IF NOT EXISTS models (
    id INTEGER PRIMARY KEY, name TEXT NOT NULL, options TEXT NOT NULL, UNIQUE (name, options));
CREATE TABLE IF NOT EXISTS operators (
    workload TEXT PRIMARY KEY, kind TEXT NOT NULL, name TEXT NOT NULL, epilogue TEXT,
    inputs TEXT NOT NULL, outputs TEXT NOT NULL, dtype TEXT, flops REAL, bytes INTEGER, intensity REAL);
CREATE TABLE IF NOT EXISTS model_ops (
    model_id INTEGER NOT NULL REFERENCES models(id), workload TEXT NOT NULL REFERENCES operators(workload),
    kernel TEXT NOT NULL, count INTEGER NOT NULL, PRIMARY KEY (model_id, kernel));
CREATE TABLE IF NOT EXISTS measurements (
    id INTEGER PRIMARY KEY, workload TEXT NOT NULL REFERENCES operators(workload),
    machine_id INTEGER NOT NULL REFERENCES machines(id), versions_id INTEGER NOT NULL REFERENCES versions(id),
    schedule TEXT NOT NULL, threads INTEGER NOT NULL, context TEXT NOT NULL, median_us REAL NOT NULL,
    samples INTEGER NOT NULL, decisions TEXT, created TEXT NOT NULL,
    UNIQUE (workload, machine_id, versions_id, schedule, threads, context));
CREATE TABLE IF NOT EXISTS tuning_records (
    id INTEGER PRIMARY KEY, workload TEXT NOT NULL REFERENCES operators(workload), database TEXT NOT NULL,
    target TEXT, run_us REAL, decisions TEXT, trace TEXT NOT NULL, imported TEXT NOT NULL,
    UNIQUE (workload, database, trace));
"""


NO_CACHE_SLOPES = "no cache slopes"  # in a roofline's bandwidth method when they could not be measured


def _read_only_uri(path: Path) -> str:
    return path.resolve().as_uri() + "?mode=ro"


def default_store_path() -> Path:
    return cache_dir("ops") / "ops.sqlite"


class OpStore(SQLiteFile):
    """One store file (``sqlfile.SQLiteFile``: versioned, shared, transactions)."""

    NAME = "operator store"
    SCHEMA = _SCHEMA
    VERSION = SCHEMA_VERSION
    MISSING = "collect one with 'tvmbench ops collect' or pass --store FILE"
    ELSEWHERE = "use another --store"

    @classmethod
    def default_path(cls) -> Path:
        return default_store_path()

    # ----- rows

    def machine_id(self, fingerprint: dict[str, Any]) -> int:
        key = json.dumps(fingerprint, sort_keys=True)
        with self.transaction() as db:
            db.execute("INSERT OR IGNORE INTO machines (fingerprint, cpu_model, isa, cores) VALUES (?, ?, ?, ?)",
                       (key, fingerprint.get("cpu_model"), fingerprint.get("isa"), fingerprint.get("cores")))
            return int(db.execute("SELECT id FROM machines WHERE fingerprint = ?", (key,)).fetchone()[0])

    def has_roofline(self, machine_id: int, threads: int) -> bool:
        """Whether the roofline is stored with its cache slopes (one measured before they were is
        measured again); a method that says "no cache slopes" counts as stored."""
        row = self.db.execute("SELECT bandwidth_method, (SELECT COUNT(*) FROM cache_slopes s WHERE s.machine_id = "
                              "r.machine_id AND s.threads = r.threads) FROM rooflines r WHERE machine_id = ? "
                              "AND threads = ?", (machine_id, threads)).fetchone()
        return row is not None and (row[1] > 0 or NO_CACHE_SLOPES in (row[0] or ""))

    def add_roofline(self, machine_id: int, threads: int, peak: Any, bandwidth: Any) -> None:
        """``peak`` and ``bandwidth`` as measure/peak.py measures them."""
        method = bandwidth.method if bandwidth.caches else f"{bandwidth.method}; {NO_CACHE_SLOPES}"
        with self.transaction() as db:
            db.execute("INSERT OR REPLACE INTO rooflines VALUES (?, ?, ?, ?, ?, ?, ?)",
                       (machine_id, threads, peak.gflops, peak.method, bandwidth.gbs, method,
                        time.strftime("%Y-%m-%dT%H:%M:%S%z")))
            db.execute("DELETE FROM cache_slopes WHERE machine_id = ? AND threads = ?", (machine_id, threads))
            db.executemany("INSERT INTO cache_slopes VALUES (?, ?, ?, ?, ?)",
                           [(machine_id, threads, c.level, c.capacity_bytes, c.gbs) for c in bandwidth.caches])

    def versions_id(self, tvmbench: str, tvm: str) -> int:
        with self.transaction() as db:
            db.execute("INSERT OR IGNORE INTO versions (tvmbench, tvm) VALUES (?, ?)", (tvmbench, tvm))
            return int(db.execute("SELECT id FROM versions WHERE tvmbench = ? AND tvm = ?",
                                  (tvmbench, tvm)).fetchone()[0])

    def model_id(self, name: str, options: dict[str, Any]) -> int:
        key = json.dumps(options, sort_keys=True)
        with self.transaction() as db:
            db.execute("INSERT OR IGNORE INTO models (name, options) VALUES (?, ?)", (name, key))
            return int(db.execute("SELECT id FROM models WHERE name = ? AND options = ?", (name, key)).fetchone()[0])

    def add_operators(self, model_id: int, operators: list[dict[str, Any]]) -> None:
        """The model's operators (features) and how often it runs each, in one transaction."""
        with self.transaction() as db:
            self._insert_workloads(db, operators, "REPLACE")  # a model's kernel names beat imported ones
            for op in operators:
                db.execute("INSERT OR REPLACE INTO model_ops (model_id, workload, kernel, count) VALUES (?, ?, ?, ?)",
                           (model_id, op["workload"], op["name"], op["count"]))

    def add_workloads(self, operators: list[dict[str, Any]]) -> None:
        """Operators (features) no model is known to run, e.g. from a tuning database."""
        with self.transaction() as db:
            self._insert_workloads(db, operators, "IGNORE")

    @staticmethod
    def _insert_workloads(db: sqlite3.Connection, operators: list[dict[str, Any]], conflict: str) -> None:
        for op in operators:
            db.execute(f"INSERT OR {conflict} INTO operators (workload, kind, name, epilogue, inputs, outputs, dtype, "
                       "flops, bytes, intensity) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                       (op["workload"], op["kind"], op["name"], op["epilogue"], json.dumps(op["inputs"]),
                        json.dumps(op["outputs"]), op["dtype"], op["flops"], op["bytes"], op["intensity"]))

    def measured(self, workload: str, machine_id: int, versions_id: int, schedule: str, threads: int,
                 context: str) -> bool:
        return self.db.execute(
            "SELECT 1 FROM measurements WHERE workload = ? AND machine_id = ? AND versions_id = ? AND schedule = ? "
            "AND threads = ? AND context = ?", (workload, machine_id, versions_id, schedule, threads, context)
        ).fetchone() is not None

    def add_measurement(self, workload: str, machine_id: int, versions_id: int, schedule: str, threads: int,
                        context: str, median_us: float, samples: int, decisions: dict[str, Any] | None) -> None:
        with self.transaction() as db:
            db.execute("INSERT OR REPLACE INTO measurements (workload, machine_id, versions_id, schedule, threads, "
                       "context, median_us, samples, decisions, created) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                       (workload, machine_id, versions_id, schedule, threads, context, median_us, samples,
                        json.dumps(decisions) if decisions is not None else None,
                        time.strftime("%Y-%m-%dT%H:%M:%S%z")))

    def add_tuning_records(self, database: str, records: list[dict[str, Any]]) -> int:
        """Records of one tuning database (workload, target, run_us, decisions, trace), in one
        transaction; a record already imported is skipped. Returns how many were new."""
        stamp = time.strftime("%Y-%m-%dT%H:%M:%S%z")
        with self.transaction() as db:
            before = db.total_changes
            for r in records:
                db.execute("INSERT OR IGNORE INTO tuning_records (workload, database, target, run_us, decisions, "
                           "trace, imported) VALUES (?, ?, ?, ?, ?, ?, ?)",
                           (r["workload"], database, r["target"], r["run_us"], json.dumps(r["decisions"]),
                            r["trace"], stamp))
            return db.total_changes - before

    # ----- reading

    def query(self, sql: str, params: tuple[Any, ...] | dict[str, Any] = ()) -> tuple[list[str], list[tuple[Any, ...]]]:
        """Run one read-only SQL statement: (column names, rows). A bad query is a one-line error;
        a statement that would write is refused."""
        ro = sqlite3.connect(_read_only_uri(self.path), uri=True, timeout=60)
        try:
            cursor = ro.execute(sql, params)
            return [d[0] for d in cursor.description or []], cursor.fetchall()
        except sqlite3.Error as e:
            raise UserError(f"bad query: {e}") from None
        finally:
            ro.close()
