"""What ``route_by`` may return, and how a result becomes group keys.

``route_by(record)`` returns one of:

- a key (``None``, bool, int, float, str, bytes or a tuple of these): one group;
- a ``set``/``frozenset`` of keys: the record goes to each of these groups;
- ``ALL`` or ``All(flows=...)``: broadcast to every group of the epoch (or only to
  groups that have records in the named flows); it never creates a group;
- ``Multicast(address)``: delivered to every key that ``out.associate(key, address)``
  bound to ``address`` during the previous epoch;
- ``NONE``: the record is dropped.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


class _NoneRoute:
    """Drop the record."""

    def __repr__(self) -> str:
        return "NONE"

    def __reduce__(self) -> str:
        # pickled as a reference to the module's singleton, so ``r is NONE`` holds in a
        # Spark worker even when the user's route_by was shipped by value
        return "NONE"


NONE = _NoneRoute()


@dataclass(frozen=True)
class All:
    """Broadcast to every group of the epoch, or to groups present in ``flows``."""

    flows: frozenset[str] | None = None

    def __init__(self, flows: Any = None) -> None:
        object.__setattr__(self, "flows", None if flows is None else frozenset(flows))

    def __repr__(self) -> str:
        return "ALL" if self.flows is None else f"All(flows={sorted(self.flows)})"


ALL = All()


@dataclass(frozen=True)
class Multicast:
    """Deliver to every key associated with ``address`` in the previous epoch."""

    address: Any


def column_router(columns: str | tuple[str, ...] | list[str]):
    """``route_by``/``order_by`` from column names: one column → its value, several → a tuple."""
    if isinstance(columns, str):
        col = columns

        def one(record: dict) -> Any:
            return record[col]

        one.__qualname__ = f"column({col!r})"
        return one
    cols = tuple(columns)

    def many(record: dict) -> Any:
        return tuple(record[c] for c in cols)

    many.__qualname__ = f"columns({', '.join(map(repr, cols))})"
    return many
