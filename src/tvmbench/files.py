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
    with replacing(path) as tmp, open(tmp, "w", newline="") as f:
        f.write(text)
        f.flush()
        os.fsync(f.fileno())
    return Path(path)


def write_json_atomic(path: str | Path, data: Any) -> Path:
    return write_text_atomic(path, json.dumps(to_jsonable(data), indent=2) + "\n")


def write_csv_atomic(path: str | Path, rows: list[dict[str, Any]], fields: list[str]) -> Path:
    """CSV of ``rows`` (only ``fields``, in that order)."""
    buf = io.StringIO()
    writer = csv.DictWriter(buf, fieldnames=fields, extrasaction="ignore")
    writer.writeheader()
    writer.writerows(to_jsonable(rows))
    return write_text_atomic(path, buf.getvalue())
