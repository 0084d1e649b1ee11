import os

import pytest


# Tests never write into the user's ~/.cache: one cache folder per test session.
@pytest.fixture(scope="session", autouse=True)
def _isolated_cache(tmp_path_factory):
    os.environ["TVMBENCH_CACHE"] = str(tmp_path_factory.mktemp("tvmbench-cache"))
    os.environ.setdefault("TVM_NUM_THREADS", "2")
    yield
