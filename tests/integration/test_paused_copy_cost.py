"""A copy its controller has paused must cost the source next to nothing: the backup tool keeps polling
the redo log for the whole copy, and on a latency-bound source what a paused copy burns is what no
copy rate can take back (two paused copies held a 0.5-core node at twice its setpoint)."""

from __future__ import annotations

import os
import subprocess
import threading
import time

from slacker import mariadb
from slacker.backup import MariaBackup

from benchkit.host import cpu_s


def _writes(tenant, stop: threading.Event) -> None:
    conn = tenant.admin_connect()
    conn.autocommit(True)
    with conn.cursor() as cur:
        cur.execute("CREATE DATABASE IF NOT EXISTS w")
        cur.execute("CREATE TABLE IF NOT EXISTS w.t (id INT AUTO_INCREMENT PRIMARY KEY, v VARCHAR(200))")
        while not stop.is_set():
            cur.execute("INSERT INTO w.t (v) VALUES (REPEAT('x', 200))")
            time.sleep(0.01)
    conn.close()


def test_a_paused_stream_burns_little_cpu(tenant, short_tmp):
    tool = MariaBackup()
    defaults = short_tmp / "backup.cnf"
    tenant.ensure_service_accounts()
    mariadb.write_secret(defaults, tool.backup_defaults(tenant.config_file.read_text(), mariadb.BACKUP_USER,
                                                        tenant.backup_password(), tenant.socket))
    (short_tmp / "work").mkdir()
    stop = threading.Event()
    writer = threading.Thread(target=_writes, args=(tenant, stop), daemon=True)
    writer.start()
    read_end, write_end = os.pipe()  # nobody reads: the stream stalls as a paused copy does
    proc = subprocess.Popen(tool.stream_argv(defaults, short_tmp / "work"), stdout=write_end,
                            stderr=subprocess.DEVNULL)
    os.close(write_end)
    try:
        time.sleep(4)  # started, its pipe full, only the log copier still running
        assert proc.poll() is None
        before, t0 = cpu_s(proc.pid), time.monotonic()
        time.sleep(5)
        cores = (cpu_s(proc.pid) - before) / (time.monotonic() - t0)
    finally:
        proc.kill()
        proc.wait()
        os.close(read_end)
        stop.set()
        writer.join(10)
    # 0.06 measured with the 2M read buffer, 0.19-0.23 with the tenant's own 16M.
    assert cores < 0.12, f"a paused backup stream used {cores:.2f} of a core"
