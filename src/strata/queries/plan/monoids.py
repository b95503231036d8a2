"""Aggregates as monoids: how each is lifted over an increment, merged and answered.

An aggregate call becomes one or more *parts*, columns of the group-by state. Each part
has a lift ``h`` (a Spark SQL aggregate over the increment's rows, weighted by their
multiplicity ``_mult``), a merge ``⊗`` (SQL over the state's value ``s`` and the
increment's value ``d``, either of which may be NULL when the group is new or untouched)
and the aggregate's answer ``a`` is SQL over its parts. For example ``avg(y)`` is the
pair ``(sum(y·m), count(y·m))`` merged by addition and answered by division.

Part kinds:

``add``       a sum of weighted values: merge is ``+``, invertible (deletes just subtract).
``least``/``greatest``  ``min``/``max`` of an input that never deletes: not invertible.
``multiset``  a map value → multiplicity (``min``/``max`` under deletes, ``count(distinct)``):
              merged by adding multiplicities and dropping zeros.
``user``      a user aggregate: the user's ``merge``, and ``inverse`` for deletes.
"""

from __future__ import annotations

from dataclasses import dataclass

from strata.queries.plan.errors import NotIncrementalError, QueryError
from strata.queries.plan.expressions import MULT, Expr, bind, to_sql, type_of


@dataclass(frozen=True)
class UserAggregate:
    """An aggregate defined by SQL snippets: ``lift`` over the argument ``x``, ``merge``
    and ``inverse`` over state values ``a`` and ``b``, ``zero`` (merge's identity),
    ``answer`` over ``a``. ``state_type`` and ``result_type`` are Spark SQL types.

    >>> product = UserAggregate("product", lift="x", merge="a * b", zero="1.0",
    ...                         inverse="1.0 / a", state_type="double")
    """

    name: str
    lift: str
    merge: str
    zero: str
    state_type: str
    answer: str = "a"
    inverse: str | None = None
    result_type: str | None = None


@dataclass(frozen=True)
class AggCall:
    """One aggregate call in a query: ``func(arg)``; ``arg`` is None for ``count(*)``."""

    func: str
    arg: Expr | None = None
    distinct: bool = False
    user: UserAggregate | None = None

    def describe(self) -> str:
        inner = "*" if self.arg is None else to_sql(self.arg)
        return f"{self.func}({'distinct ' if self.distinct else ''}{inner})"


@dataclass(frozen=True)
class Part:
    """A column of the group-by state that one aggregate keeps."""

    name: str
    kind: str  # add | least | greatest | multiset | user
    lift: str  # SQL aggregate over increment rows (for multiset: the value expression)
    merge: str  # SQL over `s` and `d`
    value_type: str = ""  # multiset: type of the values


@dataclass(frozen=True)
class Monoid:
    """The state parts of one aggregate call and its answer over them."""

    call: AggCall
    parts: tuple[Part, ...]
    answer: str
    result_type: str


def _q(name: str) -> str:
    return f"`{name}`"


def _add(name: str, lift: str) -> Part:
    return Part(name, "add", lift, "coalesce(s, 0) + coalesce(d, 0)")


def _multiset(name: str, value: str, vtype: str) -> Part:
    return Part(name, "multiset", value,
                "CASE WHEN s IS NULL THEN d WHEN d IS NULL THEN s ELSE map_filter("
                "map_zip_with(s, d, (k, v1, v2) -> coalesce(v1, 0) + coalesce(v2, 0)), "
                "(k, v) -> v <> 0) END", vtype)


NUMERIC_INTEGRAL = {"tinyint", "smallint", "int", "bigint"}
_VAR = {"variance": "var_samp", "stddev": "stddev_samp", "std": "stddev_samp"}
COUNT_PART = Part("_cnt", "add", f"sum({MULT})", "coalesce(s, 0) + coalesce(d, 0)")


