"""What crosses the Spark shuffle of a translate stage's epoch.

The map side sends each item to the partition that owns it, and the task of that
partition groups them (``tasks.py``, ``partition_run.py``). Every item is a plain tuple
whose first element names its kind; the layouts below are the only place they are
defined, and the code builds and unpacks them by these names:

=================  ===========================================  ==============================
kind               layout                                       what it carries
=================  ===========================================  ==============================
``KEYED``          ``(KEYED, flow, enc, key, record)``          an input record for the group
                                                                of ``key`` (``enc``: its
                                                                canonical encoding)
``BROADCAST``      ``(BROADCAST, flow, only, record)``          an input record for every group
                                                                (or those with records in the
                                                                flows ``only``)
``MULTICAST``      ``(MULTICAST, flow, address, record)``       an input record for the groups
                                                                associated with ``address``
``KEYED_BATCH``    ``(KEYED_BATCH, flow, column, ipc)``         input records for groups of
                                                                this partition, keyed by the
                                                                value of ``column``: an Arrow
                                                                IPC stream (``column_route.py``)
``UNKEYED``        ``(UNKEYED, flow, record)``                  an input record that is a
                                                                group of its own
``PENDING_STATE``  ``(PENDING_STATE, enc, key, record)``        a state record written for a
                                                                key of another partition
``ASSOCIATION``    ``(ASSOCIATION, address, enc, key)``         ``out.associate(key, address)``
``STORED_STATE``   ``(STORED_STATE, enc, key, record)``         a state record of black-box
                                                                mode, re-routed every epoch
``FAILURE``        ``(FAILURE, error)``                         an ``EpochError.to_dict()``
                                                                that stopped a map task
=================  ===========================================  ==============================

``flow`` is the index of the stage's input flow. Why plain tuples and not NamedTuples or
tuple subclasses: Spark pickles every item, and a tuple is the one type ``pickle`` writes
without calling ``__reduce_ex__``. Measured on the map side of one 200,000-record increment
(the URL count), dumping took 0.08 s as tuples and 0.36 s as tuple subclasses (NamedTuples
are slower still), loading 0.56 s against 0.6–0.7 s, and the bytes grew by 5%: about 0.35 s
more per epoch of 1.7 s.

Pending state records and associations are also what a *pending file* holds between two
epochs.
"""

from __future__ import annotations

import pickle
from typing import Any

KEYED = "K"
KEYED_BATCH = "C"
BROADCAST = "B"
MULTICAST = "M"
UNKEYED = "R"
PENDING_STATE = "P"
ASSOCIATION = "A"
STORED_STATE = "S"
FAILURE = "E"

Item = tuple[Any, ...]


def dump_pending(items: list[Item]) -> bytes:
    """A pending file's bytes: ``PENDING_STATE`` and ``ASSOCIATION`` items."""
    return pickle.dumps(items, protocol=5)


def load_pending(data: bytes) -> list[Item]:
    return pickle.loads(data)


def pending_state_records(data: bytes) -> list[dict]:
    """The state records of a pending file (its associations left out)."""
    return [item[3] for item in load_pending(data) if item[0] == PENDING_STATE]
