"""The URL-count dataflow (CBP Figure 3) as a pipeline file for ``strata run``."""

from strata.apps.urlcount import urlcount_dataflow

dataflow = urlcount_dataflow()
