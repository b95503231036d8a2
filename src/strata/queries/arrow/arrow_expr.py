"""Scalar query expressions evaluated over Arrow tables in the driver, as Spark would.

An iteration step's changes are small tables the driver already holds
(:mod:`strata.queries.arrow.driver_rows`); filtering, projecting or assigning them in Spark
costs a planned job each (docs/performance.md, "Iteration steps"). This module
evaluates the part of Spark SQL such steps use with ``pyarrow.compute`` instead:
columns (and fields of struct columns), literals, ``+ - * / %``, unary minus, comparisons
(``<=>`` too), ``AND``/``OR``/``NOT``, ``IS [NOT] NULL``, ``CAST`` between integers,
doubles and booleans, ``coalesce``, ``greatest``/``least``, ``CASE``/``IF``.

Values follow Spark's ANSI mode (its default): integers of ``tinyint`` to ``bigint``
and ``double`` widen as Spark's type coercion does, ``/`` divides as doubles, and an
overflow or a division by zero is an error. Anything else — another type (``float``,
decimals, dates), another function, a NaN compared or ordered (Spark orders NaN above
every number), an error, or a session with ANSI off — raises :class:`Unsupported`, and
the caller runs the expression in Spark, which gives the answer or the error in its own
words. ``tests/queries/test_arrow_expr.py`` compares results and types with Spark's.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from sqlglot import exp

from strata.queries.plan.expressions import Expr, parse

SPARK_TYPES = {pa.int8(): "tinyint", pa.int16(): "smallint", pa.int32(): "int",
               pa.int64(): "bigint", pa.float64(): "double", pa.bool_(): "boolean",
               pa.string(): "string", pa.large_string(): "string"}
ARROW_TYPES = {"tinyint": pa.int8(), "smallint": pa.int16(), "int": pa.int32(),
               "bigint": pa.int64(), "double": pa.float64(), "boolean": pa.bool_(),
               "string": pa.string()}
NUMBERS = ["tinyint", "smallint", "int", "bigint", "double"]
_CHECKED: dict[type, Callable] = {exp.Add: pc.add_checked, exp.Sub: pc.subtract_checked,
                                  exp.Mul: pc.multiply_checked}
_COMPARE: dict[type, Callable] = {exp.EQ: pc.equal, exp.NEQ: pc.not_equal,
                                  exp.GT: pc.greater, exp.GTE: pc.greater_equal,
                                  exp.LT: pc.less, exp.LTE: pc.less_equal}


class Unsupported(Exception):  # a signal to fall back, not a failure
    """The expression (or these values) is not evaluated here: run it in Spark."""


Value = tuple[pa.Array, str]  # an evaluated expression and its Spark type ("void": NULL)


def evaluate(text: Expr | str, table: pa.Table) -> Value:
    """``text`` (Spark SQL) over every row of ``table``: an array and its Spark type."""
    e = _parsed(text) if isinstance(text, str) else text
    try:
        return _eval(e, table)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError, ZeroDivisionError,
            OverflowError) as err:
        raise Unsupported(f"{e.sql('spark')}: {err}") from None


@functools.lru_cache(maxsize=4096)
def _parsed(text: str) -> Expr:
    """``text`` parsed once: a step evaluates the same few expressions many times (the
    tree is only read)."""
    return parse(text)


def _eval(e: Expr, t: pa.Table) -> Value:
    n = t.num_rows
    if isinstance(e, exp.Paren):
        return _eval(e.this, t)
    if isinstance(e, exp.Column):
        return _column(e, t)
    if isinstance(e, exp.Literal):
        return _literal(e, n)
    if isinstance(e, exp.Null):
        return pa.nulls(n), "void"
    if isinstance(e, exp.Boolean):
        return pa.repeat(pa.scalar(e.this, pa.bool_()), n), "boolean"
    if isinstance(e, exp.Cast):
        to = e.to.sql(dialect="spark").lower()
        lit = e.this
        if to == "double" and isinstance(lit, exp.Literal) and lit.is_number:
            # how queries write a decimal constant as a double (expressions.to_sql)
            return pa.repeat(pa.scalar(float(lit.this), pa.float64()), n), "double"
        return _cast(_eval(lit, t), to)
    if isinstance(e, exp.Neg):
        v, vt = _eval(e.this, t)
        if vt == "void":  # Spark types a negated NULL as a double
            return pa.nulls(n, pa.float64()), "double"
        v, vt = _number((v, vt))
        return (pc.negate_checked(v) if vt != "double" else pc.negate(v)), vt
    if type(e) in _CHECKED:
        (a, _), (b, _), rt = _common(_eval(e.this, t), _eval(e.expression, t))
        fn = _CHECKED[type(e)]
        return (fn(a, b), rt)
    if isinstance(e, exp.Div):
        a, _ = _cast(_number(_eval(e.this, t)), "double")
        b, _ = _cast(_number(_eval(e.expression, t)), "double")
        if pc.any(pc.equal(b, 0.0)).as_py():
            raise Unsupported("division by zero")  # Spark's error names it
        return pc.divide(a, b), "double"
    if isinstance(e, exp.Mod):
        (a, _), (b, _), rt = _common(_eval(e.this, t), _eval(e.expression, t))
        return _remainder(a, b, rt), rt
    if type(e) in _COMPARE or isinstance(e, exp.NullSafeEQ):
        (a, at), (b, _), _ = _common(_eval(e.this, t), _eval(e.expression, t), numbers=False)
        _no_nan(a, at)
        _no_nan(b, at)
        if isinstance(e, exp.NullSafeEQ):
            both_null = pc.and_(pc.is_null(a), pc.is_null(b))
            return pc.fill_null(pc.or_kleene(pc.equal(a, b), both_null), False), "boolean"
        return _COMPARE[type(e)](a, b), "boolean"
    if isinstance(e, (exp.And, exp.Or)):
        a, b = _boolean(_eval(e.this, t)), _boolean(_eval(e.expression, t))
        return (pc.and_kleene(a, b) if isinstance(e, exp.And) else pc.or_kleene(a, b),
                "boolean")
    if isinstance(e, exp.Not):
        return pc.invert(_boolean(_eval(e.this, t))), "boolean"
    if isinstance(e, exp.Is) and isinstance(e.expression, exp.Null):
        return pc.is_null(_eval(e.this, t)[0]), "boolean"
    if isinstance(e, exp.Coalesce):
        vals = [_eval(x, t) for x in [e.this, *e.expressions]]
        arrays, rt = _widen(vals)
        return pc.coalesce(*arrays), rt
    if isinstance(e, (exp.Greatest, exp.Least)):
        if not e.expressions:
            raise Unsupported(f"{e.sql('spark')}: Spark wants two arguments or more")
        vals = [_eval(x, t) for x in [e.this, *e.expressions]]
        arrays, rt = _widen(vals)
        for a in arrays:
            _no_nan(a, rt)
        fn = pc.max_element_wise if isinstance(e, exp.Greatest) else pc.min_element_wise
        return fn(*arrays, skip_nulls=True), rt
    if isinstance(e, (exp.Case, exp.If)):
        return _case(e, t)
    raise Unsupported(f"{type(e).__name__} {e.sql('spark')!r}")


def _column(e: exp.Column, t: pa.Table) -> Value:
    if e.table:
        if e.table not in t.column_names:
            raise Unsupported(f"column {e.sql('spark')}")
        struct = t.column(e.table).combine_chunks()
        if not pa.types.is_struct(struct.type) or struct.type.get_field_index(e.name) < 0:
            raise Unsupported(f"column {e.sql('spark')}")
        v = pc.struct_field(struct, e.name)
    elif e.name in t.column_names:
        v = t.column(e.name).combine_chunks()
    else:
        raise Unsupported(f"column {e.name}")
    if v.type not in SPARK_TYPES:
        raise Unsupported(f"column {e.name} of type {v.type}")
    return v, SPARK_TYPES[v.type]


def _literal(e: exp.Literal, n: int) -> Value:
    if e.is_string:
        return pa.repeat(pa.scalar(e.this, pa.string()), n), "string"
    text = e.this
    if any(c in text for c in ".eEdDlLsSyY"):  # decimals and suffixed literals: Spark's
        raise Unsupported(f"literal {text}")
    value = int(text)
    st = "int" if -2**31 <= value < 2**31 else "bigint" if -2**63 <= value < 2**63 else None
    if st is None:
        raise Unsupported(f"literal {text}")
    return pa.repeat(pa.scalar(value, ARROW_TYPES[st]), n), st


def _cast(v: Value, to: str) -> Value:
    a, st = v
    if to == st:
        return v
    if st == "void" and to in ARROW_TYPES:
        return pa.nulls(len(a), ARROW_TYPES[to]), to
    if to not in ARROW_TYPES or st not in ARROW_TYPES or "string" in (st, to):
        raise Unsupported(f"CAST {st} AS {to}")
    if st == "double" and to != "double":
        raise Unsupported(f"CAST double AS {to}")  # Spark truncates; Arrow refuses
    if to == "boolean" or st == "boolean":
        if st == "boolean":
            return pc.cast(a, ARROW_TYPES[to]), to
        return pc.not_equal(a, pa.scalar(0, a.type)), to
    # integers narrow with an overflow check (Spark's ANSI error); to double they round
    return pc.cast(a, ARROW_TYPES[to], safe=to != "double"), to


def _number(v: Value) -> Value:
    if v[1] == "void":
        return _cast(v, "int")
    if v[1] not in NUMBERS:
        raise Unsupported(f"arithmetic on {v[1]}")
    return v


def _boolean(v: Value) -> pa.Array:
    if v[1] == "void":
        return pa.nulls(len(v[0]), pa.bool_())
    if v[1] != "boolean":
        raise Unsupported(f"{v[1]} used as a condition")
    return v[0]


def _widen(vals: list[Value]) -> tuple[list[pa.Array], str]:
    """The values cast to the type Spark's coercion gives them all (numbers widen)."""
    types = {st for _, st in vals if st != "void"}
    if not types:
        raise Unsupported("only NULLs")
    if types <= set(NUMBERS):
        rt = max(types, key=NUMBERS.index)
    elif len(types) == 1:
        rt = types.pop()
    else:
        raise Unsupported(f"values of types {sorted(types)}")
    return [_cast(v, rt)[0] for v in vals], rt


