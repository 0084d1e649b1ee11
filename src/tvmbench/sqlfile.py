"""A versioned SQLite file that several tvmbench processes share: the operator store
(``profiling/store.py``) and the results history (``results/history.py``).

SQLite because it is in Python's standard library, its transactions (``BEGIN IMMEDIATE``: a
second writer waits for the first) and WAL journal (readers never block) make a file safe for
concurrent tvmbench processes, and any SQLite tool reads it. The schema version sits in a
``meta`` table: an older file gains what is missing when opened for writing, a newer one is
refused; a missing file (for reading), an unwritable path or a file that is not one of ours is a
one-line UserError, never a traceback and never a silent replacement.
"""

from __future__ import annotations

import contextlib
import sqlite3
from collections.abc import Iterator
from pathlib import Path
from typing import Any, ClassVar

from tvmbench.errors import UserError


class SQLiteFile:
    """Subclasses say what they are (``NAME``), their ``SCHEMA`` and ``VERSION``, and what to
    do when the file is missing (``MISSING``) or unusable (``ELSEWHERE``)."""

    NAME: ClassVar[str] = "file"
    SCHEMA: ClassVar[str] = ""
    VERSION: ClassVar[int] = 1
    MISSING: ClassVar[str] = "create it first"
    ELSEWHERE: ClassVar[str] = "use another file"

    def __init__(self, path: Path, connection: sqlite3.Connection, readonly: bool) -> None:
        self.path, self.db, self.readonly = path, connection, readonly

    @classmethod
    def default_path(cls) -> Path:
        raise NotImplementedError

    @classmethod
    def open(cls, path: str | Path | None = None, readonly: bool = False) -> Any:
        """The file at ``path`` (default: :meth:`default_path`), created when writing to a new one."""
        p = Path(path).expanduser() if path else cls.default_path()
        if readonly and not p.is_file():
            raise UserError(f"no {cls.NAME} at {p}; {cls.MISSING}")
        try:
            if readonly:
                db = sqlite3.connect(p.resolve().as_uri() + "?mode=ro", uri=True, timeout=60)
            else:
                p.parent.mkdir(parents=True, exist_ok=True)
                db = sqlite3.connect(p, timeout=60)
                db.execute("PRAGMA journal_mode=WAL")
        except (OSError, sqlite3.Error) as e:
            raise UserError(f"cannot open the {cls.NAME} {p}: {e}") from None
        opened = cls(p, db, readonly)
        opened._check_schema()
        return opened

    def _check_schema(self) -> None:
        try:
            if not self.readonly:
                with self.transaction():
                    row = self._version()
                    if row is None or int(row[0]) <= self.VERSION:  # new, or older: add what is missing
                        self.db.executescript(
                            "CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);"
                            + self.SCHEMA)
                        self.db.execute("INSERT OR REPLACE INTO meta VALUES ('schema_version', ?)", (str(self.VERSION),))
            row = self._version()
        except sqlite3.Error as e:
            raise UserError(f"{self.path} is not a tvmbench {self.NAME} ({e}); {self.ELSEWHERE}") from None
        version = int(row[0]) if row else 0
        if version > self.VERSION:
            raise UserError(f"{self.path} has schema version {version}, newer than this tvmbench reads "
                            f"({self.VERSION}); upgrade tvmbench or {self.ELSEWHERE}")

    def _version(self) -> tuple[Any, ...] | None:
        if not self.db.execute("SELECT 1 FROM sqlite_master WHERE name = 'meta'").fetchone():
            return None
        return self.db.execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchone()

    @contextlib.contextmanager
    def transaction(self) -> Iterator[sqlite3.Connection]:
        """One write transaction (BEGIN IMMEDIATE: a second writer waits for this one)."""
        if self.readonly:
            raise UserError(f"the {self.NAME} {self.path} is open read-only")
        try:
            self.db.execute("BEGIN IMMEDIATE")
        except sqlite3.OperationalError as e:
            raise UserError(f"cannot write the {self.NAME} {self.path}: {e}") from None
        try:
            yield self.db
        except BaseException:
            self.db.rollback()
            raise
        else:
            self.db.commit()

    def close(self) -> None:
        self.db.close()
