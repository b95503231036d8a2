"""The query algebra and its incremental program: the nodes, scalar expressions typed as
Spark types them, aggregates as monoids, and the derivation of ``h``, ``⊗`` and ``a``
(docs/architecture.md, "Layers"). Plain Python data: nothing here needs Spark."""
