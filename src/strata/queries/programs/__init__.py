"""The stage programs the controller runs for queries: a query's epochs (general plan,
recomputation, iteration, the vectorized route of a group-by) and ``add_query``, which
chooses among them (docs/architecture.md, "Adding a new kind of stage")."""
