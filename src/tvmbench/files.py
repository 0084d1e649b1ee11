"""Write results so that an interrupted write never leaves a truncated file."""

from __future__ import annotations

import csv
import io
import json
import math
import os
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np


def to_jsonable(value: Any) -> Any:
    """Plain JSON types: numpy scalars/arrays to Python, NaN/Inf to null (JSON has neither)."""
    if isinstance(value, dict):
        return {str(k): to_jsonable(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [to_jsonable(v) for v in value]
    if isinstance(value, np.ndarray):
        return to_jsonable(value.tolist())
    if isinstance(value, np.generic):
        return to_jsonable(value.item())
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, Path):
        return str(value)
    return value


@contextmanager
def replacing(path: str | Path, suffix: str = "") -> Iterator[Path]:
    """A temporary path in ``path``'s folder that replaces ``path`` in one rename when the block
    succeeds: readers see the old file or the new one, never a truncated one, and a failed or
    interrupted write leaves nothing behind."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=suffix, dir=path.parent)
    os.close(fd)
    umask = os.umask(0)
    os.umask(umask)
    os.chmod(tmp, 0o666 & ~umask)  # mkstemp makes it 0600; the result should be an ordinary file
    try:
        yield Path(tmp)
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)


def write_text_atomic(path: str | Path, text: str) -> Path:
    """Write ``text`` to ``path`` in one rename (see :func:`replacing`). A symlink is written
    through (its target is replaced, the link stays) and a device or pipe (``/dev/stdout``) is
    written to directly: renaming over them would replace them with a plain file."""
    p = Path(path).expanduser()
    if p.is_symlink():
        p = p.resolve()
    if p.exists() and not p.is_file() and not p.is_dir():
        with open(p, "w", newline="") as f:
            f.write(text)
        return Path(path)
    with replacing(p) as tmp, open(tmp, "w", newline="") as f:
        f.write(text)
        f.flush()
        os.fsync(f.fileno())
    return Path(path)


def check_writable(path: str | Path) -> None:
    """Fail now, in one line, if ``path`` cannot be written: before the measuring, not after."""
    from tvmbench.errors import UserError

    p = Path(path).expanduser()
    if p.is_symlink():
        p = p.resolve()
    if p.is_dir():
        raise UserError(f"cannot write {path}: it is a folder; give a file name")
    if p.exists() and not p.is_file():
        if not os.access(p, os.W_OK):
            raise UserError(f"cannot write {path}: permission denied")
        return
    try:
        p.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=f".{p.name}.", dir=p.parent)
        os.close(fd)
        os.unlink(tmp)
    except OSError as e:
        raise UserError(f"cannot write {path}: {e.strerror or e}; choose another output path") from None


def check_writable_dir(path: str | Path, what: str = "output folder") -> Path:
    """Make the folder ``path`` (and its parents) now and check a file can be written in it, or
    fail in one line: before the building and measuring, not after."""
    from tvmbench.errors import UserError

    p = Path(path).expanduser()
    try:
        p.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=".tvmbench-check.", dir=p)
        os.close(fd)
        os.unlink(tmp)
    except OSError as e:
        raise UserError(f"cannot write the {what} {path}: {e.strerror or e}; choose another folder") from None
    return p


def write_json_atomic(path: str | Path, data: Any) -> Path:
    return write_text_atomic(path, json.dumps(to_jsonable(data), indent=2) + "\n")


def parquet_available() -> bool:
    import importlib.util

    return importlib.util.find_spec("duckdb") is not None


def write_parquet_atomic(path: str | Path, columns: list[str], rows: list[tuple[Any, ...]]) -> Path:
    """Parquet of ``rows``, written by DuckDB (the optional ``parquet`` extra). Each column's type
    is taken from its values: integers BIGINT, numbers DOUBLE, anything else text."""
    import duckdb

    def sql_type(i: int) -> str:
        values = [r[i] for r in rows if r[i] is not None]
        if values and all(isinstance(v, int) and not isinstance(v, bool) for v in values):
            return "BIGINT"
        if values and all(isinstance(v, int | float) and not isinstance(v, bool) for v in values):
            return "DOUBLE"
        return "VARCHAR"

    types = [sql_type(i) for i in range(len(columns))]
    con = duckdb.connect()
    try:
        names = ", ".join(f'"{c.replace(chr(34), "")}" {t}' for c, t in zip(columns, types, strict=True))
        con.execute(f"CREATE TABLE rows ({names})")
        if rows:
            cast = [[v if t != "VARCHAR" or v is None else str(v) for v, t in zip(r, types, strict=True)]
                    for r in rows]
            con.executemany(f"INSERT INTO rows VALUES ({', '.join('?' * len(columns))})", cast)
        with replacing(path, ".parquet") as tmp:
            con.execute(f"COPY rows TO '{str(tmp).replace(chr(39), chr(39) * 2)}' (FORMAT PARQUET)")
    finally:
        con.close()
    return Path(path)


def write_csv_atomic(path: str | Path, rows: list[dict[str, Any]], fields: list[str]) -> Path:
    """CSV of ``rows`` (only ``fields``, in that order)."""
    buf = io.StringIO()
    writer = csv.DictWriter(buf, fieldnames=fields, extrasaction="ignore")
    writer.writeheader()
    writer.writerows(to_jsonable(rows))
    return write_text_atomic(path, buf.getvalue())
