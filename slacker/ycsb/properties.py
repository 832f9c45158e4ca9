"""YCSB workload property files: parse, apply `-p` overrides, validate into a typed `Workload`.

The file format is Java's properties format as YCSB reads it. Every name is
checked against the CoreWorkload's properties (plus Slacker's extensions), so a
typo is an error with a did-you-mean rather than a silently ignored setting.
"""

from __future__ import annotations

import difflib
import re
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any, Iterable

from ..errors import InvalidInput, NotFound

OPERATIONS = ("read", "update", "insert", "scan", "readmodifywrite")
REQUEST_DISTRIBUTIONS = ("uniform", "zipfian", "latest", "hotspot", "exponential", "sequential")
IDENT_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,63}$")
PROPORTION_TOLERANCE = 1e-6
DEFAULT_DATABASE = "ycsb"  # without a `database`: the session's (a shared tenant's own), else this


@dataclass(frozen=True)
class PropertySpec:
    name: str
    kind: str  # int, float, bool, choice, ident, str
    default: Any
    help: str
    choices: tuple[str, ...] = ()
    minimum: float | None = None
    maximum: float | None = None


def _p(name, kind, default, help, choices=(), minimum=None, maximum=None) -> PropertySpec:
    return PropertySpec(name, kind, default, help, tuple(choices), minimum, maximum)


# The CoreWorkload's properties with YCSB's defaults (except recordcount, whose
# YCSB default of "0 = 2^31-1 rows" is never what anyone wants here).
PROPERTIES: dict[str, PropertySpec] = {s.name: s for s in (
    _p("workload", "choice", "site.ycsb.workloads.CoreWorkload", "workload class; only the CoreWorkload exists here",
       ("site.ycsb.workloads.CoreWorkload", "com.yahoo.ycsb.workloads.CoreWorkload")),
    _p("recordcount", "int", 1000, "rows loaded by `ycsb load` and addressed by `ycsb run`", minimum=1),
    _p("operationcount", "int", 1000, "YCSB's run length; here it only sizes the zipfian key space for inserts "
       "(the run length is --duration)", minimum=0),
    _p("table", "ident", "usertable", "table name"),
    _p("fieldcount", "int", 10, "value columns per row (FIELD0..FIELDn-1)", minimum=1, maximum=1000),
    _p("fieldlength", "int", 100, "bytes per field (maximum for uniform/zipfian lengths)", minimum=1, maximum=16000),
    _p("minfieldlength", "int", 1, "minimum field length for uniform/zipfian lengths", minimum=1),
    _p("fieldlengthdistribution", "choice", "constant", "field length distribution", ("constant", "uniform", "zipfian")),
    _p("fieldnameprefix", "ident", "FIELD", "column name prefix (YCSB's JDBC binding uses FIELD0..)"),
    _p("readallfields", "bool", True, "reads fetch every field (true) or one random field (false)"),
    _p("writeallfields", "bool", False, "updates write every field (true) or one random field (false)"),
    _p("readproportion", "float", 0.95, "share of operations that read one row", minimum=0, maximum=1),
    _p("updateproportion", "float", 0.05, "share of operations that update one row", minimum=0, maximum=1),
    _p("insertproportion", "float", 0.0, "share of operations that insert a new row", minimum=0, maximum=1),
    _p("scanproportion", "float", 0.0, "share of operations that scan a key range", minimum=0, maximum=1),
    _p("readmodifywriteproportion", "float", 0.0, "share of operations that read then update one row",
       minimum=0, maximum=1),
    _p("requestdistribution", "choice", "uniform", "how rows are chosen", REQUEST_DISTRIBUTIONS),
    _p("minscanlength", "int", 1, "shortest scan, in rows", minimum=1),
    _p("maxscanlength", "int", 1000, "longest scan, in rows", minimum=1),
    _p("scanlengthdistribution", "choice", "uniform", "scan length distribution", ("uniform", "zipfian")),
    _p("insertorder", "choice", "hashed", "key order: hashed (FNV-1a-64 of the row number) or ordered",
       ("hashed", "ordered")),
    _p("insertstart", "int", 0, "first row number this loader inserts (for split loads)", minimum=0),
    _p("insertcount", "int", None, "rows this loader inserts (default recordcount - insertstart)", minimum=0),
    _p("zeropadding", "int", 1, "left-pad row numbers with zeros to this many digits", minimum=1, maximum=40),
    _p("hotspotdatafraction", "float", 0.2, "hotspot: share of rows in the hot set", minimum=0, maximum=1),
    _p("hotspotopnfraction", "float", 0.8, "hotspot: share of operations on the hot set", minimum=0, maximum=1),
    _p("exponential.percentile", "float", 95.0, "exponential: percentile of operations within exponential.frac",
       minimum=0, maximum=100),
    _p("exponential.frac", "float", 0.8571428571, "exponential: fraction of rows covered by the percentile",
       minimum=0, maximum=1),
    # Slacker's extensions.
    _p("operationspertransaction", "int", 1, "operations per SQL transaction (BEGIN ... COMMIT)",
       minimum=1, maximum=10000),
    _p("database", "ident", None, "database (schema) holding the table; default: the session's (a shared "
       "tenant's own), else " + DEFAULT_DATABASE),
)}

