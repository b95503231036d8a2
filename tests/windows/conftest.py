"""Window tests run over both pane stores: the driver's and the executors'."""

from __future__ import annotations

import pytest

from strata import config


@pytest.fixture(params=["driver", "executors"])
def store(request, spark):
    """``spark.strata.window.store`` for the test (restored after it)."""
    spark.conf.set(config.WINDOW_STORE.name, request.param)
    yield request.param
    spark.conf.unset(config.WINDOW_STORE.name)
