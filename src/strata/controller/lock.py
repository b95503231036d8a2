"""The home's controller lock: one controller runs a home at a time."""

from __future__ import annotations

import fcntl
import os
import socket
import time
from pathlib import Path

from strata.model.errors import StrataError


class HomeLockedError(StrataError):
    """Another controller holds the home."""


class HomeLock:
    """An exclusive ``flock`` on the home's lock file, naming its holder."""

    def __init__(self, path: str, home: str) -> None:
        self.path, self.home = path, home
        self._fd: int | None = None

    def acquire(self) -> None:
        """Take the lock, or fail at once naming the holder."""
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = Path(self.path).read_text().strip() or "another process"
            os.close(fd)
            raise HomeLockedError(
                f"strata home {self.home} is in use by another controller ({holder}). "
                "Wait for it to finish or stop it; one controller runs a home at a time."
            ) from None
        os.ftruncate(fd, 0)
        os.write(fd, f"pid {os.getpid()} on {socket.gethostname()} since "
                     f"{time.strftime('%Y-%m-%d %H:%M:%S')}".encode())
        self._fd = fd

    def release(self) -> None:
        if self._fd is not None:
            os.close(self._fd)  # releases the flock
            self._fd = None
