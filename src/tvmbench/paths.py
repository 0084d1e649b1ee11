"""Where generated artifacts go: one cache folder, never inside the git tree unless asked.

``TVMBENCH_CACHE`` overrides the default ``~/.cache/tvmbench`` (the Makefile points it at the
project's ignored ``.cache/`` so a checkout is self-contained).
"""

from __future__ import annotations

import os
from pathlib import Path


def cache_dir(*parts: str) -> Path:
    root = Path(os.environ.get("TVMBENCH_CACHE") or Path.home() / ".cache" / "tvmbench").expanduser()
    path = root.joinpath(*parts)
    path.mkdir(parents=True, exist_ok=True)
    return path
