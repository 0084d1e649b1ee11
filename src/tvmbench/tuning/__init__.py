"""MetaSchedule tuning into a persistent per-target database that later runs reuse.

``config`` (the options), ``database`` (the databases on disk, and which apply to a target),
``tuner`` (the search, in a worker process), ``build`` (MetaSchedule's builder made to work here).
"""
