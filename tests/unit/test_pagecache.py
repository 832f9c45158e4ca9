"""slacker.pagecache: which parts of a file are cached, and reading only those through a rate limit."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from slacker import pagecache

MIB = 1 << 20


def evict(path: Path) -> bool:
    """Drop the file's pages from the page cache; False where the filesystem keeps them (tmpfs)."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    finally:
        os.close(fd)
    vec, _ = pagecache.resident(path)
    return sum(b & 1 for b in vec) < len(vec) // 2


@pytest.fixture
def big_file(tmp_path: Path) -> Path:
    p = tmp_path / "prog"
    p.write_bytes(os.urandom(3 * MIB + 1234))
    if not evict(p):
        pytest.skip("this filesystem keeps every page in memory")
    return p


def test_only_the_uncached_parts_are_read_each_through_the_limit(big_file: Path) -> None:
    asked: list[int] = []

    def take(n: int) -> int:
        asked.append(n)
        return min(n, 256 * 1024)  # a limit that grants in slices

    assert list(pagecache.missing_ranges(big_file))  # evicted: every chunk is missing
    got = pagecache.preread([big_file], take)
    assert got == big_file.stat().st_size == sum(min(n, 256 * 1024) for n in asked)
    assert max(asked) <= pagecache.CHUNK_BYTES
    vec, _ = pagecache.resident(big_file)
    assert all(b & 1 for b in vec)  # now in memory
    asked.clear()
    assert pagecache.preread([big_file], take) == 0 and asked == []  # nothing left to read


def test_a_partly_cached_file_reads_only_its_missing_chunks(big_file: Path) -> None:
    with open(big_file, "rb") as f:
        f.read(MIB)  # the first chunk is cached now
    ranges = list(pagecache.missing_ranges(big_file))
    assert ranges and ranges[0][0] >= MIB - os.sysconf("SC_PAGE_SIZE") * 32  # (readahead may cache a bit more)
    assert pagecache.preread([big_file], lambda n: n) <= big_file.stat().st_size - MIB + 32 * 4096


def test_a_stop_from_the_limit_ends_the_read(big_file: Path) -> None:
    class Stop(Exception):
        pass

    calls = []

    def take(n: int) -> int:
        calls.append(n)
        if len(calls) > 1:
            raise Stop()
        return n

    with pytest.raises(Stop):
        pagecache.preread([big_file], take)


def test_unreadable_files_are_skipped(tmp_path: Path) -> None:
    assert pagecache.preread([tmp_path / "missing", tmp_path], lambda n: n) == 0


def test_a_programs_files_are_itself_and_the_libraries_it_loads() -> None:
    files = pagecache.program_files("sh")
    assert files[0] == Path(os.path.realpath(pagecache.shutil.which("sh")))
    assert any(f.name.startswith("libc.so") for f in files), files
    assert all(f.is_file() for f in files)
    assert pagecache.program_files("/nonexistent/tool") == [Path("/nonexistent/tool")]
