"""Disk read limits per node: validation at the edge and the device a path lives on."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from slacker import cgroups
from slacker.errors import InvalidInput


def test_read_limit_is_validated():
    assert cgroups.validate_read_bps(40e6) == 40_000_000
    for bad in (0, 1000, 1e12):
        with pytest.raises(InvalidInput, match="--disk-read-per-node"):
            cgroups.validate_read_bps(bad)


def test_a_tmpfs_path_is_refused_with_a_reason():
    if not Path("/dev/shm").exists() or Path(f"/sys/dev/block/{os.major(os.stat('/dev/shm').st_dev)}:"
                                             f"{os.minor(os.stat('/dev/shm').st_dev)}").exists():
        pytest.skip("no tmpfs at /dev/shm")
    with pytest.raises(InvalidInput, match="not on a block device"):
        cgroups.disk_of(Path("/dev/shm"))


def test_the_disk_of_a_path_is_a_whole_disk():
    dev = os.stat("/").st_dev
    if not Path(f"/sys/dev/block/{os.major(dev)}:{os.minor(dev)}").exists():
        pytest.skip("/ is not on a block device here")
    disk = cgroups.disk_of(Path("/"))
    assert not (Path("/sys/dev/block") / disk / "partition").exists()
