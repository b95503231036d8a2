"""Query series (Comet): recurring queries over a stream's segments, run together.

:func:`add_series` adds the stage of a stream's series to a dataflow; ``strata series``
registers them in a home. See ``docs/series.md``.
"""

from strata.series.adhoc import ad_hoc
from strata.series.program import Series, SeriesProgram
from strata.series.stage import add_series, series_stage_name

__all__ = ["Series", "SeriesProgram", "ad_hoc", "add_series", "series_stage_name"]
