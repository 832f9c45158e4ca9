"""The seed's copy: every byte as in the source, the whole size allocated, only non-zero blocks written."""

import os

from hypothesis import given, settings, strategies as st

from slacker.seed import COPY_BLOCK, copy_allocated

# A file as runs of zeros and of data, around the copy's block size (a run may end mid-block).
runs = st.lists(st.tuples(st.booleans(), st.integers(1, 3 * COPY_BLOCK)), max_size=8)


@settings(max_examples=40, deadline=None)
@given(runs)
def test_copy_is_byte_for_byte_and_fully_allocated(tmp_path_factory, layout):
    d = tmp_path_factory.mktemp("seed")
    src, dst = d / "src", d / "dst"
    data = b"".join(bytes(n) if zero else os.urandom(n) for zero, n in layout)
    src.write_bytes(data)
    os.chmod(src, 0o640)
    copy_allocated(str(src), str(dst))
    assert dst.read_bytes() == data
    st_ = os.stat(dst)
    assert st_.st_size == len(data) and st_.st_mode & 0o777 == 0o640
    assert st_.st_blocks * 512 >= len(data), "holes left: the tenant's files would not have their space"


def test_refuses_to_overwrite(tmp_path):
    (tmp_path / "a").write_bytes(b"x")
    (tmp_path / "b").write_bytes(b"keep")
    try:
        copy_allocated(str(tmp_path / "a"), str(tmp_path / "b"))
        raise AssertionError("overwrote an existing file")
    except FileExistsError:
        pass
    assert (tmp_path / "b").read_bytes() == b"keep"
