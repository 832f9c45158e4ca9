"""Row checksums for verifying a copy: a consistent snapshot at a known GTID position, and
primary-key-ordered chunks summed row by row (`slacker.verify` drives them on both servers).

A chunk's sum is (rows, BIT_XOR and SUM of CRC32 over each row's text). The row's text is
its columns joined with CONCAT_WS plus a string of ISNULL flags (CONCAT_WS skips NULLs, so
NULL and '' would otherwise look alike). XOR alone cancels duplicate rows; the SUM does not.
"""

from __future__ import annotations

import datetime
import decimal
from dataclasses import dataclass, field

from .ops import SYSTEM_SCHEMAS


@dataclass(frozen=True)
class TablePlan:
    """What a chunked checksum of one table needs: its columns, primary key and size."""

    label: str                # schema.table, as messages show it
    name: str                 # `schema`.`table`, quoted for SQL
    columns: tuple[str, ...]  # in ordinal order
    pk: tuple[str, ...]       # primary key columns in key order; () when it has none
    data_bytes: int           # its tablespace file's size (data_length where there is none)
    rows: int                 # information_schema's estimate (table_rows; stale on a fresh table)
    shape: str = field(default="")  # column names and types, compared between the two servers


def _q(ident: str) -> str:
    return "`" + ident.replace("`", "``") + "`"


# ---- the snapshot --------------------------------------------------------------------------------
def open_snapshot(conn) -> str:
    """A read-only REPEATABLE READ transaction on a consistent snapshot; returns its GTID position.

    MariaDB reports the binlog offset the snapshot corresponds to (Binlog_snapshot_file /
    Binlog_snapshot_position, unaffected by commits after it) and BINLOG_GTID_POS turns it into
    a GTID position. No lock is taken."""
    with conn.cursor() as cur:
        cur.execute("SET SESSION TRANSACTION ISOLATION LEVEL REPEATABLE READ")
        cur.execute("SET SESSION max_statement_time = 0")
        cur.execute("START TRANSACTION WITH CONSISTENT SNAPSHOT, READ ONLY")
        cur.execute("SHOW SESSION STATUS LIKE 'binlog_snapshot_%'")
        st = {k.lower(): v for k, v in cur.fetchall()}
        cur.execute("SELECT BINLOG_GTID_POS(%s, %s)",
                    (st["binlog_snapshot_file"], int(st["binlog_snapshot_position"])))
        row = cur.fetchone()
    return (row[0] if row else "") or ""


def open_plain_snapshot(conn) -> None:
    """A consistent snapshot whose position the caller knows (a target whose applier is stopped)."""
    with conn.cursor() as cur:
        cur.execute("SET SESSION TRANSACTION ISOLATION LEVEL REPEATABLE READ")
        cur.execute("SET SESSION max_statement_time = 0")
        cur.execute("START TRANSACTION WITH CONSISTENT SNAPSHOT, READ ONLY")


# ---- what to checksum ----------------------------------------------------------------------------
def table_plans(conn, schema: str | None = None) -> list[TablePlan]:
    """Every user base table (of `schema` only, when named: a shared tenant's database), with its columns,
    primary key and size estimate."""
    ph = ", ".join(["%s"] * len(SYSTEM_SCHEMAS))
    where, args = f"table_schema NOT IN ({ph})", list(SYSTEM_SCHEMAS)
    if schema is not None:
        where, args = "table_schema = %s", [schema]
    with conn.cursor() as cur:
        # The file's size, not data_length: InnoDB's statistics lag on a table that just grew.
        cur.execute(f"SELECT t.table_schema, t.table_name, COALESCE(s.file_size, t.data_length, 0), "
                    f"COALESCE(t.table_rows, 0) FROM information_schema.tables t "
                    f"LEFT JOIN information_schema.innodb_sys_tablespaces s "
                    f"ON s.name = CONCAT(t.table_schema, '/', t.table_name) WHERE t.table_type = 'BASE TABLE' "
                    f"AND t.{where} ORDER BY t.table_schema, t.table_name", args)
        tables = cur.fetchall()
        cur.execute(f"SELECT table_schema, table_name, column_name, column_type FROM information_schema.columns "
                    f"WHERE {where} ORDER BY table_schema, table_name, ordinal_position", args)
        cols: dict[tuple[str, str], list[tuple[str, str]]] = {}
        for s, t, c, ty in cur.fetchall():
            cols.setdefault((s, t), []).append((c, ty))
        cur.execute(f"SELECT table_schema, table_name, column_name FROM information_schema.statistics "
                    f"WHERE index_name = 'PRIMARY' AND {where} "
                    f"ORDER BY table_schema, table_name, seq_in_index", args)
        pks: dict[tuple[str, str], list[str]] = {}
        for s, t, c in cur.fetchall():
            pks.setdefault((s, t), []).append(c)
    out = []
    for s, t, data, rows in tables:
        c = cols.get((s, t), [])
        out.append(TablePlan(f"{s}.{t}", f"{_q(s)}.{_q(t)}", tuple(n for n, _ in c), tuple(pks.get((s, t), ())),
                             int(data), int(rows), ";".join(f"{n} {ty}" for n, ty in c)))
    return out


# ---- chunks ---------------------------------------------------------------------------------------
def _beyond(pk: tuple[str, ...], n: int, strict: str, last: str) -> str:
    """(pk) <op> (v1..vn) expanded into ORs of equalities and one comparison each, so the optimizer
    sees a range on the primary key whatever its width: `strict` for the leading columns, `last` for
    the n-th."""
    parts = []
    for i in range(n):
        eq = [f"{_q(pk[j])} = %s" for j in range(i)]
        parts.append("(" + " AND ".join(eq + [f"{_q(pk[i])} {last if i == n - 1 else strict} %s"]) + ")")
    return "(" + " OR ".join(parts) + ")"


