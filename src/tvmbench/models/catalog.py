"""Parameters and FLOPs of every zoo model at its default input, cached on disk.

Building all zoo models takes a minute or two (bert-large alone has 335 M parameters), so the
numbers are computed once per tvmbench/torch/transformers version and kept in the cache folder.
"""

from __future__ import annotations

import json
from typing import Any

from rich.console import Console
from rich.progress import Progress

from tvmbench.files import write_json_atomic
from tvmbench.models import ModelOptions, count_flops, load_model
from tvmbench.models.zoo import ZOO
from tvmbench.paths import cache_dir


def _default_input(name: str) -> str:
    entry = ZOO[name]
    if entry.default_seq_length:
        return f"1x{entry.default_seq_length} tokens"
    return f"1x3x{entry.default_image_size}x{entry.default_image_size}"


def _cache_file() -> Any:
    from tvmbench.version import package_versions

    v = package_versions()
    tag = f"{v.get('torch')}-{v.get('torchvision')}-{v.get('transformers')}"
    return cache_dir("zoo") / f"stats-{tag}.json"


def zoo_stats(with_stats: bool = True, console: Console | None = None) -> list[dict[str, Any]]:
    rows = [{"name": n, "family": e.family, "description": e.description, "default_input": _default_input(n)}
            for n, e in ZOO.items()]
    if not with_stats:
        return rows
    path = _cache_file()
    cached: dict[str, Any] = json.loads(path.read_text()) if path.is_file() else {}
    todo = [r for r in rows if r["name"] not in cached]
    if todo:
        with Progress(console=console, transient=True) as progress:
            task = progress.add_task("building zoo models for their statistics", total=len(todo))
            for r in todo:
                progress.update(task, description=f"building {r['name']}")
                model = load_model(r["name"], ModelOptions())
                cached[r["name"]] = {"param_count": model.param_count, "flops": count_flops(model)}
                del model
                write_json_atomic(path, cached)  # keep what is done if interrupted
                progress.advance(task)
    for r in rows:
        r.update(cached.get(r["name"], {}))
    return rows
