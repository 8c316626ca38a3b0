"""What remat accepts, said and enforced: input limits, safe file reading, a memory guard.

A hostile or broken input must fail with one clear line, not hang or exhaust the machine.
The limits here are the promises (each has a CLI flag to raise it, see README "Limits"):

* ``max_file_bytes``: a graph or plan file larger than this is refused before it is read;
* ``max_nodes``: a graph with more nodes is refused after it is read;
* ``max_dim``: a ``--dim`` value above this is refused;
* ``max_total_bytes``: a graph whose sizes (every node's output, workspace and fixed
  memory) sum above this cannot describe a real machine and is refused;
* ``max_memory_bytes``: the address space a remat process may use (``RLIMIT_AS``), so a
  dense input that would need more ends in a clear error instead of swapping the host.

:func:`read_regular_file` is the one way a file from the user is read: FIFOs, devices
and sockets are refused without opening them for a blocking read, and the size is capped.
This module sits beside ``errors.py`` at the bottom of the layers and imports nothing else.
"""

from __future__ import annotations

import os
import stat
from dataclasses import dataclass
from pathlib import Path

from remat_cli.errors import InputError

__all__ = [
    "Limits",
    "LimitError",
    "DEFAULT_LIMITS",
    "read_regular_file",
    "check_regular_file",
    "format_bytes",
    "set_memory_limit",
    "lift_memory_limit",
    "default_memory_limit",
]

GiB = 1 << 30


class LimitError(InputError):
    """An input larger than a limit (exit 2); ``batch`` reports it as ``too-large``."""


@dataclass(frozen=True)
class Limits:
    """The input limits of one run; every field has a CLI flag to raise it."""

    max_file_bytes: int = 2 * GiB  # ONNX models with embedded weights above 2 GiB are not valid protobuf
    max_nodes: int = 1_000_000  # real models have 10^2..10^5 nodes (DESIGN §6)
    max_dim: int = 1 << 40  # a --dim or ONNX dimension value
    max_total_bytes: int = 1 << 60  # 1 EiB: the sum of every size in the graph


DEFAULT_LIMITS = Limits()


def format_bytes(n: int) -> str:
    """``2 GiB`` / ``1536 B``: exact where the value is a whole number of the unit."""
    for unit, size in (("EiB", 1 << 60), ("TiB", 1 << 40), ("GiB", GiB), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= size and n % size == 0:
            return f"{n // size} {unit}"
    return f"{n} B"


def _kind(mode: int) -> str:
    if stat.S_ISFIFO(mode):
        return "a named pipe (FIFO)"
    if stat.S_ISCHR(mode):
        return "a character device"
    if stat.S_ISBLK(mode):
        return "a block device"
    if stat.S_ISSOCK(mode):
        return "a socket"
    if stat.S_ISDIR(mode):
        return "a directory"
    return "not a regular file"


def check_regular_file(path: str | Path, what: str = "file") -> os.stat_result:
    """``stat`` of ``path`` (following links) if it is a regular file, else :class:`InputError`."""
    try:
        st = os.stat(path)
    except OSError as exc:
        if str(path) == "-":  # (a file named "-" is read as any other)
            raise InputError(f"-: standard input is not read: give the path of a {what}") from None
        raise InputError(f"{path}: cannot read: {exc.strerror or exc}") from None
    if not stat.S_ISREG(st.st_mode):
        raise InputError(f"{path}: is {_kind(st.st_mode)}, not a {what}: give a regular file")
    return st


def read_regular_file(path: str | Path, max_bytes: int | None = None, what: str = "file") -> bytes:
    """The bytes of ``path``, refusing non-regular files and files above ``max_bytes``.

    The file is opened non-blocking and checked with ``fstat`` on the open descriptor, so
    a FIFO swapped in after a ``stat`` still cannot block, and the read stops one byte past
    the cap, so ``/dev/zero`` behind a symlink cannot fill memory.
    """
    max_bytes = DEFAULT_LIMITS.max_file_bytes if max_bytes is None else max_bytes
    check_regular_file(path, what)
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0))
    except OSError as exc:
        raise InputError(f"{path}: cannot read: {exc.strerror or exc}") from None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise InputError(f"{path}: is {_kind(st.st_mode)}, not a {what}: give a regular file")
        if st.st_size > max_bytes:
            raise _too_big(path, st.st_size, max_bytes)
        chunks = []
        total = 0
        while True:
            block = os.read(fd, min(1 << 24, max_bytes + 1 - total))
            if not block:
                break
            chunks.append(block)
            total += len(block)
            if total > max_bytes:  # the file grew while we read it
                raise _too_big(path, total, max_bytes)
        return b"".join(chunks)
    except OSError as exc:
        raise InputError(f"{path}: cannot read: {exc.strerror or exc}") from None
    finally:
        os.close(fd)


def _too_big(path: str | Path, size: int, limit: int) -> LimitError:
    return LimitError(f"{path}: {size} bytes is more than the {format_bytes(limit)} file size limit (raise it with --max-file-size)")


# --------------------------------------------------------------------------- memory guard


def default_memory_limit() -> int | None:
    """80% of physical memory, or None where the platform does not say."""
    try:
        pages = os.sysconf("SC_PHYS_PAGES")
        page = os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError, AttributeError):
        return None
    if pages <= 0 or page <= 0:
        return None
    return int(pages * page * 0.8)


def set_memory_limit(max_bytes: int | None) -> bool:
    """Cap this process's address space (``RLIMIT_AS``) at ``max_bytes``; True if set.

    Only lowers the limit (an unprivileged process cannot raise it back). Beyond it an
    allocation fails with ``MemoryError`` inside Python, which the CLI and batch workers
    turn into one line, instead of the machine swapping or the OOM killer striking.
    """
    if max_bytes is None or max_bytes <= 0:
        return False
    try:
        import resource
    except ImportError:  # pragma: no cover - not on POSIX
        return False
    try:
        soft, hard = resource.getrlimit(resource.RLIMIT_AS)
        if hard != resource.RLIM_INFINITY:
            max_bytes = min(max_bytes, hard)
        if soft != resource.RLIM_INFINITY and soft <= max_bytes:
            return True
        resource.setrlimit(resource.RLIMIT_AS, (max_bytes, hard))
    except (ValueError, OSError):
        return False
    return True


def lift_memory_limit() -> None:
    """Undo :func:`set_memory_limit` (soft limit back to the hard one), e.g. to report a MemoryError."""
    try:
        import resource

        _soft, hard = resource.getrlimit(resource.RLIMIT_AS)
        resource.setrlimit(resource.RLIMIT_AS, (hard, hard))
    except (ImportError, ValueError, OSError):  # pragma: no cover
        pass
