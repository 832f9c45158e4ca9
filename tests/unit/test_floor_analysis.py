"""bench/run floor's paired comparison of two variants (e.g. a TLS move over a plain one)."""

from __future__ import annotations

import pytest

from benches.floor.analysis import variant_pairs, variant_table


def _res():
    runs = []
    for rep, (plain, tls) in enumerate([(5.0, 6.0), (6.0, 6.6), (4.0, 6.0)]):
        runs.append({"kind": "bare", "tenant": "f1500", "total_s": 5.0, "repeat": rep, "prepare_s": 0.1})
        order = [("plain", plain), ("tls", tls)] if rep % 2 == 0 else [("tls", tls), ("plain", plain)]
        for v, t in order:
            runs.append({"kind": "migrate", "tenant": "f1500", "variant": v, "total_s": t, "repeat": rep})
    runs.append({"kind": "migrate", "tenant": "f1500", "variant": "tls", "total_s": 99.0, "repeat": 3})  # unpaired
    return {"tenants": ["f1500"], "variants": ["plain", "tls"], "runs": runs}


def test_each_repeat_pairs_its_own_two_moves_whatever_their_order():
    assert variant_pairs(_res(), "tls", "plain") == {"f1500": pytest.approx([1.2, 1.1, 1.5])}


def test_the_table_reads_over_the_first_variant_and_is_empty_with_one():
    table = variant_table(_res())
    assert "tls / plain" in table and "1.20x (1.10-1.50, n=3)" in table
    assert variant_table(dict(_res(), variants=["plain"])) == ""
