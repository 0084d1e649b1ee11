"""A backend whose framework is not installed, to test that it is reported, not fatal."""

from tvmbench.backends.base import Backend


class GhostBackend(Backend):
    name = "ghost"
    result_key = "ghost"
    requires = ("a_framework_that_is_not_installed",)
    extra = "ghost"

    def prepare(self, model):  # pragma: no cover - never reached
        raise AssertionError

    def run(self):  # pragma: no cover
        raise AssertionError

    def outputs(self):  # pragma: no cover
        raise AssertionError
