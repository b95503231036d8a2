"""File access on any Hadoop-compatible path through ``pyarrow.fs``.

A location is a local path or a URI that both Spark (Hadoop) and ``pyarrow.fs`` read:
``file:``, ``hdfs://``, ``s3a://`` (``s3://``), ``gs://``, ``abfs(s)://``. This module is
the one place that maps between their spellings (docs/architecture.md, "The home on
disk"): :func:`normalize` gives a location the one spelling strata stores and hands to
Spark, and :func:`resolve` turns it into what pyarrow wants (a plain path on the local
filesystem, ``s3://`` for Hadoop's ``s3a://``).
"""

from __future__ import annotations

import json
import os
import re
import uuid
from typing import Any

import pyarrow as pa
import pyarrow.fs as pafs

from strata.model.errors import StrataError

# ``scheme://…``, or ``file:/…`` as Hadoop prints it (a plain name such as ``a:b`` is a path)
_SCHEME = re.compile(r"^([A-Za-z][A-Za-z0-9+.-]+)://|^(file):", re.I)
_PYARROW_SCHEME = {"s3a": "s3", "s3n": "s3"}  # Hadoop's names pyarrow spells otherwise


def scheme(location: str) -> str | None:
    """The URI scheme of ``location`` (lower case), or None for a plain path."""
    m = _SCHEME.match(location)
    return (m.group(1) or m.group(2)).lower() if m else None


def is_local(location: str) -> bool:
    """Whether ``location`` is on this machine's filesystem (a path or a ``file:`` URI)."""
    return scheme(location) in (None, "file")


def local_path(location: str) -> str:
    """The absolute plain path of a local location (``file:/x``, ``file:///x``, ``x``)."""
    if scheme(location) == "file":
        rest = location[len("file:"):]
        if rest.startswith("//localhost/"):
            rest = rest[len("//localhost"):]
        elif rest.startswith("///"):
            rest = rest[2:]
        return os.path.normpath(rest) if rest.startswith("/") else os.path.abspath(rest)
    return os.path.abspath(os.path.expanduser(location))


def normalize(location: str) -> str:
    """The one spelling strata keeps for ``location``: a plain path made absolute, a
    ``file:`` URI as ``file:///abs/path`` (Spark and pyarrow read both), any other URI
    as given, without a trailing ``/``."""
    s = scheme(location)
    if s is None:
        return local_path(location)
    if s == "file":
        return "file://" + local_path(location)
    return location if location.endswith("://") else location.rstrip("/")


def key(location: str) -> str:
    """What identifies the file at ``location`` whichever way it is spelt (for comparing
    listed files with the catalog's): the plain path of a local one, else the URI."""
    return local_path(location) if is_local(location) else location


def resolve(uri: str) -> tuple[pafs.FileSystem, str]:
    """``(filesystem, path)`` for a local path or a URI such as ``hdfs://nn/x``."""
    s = scheme(uri)
    if s is None:
        return pafs.LocalFileSystem(), uri
    if s == "file":
        return pafs.LocalFileSystem(), local_path(uri)
    try:
        return pafs.FileSystem.from_uri(_PYARROW_SCHEME.get(s, s) + uri[len(s):])
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError, ValueError) as e:
        raise StrataError(
            f"{uri}: pyarrow cannot open this location ({e}). Strata reads and writes a "
            "home's data through pyarrow.fs: use a scheme it supports (file, hdfs, s3a or "
            "s3, gs, abfs/abfss) with its client libraries and credentials set up") from None


def join(root: str, *parts: str) -> str:
    return "/".join([root.rstrip("/"), *parts])


def write_bytes_atomic(uri: str, data: bytes) -> None:
    """Write a file so that readers see either nothing or all of it."""
    fs, path = resolve(uri)
    parent = path.rsplit("/", 1)[0]
    fs.create_dir(parent, recursive=True)
    tmp = f"{parent}/.tmp-{uuid.uuid4().hex}"
    with fs.open_output_stream(tmp) as f:
        f.write(data)
    fs.move(tmp, path)


def read_bytes(uri: str) -> bytes | None:
    fs, path = resolve(uri)
    try:
        with fs.open_input_stream(path) as f:
            return f.read()
    except FileNotFoundError:
        return None


def read_required(uri: str) -> bytes:
    """A file's bytes; FileNotFoundError naming it if it is missing."""
    data = read_bytes(uri)
    if data is None:
        raise FileNotFoundError(f"{uri} is missing")
    return data


def write_json_atomic(uri: str, obj: Any) -> None:
    write_bytes_atomic(uri, json.dumps(obj, indent=1, sort_keys=True).encode())


def read_json(uri: str) -> Any | None:
    data = read_bytes(uri)
    return None if data is None else json.loads(data)


def size_of(uri: str) -> int:
    """The bytes of a file, or of every file under a directory."""
    fs, path = resolve(uri)
    info = fs.get_file_info(path)
    if info.type == pafs.FileType.Directory:
        return sum(i.size or 0 for i in fs.get_file_info(pafs.FileSelector(path,
                                                                            recursive=True)))
    return info.size or 0


def delete_quietly(uri: str) -> None:
    fs, path = resolve(uri)
    info = fs.get_file_info(path)
    try:
        if info.type == pafs.FileType.Directory:
            fs.delete_dir(path)
        elif info.type == pafs.FileType.File:
            fs.delete_file(path)
    except OSError:
        pass


def list_dir(uri: str) -> list[str]:
    fs, path = resolve(uri)
    if fs.get_file_info(path).type != pafs.FileType.Directory:
        return []
    return [i.base_name for i in fs.get_file_info(pafs.FileSelector(path))]


def move(src: str, dst: str) -> None:
    """Rename ``src`` to ``dst`` (same filesystem), creating ``dst``'s directory."""
    fs, path = resolve(src)
    _, target = resolve(dst)
    fs.create_dir(target.rsplit("/", 1)[0], recursive=True)
    fs.move(path, target)
