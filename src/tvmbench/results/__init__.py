"""Result documents: writing them safely and showing them to people."""

from tvmbench.results.report import make_console, print_run
from tvmbench.results.writers import to_jsonable, write_csv_atomic, write_json_atomic

__all__ = ["make_console", "print_run", "to_jsonable", "write_csv_atomic", "write_json_atomic"]