# YCSB client/binding settings that have a Slacker counterpart or no meaning
# here: accepted so stock YCSB files load, reported as ignored.
IGNORED: dict[str, str] = {
    "db": "the binding is always MariaDB/MySQL; the schema is the `database` property or --database",
    "threadcount": "use --mpl",
    "target": "use --rate",
    "maxexecutiontime": "use --duration",
    "measurementtype": "latency is always a histogram plus per-interval percentiles",
    "measurement.interval": "latency is measured per transaction",
    "status.interval": "use --interval",
    "histogram.buckets": "the Prometheus buckets are fixed",
    "hdrhistogram.percentiles": "p50, p95, p99 and max are reported",
    "exporter": "use --out and --json",
    "exportfile": "use --out",
    "dataintegrity": "values are not verified",
    "readallfieldsbyname": "reads use SELECT * or one named column",
    "core_workload_insertion_retry_limit": "see the retry policy in docs/ycsb.md",
    "core_workload_insertion_retry_interval": "see the retry policy in docs/ycsb.md",
    "fieldlengthhistogram": "histogram field lengths are not supported",
}


@dataclass(frozen=True)
class Workload:
    """A validated workload: every CoreWorkload property as a typed value."""

    recordcount: int = 1000
    operationcount: int = 1000
    table: str = "usertable"
    fieldcount: int = 10
    fieldlength: int = 100
    minfieldlength: int = 1
    fieldlengthdistribution: str = "constant"
    fieldnameprefix: str = "FIELD"
    readallfields: bool = True
    writeallfields: bool = False
    readproportion: float = 0.95
    updateproportion: float = 0.05
    insertproportion: float = 0.0
    scanproportion: float = 0.0
    readmodifywriteproportion: float = 0.0
    requestdistribution: str = "uniform"
    minscanlength: int = 1
    maxscanlength: int = 1000
    scanlengthdistribution: str = "uniform"
    insertorder: str = "hashed"
    insertstart: int = 0
    insertcount: int = 1000
    zeropadding: int = 1
    hotspotdatafraction: float = 0.2
    hotspotopnfraction: float = 0.8
    exponential_percentile: float = 95.0
    exponential_frac: float = 0.8571428571
    operationspertransaction: int = 1
    database: str | None = None  # None: the session's database, else ycsb (slacker/loads.py)
    workload: str = "site.ycsb.workloads.CoreWorkload"
    # Where it came from, for reports: file names and the overrides applied.
    sources: tuple[str, ...] = ()
    ignored: tuple[str, ...] = field(default=(), compare=False)

    @property
    def proportions(self) -> tuple[float, float, float, float, float]:
        """(read, update, insert, scan, readmodifywrite), in YCSB's order."""
        return (self.readproportion, self.updateproportion, self.insertproportion, self.scanproportion,
                self.readmodifywriteproportion)

    @property
    def ordered_inserts(self) -> bool:
        return self.insertorder == "ordered"

    @property
    def field_names(self) -> list[str]:
        return [f"{self.fieldnameprefix}{i}" for i in range(self.fieldcount)]

    @property
    def row_bytes(self) -> int:
        """Approximate payload bytes per row (key plus fields), for sizing."""
        return 24 + self.fieldcount * self.fieldlength

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for f in fields(self):
            if f.name in ("sources", "ignored"):
                continue
            out[f.name.replace("exponential_", "exponential.")] = getattr(self, f.name)
        return out


