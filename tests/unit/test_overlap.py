"""The pipe helpers of a copy (slacker.transfer.overlap) on real pipes: bytes in order and whole,
errors raised in the pump's thread, and a descriptor the owner closes never written under it."""

from __future__ import annotations

import os
import threading

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from slacker.transfer.overlap import PipeReader, PipeWriter


def _feed(fd: int, pieces: list[bytes]) -> threading.Thread:
    def run():
        with os.fdopen(fd, "wb", buffering=0) as w:
            for p in pieces:
                w.write(p)
    t = threading.Thread(target=run, daemon=True)
    t.start()
    return t


@settings(max_examples=25, deadline=None)
@given(st.lists(st.binary(min_size=1, max_size=5000), max_size=30), st.integers(1, 4))
def test_reader_hands_over_every_byte_in_order(pieces, depth):
    r, w = os.pipe()
    feeder = _feed(w, pieces)
    reader = PipeReader(r, chunk=1024, depth=depth)
    reader.start()
    got = bytearray()
    while (item := reader.take()) is not None:
        buf, n = item
        got += buf[:n]
        reader.give_back(buf)
    assert reader.take() is None  # the end stays the end
    reader.close()
    feeder.join(5)
    os.close(r)
    assert bytes(got) == b"".join(pieces)


@settings(max_examples=25, deadline=None)
@given(st.lists(st.binary(max_size=3000), max_size=30), st.integers(1, 4))
def test_writer_writes_every_slice_in_order(pieces, depth):
    r, w = os.pipe()
    out = bytearray()

    def read_all():
        while chunk := os.read(r, 65536):
            out.extend(chunk)
    drain = threading.Thread(target=read_all)
    drain.start()
    writer = PipeWriter(w, chunk=3000 + 8, depth=depth)
    writer.start()
    for p in pieces:
        buf = writer.buffer()
        buf[8:8 + len(p)] = p
        writer.submit(buf, 8, 8 + len(p))
    writer.flush()
    writer.close()
    os.close(w)
    drain.join(5)
    os.close(r)
    assert bytes(out) == b"".join(pieces)


def test_writer_raises_the_extractors_exit_in_the_pumps_thread():
    r, w = os.pipe()
    os.close(r)  # the extractor is gone: its stdin has no reader
    writer = PipeWriter(w, chunk=1024, depth=2)
    writer.start()
    with pytest.raises(BrokenPipeError):
        for _ in range(100):
            buf = writer.buffer()
            writer.submit(buf, 0, 1024)
        writer.flush()
    writer.close()
    os.close(w)


def test_a_descriptor_closed_by_the_owner_is_not_written_under_the_helper():
    """The receiver closes the extractor's stdin on a failure path while the writer may still hold
    bytes; the helper writes its own duplicate, never a number that another file could reuse."""
    r, w = os.pipe()
    writer = PipeWriter(w, chunk=16, depth=2)
    writer.start()
    os.close(w)
    other_r, other_w = os.pipe()  # likely takes the number just freed
    buf = writer.buffer()
    buf[:5] = b"hello"
    writer.submit(buf, 0, 5)
    writer.flush()
    writer.close()
    os.set_blocking(other_r, False)
    with pytest.raises(BlockingIOError):
        os.read(other_r, 16)  # nothing went to the other pipe
    assert os.read(r, 16) == b"hello"
    for fd in (r, other_r, other_w):
        os.close(fd)
