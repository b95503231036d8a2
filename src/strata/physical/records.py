"""What crosses the Spark shuffle of a translate stage's epoch, as named records.

The map side of an epoch sends each item to the partition that owns it, and the task of
that partition groups them (``tasks.py``), telling them apart by type. Items are tuple
subclasses with named fields and no ``__new__`` or ``__getnewargs__`` of their own, so
that pickling and unpickling them — millions per epoch — stays in C (a ``NamedTuple``
pickles through Python methods, about four times slower to dump). Build one from a
tuple of its fields, as ``tuple()`` does: ``Keyed((flow, enc, key, record))``.

Records bound for another partition's state (:class:`PendingState`) and multicast
associations (:class:`Association`) are also what a *pending file* holds between two
epochs.
"""

from __future__ import annotations

import pickle
from operator import itemgetter
from typing import Any


class _Record(tuple):
    """A tuple with named fields (``_fields``), pickled by C code only."""

    __slots__ = ()
    _fields: tuple[str, ...] = ()

    def __repr__(self) -> str:
        fields = ", ".join(f"{f}={v!r}" for f, v in zip(self._fields, self, strict=True))
        return f"{type(self).__name__}({fields})"


def _field(i: int, doc: str) -> Any:
    return property(itemgetter(i), doc=doc)


class Keyed(_Record):
    """An input record routed to the group of ``key`` (``enc``: its canonical encoding)."""

    __slots__ = ()
    _fields = ("flow", "enc", "key", "record")
    flow: int = _field(0, "the index of the input flow")
    enc: bytes = _field(1, "the key's canonical encoding")
    key: Any = _field(2, "the group key")
    record: dict = _field(3, "the input record")


class Broadcast(_Record):
    """An input record for every group of the epoch (or those present in ``only``)."""

    __slots__ = ()
    _fields = ("flow", "only", "record")
    flow: int = _field(0, "the index of the input flow")
    only: tuple[str, ...] | None = _field(1, "the flows a group must have records in")
    record: dict = _field(2, "the input record")


class Multicasted(_Record):
    """An input record for every group associated with ``address`` last epoch."""

    __slots__ = ()
    _fields = ("flow", "address", "record")
    flow: int = _field(0, "the index of the input flow")
    address: bytes = _field(1, "the multicast address, encoded")
    record: dict = _field(2, "the input record")


class Unkeyed(_Record):
    """An input record that is a group of its own (no ``route_by``)."""

    __slots__ = ()
    _fields = ("flow", "record")
    flow: int = _field(0, "the index of the input flow")
    record: dict = _field(1, "the input record")


class PendingState(_Record):
    """A state record ``translate`` wrote for a key of another partition."""

    __slots__ = ()
    _fields = ("enc", "key", "record")
    enc: bytes = _field(0, "the state key's canonical encoding")
    key: Any = _field(1, "the state key")
    record: dict = _field(2, "the state record")


class Association(_Record):
    """``out.associate(key, address)``: the group of ``enc`` receives ``address``'s
    multicasts next epoch."""

    __slots__ = ()
    _fields = ("address", "enc", "key")
    address: bytes = _field(0, "the multicast address, encoded")
    enc: bytes = _field(1, "the associated key's canonical encoding")
    key: Any = _field(2, "the associated key")


class StoredState(_Record):
    """A state record of black-box mode, re-routed with the input every epoch."""

    __slots__ = ()
    _fields = ("enc", "key", "record")
    enc: bytes = _field(0, "the state key's canonical encoding")
    key: Any = _field(1, "the state key")
    record: dict = _field(2, "the state record")


class Failure(_Record):
    """An ``EpochError`` (as its dict) that stopped a map task, sent to partition 0."""

    __slots__ = ()
    _fields = ("error",)
    error: dict = _field(0, "EpochError.to_dict()")


Pending = PendingState | Association

# The first format of pending files: plain tuples tagged "P" and "A".
_LEGACY = {"P": PendingState, "A": Association}


def dump_pending(items: list[Pending]) -> bytes:
    return pickle.dumps(items, protocol=5)


def load_pending(data: bytes) -> list[Pending]:
    """The items of a pending file (either format)."""
    items = pickle.loads(data)
    return [i if type(i) in (PendingState, Association) else _LEGACY[i[0]](i[1:])
            for i in items]
