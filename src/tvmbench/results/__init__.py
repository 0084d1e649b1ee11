"""Result documents: writing them safely and showing them to people."""

from tvmbench.results.report import print_run
from tvmbench.results.writers import to_jsonable, write_json_atomic

__all__ = ["print_run", "to_jsonable", "write_json_atomic"]
