"""The target's end of a shared tenant's logical snapshot: `python -m slacker.onedb_load DEFAULTS WORKDIR`.

The receiver of a migration (slacker.transfer.Receiver) runs this as its extract program: the stream is
`mariadb-dump --single-transaction --master-data=2 --gtid --databases DB` of the source, and this pumps it
into the target's `mariadb` client (binlog off, slacker.onedb_snapshot.client_argv) while it keeps the
dump's first and last 64 KiB in WORKDIR/dump.head and WORKDIR/dump.tail: the position the copy is
consistent at is there (onedb_snapshot.parse_dump_position), read by the target's prepare step. Its exit
code is the client's (a failed load fails the stream); the client's stderr goes to WORKDIR/load.log.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

from .onedb_snapshot import CHUNK, HEAD_BYTES, TAIL_BYTES, client_argv


def definer_rewrite(spec: str):
    """`FROM:TO` (account names): a function that rewrites the DEFINER of the dump's objects from FROM to TO on
    lines that are not rows (`mariadb-dump` writes one INSERT per line, its strings' newlines escaped), keeping
    each account's host: a whole server packed into a shared server has its objects defined by `app`, whose
    account there is the tenant's own."""
    old, _, new = spec.partition(":")
    if not old or not new:
        raise ValueError(f"--definer wants FROM:TO, got {spec!r}")
    pattern = re.compile(rb"DEFINER=`" + re.escape(old.encode()) + rb"`@")
    to = b"DEFINER=`" + new.encode() + b"`@"

    def rewrite(line: bytes) -> bytes:
        return line if line.startswith(b"INSERT INTO ") else pattern.sub(to, line)
    return rewrite


def _chunks(src, rewrite):
    if rewrite is None:
        while chunk := src.read1(CHUNK):
            yield chunk
        return
    while line := src.readline():
        yield rewrite(line)


def main(argv: list[str]) -> int:
    rewrite = None
    if argv and argv[-1].startswith("--definer="):
        rewrite = definer_rewrite(argv.pop()[len("--definer="):])
    if len(argv) != 2:
        sys.stderr.write("usage: python -m slacker.onedb_load DEFAULTS_FILE WORK_DIR [--definer=FROM:TO]\n")
        return 2
    defaults, work = Path(argv[0]), Path(argv[1])
    head, tail = b"", b""
    with open(work / "load.log", "wb") as err:
        client = subprocess.Popen(client_argv(defaults), stdin=subprocess.PIPE, stdout=subprocess.DEVNULL,
                                  stderr=err)
        src = sys.stdin.buffer
        try:
            for chunk in _chunks(src, rewrite):
                if len(head) < HEAD_BYTES:
                    head += chunk[:HEAD_BYTES - len(head)]
                tail = (tail + chunk)[-TAIL_BYTES:]
                client.stdin.write(chunk)
        except BrokenPipeError:
            pass  # the client failed: its exit code says so
        finally:
            try:
                client.stdin.close()
            except BrokenPipeError:
                pass
        rc = client.wait()
    for name, data in (("dump.head", head), ("dump.tail", tail)):
        tmp = work / f"{name}.tmp"
        tmp.write_bytes(data)
        os.replace(tmp, work / name)
    return rc


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