def _beyond_args(values: list) -> list:
    args = []
    for i in range(len(values)):
        args.extend(values[:i])
        args.append(values[i])
    return args


def _range(plan: TablePlan, lo: list | None, hi: list | None) -> tuple[str, list]:
    where, args = [], []
    if lo is not None:
        where.append(_beyond(plan.pk, len(lo), ">", ">"))
        args.extend(_beyond_args(lo))
    if hi is not None:
        where.append(_beyond(plan.pk, len(hi), "<", "<="))
        args.extend(_beyond_args(hi))
    return (" WHERE " + " AND ".join(where)) if where else "", args


def _row_text(plan: TablePlan) -> str:
    """A row as one string: its columns joined, then their NULL flags (CONCAT_WS skips NULLs)."""
    cols = [_q(c) for c in plan.columns]
    flags = "CONCAT(" + ", ".join(f"ISNULL({c})" for c in cols) + ")" if cols else "''"
    return f"CONCAT_WS('#', {', '.join(cols + [flags])})"


def next_boundary(conn, plan: TablePlan, lo: list | None, rows: int) -> list | None:
    """The primary key of the `rows`-th row after `lo` (None: fewer rows are left; the chunk ends the table)."""
    pk = ", ".join(_q(c) for c in plan.pk)
    where, args = _range(plan, lo, None)
    with conn.cursor() as cur:
        cur.execute(f"SELECT {pk} FROM {plan.name} FORCE INDEX (PRIMARY){where} ORDER BY {pk} "
                    f"LIMIT 1 OFFSET {int(rows) - 1}", args)
        row = cur.fetchone()
    return list(row) if row else None


def chunk_sum(conn, plan: TablePlan, lo: list | None, hi: list | None) -> tuple[int, int, int, int]:
    """(rows, BIT_XOR of CRC32, SUM of CRC32, bytes of row text) over the rows with lo < pk <= hi
    (bounds optional). The first three are the checksum; the bytes size the next chunk."""
    text = _row_text(plan)
    where, args = _range(plan, lo, hi) if plan.pk else ("", [])
    index = " FORCE INDEX (PRIMARY)" if plan.pk else ""
    with conn.cursor() as cur:
        cur.execute(f"SELECT COUNT(*), COALESCE(BIT_XOR(CRC32({text})), 0), COALESCE(SUM(CRC32({text})), 0), "
                    f"COALESCE(SUM(LENGTH({text})), 0) FROM {plan.name}{index}{where}", args)
        n, x, s, b = cur.fetchone()
    return int(n), int(x), int(s), int(b)


def next_chunk_sum(conn, plan: TablePlan, lo: list | None, rows: int) -> tuple[tuple[int, int, int, int], list | None]:
    """For a one-column primary key: the sums of the next `rows` rows after `lo` and the key of the last
    of them, in one statement (None: fewer rows were left, the chunk ends the table). Reads each row
    once where next_boundary + chunk_sum read it twice."""
    (pk,) = plan.pk
    text = _row_text(plan)
    where, args = _range(plan, lo, None)
    with conn.cursor() as cur:
        cur.execute(f"SELECT COUNT(*), COALESCE(BIT_XOR(c), 0), COALESCE(SUM(c), 0), COALESCE(SUM(l), 0), MAX(k) "
                    f"FROM (SELECT {_q(pk)} k, CRC32({text}) c, LENGTH({text}) l FROM {plan.name} FORCE INDEX (PRIMARY)"
                    f"{where} ORDER BY {_q(pk)} LIMIT {int(rows)}) x", args)
        n, x, s, b, last = cur.fetchone()
    return (int(n), int(x), int(s), int(b)), ([last] if n >= rows else None)


def table_sums(conn) -> dict[str, tuple[int, int, int]]:
    """Every user table summed whole: schema.table -> (rows, xor, sum) (a stopped or frozen server)."""
    return {p.label: chunk_sum(conn, p, None, None)[:3] for p in table_plans(conn)}


# ---- primary key values between the two agents (JSON) ---------------------------------------------
def encode_key(values: list | None) -> list | None:
    """A primary key tuple as JSON values that compare the same way when sent back as parameters."""
    if values is None:
        return None
    out = []
    for v in values:
        if isinstance(v, (bytes, bytearray)):
            out.append({"hex": bytes(v).hex()})
        elif isinstance(v, decimal.Decimal):
            out.append({"dec": str(v)})
        elif isinstance(v, (datetime.datetime, datetime.date)):
            out.append({"time": v.isoformat(sep=" ") if isinstance(v, datetime.datetime) else v.isoformat()})
        elif isinstance(v, datetime.timedelta):
            total = v.total_seconds()
            sign = "-" if total < 0 else ""
            total = abs(total)
            h, rest = divmod(total, 3600)
            m, s = divmod(rest, 60)
            out.append({"time": f"{sign}{int(h)}:{int(m):02d}:{s:09.6f}"})
        else:
            out.append(v)
    return out


def decode_key(values: list | None) -> list | None:
    if values is None:
        return None
    out = []
    for v in values:
        if isinstance(v, dict) and "hex" in v:
            out.append(bytes.fromhex(v["hex"]))
        elif isinstance(v, dict) and "dec" in v:
            out.append(decimal.Decimal(v["dec"]))
        elif isinstance(v, dict) and "time" in v:
            out.append(str(v["time"]))
        else:
            out.append(v)
    return out
