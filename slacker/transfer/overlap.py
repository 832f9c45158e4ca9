"""The pipe side of a copy in a thread of its own, so it overlaps the socket side.

A copy through Python is serial in one thread: the sender reads the producer's pipe, then
encrypts and sends; the receiver receives and decrypts, then writes to the extractor's pipe.
While one thread does one half, nobody does the other, and under TLS each half costs enough
CPU that the producer and the extractor stall on their pipes in turn. Here the pipe half runs
in a helper thread with a few buffers in flight (the GIL is released in read, write and the
TLS calls), and only the pump thread ever touches the socket, so TLS state is never shared.

`PipeReader` (sender): a thread fills buffers from the producer's pipe; the pump takes them.
`PipeWriter` (receiver): the pump fills buffers from the socket; a thread writes them to the
extractor's pipe and hands each buffer back.

Errors cross to the pump thread: a read error is raised by the next `take()`, a write error
(EPIPE: the extractor exited) by the next `buffer()`, `submit()` or `flush()`. `close()` stops
the thread; a thread blocked on its pipe ends when the child at the other end is killed, which
every failure path of the pipe and the receiver does. Each thread reads or writes a duplicate of
the pipe's descriptor and closes it when it ends.
"""

from __future__ import annotations

import os
import queue
import threading
import time

DEPTH = 4  # buffers per copy; with 1 MiB chunks, 4 MiB in flight between the pipe and the socket
_POLL_S = 0.2  # how often a waiting side looks at the stop flag


class _Side:
    def __init__(self, fd: int, chunk: int, depth: int, name: str) -> None:
        # Our own descriptor for the pipe: the owner may close theirs on a failure path while this
        # thread still reads or writes, and a number closed under us could be reused by another file.
        self._fd = os.dup(fd)
        self._free: queue.Queue = queue.Queue()
        for _ in range(depth):
            self._free.put(bytearray(chunk))
        self._full: queue.Queue = queue.Queue()
        self._stop = threading.Event()
        self._error: BaseException | None = None
        self.cpu_s = 0.0  # the helper thread's own CPU, added to the copy's
        self._thread = threading.Thread(target=self._main, name=name, daemon=True)

    def start(self) -> None:
        self._thread.start()

    def close(self, timeout_s: float = 0.5) -> None:
        self._stop.set()
        self._full.put(None)  # wakes a writer waiting for work
        if self._thread.is_alive() and self._thread is not threading.current_thread():
            self._thread.join(timeout_s)

    def _main(self) -> None:
        cpu0 = time.thread_time()
        try:
            self._loop()
        except BaseException as exc:  # handed to the pump thread, raised there
            self._error = exc
            self._full.put(None)
        finally:
            os.close(self._fd)
            self.cpu_s = time.thread_time() - cpu0

    def _loop(self) -> None:
        raise NotImplementedError

    def _get(self, q: queue.Queue):
        """Next item of `q`, or None once stopped (called in the helper thread)."""
        while not self._stop.is_set():
            try:
                return q.get(timeout=_POLL_S)
            except queue.Empty:
                continue
        return None


class PipeReader(_Side):
    """Reads `fd` ahead of the pump. take() -> (buffer, n) with n > 0, or None at the end of input."""

    def __init__(self, fd: int, chunk: int, depth: int = DEPTH, name: str = "pipe-reader") -> None:
        super().__init__(fd, chunk, depth, name)

    def _loop(self) -> None:
        while True:
            buf = self._get(self._free)
            if buf is None:
                return
            n = os.readv(self._fd, [buf])
            self._full.put((buf, n) if n else None)
            if not n:
                return

    def take(self):
        item = self._full.get()
        if item is None:
            self._full.put(None)  # the end stays the end for a second caller
            if self._error is not None:
                raise self._error
        return item

    def give_back(self, buf: bytearray) -> None:
        self._free.put(buf)


class PipeWriter(_Side):
    """Writes submitted buffer slices to `fd` in order, behind the pump."""

    def __init__(self, fd: int, chunk: int, depth: int = DEPTH, name: str = "pipe-writer") -> None:
        super().__init__(fd, chunk, depth, name)
        self._done = threading.Condition()
        self._pending = 0

    def _loop(self) -> None:
        while True:
            item = self._get(self._full)
            if item is None:
                return
            buf, start, end = item
            view = memoryview(buf)[start:end]
            while view:
                view = view[os.write(self._fd, view):]
            self._free.put(buf)
            with self._done:
                self._pending -= 1
                self._done.notify_all()

    def _raise(self) -> None:
        if self._error is not None:
            raise self._error

    def buffer(self) -> bytearray:
        """A free buffer to fill (waits while all are queued for writing)."""
        while True:
            self._raise()
            try:
                return self._free.get(timeout=_POLL_S)
            except queue.Empty:
                continue

    def submit(self, buf: bytearray, start: int, end: int) -> None:
        """Queue buf[start:end] for writing (an empty slice hands the buffer straight back)."""
        self._raise()
        if end <= start:
            self._free.put(buf)
            return
        with self._done:
            self._pending += 1
        self._full.put((buf, start, end))

    def flush(self) -> None:
        """Wait until everything submitted is written."""
        with self._done:
            while self._pending and self._error is None:
                self._done.wait(_POLL_S)
        self._raise()
