"""File access on any Hadoop-compatible path through ``pyarrow.fs``."""

from __future__ import annotations

import json
import uuid
from typing import Any

import pyarrow.fs as pafs


def resolve(uri: str) -> tuple[pafs.FileSystem, str]:
    """``(filesystem, path)`` for a local path or a URI such as ``hdfs://nn/x``."""
    if "://" not in uri:
        return pafs.LocalFileSystem(), uri
    return pafs.FileSystem.from_uri(uri)


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
    fs, path = resolve(uri)
    return fs.get_file_info(path).size or 0


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