def _common(a: Value, b: Value, numbers: bool = True) -> tuple[Value, Value, str]:
    if numbers:  # a NULL operand takes the other's type (two NULLs: not evaluated here)
        a, b = (x if x[1] == "void" else _number(x) for x in (a, b))
    arrays, rt = _widen([a, b])
    return (arrays[0], rt), (arrays[1], rt), rt


def _remainder(a: pa.Array, b: pa.Array, rt: str) -> pa.Array:
    """Spark's ``a % b``: the sign of ``a`` (Java's ``%``, C's ``fmod``); a zero divisor
    is Spark's to report (an error in ANSI mode)."""
    if pc.any(pc.equal(b, pc.cast(0, b.type))).as_py():
        raise Unsupported("remainder by zero")
    nulls = pc.or_(pc.is_null(a), pc.is_null(b))
    x = np.asarray(pc.fill_null(a, 0).to_numpy(zero_copy_only=False))
    y = np.asarray(pc.fill_null(b, 1).to_numpy(zero_copy_only=False))
    if rt == "double":
        out = np.fmod(x, y)
    else:  # MIN % -1 is 0 in Java; numpy's integer fmod would trap on it
        minus_one = y == -1
        out = np.where(minus_one, 0, np.fmod(x, np.where(minus_one, 1, y)))
    return pa.array(out, ARROW_TYPES[rt], mask=np.asarray(nulls.to_numpy(
        zero_copy_only=False), bool))


