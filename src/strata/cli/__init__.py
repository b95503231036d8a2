"""The ``strata`` command: run a dataflow over a home, ingest input, inspect, draw.

Errors strata reports (bad input, a failed epoch, a missing home) are printed as one
clean message on stderr with exit code 1; a home held by another controller exits with 75.
"""

from strata.cli import inspection  # noqa: F401  (registers status, show and export on app)
from strata.cli.commands import app
from strata.cli.pipelines import app as pipelines_app
from strata.cli.series import app as series_app
from strata.cli.windows import app as window_app

app.add_typer(series_app)
app.add_typer(window_app)
app.add_typer(pipelines_app)

__all__ = ["app"]
