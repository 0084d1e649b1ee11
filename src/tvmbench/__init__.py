"""tvmbench: compile, tune, profile and benchmark models with Apache TVM, side by side with peers.

The Python API (``tvmbench.run``, ``compare``, ``tune``, ``profile``) is what the command line
calls; see ``tvmbench.api``. Importing tvmbench imports neither torch nor TVM: each call does,
in the worker processes that measure.
"""

from tvmbench.version import __version__

__all__ = ["__version__", "compare", "profile", "run", "tune"]


def __getattr__(name: str):  # the API on first use, so `import tvmbench` stays light
    if name in ("run", "compare", "tune", "profile"):
        from tvmbench import api

        return getattr(api, name)
    raise AttributeError(f"module 'tvmbench' has no attribute {name!r}")