# --- parsing --------------------------------------------------------------------


@dataclass(frozen=True)
class RawProperty:
    value: str
    origin: str  # "FILE:LINE" or "-p"


def parse_properties_text(text: str, origin: str = "<text>") -> dict[str, RawProperty]:
    """Java properties: `key=value`, `key: value` or `key value`; `#`/`!` comments; `\\` continues a line."""
    out: dict[str, RawProperty] = {}
    lines = text.splitlines()
    i = 0
    while i < len(lines):
        start = i
        line = lines[i].strip()
        i += 1
        if not line or line[0] in "#!":
            continue
        # A trailing odd number of backslashes continues the logical line.
        while _continues(line) and i < len(lines):
            line = line[:-1] + lines[i].strip()
            i += 1
        m = re.match(r"^((?:\\.|[^=:\s\\])+)\s*(?:[=:]\s*|\s+|$)(.*)$", line)
        if not m:
            raise InvalidInput(f"cannot parse {origin}:{start + 1}", f"{line[:60]!r} is not key=value",
                               "write one name=value per line")
        key = re.sub(r"\\(.)", r"\1", m.group(1))
        out[key] = RawProperty(m.group(2).strip(), f"{origin}:{start + 1}")
    return out


def _continues(line: str) -> bool:
    n = len(line) - len(line.rstrip("\\"))
    return n % 2 == 1


def parse_override(text: str) -> tuple[str, str]:
    """`-p name=value` as YCSB takes it."""
    key, sep, value = str(text).partition("=")
    if not sep or not key.strip():
        raise InvalidInput(f"invalid property override {text!r}", "expected name=value",
                           "for example -p recordcount=100000")
    return key.strip(), value.strip()


def did_you_mean(name: str, candidates: Iterable[str]) -> str:
    match = difflib.get_close_matches(name, list(candidates), n=1, cutoff=0.6)
    return f"did you mean {match[0]!r}?" if match else ""


def find_workload_file(name: str | Path) -> Path:
    """A path as given, or a bare name looked up in the repository's workloads/ directory."""
    p = Path(name)
    if p.is_file():
        return p
    repo = Path(__file__).resolve().parents[2]
    if not p.is_absolute():
        # `workloads/slacker` from another directory, or a bare `slacker`.
        for candidate in (repo / p, repo / "workloads" / p):
            if candidate.is_file():
                return candidate
    raise NotFound(f"workload file {str(name)!r} not found", "no such file",
                   "give a path such as workloads/workloada or workloads/slacker")


def load_workload(files: Iterable[str | Path] = (), overrides: Iterable[str] | dict[str, Any] = ()) -> Workload:
    """Read property files in order, then apply `-p` overrides (last one wins), then validate."""
    raw: dict[str, RawProperty] = {}
    sources: list[str] = []
    for f in files:
        path = find_workload_file(f)
        try:
            text = path.read_text()
        except OSError as exc:
            raise InvalidInput(f"cannot read workload file {path}", exc.strerror or str(exc), "") from None
        raw.update(parse_properties_text(text, str(f)))
        sources.append(str(f))
    items = overrides.items() if isinstance(overrides, dict) else (parse_override(o) for o in overrides)
    for key, value in items:
        raw[key] = RawProperty(str(value).lower() if isinstance(value, bool) else str(value), "-p")
        sources.append(f"-p {key}={value}")
    return build_workload(raw, tuple(sources))


