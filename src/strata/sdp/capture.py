"""Python dataset bodies read as SQL: a tracing ``spark`` and DataFrame.

A body such as ``spark.table("orders").where("amount > 0").groupBy("country")
.agg(F.sum("amount").alias("total"))`` is called with :class:`TracingSession` as its
``spark``; each DataFrame operator wraps the SQL so far as a subquery, so the result is
one SELECT that strata compiles like a SQL file's (docs/sdp.md). Column objects are
taken from their text only where it is plain SQL (``sum(x) AS s``); PySpark prints
operators in prefix form and ``count_distinct`` like ``count``, so those, and every
operator not listed here, leave the body uncaptured (with the reason): it then runs as
written, by Spark, at each refresh.
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Callable, Mapping
from typing import Any

import sqlglot
from sqlglot import exp


class Uncaptured(Exception):
    """The body uses something strata does not read as SQL (the message says what)."""


_ids = itertools.count(1)
_PREFIX_OP = re.compile(r"(^|[(,\s])(and|or|not|in|[<>=!+\-*/%&|^]+)\(")
_COUNT_COLUMN = re.compile(r"\bcount\((?!\*\)|1\))")


def column_sql(c: Any, *, name_only: bool = False) -> str:
    """SQL text of a column argument: a string (a column name where ``name_only``, else
    an expression), or a PySpark Column whose text is plain SQL."""
    if isinstance(c, str):
        if name_only and c != "*" and not re.fullmatch(r"[A-Za-z_][\w.]*", c):
            return f"`{c}`"
        return c
    text = str(c)
    m = re.fullmatch(r"Column<'(.*)'>", text, re.S)
    if m is None:
        raise Uncaptured(f"argument {text[:80]!r} is neither a string nor a Column")
    inner = m[1]
    if _PREFIX_OP.search(inner) or _COUNT_COLUMN.search(inner):
        raise Uncaptured(f"the Column {inner[:80]!r} prints in a form that is not SQL; "
                         "write it as a SQL string (F.expr('…') or where('…'))")
    return inner


def _parse(sql: str) -> exp.Select:
    try:
        tree = sqlglot.parse_one(sql, read="spark")
    except sqlglot.errors.ParseError as e:
        raise Uncaptured(f"{sql[:80]!r} does not parse: {e}") from e
    if not isinstance(tree, exp.Query):
        raise Uncaptured(f"{sql[:80]!r} is not a query")
    return tree  # type: ignore[return-value]


class TracedFrame:
    """A DataFrame built by the body, held as one SELECT."""

    def __init__(self, query: exp.Expr) -> None:
        self.query = query

    def _wrap(self, select: str, tail: str = "") -> TracedFrame:
        alias = f"_t{next(_ids)}"
        inner = self.query.sql(dialect="spark")
        return TracedFrame(_parse(f"SELECT {select} FROM ({inner}) AS {alias} {tail}"))

    def select(self, *cols: Any) -> TracedFrame:
        flat = cols[0] if len(cols) == 1 and isinstance(cols[0], list | tuple) else cols
        return self._wrap(", ".join(column_sql(c, name_only=True) for c in flat))

    def selectExpr(self, *exprs: str) -> TracedFrame:
        return self._wrap(", ".join(exprs))

    def filter(self, condition: Any) -> TracedFrame:
        return self._wrap("*", f"WHERE {column_sql(condition)}")

    where = filter

    def withColumn(self, name: str, col: Any) -> TracedFrame:
        return self._wrap(f"*, {column_sql(col)} AS `{name}`")

    def withColumnRenamed(self, old: str, new: str) -> TracedFrame:
        raise Uncaptured("withColumnRenamed needs the frame's columns; use "
                         "select(…, F.col(old).alias(new)) or SQL")

    def groupBy(self, *cols: Any) -> TracedGroup:
        flat = cols[0] if len(cols) == 1 and isinstance(cols[0], list | tuple) else cols
        return TracedGroup(self, [column_sql(c, name_only=True) for c in flat])

    groupby = groupBy

    def agg(self, *exprs: Any) -> TracedFrame:
        return TracedGroup(self, []).agg(*exprs)

    def join(self, other: TracedFrame, on: Any = None, how: str | None = None
             ) -> TracedFrame:
        if not isinstance(other, TracedFrame):
            raise Uncaptured("join with something other than a captured DataFrame")
        kind = {None: "INNER", "inner": "INNER", "left": "LEFT", "left_outer": "LEFT",
                "leftouter": "LEFT", "right": "RIGHT", "right_outer": "RIGHT",
                "full": "FULL", "outer": "FULL", "full_outer": "FULL"}.get(how)
        if kind is None:
            raise Uncaptured(f"join how={how!r}")
        a, b = f"_t{next(_ids)}", f"_t{next(_ids)}"
        left, right = self.query.sql(dialect="spark"), other.query.sql(dialect="spark")
        if isinstance(on, str) or isinstance(on, list | tuple) and all(
                isinstance(c, str) for c in on):
            names = [on] if isinstance(on, str) else list(on)
            cond = f"USING ({', '.join(names)})"
        elif on is None:
            raise Uncaptured("a join without a condition (a cross join)")
        else:
            cond = f"ON {column_sql(on)}"
        return TracedFrame(_parse(f"SELECT * FROM ({left}) AS {a} {kind} JOIN ({right}) "
                                  f"AS {b} {cond}"))

    def _set(self, other: TracedFrame, op: str) -> TracedFrame:
        if not isinstance(other, TracedFrame):
            raise Uncaptured(f"{op} with something other than a captured DataFrame")
        return TracedFrame(_parse(f"{self.query.sql(dialect='spark')} {op} "
                                  f"{other.query.sql(dialect='spark')}"))

    def union(self, other: TracedFrame) -> TracedFrame:
        return self._set(other, "UNION ALL")

    unionAll = union

    def unionByName(self, other: TracedFrame, allowMissingColumns: bool = False
                    ) -> TracedFrame:
        if allowMissingColumns:
            raise Uncaptured("unionByName(allowMissingColumns=True)")
        return self._set(other, "UNION ALL")

    def intersect(self, other: TracedFrame) -> TracedFrame:
        return self._set(other, "INTERSECT")

    def distinct(self) -> TracedFrame:
        return self._wrap("DISTINCT *")

    def dropDuplicates(self, subset: list[str] | None = None) -> TracedFrame:
        if subset:
            raise Uncaptured("dropDuplicates(subset) keeps an arbitrary row per key")
        return self.distinct()

    def orderBy(self, *cols: Any, ascending: bool = True) -> TracedFrame:
        order = ", ".join(f"{column_sql(c, name_only=True)}{'' if ascending else ' DESC'}"
                          for c in cols)
        return self._wrap("*", f"ORDER BY {order}")

    sort = orderBy

    def limit(self, n: int) -> TracedFrame:
        return self._wrap("*", f"LIMIT {int(n)}")

    def alias(self, name: str) -> TracedFrame:
        return TracedFrame(_parse(f"SELECT * FROM ({self.query.sql(dialect='spark')}) "
                                  f"AS `{name}`"))

    def __getattr__(self, name: str) -> Any:
        raise Uncaptured(f"DataFrame.{name}")


class TracedGroup:
    def __init__(self, frame: TracedFrame, keys: list[str]) -> None:
        self.frame, self.keys = frame, keys

    def agg(self, *exprs: Any) -> TracedFrame:
        if len(exprs) == 1 and isinstance(exprs[0], Mapping):
            parts = [f"{fn}({column_sql(c, name_only=True)}) AS `{fn}({c})`"
                     for c, fn in exprs[0].items()]
        else:
            parts = [column_sql(e) for e in exprs]
        by = f"GROUP BY {', '.join(self.keys)}" if self.keys else ""
        return self.frame._wrap(", ".join([*self.keys, *parts]), by)

    def count(self) -> TracedFrame:
        return self.agg("count(*) AS count")

    def __getattr__(self, name: str) -> Any:
        raise Uncaptured(f"GroupedData.{name}")


class TracingReader:
    """``spark.read`` / ``spark.readStream``: tables and Parquet files."""

    def __init__(self) -> None:
        self._format = "parquet"

    def format(self, fmt: str) -> TracingReader:
        self._format = fmt.lower()
        return self

    def schema(self, _schema: Any) -> TracingReader:
        return self

    def option(self, *_args: Any) -> TracingReader:
        return self

    options = option

    def table(self, name: str) -> TracedFrame:
        return TracedFrame(_parse(f"SELECT * FROM {name}"))

    def load(self, *paths: str) -> TracedFrame:
        return self._files(self._format, paths)

    def parquet(self, *paths: str) -> TracedFrame:
        return self._files("parquet", paths)

    def _files(self, fmt: str, paths: tuple[str, ...]) -> TracedFrame:
        if fmt != "parquet":
            raise Uncaptured(f"a {fmt} file source (strata reads Parquet sources in place)")
        if not paths:
            raise Uncaptured("a file source without a path")
        parts = [f"SELECT * FROM parquet.`{p}`" for p in paths]
        return TracedFrame(_parse(" UNION ALL ".join(parts)))

    def __getattr__(self, name: str) -> Any:
        raise Uncaptured(f"spark.read.{name}")


class TracingConf:
    def __init__(self, values: Mapping[str, str]) -> None:
        self.values = values

    def get(self, key: str, default: str | None = None) -> str | None:
        return self.values.get(key, default)


class TracingSession:
    """The ``spark`` a Python definition file sees while strata reads it."""

    def __init__(self, configuration: Mapping[str, str]) -> None:
        self.conf = TracingConf(configuration)

    @property
    def read(self) -> TracingReader:
        return TracingReader()

    readStream = read

    def sql(self, text: str, *_args: Any, **_kwargs: Any) -> TracedFrame:
        return TracedFrame(_parse(text))

    def table(self, name: str) -> TracedFrame:
        return TracedFrame(_parse(f"SELECT * FROM {name}"))

    def __getattr__(self, name: str) -> Any:
        raise Uncaptured(f"spark.{name}")


def capture_body(body: Callable[[], Any], spark: Any) -> tuple[exp.Expr | None,
                                                                str | None]:
    """The body's query as SQL, or None and why not. Subquery names are numbered from
    1 for each body, so the same body always gives the same SQL."""
    global _ids
    _ids = itertools.count(1)
    try:
        result = body()
    except Uncaptured as e:
        return None, f"the body calls {e}, which strata does not read as SQL"
    except Exception as e:  # noqa: BLE001 (any failure of user code: reported as why)
        return None, f"the body could not be read as SQL ({type(e).__name__}: {e})"
    if not isinstance(result, TracedFrame):
        return None, f"the body returns {type(result).__name__}, not a DataFrame"
    return result.query, None
