"""Per-table checksums of a tenant's user tables, to verify a copy equals its source."""

from __future__ import annotations

from .ops import SYSTEM_SCHEMAS


def user_tables(conn) -> list[str]:
    with conn.cursor() as cur:
        cur.execute(
            "SELECT CONCAT('`', table_schema, '`.`', table_name, '`') FROM information_schema.tables "
            "WHERE table_type = 'BASE TABLE' AND table_schema NOT IN (%s, %s, %s, %s) "
            "ORDER BY table_schema, table_name", SYSTEM_SCHEMAS)
        return [r[0] for r in cur.fetchall()]


def table_checksums(conn) -> dict[str, int | None]:
    """`schema.table` -> CHECKSUM TABLE value (EXTENDED: reads every row, engine-independent)."""
    tables = user_tables(conn)
    out: dict[str, int | None] = {}
    with conn.cursor() as cur:
        for i in range(0, len(tables), 50):
            cur.execute("CHECKSUM TABLE " + ", ".join(tables[i:i + 50]) + " EXTENDED")
            for name, value in cur.fetchall():
                out[name] = value
    return out
