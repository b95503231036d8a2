"""Creating the Spark session strata runs on."""

from __future__ import annotations

import logging
import os
import sys
import warnings
from importlib.resources import files

from pyspark.sql import SparkSession

DEFAULT_MASTER = "local[*]"


def get_spark(master: str | None = None, app_name: str = "strata", **conf: str) -> SparkSession:
    """Return the active Spark session, creating one for ``master`` if there is none.

    The default is embedded Spark (``local[*]``); pass a master URL (``spark://…``,
    ``yarn``, ``k8s://…``) to run the same dataflow on a cluster. Adaptive query
    execution is switched off because strata relies on a shuffle's output partition
    ``i`` being read by task ``i`` (the state of partition ``i`` lives beside it).
    PySpark's DataFrame debugging context is off: it costs several JVM round trips for
    every column function a query plan is built from, and strata names the failing stage
    and epoch in its own errors.
    """
    active = SparkSession.getActiveSession()
    if active is not None:
        return active
    # Python workers must run the interpreter that holds strata and its pinned deps.
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    # PySpark 4.3 warns about pandas 3 on import; strata's paths do not use the affected parts.
    warnings.filterwarnings("ignore", message="PySpark does not yet fully support pandas")
    log4j = files("strata") / "data" / "log4j2.properties"
    # PySpark logs every failed DataFrame analysis as a JSON dump; strata reports it itself.
    logging.getLogger("DataFrameQueryContextLogger").setLevel(logging.CRITICAL)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    builder = (
        SparkSession.builder.master(master or os.environ.get("STRATA_MASTER", DEFAULT_MASTER))
        .appName(app_name)
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.adaptive.enabled", "false")
        .config("spark.python.worker.reuse", "true")
        .config("spark.python.sql.dataFrameDebugging.enabled", "false")
        .config("spark.ui.enabled", "true")
        .config("spark.ui.port", "0")
        .config("spark.driver.memory", os.environ.get("STRATA_DRIVER_MEMORY", "4g"))
        .config("spark.driver.extraJavaOptions", f"-Dlog4j2.configurationFile=file:{log4j}")
    )
    for k, v in conf.items():
        builder = builder.config(k.replace("_", "."), v)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    return spark
