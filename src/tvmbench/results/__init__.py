"""Result documents: typed records (``records``), building them from measurements (``build``),
and showing them to people (``report``, ``summary``). Files are written by ``tvmbench.files``."""
