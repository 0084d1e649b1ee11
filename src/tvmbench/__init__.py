"""tvmbench: compile, tune, profile and benchmark models with Apache TVM, side by side with peers."""

__version__ = "0.1.0"
