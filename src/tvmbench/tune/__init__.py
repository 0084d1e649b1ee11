"""MetaSchedule tuning into a persistent per-target database that later runs reuse."""

from tvmbench.tune.database import TuningDatabase, default_database_dir
from tvmbench.tune.tuner import TuneConfig, TuneReport, tune_model

__all__ = ["TuneConfig", "TuneReport", "TuningDatabase", "default_database_dir", "tune_model"]
