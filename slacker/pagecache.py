"""Read a program into the page cache at a paced rate before it runs.

A backup tool that is not in memory loads itself from the source's disk when it
starts: mariabackup 10.11 is a 26 MB binary, and its first second read ~40 MB
(program, libraries, its first data chunk) at the disk's full speed, before the
pipe could pace a byte. On a disk-bound source that stalled the tenant for
3-6 s at any copy rate, measured on a disk-bound host. The pipe therefore reads the producer's program and its shared libraries first, only
the parts not already cached, through the same rate limit as the copy.

`mincore(2)` tells which pages of a file are cached; the files are mapped only
for that question, never executed or written.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import logging
import mmap
import os
import re
import shutil
import subprocess
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path

log = logging.getLogger(__name__)

CHUNK_BYTES = 1 << 20  # one read at a time; the rate limit is asked for each
LDD_TIMEOUT_S = 5.0

_MAP_FAILED = ctypes.c_void_p(-1).value
_libc = None


def _c():
    global _libc
    if _libc is None:
        lib = ctypes.CDLL(ctypes.util.find_library("c") or None, use_errno=True)
        lib.mmap.restype = ctypes.c_void_p
        lib.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_long]
        lib.munmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
        lib.mincore.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_char_p]
        _libc = lib
    return _libc


def resident(path: str | Path) -> tuple[bytes, int]:
    """(one byte per page, bit 0 set when the page is cached; the file's size). OSError if it cannot be read."""
    fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    try:
        size = os.fstat(fd).st_size
        if size == 0:
            return b"", 0
        page = os.sysconf("SC_PAGE_SIZE")
        libc = _c()
        addr = libc.mmap(None, size, mmap.PROT_READ, mmap.MAP_SHARED, fd, 0)
        if addr in (None, _MAP_FAILED):
            err = ctypes.get_errno()
            raise OSError(err, os.strerror(err), str(path))
        try:
            vec = ctypes.create_string_buffer((size + page - 1) // page)
            if libc.mincore(addr, size, vec) != 0:
                err = ctypes.get_errno()
                raise OSError(err, os.strerror(err), str(path))
            return vec.raw, size
        finally:
            libc.munmap(addr, size)
    finally:
        os.close(fd)


def missing_ranges(path: str | Path, chunk_bytes: int = CHUNK_BYTES) -> Iterator[tuple[int, int]]:
    """(offset, length) of the chunks of `path` that have a page not in the page cache."""
    vec, size = resident(path)
    page = os.sysconf("SC_PAGE_SIZE")
    per = max(1, chunk_bytes // page)
    for i in range(0, len(vec), per):
        if any(not (b & 1) for b in vec[i:i + per]):
            off = i * page
            yield off, min(per * page, size - off)


def program_files(program: str) -> list[Path]:
    """The program's file and the shared libraries it loads (from ldd; none if ldd cannot tell)."""
    exe = shutil.which(program) or program
    files = [Path(os.path.realpath(exe))]
    ldd = shutil.which("ldd")
    if ldd is None:
        return files
    try:
        out = subprocess.run([ldd, str(files[0])], capture_output=True, text=True, timeout=LDD_TIMEOUT_S,
                             stdin=subprocess.DEVNULL).stdout
    except (OSError, subprocess.SubprocessError):
        return files
    for line in out.splitlines():
        m = re.search(r"(?:=>\s*)?(/\S+)\s+\(0x", line)
        if m:
            p = Path(os.path.realpath(m.group(1)))
            if p.is_file() and p not in files:
                files.append(p)
    return files


def preread(files: Iterable[Path], take: Callable[[int], int], chunk_bytes: int = CHUNK_BYTES) -> int:
    """Read the parts of `files` not in the page cache, asking `take(n)` (a rate limit: it blocks until
    n bytes may go, returns how many, raises to stop) before each read. Returns the bytes read.

    A file that cannot be opened or mapped is skipped (it is only a head start for the program).
    """
    total = 0
    for path in files:
        try:
            ranges = list(missing_ranges(path, chunk_bytes))
            if not ranges:
                continue
            fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
        except OSError as exc:
            log.debug("cannot pre-read %s: %s", path, exc)
            continue
        try:
            try:  # no readahead: every byte read goes through the rate limit
                os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_RANDOM)
            except OSError:
                pass
            for off, length in ranges:
                done = 0
                while done < length:
                    n = take(length - done)
                    if n <= 0:
                        continue
                    got = len(os.pread(fd, n, off + done))
                    total += got
                    if got < n:  # the file shrank: nothing more to read
                        done = length
                    else:
                        done += got
        finally:
            os.close(fd)
    return total
