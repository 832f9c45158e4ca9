"""Workload property files: the Java format, -p overrides, typos and inconsistent mixes."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from slacker.errors import InvalidInput, NotFound
from slacker.ycsb.properties import (
    PROPERTIES,
    find_workload_file,
    load_workload,
    parse_override,
    parse_properties_text,
)

REPO = Path(__file__).resolve().parents[2]


def test_java_properties_syntax():
    text = "\n".join([
        "# comment",
        "! another comment",
        "",
        "recordcount=500",
        "  fieldcount : 4  ",
        "fieldlength 20",
        "table = my\\",
        "    table",
        "readproportion=",
    ])
    raw = parse_properties_text(text, "w")
    assert {k: v.value for k, v in raw.items()} == {
        "recordcount": "500", "fieldcount": "4", "fieldlength": "20", "table": "mytable", "readproportion": "",
    }
    assert raw["fieldlength"].origin == "w:6"


def test_file_then_overrides_last_wins(tmp_path):
    f = tmp_path / "w"
    f.write_text("recordcount=500\nreadproportion=0.9\nupdateproportion=0.1\n")
    wl = load_workload([f], ["recordcount=2000", "readproportion=0.5", "updateproportion=0.5", "recordcount=3000"])
    assert wl.recordcount == 3000
    assert wl.insertcount == 3000  # defaults to recordcount - insertstart
    assert (wl.readproportion, wl.updateproportion) == (0.5, 0.5)
    assert wl.sources[0] == str(f)
    assert "-p recordcount=3000" in wl.sources


def test_defaults_are_ycsbs():
    wl = load_workload()
    assert (wl.fieldcount, wl.fieldlength, wl.readproportion, wl.updateproportion) == (10, 100, 0.95, 0.05)
    assert (wl.requestdistribution, wl.insertorder, wl.readallfields, wl.writeallfields) == \
        ("uniform", "hashed", True, False)
    assert wl.operationspertransaction == 1 and wl.database is None and wl.table == "usertable"


def test_unknown_property_has_did_you_mean():
    with pytest.raises(InvalidInput) as e:
        load_workload([], ["readproportin=0.5"])
    msg = str(e.value)
    assert "unknown workload property 'readproportin'" in msg
    assert "did you mean 'readproportion'?" in msg


def test_unknown_property_in_a_file_names_the_line(tmp_path):
    f = tmp_path / "w"
    f.write_text("recordcount=10\n\nrequestdistrbution=zipfian\n")
    with pytest.raises(InvalidInput) as e:
        load_workload([f])
    assert f"{f}:3" in str(e.value)
    assert "did you mean 'requestdistribution'?" in str(e.value)


def test_unknown_property_without_a_near_match():
    with pytest.raises(InvalidInput) as e:
        load_workload([], ["zzzz=1"])
    assert "did you mean" not in str(e.value)


def test_proportions_must_sum_to_one():
    with pytest.raises(InvalidInput) as e:
        load_workload([], ["readproportion=0.5", "updateproportion=0.3"])
    assert "sum to 0.8, not 1" in str(e.value)
    with pytest.raises(InvalidInput):
        load_workload([], ["readproportion=0.9", "updateproportion=0.2"])
    # Float noise is fine.
    wl = load_workload([], ["readproportion=0.7", "updateproportion=0.1", "insertproportion=0.1",
                            "scanproportion=0.1"])
    assert sum(wl.proportions) == pytest.approx(1.0)


@pytest.mark.parametrize("override,fragment", [
    ("recordcount=abc", "expected an integer"),
    ("recordcount=0", "at least 1"),
    ("readproportion=1.5", "between 0 and 1"),
    ("requestdistribution=zipfain", "did you mean 'zipfian'?"),
    ("readallfields=maybe", "expected true or false"),
    ("table=user;drop", "SQL identifier"),
    ("insertorder=random", "expected one of hashed, ordered"),
])
def test_bad_values(override, fragment):
    with pytest.raises(InvalidInput) as e:
        load_workload([], [override])
    assert fragment in str(e.value)


def test_cross_property_rules():
    with pytest.raises(InvalidInput, match="insertstart"):
        load_workload([], ["recordcount=100", "insertstart=50", "insertcount=60"])
    with pytest.raises(InvalidInput, match="minscanlength"):
        load_workload([], ["minscanlength=10", "maxscanlength=5"])


def test_ycsb_client_properties_are_accepted_and_reported():
    wl = load_workload([], ["threadcount=16", "db=site.ycsb.db.JdbcDBClient"])
    assert any(i.startswith("threadcount") and "--mpl" in i for i in wl.ignored)
    assert any(i.startswith("db ") for i in wl.ignored)


def test_override_syntax():
    assert parse_override("a=b=c") == ("a", "b=c")
    with pytest.raises(InvalidInput, match="name=value"):
        parse_override("recordcount")


def test_dict_overrides_for_python_callers():
    wl = load_workload([], {"recordcount": 5, "readallfields": False})
    assert wl.recordcount == 5 and wl.readallfields is False


@pytest.mark.parametrize("name", ["workloada", "workloadb", "workloadc", "workloadd", "workloade", "workloadf",
                                  "slacker"])
def test_bundled_workloads_parse(name):
    wl = load_workload([REPO / "workloads" / name])
    assert sum(wl.proportions) == pytest.approx(1.0)
    assert find_workload_file(name) == (REPO / "workloads" / name).resolve()


def test_core_workload_semantics():
    a = load_workload([REPO / "workloads/workloada"])
    assert (a.readproportion, a.updateproportion, a.requestdistribution) == (0.5, 0.5, "zipfian")
    d = load_workload([REPO / "workloads/workloadd"])
    assert (d.insertproportion, d.requestdistribution) == (0.05, "latest")
    e = load_workload([REPO / "workloads/workloade"])
    assert (e.scanproportion, e.maxscanlength) == (0.95, 100)
    f = load_workload([REPO / "workloads/workloadf"])
    assert f.readmodifywriteproportion == 0.5


def test_slacker_workload_is_the_papers():
    wl = load_workload(["slacker"])
    assert wl.operationspertransaction == 10
    assert (wl.readproportion, wl.updateproportion, wl.requestdistribution) == (0.85, 0.15, "uniform")
    assert 0.9e9 < wl.recordcount * wl.row_bytes < 1.2e9  # ~1 GB


def test_missing_workload_file():
    with pytest.raises(NotFound, match="not found"):
        load_workload(["no/such/workload"])


@given(st.integers(min_value=1, max_value=10**9), st.integers(min_value=1, max_value=1000))
def test_integer_properties_round_trip(recordcount, fieldcount):
    wl = load_workload([], {"recordcount": recordcount, "fieldcount": fieldcount})
    assert (wl.recordcount, wl.fieldcount) == (recordcount, fieldcount)
    assert len(wl.field_names) == fieldcount


def test_every_property_has_help():
    assert all(spec.help for spec in PROPERTIES.values())
