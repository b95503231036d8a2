"""Evaluating per-flow functions on one record, with errors that name the record."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from strata.model.keys import KeyTypeError, encode_key
from strata.model.routing import NONE, All, Multicast

KEYED, BROADCAST, MULTICAST, DROP = 0, 1, 2, 3


class BadRoute(Exception):
    """route_by failed or returned something that is not a route."""


def evaluate_route(route, record: dict) -> tuple[int, Any]:
    """Apply ``route`` to ``record``.

    Returns ``(KEYED, [(enc, key), ...])``, ``(BROADCAST, All)``,
    ``(MULTICAST, encoded address)`` or ``(DROP, None)``.
    """
    try:
        r = route(record)
    except Exception as e:  # any user error becomes a BadRoute
        raise BadRoute(f"route_by raised {type(e).__name__}: {e}") from e
    t = type(r)
    if t is str or t is int:
        return KEYED, [(encode_key(r), r)]
    if r is NONE:
        return DROP, None
    if t is All:
        return BROADCAST, r
    if t is Multicast:
        return MULTICAST, _enc(r.address, "multicast address")
    if t in (set, frozenset):
        return KEYED, [(_enc(k, "route key"), k) for k in r]
    return KEYED, [(_enc(r, "route key"), r)]


def _enc(value: Any, what: str) -> bytes:
    try:
        return encode_key(value)
    except KeyTypeError as e:
        raise BadRoute(f"route_by returned an unusable {what}: {e}") from None


def state_key(route, record: dict) -> tuple[bytes, Any]:
    """The single key a state record is kept under."""
    kind, keys = evaluate_route(route, record)
    if kind != KEYED or len(keys) != 1:
        raise BadRoute(
            "a state record must route to exactly one key (not a set, ALL, NONE or multicast)"
        )
    return keys[0]


def sort_by(order, records: Iterable[dict]) -> list[dict]:
    """Records in ``order_by`` order (stable); raises BadRoute naming the failing record."""
    records = list(records)
    if order is None or len(records) < 2:
        return records
    keyed = []
    for r in records:
        try:
            keyed.append((order(r), r))
        except Exception as e:
            raise BadRoute(f"order_by raised {type(e).__name__}: {e}") from e
    try:
        keyed.sort(key=lambda kr: kr[0])
    except TypeError as e:
        raise BadRoute(f"order_by returned keys that cannot be compared: {e}") from None
    return [r for _, r in keyed]
