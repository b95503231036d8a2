"""Scalar expressions of queries: sqlglot syntax trees, typed and printed as Spark SQL.

Queries keep their scalar parts (filters, projections, aggregate arguments) as
sqlglot expressions: plain Python data that can be inspected, rewritten (column
renaming, substitution when maps fuse) and printed for Spark (``F.expr``) or for
``explain``. :func:`type_of` infers Spark types for the subset strata supports, so a
query's output flow has a schema before any Spark session exists.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping

import sqlglot
from sqlglot import exp

from strata.queries.plan.errors import QueryError

Expr = exp.Expr  # every sqlglot node (its parser returns Expr, the base of Expression)
MULT = "_mult"  # the multiplicity column: +n inserts, -n deletes (absent means +1)

_NUMERIC = ["tinyint", "smallint", "int", "bigint", "float", "double"]
# function names (Spark's, or sqlglot's class names in snake case) by the type Spark
# gives the call; tests/queries/test_function_types.py checks each against Spark
_STRING_FUNCS = {"lower", "upper", "concat", "substr", "substring", "trim", "ltrim", "rtrim",
                 "lpad", "rpad", "pad", "replace", "regexp_extract", "regexp_replace",
                 "split_part", "concat_ws", "parse_url", "substring_index", "md5", "sha",
                 "sha1", "sha2", "initcap", "left", "right", "translate", "reverse", "repeat",
                 "to_base64", "base64"}
_DOUBLE_FUNCS = {"sqrt", "ln", "log", "log10", "log2", "exp", "pow", "power", "sin", "cos",
                 "tan", "atan", "atan2", "cbrt", "degrees", "radians", "sign", "signum"}
_LONG_FUNCS = {"floor", "ceil", "ceiling", "xxhash64", "crc32"}
_INT_FUNCS = {"length", "char_length", "year", "month", "day", "dayofweek", "hour", "minute",
              "second", "instr", "str_position", "dayofmonth", "quarter", "hash", "ascii",
              "size", "array_size"}
_SAME_FUNCS = {"abs", "negative", "round", "bround", "coalesce", "nvl", "ifnull", "greatest",
               "least", "nullif", "pmod"}
_BOOL_FUNCS = {"starts_with", "startswith", "ends_with", "endswith", "contains"}
# dates and times: (sqlglot's classes, Spark functions it leaves anonymous, result type)
_TIME_FUNCS: tuple[tuple[tuple[type, ...], frozenset[str], str], ...] = (
    ((exp.TimestampTrunc,), frozenset({"timestamp_seconds", "timestamp_millis",
                                       "timestamp_micros"}), "timestamp"),
    ((exp.DateTrunc, exp.TsOrDsToDate, exp.TsOrDsAdd, exp.LastDay, exp.AddMonths),
     frozenset({"make_date", "next_day"}), "date"),
    ((exp.TimeToStr, exp.UnixToStr), frozenset(), "string"),
    ((exp.StrToUnix, exp.UnixSeconds), frozenset({"unix_millis", "unix_date"}), "bigint"),
    ((exp.DateDiff, exp.WeekOfYear, exp.DayOfYear, exp.DayOfWeek), frozenset(), "int"),
    ((exp.MonthsBetween,), frozenset(), "double"),
)
_BOOL_TYPES = (exp.Predicate, exp.Connector, exp.Not, exp.Between, exp.In, exp.Is, exp.Like,
               exp.ILike, exp.Boolean)
AGGREGATES = {"count", "sum", "avg", "mean", "min", "max", "stddev", "stddev_samp",
              "stddev_pop", "variance", "var_samp", "var_pop"}


def parse(text: str | Expr) -> Expr:
    """A scalar expression from SQL text (Spark dialect) or an expression as it is."""
    if isinstance(text, exp.Expr):
        return text
    try:
        return sqlglot.parse_one(text, read="spark")
    except sqlglot.errors.ParseError as e:
        raise QueryError(f"cannot parse expression {text!r}: {e.errors[0]['description']}"
                         ) from None


def to_sql(e: Expr) -> str:
    """Spark SQL text of ``e``; decimal literals become doubles (Spark would read ``1.5``
    as a decimal, which silently changes result types)."""
    def doubles(node: Expr) -> Expr:
        if isinstance(node, exp.Literal) and node.is_number and any(
                c in node.this for c in ".eE"):
            return exp.cast(node.copy(), "double")
        return node

    return e.transform(doubles).sql(dialect="spark")


def columns(e: Expr) -> list[exp.Column]:
    return list(e.find_all(exp.Column))


def column_names(e: Expr) -> set[str]:
    return {c.name for c in columns(e)}


def rename_columns(e: Expr, fn: Callable[[exp.Column], str]) -> Expr:
    """A copy of ``e`` with each column reference replaced by an unqualified ``fn(col)``."""
    return e.copy().transform(
        lambda n: exp.column(fn(n), quoted=True) if isinstance(n, exp.Column) else n)


def substitute(e: Expr, defs: Mapping[str, Expr]) -> Expr:
    """Replace references to columns named in ``defs`` by their defining expressions
    (used when two maps fuse)."""
    def sub(n: Expr) -> Expr:
        if isinstance(n, exp.Column) and not n.table and n.name in defs:
            return exp.paren(defs[n.name].copy()) if not isinstance(
                defs[n.name], (exp.Column, exp.Literal)) else defs[n.name].copy()
        return n

    return e.copy().transform(sub)


def conjuncts(e: Expr) -> list[Expr]:
    """The parts of an ``AND`` chain (``e`` itself if it is not one)."""
    e = e.unnest() if isinstance(e, exp.Paren) else e
    return list(e.flatten()) if isinstance(e, exp.And) else [e]


def and_all(*es: Expr | None) -> Expr | None:
    """The conjunction of the given conditions (None if there are none)."""
    parts = [x for x in es if x is not None]
    if not parts:
        return None
    out = parts[0]
    for p in parts[1:]:
        out = exp.and_(out, p)
    return out


def bind(body: str, args: Mapping[str, str]) -> str:
    """SQL ``body`` with the columns named in ``args`` replaced by their SQL (parenthesised),
    on the parsed expression, so only whole identifiers are replaced: how lift, merge and
    answer templates get their arguments."""
    return _bind(body, tuple(args.items()))


@functools.lru_cache(maxsize=4096)
def _bind(body: str, args: tuple[tuple[str, str], ...]) -> str:
    tree = sqlglot.parse_one(body, read="spark")
    repl = {k: sqlglot.parse_one(v, read="spark") for k, v in args}
    out = tree.transform(lambda n: exp.paren(repl[n.name].copy())
                         if isinstance(n, exp.Column) and not n.table and n.name in repl else n)
    return out.sql(dialect="spark")


def col(name: str) -> Expr:
    return exp.column(name, quoted=True)


def is_aggregate(e: Expr) -> bool:
    return isinstance(e, exp.AggFunc) or (
        isinstance(e, exp.Anonymous) and e.name.lower() in AGGREGATES)


def contains_aggregate(e: Expr) -> bool:
    return any(is_aggregate(n) for n in e.walk())


# -- types ------------------------------------------------------------------------------
def widest(types: list[str]) -> str:
    """The type values of all ``types`` fit in (numbers widen; others must agree)."""
    known = [t for t in types if t != "void"]
    if not known:
        return "string"
    if all(t in _NUMERIC for t in known):
        return max(known, key=_NUMERIC.index)
    if len(set(known)) == 1:
        return known[0]
    raise QueryError(f"cannot combine values of types {sorted(set(known))}")


def type_of(e: Expr, schema: Mapping[str, str]) -> str:
    """The Spark SQL type of scalar expression ``e`` over columns typed by ``schema``."""
    if isinstance(e, exp.Paren):
        return type_of(e.this, schema)
    if isinstance(e, exp.Bracket) and len(e.expressions) == 1:  # arr[i], element_at(arr, i)
        array = type_of(e.this, schema)
        if array.startswith("array<") and array.endswith(">"):
            type_of(e.expressions[0], schema)
            return array[len("array<"):-1]
        raise QueryError(f"{e.sql(dialect='spark')!r}: indexing needs an array, not {array}")
    if isinstance(e, exp.RegexpSplit):
        return "array<string>"
    if isinstance(e, exp.Column):
        if e.name not in schema:
            raise QueryError(f"unknown column {e.sql()!r}; known: {sorted(schema)}")
        return schema[e.name]
    if isinstance(e, exp.Literal):
        if e.is_string:
            return "string"
        return "double" if any(c in e.this for c in ".eE") else (
            "int" if abs(int(e.this)) < 2**31 else "bigint")
    if isinstance(e, exp.Null):
        return "void"
    if isinstance(e, exp.Cast):
        return e.to.sql(dialect="spark").lower()
    if isinstance(e, _BOOL_TYPES):
        for c in columns(e):
            type_of(c, schema)
        return "boolean"
    if isinstance(e, exp.Div):
        type_of(e.left, schema), type_of(e.right, schema)
        return "double"
    if isinstance(e, (exp.Add, exp.Sub, exp.Mul, exp.Mod, exp.IntDiv)):
        t = widest([type_of(e.left, schema), type_of(e.right, schema)])
        if t not in _NUMERIC:
            raise QueryError(f"arithmetic on {t} values in {e.sql()!r}")
        return "bigint" if isinstance(e, exp.IntDiv) else t
    if isinstance(e, exp.Neg):
        return type_of(e.this, schema)
    if isinstance(e, exp.DPipe):
        return "string"
    if isinstance(e, (exp.Case, exp.If)):
        branches = [i.args.get("true") for i in e.args.get("ifs", [])] if isinstance(
            e, exp.Case) else [e.args.get("true")]
        branches.append(e.args.get("default") or e.args.get("false"))
        return widest([type_of(b, schema) for b in branches if b is not None])
    if isinstance(e, exp.GenerateSeries):  # sequence(start, stop[, step]) of integers
        t = widest([type_of(a, schema) for a in e.iter_expressions()])
        if t not in ("tinyint", "smallint", "int", "bigint"):
            raise QueryError(f"{e.sql(dialect='spark')}: sequence of {t} values is not "
                             "supported in queries (integers are)")
        return f"array<{t}>"
    if isinstance(e, exp.Array):  # array(a, b, …)
        return f"array<{widest([type_of(a, schema) for a in e.expressions])}>"
    if isinstance(e, exp.Func):
        name = (e.name if isinstance(e, exp.Anonymous) else e.sql_name()).lower()
        args = [a for a in e.iter_expressions()]
        if name in _STRING_FUNCS or isinstance(e, (exp.Lower, exp.Upper, exp.Concat,
                                                   exp.Substring, exp.Trim)):
            return "string"
        if name in _DOUBLE_FUNCS or isinstance(e, (exp.Sqrt, exp.Ln, exp.Exp, exp.Pow,
                                                   exp.Log)):
            return "double"
        if name in _LONG_FUNCS or isinstance(e, (exp.Floor, exp.Ceil)):
            return "bigint"
        if name in _INT_FUNCS or isinstance(e, exp.Length):
            return "int"
        if name in _BOOL_FUNCS:
            return "boolean"
        if name in _SAME_FUNCS or isinstance(e, (exp.Abs, exp.Round, exp.Coalesce,
                                                 exp.Greatest, exp.Least, exp.Nullif)):
            return widest([type_of(a, schema) for a in args])
        for classes, names, type_ in _TIME_FUNCS:
            if isinstance(e, classes) or name in names:
                return type_
        raise QueryError(f"function {e.sql(dialect='spark')} is not supported in queries")
    raise QueryError(f"expression {e.sql()!r} ({type(e).__name__}) is not supported in queries")


_RANKS = (exp.RowNumber, exp.Rank, exp.DenseRank, exp.Ntile)
_VALUES = (exp.Min, exp.Max, exp.Lag, exp.Lead, exp.FirstValue, exp.LastValue, exp.NthValue)


def window_type(e: exp.Window, schema: Mapping[str, str]) -> str:
    """The Spark SQL type of window function ``e`` (``f(…) OVER (…)``) over ``schema``."""
    f = e.this
    if isinstance(f, _RANKS):
        return "int"
    if isinstance(f, (exp.PercentRank, exp.CumeDist)):
        return "double"
    if isinstance(f, exp.Count):
        return "bigint"
    if isinstance(f, (exp.Sum, exp.Avg)):
        t = type_of(f.this, schema)
        if t not in _NUMERIC:
            raise QueryError(f"{e.sql(dialect='spark')}: {f.key} of {t} values is not "
                             "supported over a window (integers and doubles are)")
        return "double" if isinstance(f, exp.Avg) or t in ("float", "double") else "bigint"
    if isinstance(f, _VALUES):
        return type_of(f.this, schema)
    raise QueryError(f"window function {f.sql(dialect='spark')} is not supported; use "
                     "row_number, rank, dense_rank, ntile, percent_rank, cume_dist, lag, "
                     "lead, first_value, last_value, nth_value, count, sum, avg, min or max")
