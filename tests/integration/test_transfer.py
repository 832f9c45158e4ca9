"""The throttled pipe end to end: real processes and sockets on 127.0.0.1, no mariadbd.

Both sender implementations run every test. Rates are judged at the receiver,
which is what a tenant's neighbours feel.
"""

from __future__ import annotations

import hashlib
import os
import signal
import socket
import sys
import time

import pytest

from slacker.errors import MigrationFailed, MissingDependency
from slacker.transfer import Receiver, make_pipe, new_token, transfer_rate_meter
from slacker.transfer import protocol
from slacker.transfer._proc import pid_alive, wait_until

KINDS = ["native", "pv"]
MB = 1_000_000

# A producer that writes `total` random-ish bytes at `rate` bytes/s and says hello on stderr.
SLOW_PRODUCER = r"""
import os, sys, time
rate, total = float(sys.argv[1]), int(float(sys.argv[2]))
sys.stderr.write("slow-producer: starting\n"); sys.stderr.flush()
block = os.urandom(64 * 1024)
t0, sent = time.monotonic(), 0
while sent < total:
    n = min(len(block), total - sent)
    os.write(1, block[:n]); sent += n
    d = t0 + sent / rate - time.monotonic()
    if d > 0:
        time.sleep(d)
"""


def slow_producer(rate: float, total: float) -> list[str]:
    return [sys.executable, "-c", SLOW_PRODUCER, str(rate), str(int(total))]


