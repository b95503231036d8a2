"""The settings table (src/strata/config.py): every setting the code and tests name is
in it, docs/configuration.md is its generated text, and its readers parse and default
as the table says. No Spark session is needed."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from strata import config

ROOT = Path(__file__).resolve().parent.parent
NAMED = re.compile(r"spark\.strata\.[A-Za-z0-9_.]*[A-Za-z0-9_]|STRATA_[A-Z0-9_]*[A-Z0-9]")
# STRATA_* strings that are not settings: the window query's SQL call (windows/query.py)
NOT_SETTINGS = {"STRATA_WINDOW"}
SCANNED = ("src", "tests", "benchmarks", "scripts", "docs")


def _named() -> dict[str, list[str]]:
    found: dict[str, list[str]] = {}
    for top in SCANNED:
        for path in sorted((ROOT / top).rglob("*")):
            if path.suffix not in (".py", ".sh", ".toml", ".md") or not path.is_file():
                continue
            for name in NAMED.findall(path.read_text(encoding="utf-8", errors="replace")):
                found.setdefault(name, []).append(str(path.relative_to(ROOT)))
    return found


def test_every_setting_named_in_the_code_tests_and_docs_is_in_the_table():
    found = _named()
    assert "spark.strata.driverEpoch.maxRows" in found and "STRATA_REMOTE" in found
    missing = {n: sorted(set(where)) for n, where in found.items()
               if n not in config.BY_NAME and n not in NOT_SETTINGS}
    assert not missing, f"add these to src/strata/config.py SETTINGS: {missing}"


def test_the_table_names_each_setting_once_with_a_default_of_its_type():
    assert len(config.BY_NAME) == len(config.SETTINGS)
    for s in config.SETTINGS:
        assert s.name.startswith("spark.strata." if s.kind == "conf" else "STRATA_"), s
        assert s.meaning.endswith(".") and s.type in (int, float, str, bool), s
        assert s.default is None or type(s.default) is s.type, s
    for limit, default in ((config.TRANSLATE_DRIVER_RECORDS, 50_000),
                           (config.EXCHANGE_MIN_RECORDS, 50_000),
                           (config.QUERY_DRIVER_ROWS, 100_000),
                           (config.DRIVER_EPOCH_ROWS, 250_000),
                           (config.HELD_SEGMENT_ROWS, 2_000_000)):
        assert limit.kind == "conf" and limit.default == default, limit


def test_docs_configuration_md_is_the_generated_table():
    written = (ROOT / "docs" / "configuration.md").read_text(encoding="utf-8")
    assert written == config.markdown(), (
        "regenerate: python -m strata.config --markdown > docs/configuration.md")
    out = subprocess.run([sys.executable, "-m", "strata.config", "--markdown"],
                         capture_output=True, text=True, check=True, cwd=ROOT)
    assert out.stdout == written
    assert "| `STRATA_DRIVER_MEMORY` | str | 4g |" in written
    assert "| `spark.strata.query.driverRows` | int | 100,000 |" in written


def test_a_conf_value_parses_to_its_type_or_the_default():
    """What :func:`config.conf` returns for a session conf's text (None: unset); the
    reading from a real session is exercised by test_vectorized.py and
    test_exchange.py."""
    assert config.parse(config.DRIVER_EPOCH_ROWS, None) == 250_000
    assert config.parse(config.DRIVER_EPOCH_ROWS, " -1 ") == -1
    assert config.parse(config.ARROW, None) is True
    for text, value in (("false", False), ("FALSE", False), ("0", False), ("true", True)):
        assert config.parse(config.ARROW, text) is value
    assert config.parse(config.EXCHANGE, "Arrow") == "arrow"
    assert config.parse(config.TEST_MARKER, "a=b") == "a=b"
    assert config.parse(config.TEST_MARKER, None) is None


@pytest.mark.parametrize(("setting", "value", "message"), [
    (config.DRIVER_EPOCH_ROWS, "lots", "driverEpoch.maxRows='lots' is not a whole number; "
                                       "set it to a count (default 250,000)"),
    (config.ARROW, "maybe", "spark.strata.arrow='maybe' is not true or false"),
    (config.EXCHANGE, "packed", "'auto', 'arrow' or 'rows', not 'packed'"),
])
def test_conf_names_a_value_that_does_not_parse(setting, value, message):
    with pytest.raises(config.SettingError) as info:
        config.parse(setting, value)
    assert message in str(info.value) and "session conf" in str(info.value)


def test_env_is_read_when_used_typed_or_default(monkeypatch):
    monkeypatch.delenv("STRATA_RUN_CACHE_MB", raising=False)
    monkeypatch.delenv("STRATA_REMOTE", raising=False)
    assert config.env(config.RUN_CACHE_MB) == 256.0
    assert config.env(config.REMOTE) is None
    monkeypatch.setenv("STRATA_RUN_CACHE_MB", "0.5")
    assert config.env(config.RUN_CACHE_MB) == 0.5
    monkeypatch.setenv("STRATA_REMOTE", "")  # empty: unset
    assert config.env(config.REMOTE) is None
    monkeypatch.setenv("STRATA_REMOTE", "sc://h:15002")
    assert config.env(config.REMOTE) == "sc://h:15002"
    monkeypatch.setenv("STRATA_MACHINE_RUN_CACHE_MB", "big")
    with pytest.raises(config.SettingError, match="environment variable "
                       "STRATA_MACHINE_RUN_CACHE_MB='big' is not a number"):
        config.env(config.MACHINE_RUN_CACHE_MB)


def test_the_run_caches_read_their_budgets_when_used(monkeypatch, tmp_path):
    from strata.storage.columnar_runs import RUN_CACHE
    from strata.storage.machine_runs import MACHINE_RUNS

    monkeypatch.setenv("STRATA_RUN_CACHE_MB", "1")
    monkeypatch.setenv("STRATA_MACHINE_RUN_CACHE_MB", "0")
    monkeypatch.setenv("STRATA_MACHINE_RUN_CACHE_DIR", str(tmp_path))
    assert RUN_CACHE.budget == 1 << 20
    assert MACHINE_RUNS.budget == 0 and not MACHINE_RUNS.enabled
    assert MACHINE_RUNS.directory == str(tmp_path)
    monkeypatch.setenv("STRATA_MACHINE_RUN_CACHE_MB", "2")
    assert MACHINE_RUNS.budget == 2 << 20 and MACHINE_RUNS.enabled
