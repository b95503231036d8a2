"""Windows (iMR): sliding windows from panes, with C2 fidelity, eviction and shedding.

:func:`add_window` adds a :class:`WindowQuery` (SQL with ``WINDOW(...)`` in its
``GROUP BY``, via :func:`from_sql`, or a :class:`MapReduce`) to a dataflow. See
``docs/windows.md``. :func:`scoreboards` reads each result's full C2 from the query's
scoreboard flow.
"""

from strata.windows.aggregates import MapReduce
from strata.windows.c2 import Scoreboard, Status
from strata.windows.policies import Eviction, Fidelity
from strata.windows.program import WindowProgram
from strata.windows.query import Shedding, WindowQuery, from_sql
from strata.windows.rows import scoreboards
from strata.windows.stage import add_window

__all__ = ["Eviction", "Fidelity", "MapReduce", "Scoreboard", "Shedding", "Status",
           "WindowProgram", "WindowQuery", "add_window", "from_sql", "scoreboards"]