def _no_nan(a: pa.Array, st: str) -> None:
    if st == "double" and pc.any(pc.is_nan(a)).as_py():
        raise Unsupported("NaN compared")  # Spark: NaN = NaN, and above every number


def _case(e: exp.Case | exp.If, t: pa.Table) -> Value:
    if isinstance(e, exp.If):
        ifs = [(e.this, e.args["true"])]
        default = e.args.get("false")
    else:
        if e.this is not None:  # CASE x WHEN …: a simple case
            raise Unsupported("CASE with an operand")
        ifs = [(i.this, i.args["true"]) for i in e.args.get("ifs", [])]
        default = e.args.get("default")
    tested = [_eval(c, t) for c, _ in ifs]
    if any(st == "void" for _, st in tested):  # Spark: a NULL literal is not a condition
        raise Unsupported("CASE WHEN NULL")
    conds = [pc.fill_null(_boolean(v), False) for v in tested]
    values = [_eval(v, t) for _, v in ifs]
    values.append(_eval(default, t) if default is not None else (pa.nulls(t.num_rows),
                                                                  "void"))
    arrays, rt = _widen(values)
    conditions = pa.StructArray.from_arrays(conds, names=[f"c{i}" for i in range(len(conds))])
    return pc.case_when(conditions, *arrays), rt


def as_double(v: Value) -> pa.Array:
    """A numeric value as doubles, as Spark's ``CAST(… AS double)``."""
    return _cast(_number(v), "double")[0]


def evaluate_all(outputs: Mapping[str, Expr | str], table: pa.Table) -> pa.Table:
    """A table of each output evaluated over ``table``, typed as Spark would type it
    (a NULL-only output, typed ``void`` by Spark, is :class:`Unsupported`)."""
    cols, fields = [], []
    for name, e in outputs.items():
        v, st = evaluate(e, table)
        if st not in ARROW_TYPES:
            raise Unsupported(f"output {name} of type {st}")
        cols.append(v.cast(ARROW_TYPES[st]) if v.type != ARROW_TYPES[st] else v)
        fields.append(pa.field(name, ARROW_TYPES[st]))
    return pa.Table.from_arrays(cols, schema=pa.schema(fields))