def sha256(path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


@pytest.fixture
def payload(tmp_path):
    path = tmp_path / "payload"
    path.write_bytes(os.urandom(12 * MB) + b"tail")
    return path


@pytest.fixture
def link():
    """Factory for a receiver + sender pair; both are aborted at teardown whatever happened."""
    made = []

    def make(kind, producer, extract=("cat",), extract_stdout=None, rate=None, token=None, mid="m-1",
             sender_token=None, sender_mid=None, pipe_kw=None, **receiver_kw):
        token = token or new_token()
        receiver = Receiver(mid, token, list(extract), "127.0.0.1", extract_stdout=extract_stdout,
                            **receiver_kw)
        receiver.start()
        pipe = make_pipe(kind, producer, "127.0.0.1", receiver.port, sender_mid or mid, sender_token or token,
                         rate_bytes_per_s=rate, **(pipe_kw or {}))
        made.append((pipe, receiver))
        return pipe, receiver

    yield make
    for pipe, receiver in made:
        pipe.abort()
        receiver.abort()


@pytest.fixture
def queue_thief():
    """Deletes the System V queue every pv on the host shares, every 50 ms, as another pv on
    the host does when it exits (pv 1.6 keys it on /tmp; a pv that lost it hears no `pv -R`)."""
    import ctypes
    import threading

    st = os.stat("/tmp")
    key = (ord("P") << 24) | ((st.st_dev & 0xFF) << 16) | (st.st_ino & 0xFFFF)
    libc = ctypes.CDLL(None, use_errno=True)
    stop = threading.Event()

    def steal():
        while not stop.wait(0.05):
            qid = libc.msgget(ctypes.c_int(key), 0)
            if qid >= 0:
                libc.msgctl(qid, 0, None)  # IPC_RMID

    thread = threading.Thread(target=steal, daemon=True)
    thread.start()
    yield
    stop.set()
    thread.join()


def all_gone(pids) -> bool:
    return all(not pid_alive(p) for p in pids)


def group_gone(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return True
    return False


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("rate", [None, 40 * MB], ids=["unlimited", "40MB/s"])
def test_stream_arrives_byte_identical(kind, rate, link, payload, tmp_path):
    out = tmp_path / "out"
    pipe, receiver = link(kind, ["cat", str(payload)], extract_stdout=out, rate=rate)
    t0 = time.monotonic()
    pipe.start()
    sent = pipe.wait(30)
    got = receiver.wait(10)
    elapsed = time.monotonic() - t0
    size = payload.stat().st_size
    assert sha256(out) == sha256(payload)
    assert sent.bytes_sent == sent.acknowledged_bytes == got.bytes_received == size
    assert got.rejected_connections == 0
    if rate is not None:
        assert elapsed >= 0.8 * size / rate  # the limit was honoured


@pytest.mark.parametrize("sender", ["splice", "copy"])
@pytest.mark.parametrize("receiving", ["splice", "copy"])
def test_every_data_path_pair_delivers_the_same_bytes_and_says_where_it_waited(sender, receiving, link, payload,
                                                                               tmp_path):
    """splice (in the kernel) and copy (through Python) on either side: same bytes, the trailer held back,
    and each side's stage clock names its path and accounts for its time."""
    out = tmp_path / "out"
    pipe, receiver = link("native", ["cat", str(payload)], extract_stdout=out, data_path=receiving,
                          pipe_kw={"use_splice": sender == "splice"})
    pipe.start()
    sent = pipe.wait(30)
    got = receiver.wait(10)
    assert sha256(out) == sha256(payload)
    assert sent.bytes_sent == got.bytes_received == payload.stat().st_size
    tx, rx = pipe.stages.as_dict(), receiver.stages.as_dict()
    assert (tx["path"], rx["path"]) == (sender, receiving)
    assert 0 <= tx["first_byte_at_s"] <= tx["producer_eof_at_s"] <= tx["verdict_at_s"]
    assert 0 <= rx["first_byte_at_s"] <= rx["stream_end_at_s"] <= rx["extractor_exit_at_s"]
    assert tx["child_cpu_s"] is not None and rx["child_cpu_s"] is not None  # cat's CPU, read before reaping
    waited = tx["producer_wait_s"] + tx["throttle_wait_s"] + tx["send_s"]
    assert waited <= tx["producer_eof_at_s"] + 0.05


@pytest.mark.parametrize("kind", KINDS)
def test_xbstream_extracted_by_mbstream(kind, link, tmp_path):
    src, dest = tmp_path / "src", tmp_path / "dest"
    src.mkdir()
    dest.mkdir()
    files = {"ibdata1": os.urandom(3 * MB), "db/t.ibd": os.urandom(MB + 17)}
    for name, data in files.items():
        (src / name).parent.mkdir(parents=True, exist_ok=True)
        (src / name).write_bytes(data)
    producer = ["mbstream", "-c", "-C", str(src), *files]
    pipe, receiver = link(kind, producer, extract=["mbstream", "-x", "-C", str(dest)], rate=20 * MB)
    pipe.start()
    pipe.wait(30)
    receiver.wait(10)
    for name, data in files.items():
        assert (dest / name).read_bytes() == data


@pytest.mark.parametrize("kind", KINDS)
def test_rate_cut_pause_and_resume_measured_at_receiver(kind, link, queue_thief):
    """200MB/s against a 10MB/s producer, then 1MB/s must hold within 1 s; 0 pauses; resume has no burst.

    Another process keeps deleting the queue every pv on the host shares (queue_thief)."""
    pipe, receiver = link(kind, slow_producer(10 * MB, 200 * MB), rate=200 * MB)
    meter = transfer_rate_meter(lambda: receiver.bytes_received)
    pipe.start()
    # Flowing first (a busy machine can take most of a second to start the pipe's processes), then 2 s of it.
    assert wait_until(lambda: receiver.bytes_received > 0, 10)
    time.sleep(2.0)
    t_cut = time.monotonic()
    pipe.set_rate(1 * MB)
    assert pipe.rate == 1 * MB
    # What the sender had passed by the cut may still be in the pipes and socket buffers: a receiver
    # starved of CPU (a busy host) gets it late, at full speed, and that is not the throttle's doing.
    # The cut is judged from 1 s after it, or from when the receiver has had all of that, if later.
    time.sleep(0.15)  # pv reports its count every 0.1 s
    sent_by_cut = pipe.bytes_sent
    assert wait_until(lambda: receiver.bytes_received >= sent_by_cut, 4)
    t_judged = max(t_cut + 1.0, time.monotonic())
    time.sleep(max(0.0, t_judged + 2.0 - time.monotonic()))
    t_pause = time.monotonic()
    pipe.set_rate(0)
    time.sleep(2.0)
    t_resume = time.monotonic()
    pipe.set_rate(2 * MB)
    time.sleep(1.6)
    meter.stop()

    assert meter.rate(t_cut - 1.5, t_cut) > 5 * MB  # it was running at the producer's pace
    assert meter.rate(t_judged, t_judged + 2.0) <= 1.2 * MB
    assert meter.bytes_between(t_pause + 0.3, t_pause + 2.0) == 0  # paused means nothing moves
    # resuming: flowing again, at the new rate, without a burst beyond a bounded amount
    assert meter.rate(t_resume + 0.6, t_resume + 1.6) >= 1.4 * MB
    assert meter.bytes_between(t_resume, t_resume + 1.0) <= 2 * MB + 512 * 1024
    assert meter.max_bytes_in_window(0.1, t_resume, t_resume + 1.6) <= 600 * 1024
    assert not pipe.done


@pytest.mark.parametrize("kind", KINDS)
def test_start_paused_then_resume(kind, link):
    pipe, receiver = link(kind, slow_producer(20 * MB, 3 * MB), rate=0)
    pipe.start()
    assert wait_until(lambda: not receiver.listening, 3)  # connected and authenticated
    time.sleep(1.2)
    assert receiver.bytes_received <= 2 and not pipe.done  # nothing flows while paused
    pipe.set_rate(None)
    assert pipe.wait(20).acknowledged_bytes == 3 * MB
    assert receiver.wait(5).bytes_received == 3 * MB


# A producer that takes a commit-blocking lock in the middle of its stream, as mariabackup does.
LOCKING_PRODUCER = r"""
import os, sys, time
def say(line):
    sys.stderr.write("[00] 2026-11-22 08:05:05 " + line + "\n"); sys.stderr.flush()
say("Starting BACKUP STAGE BLOCK_COMMIT")
block = os.urandom(1 << 20)
for _ in range(3):
    os.write(1, block)
time.sleep(1.5)  # the pipe drains what it read before the lock goes
say("All tables unlocked")
# stderr and stdout are two pipes read by two threads: nothing orders the release
# line before bytes written right after it. Bytes that slip through unthrottled in
# that gap are harmless in a real backup, but this test checks that the pause
# holds again once the release is seen, so it gives the reader time to see it.
time.sleep(0.5)
os.write(1, block)
"""


@pytest.mark.parametrize("kind", KINDS)
def test_commit_lock_stage_runs_unthrottled_even_when_paused(kind, link):
    """While the producer blocks the source's commits a pause must not hold it (that deadlocks)."""
    from slacker.backup import commit_lock_event

    MIB = 1 << 20

    receiver = Receiver("m-lock", token := new_token(), ["cat"], "127.0.0.1")
    receiver.start()
    pipe = make_pipe(kind, [sys.executable, "-c", LOCKING_PRODUCER], "127.0.0.1", receiver.port, "m-lock",
                     token, rate_bytes_per_s=0, commit_lock_events=commit_lock_event)
    try:
        pipe.start()
        assert wait_until(lambda: pipe.commit_locked, 5)
        assert pipe.rate == 0 and pipe.effective_rate is None
        # the whole locked part arrives although the requested rate is 0
        assert wait_until(lambda: receiver.bytes_received >= 3 * MIB, 10), receiver.bytes_received
        assert wait_until(lambda: not pipe.commit_locked, 5)
        time.sleep(1.0)
        # lock released: the pause holds again, the last MB waits
        assert receiver.bytes_received < 4 * MIB and not pipe.done
        pipe.set_rate(None)
        assert pipe.wait(20).acknowledged_bytes == 4 * MIB
    finally:
        pipe.abort()
        receiver.abort()


def _raw_attempt(port: int, data: bytes) -> bytes:
    """Connect, send `data`, return what the receiver answers before closing."""
    with socket.create_connection(("127.0.0.1", port), timeout=5) as s:
        s.sendall(data)
        s.shutdown(socket.SHUT_WR)
        out = b""
        while chunk := s.recv(4096):
            out += chunk
        return out


@pytest.mark.parametrize("kind", KINDS)
def test_wrong_credentials_refused_right_one_accepted_then_no_more(kind, link, payload, tmp_path):
    out = tmp_path / "out"
    token = new_token()
    pipe, receiver = link(kind, ["cat", str(payload)], extract_stdout=out, token=token, mid="m-7")
    port = receiver.port
    assert _raw_attempt(port, protocol.encode_header("m-7", new_token())).startswith(b"ERR refused")
    assert _raw_attempt(port, protocol.encode_header("m-8", token)).startswith(b"ERR refused")
    assert _raw_attempt(port, b"GET / HTTP/1.0\r\n\r\n").startswith(b"ERR refused")
    assert receiver.rejected_connections == 3 and not receiver.done

    pipe.start()
    assert pipe.wait(30).bytes_sent == payload.stat().st_size
    assert receiver.wait(10).rejected_connections == 3
    assert sha256(out) == sha256(payload)
    with pytest.raises(OSError):  # it stopped listening after the one stream
        _raw_attempt(port, protocol.encode_header("m-7", token))


@pytest.mark.parametrize("kind", KINDS)
def test_sender_with_wrong_token_fails_and_receiver_keeps_waiting(kind, link, payload):
    pipe, receiver = link(kind, ["cat", str(payload)], sender_token=new_token())
    pipe.start()
    with pytest.raises(MigrationFailed) as err:
        pipe.wait(10)
    assert err.value.phase == "snapshot" and err.value.stage == "receiver"
    assert "refused" in str(err.value)
    assert wait_until(lambda: receiver.rejected_connections == 1, 2)
    assert not receiver.done and receiver.listening


@pytest.mark.parametrize("kind", KINDS)
def test_producer_killed_mid_stream(kind, link):
    pipe, receiver = link(kind, slow_producer(5 * MB, 100 * MB))
    pipe.start()
    assert wait_until(lambda: receiver.bytes_received > MB, 5)
    producer_pid = pipe.pids[0]
    os.kill(producer_pid, signal.SIGKILL)
    with pytest.raises(MigrationFailed) as err:
        pipe.wait(10)
    e = err.value
    assert e.phase == "snapshot" and e.stage == "producer"
    assert sys.executable in str(e) or os.path.basename(sys.executable) in str(e)
    assert "slow-producer: starting" in str(e)  # the tail of the producer's stderr
    with pytest.raises(MigrationFailed) as rerr:
        receiver.wait(10)
    assert rerr.value.stage == "transport"  # a cut, not an end: no trailer arrived
    assert wait_until(lambda: all_gone(pipe.pids + receiver.pids), 3)


@pytest.mark.parametrize("kind", KINDS)
def test_transport_killed(kind, link):
    pipe, receiver = link(kind, slow_producer(5 * MB, 100 * MB))
    pipe.start()
    assert wait_until(lambda: receiver.bytes_received > MB, 5)
    if kind == "pv":
        os.kill(pipe.stage_pids["transport"], signal.SIGKILL)  # kill nc
    else:
        pipe._sock.shutdown(socket.SHUT_RDWR)  # the native pipe's transport is its socket
    with pytest.raises(MigrationFailed) as err:
        pipe.wait(10)
    assert err.value.phase == "snapshot" and err.value.stage == "transport"
    with pytest.raises(MigrationFailed) as rerr:
        receiver.wait(10)
    assert rerr.value.phase == "snapshot"
    assert wait_until(lambda: all_gone(pipe.pids + receiver.pids), 3)


@pytest.mark.parametrize("kind", KINDS)
def test_extractor_failure_reaches_both_sides(kind, link):
    extract = [sys.executable, "-c", "import sys; sys.stdin.buffer.read(1000); "
                                     "sys.stderr.write('disk full, pretend\\n'); sys.exit(3)"]
    pipe, receiver = link(kind, slow_producer(20 * MB, 50 * MB), extract=extract)
    pipe.start()
    with pytest.raises(MigrationFailed) as rerr:
        receiver.wait(10)
    assert rerr.value.stage == "extractor" and "disk full, pretend" in str(rerr.value)
    with pytest.raises(MigrationFailed) as err:
        pipe.wait(10)
    assert err.value.stage in ("receiver", "transport")
    assert wait_until(lambda: all_gone(pipe.pids + receiver.pids), 3)


@pytest.mark.parametrize("kind", KINDS)
def test_abort_leaves_nothing_behind(kind, link):
    pipe, receiver = link(kind, slow_producer(5 * MB, 100 * MB))
    pipe.start()
    assert wait_until(lambda: receiver.bytes_received > 0, 5)
    pipe.set_rate(0)  # a paused pv pipe has a stopped nc: abort must kill it too
    time.sleep(0.5)
    pids = pipe.pids + receiver.pids
    assert len(pids) == (3 if kind == "pv" else 1) + 1
    pipe.abort()
    receiver.abort()
    assert wait_until(lambda: all_gone(pids), 3)
    assert group_gone(pids[0] if kind == "native" else pipe.stage_pids["transport"])
    assert group_gone(receiver.pids[0])
    with pytest.raises(MigrationFailed) as err:
        pipe.wait(1)
    assert err.value.stage == "aborted"


def test_receiver_gives_up_without_a_valid_connection():
    receiver = Receiver("m-1", new_token(), ["cat"], accept_timeout_s=0.6)
    receiver.start()
    with pytest.raises(MigrationFailed) as err:
        receiver.wait(5)
    assert err.value.stage == "accept" and err.value.phase == "snapshot"
    assert not receiver.listening


def test_wait_timeout_aborts_and_raises(link):
    pipe, receiver = link("native", slow_producer(MB, 100 * MB))
    pipe.start()
    with pytest.raises(MigrationFailed) as err:
        pipe.wait(0.5)
    assert err.value.stage == "timeout"
    assert wait_until(lambda: all_gone(pipe.pids), 3)


def cold_program(tmp_path, payload, size: int):
    """An executable of `size` bytes that streams `payload`, not in the page cache (None on tmpfs)."""
    prog = tmp_path / "backup-tool"
    prog.write_bytes(b"#!/bin/sh\nexec cat '" + str(payload).encode() + b"'\n#" + b"x" * size + b"\n")
    prog.chmod(0o755)
    fd = os.open(prog, os.O_RDONLY)
    os.fsync(fd)
    os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    os.close(fd)
    from slacker import pagecache
    vec, _ = pagecache.resident(prog)
    return prog if sum(b & 1 for b in vec) < len(vec) // 2 else None


@pytest.mark.parametrize("kind", KINDS)
def test_the_producers_program_is_read_into_memory_at_the_pipes_rate_first(kind, link, payload, tmp_path):
    # A backup tool that is not in memory loads itself from the source's disk at full speed when it
    # starts (mariabackup: ~40 MB in its first second): the pipe reads it first, at the copy's rate.
    prog = cold_program(tmp_path, payload, 3 * MB)
    if prog is None:
        pytest.skip("this filesystem keeps every page in memory")
    out = tmp_path / "out"
    pipe, receiver = link(kind, [str(prog)], extract_stdout=out, rate=2 * MB, pipe_kw={"preread_program": True})
    t0 = time.monotonic()
    pipe.start()
    started = time.monotonic() - t0
    assert 3 * MB <= pipe.preread_bytes <= 3.2 * MB and not pipe.prereading
    assert started >= 1.2  # 3 MB at 2 MB/s (less one burst), before the producer ran
    pipe.set_rate(None)
    pipe.wait(30)
    receiver.wait(10)
    assert sha256(out) == sha256(payload)  # the stream itself is untouched
    # In memory now: a second pipe reads nothing and starts at once. Read once more first: a page read
    # once is the first the kernel reclaims while the rest of the suite streams gigabytes (a fresh-clone
    # run saw one 1 MiB chunk gone within seconds); read twice, it stays, as a tool run before would.
    prog.read_bytes()
    pipe2, receiver2 = link(kind, [str(prog)], extract_stdout=tmp_path / "out2", rate=2 * MB, mid="m-2",
                            pipe_kw={"preread_program": True})
    t0 = time.monotonic()
    pipe2.start()
    assert pipe2.preread_bytes == 0 and time.monotonic() - t0 < 1.0
    pipe2.set_rate(None)
    pipe2.wait(30)


@pytest.mark.parametrize("kind", KINDS)
def test_an_abort_while_the_program_is_read_ends_it_before_it_ran(kind, link, payload, tmp_path):
    prog = cold_program(tmp_path, payload, 3 * MB)
    if prog is None:
        pytest.skip("this filesystem keeps every page in memory")
    pipe, receiver = link(kind, [str(prog)], rate=0.2 * MB, pipe_kw={"preread_program": True})
    errors = []

    def start():
        try:
            pipe.start()
        except MigrationFailed as exc:
            errors.append(exc)

    import threading
    t = threading.Thread(target=start)
    t.start()
    assert wait_until(lambda: pipe.prereading, 5)
    t0 = time.monotonic()
    pipe.abort()
    t.join(5)
    assert not t.is_alive() and time.monotonic() - t0 < 3
    assert errors and errors[0].stage == "aborted", errors
    assert pipe.done and pipe.pids == [] and receiver.bytes_received == 0


@pytest.mark.parametrize("kind", KINDS)
def test_missing_producer_program(kind, link):
    pipe, _ = link(kind, ["/nonexistent/backup-tool", "--backup"])
    with pytest.raises(MissingDependency):
        pipe.start()
    assert pipe.done


@pytest.mark.parametrize("kind", KINDS)
def test_nobody_listening_is_a_transport_failure(kind):
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()  # a port nobody listens on
    pipe = make_pipe(kind, ["cat", "/etc/hostname"], "127.0.0.1", port, "m-1", new_token())
    try:
        with pytest.raises(MigrationFailed) as err:
            pipe.start()
            pipe.wait(10)
        assert err.value.stage == "transport" and "refused" in str(err.value).lower()
    finally:
        pipe.abort()
    assert wait_until(lambda: all_gone(pipe.pids), 3)


def test_producer_credentials_stay_out_of_argv(link, tmp_path):
    """The pipe adds nothing secret to any process's arguments (the token travels in-band)."""
    token = new_token()
    pipe, receiver = link("pv", slow_producer(5 * MB, 50 * MB), token=token)
    pipe.start()
    assert wait_until(lambda: receiver.bytes_received > 0, 5)
    for pid in pipe.pids + receiver.pids:
        cmdline = open(f"/proc/{pid}/cmdline", "rb").read()
        assert token.encode() not in cmdline
    with open(f"/proc/{pipe.stage_pids['throttle']}/environ", "rb") as f:
        assert token.encode() not in f.read()
