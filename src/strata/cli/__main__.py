from strata.cli import app

app()