def monoid(call: AggCall, prefix: str, schema: dict[str, str], retracts: bool) -> Monoid:
    """The monoid of ``call``; its parts are named ``{prefix}_…``. ``retracts`` says the
    aggregated input can delete rows, which rules out non-invertible merges."""
    func = _VAR.get(call.func, "avg" if call.func == "mean" else call.func)
    m = _q(MULT)
    if call.user is not None:
        return _user(call, prefix, retracts)
    if call.arg is None:
        if func != "count":
            raise QueryError(f"{func}(*) is not an aggregate; only count(*) is")
        return Monoid(call, (), f"{_q('_cnt')}", "bigint")
    x = f"({to_sql(call.arg)})"
    xt = type_of(call.arg, schema)
    n = f"{prefix}_n"
    count_x = _add(n, f"sum(CASE WHEN {x} IS NULL THEN 0 ELSE {m} END)")
    if call.distinct:
        if func != "count":
            raise QueryError(f"{func}(distinct …) is not supported; count(distinct …) is")
        p = _multiset(f"{prefix}_set", x, xt)
        return Monoid(call, (p,), f"CASE WHEN {_q(p.name)} IS NULL THEN 0 "
                                  f"ELSE size({_q(p.name)}) END", "bigint")
    if func == "count":
        return Monoid(call, (count_x,), _q(n), "bigint")
    numeric = NUMERIC_INTEGRAL | {"float", "double"}
    if func in ("sum", "avg", "var_samp", "var_pop", "stddev_samp", "stddev_pop") and (
            xt not in numeric):
        raise QueryError(f"{call.describe()}: {func} needs a number, not {xt}")
    if func == "sum":
        st = "bigint" if xt in NUMERIC_INTEGRAL else "double"
        s = _add(f"{prefix}_sum", f"sum(CAST({x} AS {st}) * {m})")
        return Monoid(call, (s, count_x),
                      f"CASE WHEN {_q(n)} > 0 THEN {_q(s.name)} END", st)
    if func in ("avg", "var_samp", "var_pop", "stddev_samp", "stddev_pop"):
        s = _add(f"{prefix}_sum", f"sum(CAST({x} AS double) * {m})")
        if func == "avg":
            return Monoid(call, (s, count_x),
                          f"CASE WHEN {_q(n)} > 0 THEN {_q(s.name)} / {_q(n)} END", "double")
        ss = _add(f"{prefix}_sq", f"sum(CAST({x} AS double) * CAST({x} AS double) * {m})")
        pop = func.endswith("_pop")
        min_n, denom = (0, _q(n)) if pop else (1, f"({_q(n)} - 1)")
        var = (f"greatest(({_q(ss.name)} - {_q(s.name)} * {_q(s.name)} / {_q(n)}) / {denom},"
               " 0D)")
        ans = var if func.startswith("var") else f"sqrt({var})"
        return Monoid(call, (s, ss, count_x), f"CASE WHEN {_q(n)} > {min_n} THEN {ans} END",
                      "double")
    if func in ("min", "max"):
        if retracts:  # a deleted minimum must be replaced: keep every value's multiplicity
            p = _multiset(f"{prefix}_set", x, xt)
            pick = "array_min" if func == "min" else "array_max"
            return Monoid(call, (p,), f"{pick}(map_keys({_q(p.name)}))", xt)
        kind = "least" if func == "min" else "greatest"
        p = Part(f"{prefix}_{func}", kind, f"{func}({x})", f"{kind}(s, d)")
        return Monoid(call, (p,), _q(p.name), xt)
    raise QueryError(f"aggregate {func}() is not supported; declare it as a UserAggregate")


def _user(call: AggCall, prefix: str, retracts: bool) -> Monoid:
    u = call.user
    assert u is not None
    if retracts and u.inverse is None:
        raise NotIncrementalError(
            f"aggregate {u.name}()", "has no inverse but its input can delete rows",
            "declare inverse= on the UserAggregate (e.g. \"-a\" for a sum)")
    x = f"({to_sql(call.arg)})" if call.arg is not None else "NULL"
    lifted = bind(u.lift, {"x": x})
    if u.inverse is not None:
        lifted = (f"CASE WHEN {_q(MULT)} > 0 THEN {lifted} "
                  f"ELSE {bind(u.inverse, {'a': lifted})} END")
    zero = f"CAST({u.zero} AS {u.state_type})"
    # NULL arguments are skipped, as SQL aggregates do; a group of only NULLs answers zero
    values = (f"filter(flatten(collect_list(array_repeat(CAST({lifted} AS {u.state_type}), "
              f"CAST(abs({_q(MULT)}) AS int)))), v -> v IS NOT NULL)")
    lift = f"aggregate({values}, {zero}, (a, b) -> {u.merge})"
    p = Part(f"{prefix}_u", "user", lift,
             f"CASE WHEN s IS NULL THEN d WHEN d IS NULL THEN s ELSE "
             f"{bind(u.merge, {'a': 's', 'b': 'd'})} END")
    return Monoid(call, (p,), bind(u.answer, {"a": _q(p.name)}),
                  u.result_type or u.state_type)