def build_workload(raw: dict[str, RawProperty], sources: tuple[str, ...] = ()) -> Workload:
    values: dict[str, Any] = {}
    ignored: list[str] = []
    for key, prop in raw.items():
        spec = PROPERTIES.get(key)
        if spec is None:
            if key in IGNORED:
                ignored.append(f"{key} ({IGNORED[key]})")
                continue
            hint = did_you_mean(key, list(PROPERTIES) + list(IGNORED))
            raise InvalidInput(f"unknown workload property {key!r} at {prop.origin}",
                               hint or "it is not a CoreWorkload property",
                               "see docs/ycsb.md for the properties")
        values[key] = _convert(spec, prop)
    kwargs: dict[str, Any] = {}
    for name, spec in PROPERTIES.items():
        kwargs[name.replace(".", "_")] = values.get(name, spec.default)
    if kwargs["insertcount"] is None:
        kwargs["insertcount"] = kwargs["recordcount"] - kwargs["insertstart"]
    wl = Workload(**kwargs, sources=sources, ignored=tuple(ignored))
    validate(wl)
    return wl


def _convert(spec: PropertySpec, prop: RawProperty) -> Any:
    text = prop.value
    where = f"workload property {spec.name}={text!r} at {prop.origin}"
    if spec.kind in ("int", "float"):
        try:
            number: float = int(text) if spec.kind == "int" else float(text)
        except ValueError:
            raise InvalidInput(f"invalid {where}", f"expected {'an integer' if spec.kind == 'int' else 'a number'}",
                               spec.help) from None
        if number != number or (spec.minimum is not None and number < spec.minimum) or (
                spec.maximum is not None and number > spec.maximum):
            bounds = f"between {spec.minimum:g} and {spec.maximum:g}" if spec.maximum is not None \
                else f"at least {spec.minimum:g}"
            raise InvalidInput(f"invalid {where}", f"it must be {bounds}", spec.help)
        return number
    if spec.kind == "bool":
        low = text.lower()
        if low in ("true", "yes", "on", "1"):
            return True
        if low in ("false", "no", "off", "0"):
            return False
        raise InvalidInput(f"invalid {where}", "expected true or false", spec.help)
    if spec.kind == "choice":
        if text in spec.choices:
            return text
        hint = did_you_mean(text, spec.choices)
        raise InvalidInput(f"invalid {where}", (hint + " " if hint else "") + "expected one of " +
                           ", ".join(spec.choices), spec.help)
    if spec.kind == "ident":
        if not IDENT_RE.match(text):
            raise InvalidInput(f"invalid {where}", "expected a SQL identifier (letters, digits, _)", spec.help)
        return text
    return text  # pragma: no cover - no plain str properties yet


def validate(wl: Workload) -> None:
    """Cross-property rules; single values were checked on the way in."""
    total = sum(wl.proportions)
    if abs(total - 1.0) > PROPORTION_TOLERANCE:
        parts = ", ".join(f"{name}proportion={p:g}" for name, p in zip(OPERATIONS, wl.proportions) if p)
        raise InvalidInput(f"workload proportions sum to {total:g}, not 1", parts or "all are 0",
                           "adjust readproportion, updateproportion, insertproportion, scanproportion "
                           "and readmodifywriteproportion so they add up to 1")
    if wl.insertstart + wl.insertcount > wl.recordcount:
        raise InvalidInput("invalid insertstart/insertcount",
                           f"insertstart {wl.insertstart} + insertcount {wl.insertcount} exceeds "
                           f"recordcount {wl.recordcount}", "keep insertstart + insertcount <= recordcount")
    if wl.minscanlength > wl.maxscanlength:
        raise InvalidInput("invalid scan lengths", f"minscanlength {wl.minscanlength} > maxscanlength "
                           f"{wl.maxscanlength}", "keep minscanlength <= maxscanlength")
    if wl.fieldlengthdistribution != "constant" and wl.minfieldlength > wl.fieldlength:
        raise InvalidInput("invalid field lengths", f"minfieldlength {wl.minfieldlength} > fieldlength "
                           f"{wl.fieldlength}", "keep minfieldlength <= fieldlength")
    if wl.insertcount < 1:
        raise InvalidInput("invalid insertcount", "the run needs at least one loaded row to address",
                           "raise recordcount or lower insertstart")
