"""Dataflows that ship with strata (used by the demo, the tests and the benchmarks)."""
