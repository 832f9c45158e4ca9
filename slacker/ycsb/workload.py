"""The CoreWorkload's operations as SQL: the usertable schema, and per-worker transaction plans.

A plan is the list of statements of one transaction, generated before it runs
so a retry repeats exactly the same transaction. SQL text is built from
prepared prefixes; keys and values are letters and digits and need no escaping.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from typing import Any

from .generators import (
    AcknowledgedCounter,
    DiscreteChooser,
    ExponentialGenerator,
    HotspotGenerator,
    ScrambledZipfianGenerator,
    SequentialGenerator,
    SkewedLatestGenerator,
    UniformGenerator,
    ValueGenerator,
    ZipfianGenerator,
    key_namer,
)
from .properties import Workload

READ, UPDATE, INSERT, SCAN, RMW = range(5)
KEY_COLUMN = "YCSB_KEY"


def create_table_sql(wl: Workload) -> str:
    cols = ",\n  ".join(f"{name} VARCHAR({wl.fieldlength}) NOT NULL" for name in wl.field_names)
    # ascii: one byte per character, so ~1 KB rows stay ~1 KB on disk, as the paper sized them.
    return (f"CREATE TABLE IF NOT EXISTS {wl.table} (\n  {KEY_COLUMN} VARCHAR(64) NOT NULL PRIMARY KEY,\n"
            f"  {cols}\n) ENGINE=InnoDB DEFAULT CHARSET=ascii")


def insert_prefix(wl: Workload) -> str:
    return f"INSERT INTO {wl.table} ({KEY_COLUMN},{','.join(wl.field_names)}) VALUES "


@dataclass
class SharedKeys:
    """State shared by all workers of one tenant: the insert key counter and the sequential cursor."""

    insert_keys: AcknowledgedCounter
    sequential: Any = None

    @classmethod
    def for_run(cls, wl: Workload, first_insert_keynum: int | None = None) -> "SharedKeys":
        import itertools

        start = wl.recordcount if first_insert_keynum is None else max(wl.recordcount, first_insert_keynum)
        return cls(AcknowledgedCounter(start), itertools.count())


@dataclass
class Plan:
    statements: list[tuple[bool, str]]
    op_counts: list[int]          # per operation, in OPERATIONS order
    inserted: list[int] = field(default_factory=list)  # key numbers to acknowledge afterwards

    @property
    def operations(self) -> int:
        return sum(self.op_counts)


class TransactionPlanner:
    """Builds transaction plans for one worker with its own random stream."""

    def __init__(self, wl: Workload, shared: SharedKeys, rng: random.Random) -> None:
        self.wl = wl
        self.shared = shared
        self.rng = rng
        self._random = rng.random
        self.n_ops = wl.operationspertransaction
        self._chooser = DiscreteChooser(wl.proportions, rng)
        self._key_name = key_namer(wl.zeropadding, wl.ordered_inserts)
        self._values = ValueGenerator(wl.fieldlength, wl.minfieldlength, wl.fieldlengthdistribution, rng)
        self._fields = wl.field_names
        self._nfields = len(self._fields)
        self._key_chooser, self._exponential = self._make_key_chooser(rng)
        if wl.scanlengthdistribution == "zipfian":
            self._scan_length: Any = ZipfianGenerator(wl.minscanlength, wl.maxscanlength, rng)
        else:
            self._scan_length = UniformGenerator(wl.minscanlength, wl.maxscanlength, rng)
        t = wl.table
        self._read_all = f"SELECT * FROM {t} WHERE {KEY_COLUMN}='"
        self._read_one = [f"SELECT {KEY_COLUMN},{f} FROM {t} WHERE {KEY_COLUMN}='" for f in self._fields]
        self._update = [f"UPDATE {t} SET {f}='" for f in self._fields]
        self._where = f"' WHERE {KEY_COLUMN}='"
        self._scan_all = f"SELECT * FROM {t} WHERE {KEY_COLUMN}>='"
        self._scan_one = [f"SELECT {KEY_COLUMN},{f} FROM {t} WHERE {KEY_COLUMN}>='" for f in self._fields]
        self._scan_tail = f"' ORDER BY {KEY_COLUMN} LIMIT "
        self._insert = insert_prefix(wl)
        self._update_all_prefix = f"UPDATE {t} SET "

    def _make_key_chooser(self, rng: random.Random):
        wl = self.wl
        lo, count = wl.insertstart, wl.insertcount
        dist = wl.requestdistribution
        if dist == "uniform":
            return UniformGenerator(lo, lo + count - 1, rng), False
        if dist == "zipfian":
            # YCSB sizes the key space for the inserts it expects, so popularity does not shift as rows arrive.
            expected_new = int(wl.operationcount * wl.insertproportion * 2.0)
            return ScrambledZipfianGenerator(lo, lo + count + expected_new, rng), False
        if dist == "latest":
            return SkewedLatestGenerator(self.shared.insert_keys, rng), False
        if dist == "hotspot":
            return HotspotGenerator(lo, lo + count - 1, wl.hotspotdatafraction, wl.hotspotopnfraction, rng), False
        if dist == "exponential":
            return ExponentialGenerator(wl.exponential_percentile, wl.recordcount * wl.exponential_frac, rng), True
        if dist == "sequential":
            return SequentialGenerator(lo, lo + count - 1, self.shared.sequential), False
        raise ValueError(f"unknown request distribution {dist!r}")  # validated earlier

    def next_keynum(self) -> int:
        """A row that exists: never above the highest acknowledged insert (CoreWorkload.nextKeynum)."""
        last = self.shared.insert_keys.last_value()
        nxt = self._key_chooser.next
        if self._exponential:
            while True:
                k = last - nxt()
                if k >= 0:
                    return k
        while True:
            k = nxt()
            if k <= last:
                return k

    def plan(self) -> Plan:
        stmts: list[tuple[bool, str]] = []
        add = stmts.append
        counts = [0, 0, 0, 0, 0]
        inserted: list[int] = []
        choose = self._chooser.next
        key_name = self._key_name
        rnd = self._random
        readall = self.wl.readallfields
        writeall = self.wl.writeallfields
        for _ in range(self.n_ops):
            op = choose()
            counts[op] += 1
            if op == READ:
                key = key_name(self.next_keynum())
                if readall:
                    add((True, self._read_all + key + "'"))
                else:
                    add((True, self._read_one[int(rnd() * self._nfields)] + key + "'"))
            elif op == UPDATE:
                add((False, self._update_sql(key_name(self.next_keynum()), writeall)))
            elif op == INSERT:
                keynum = self.shared.insert_keys.next_value()
                inserted.append(keynum)
                add((False, self._insert + self.row_values(key_name(keynum))))
            elif op == SCAN:
                key = key_name(self.next_keynum())
                n = self._scan_length.next()
                head = self._scan_all if readall else self._scan_one[int(rnd() * self._nfields)]
                add((True, head + key + self._scan_tail + str(n)))
            else:  # read-modify-write: one operation, two statements on the same row
                key = key_name(self.next_keynum())
                if readall:
                    add((True, self._read_all + key + "'"))
                else:
                    add((True, self._read_one[int(rnd() * self._nfields)] + key + "'"))
                add((False, self._update_sql(key, writeall)))
        return Plan(stmts, counts, inserted)

    def _update_sql(self, key: str, writeall: bool) -> str:
        if writeall:
            sets = ",".join(f"{f}='{self._values.next()}'" for f in self._fields)
            return self._update_all_prefix + sets + " WHERE " + KEY_COLUMN + "='" + key + "'"
        return self._update[int(self._random() * self._nfields)] + self._values.next() + self._where + key + "'"

    def row_values(self, key: str) -> str:
        """`('key','v0',...,'vn')` for a multi-row INSERT."""
        nxt = self._values.next
        return "('" + key + "','" + "','".join([nxt() for _ in range(self._nfields)]) + "')"
