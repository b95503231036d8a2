"""Window tests run over both pane stores: the driver's and the executors'."""

from __future__ import annotations

import pytest

from strata import config

# `make test` runs these over the executors' store only (the store for data the driver
# cannot hold; small stages elsewhere in the suite run on the driver's): their driver
# variants are in the slow tier
HEAVY = frozenset({"test_kill_9_inside_window_epochs",
                   "test_random_windows_equal_duckdb_over_their_c2_cells",
                   "test_complete_results_are_final_under_out_of_order_arrival"})


@pytest.hookimpl(tryfirst=True)  # before ``-m`` deselects by marker
def pytest_collection_modifyitems(items):
    for item in items:
        spec = getattr(item, "callspec", None)
        if spec and spec.params.get("store") == "driver" and item.originalname in HEAVY:
            item.add_marker(pytest.mark.slow)


@pytest.fixture(params=["driver", "executors"])
def store(request, spark):
    """``spark.strata.window.store`` for the test (restored after it)."""
    spark.conf.set(config.WINDOW_STORE.name, request.param)
    yield request.param
    spark.conf.unset(config.WINDOW_STORE.name)
