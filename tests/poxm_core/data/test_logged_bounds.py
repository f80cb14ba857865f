"""Logged tables and obp's archive are read within bounds (poxm_core.data.logged_checks, poxm_core.data.obd):
a propensity below 1e-6, an action id past the declared bound, a malformed Parquet file, an archive
member larger than poxm reads are each one line naming the file (and row), never a traceback or a
process that swells to the member's size."""
from __future__ import annotations

import gzip
import io
import tarfile
import tracemalloc

import numpy as np
import pandas as pd
import pytest

from poxm_core.common.errors import PoxmInputError
from poxm_core.config.schema import default_data_root
from poxm_core.data import obd
from poxm_core.data.logged import LoggedColumns, read_logged_table
from poxm_core.data.logged_checks import MAX_ACTIONS, PROPENSITY_MIN
from poxm_core.data.obd import read_obd

COLS = LoggedColumns(action="a", position="k", reward="r", propensity="ps", context=("x",))


def table(tmp_path, name="log.csv", **over):
    df = pd.DataFrame({"a": [0, 1, 2, 1], "k": [1, 2, 1, 2], "r": [0, 1, 0, 0], "ps": [0.25, 0.5, 0.5, 0.1],
                       "x": [0.1, 0.2, 0.3, 0.4]})
    for k, v in over.items():
        df[k] = v
    path = tmp_path / name
    df.to_parquet(path) if name.endswith(".parquet") else df.to_csv(path, index=False)
    return path


@pytest.mark.parametrize("ps", [5e-324, 1e-7, PROPENSITY_MIN * 0.999])
def test_a_propensity_below_the_declared_range_is_one_line(tmp_path, ps):
    with pytest.raises(PoxmInputError) as e:
        read_logged_table(table(tmp_path, ps=[0.25, ps, 0.5, 0.1]), COLS)
    assert str(e.value).startswith(f"{tmp_path / 'log.csv'}: row 2 (line 3), column 'ps': expected a propensity "
                                   "in [1e-06, 1], got")


def test_the_smallest_propensity_of_the_range_is_read(tmp_path):
    log = read_logged_table(table(tmp_path, ps=[0.25, PROPENSITY_MIN, 0.5, 1.0]), COLS)
    assert log.propensity.min() == PROPENSITY_MIN


@pytest.mark.parametrize("big", [10**15, MAX_ACTIONS, 2**63 + 5])
def test_a_huge_action_id_is_one_line_naming_its_row(tmp_path, big):
    with pytest.raises(PoxmInputError) as e:
        read_logged_table(table(tmp_path, a=[0, 1, big, 1]), COLS)
    assert f"row 3 (line 4), column 'a': expected an action id in [0, {MAX_ACTIONS})" in str(e.value)


def test_a_huge_position_is_one_line(tmp_path):
    with pytest.raises(PoxmInputError, match=r"row 4 \(line 5\), column 'k': expected a position in \[1, 1000\]"):
        read_logged_table(table(tmp_path, k=[1, 2, 1, 10**12]), COLS)


def test_a_malformed_parquet_file_is_one_line(tmp_path):
    good = table(tmp_path, "good.parquet")
    bad = tmp_path / "bad.parquet"
    bad.write_bytes(good.read_bytes()[: len(good.read_bytes()) // 2])
    with pytest.raises(PoxmInputError) as e:
        read_logged_table(bad, COLS)
    assert str(e.value).startswith(f"{bad}: not a readable Parquet table (")
    assert "\n" not in str(e.value)
    (tmp_path / "junk.parquet").write_bytes(b"PAR1 not really")
    with pytest.raises(PoxmInputError, match="not a readable Parquet table"):
        read_logged_table(tmp_path / "junk.parquet", COLS)


class _Zeros(io.RawIOBase):
    """n zero bytes, streamed (the archive is built without holding the member in memory)."""

    def __init__(self, n):
        self.left = n

    def readinto(self, b):
        k = min(len(b), self.left)
        b[:k] = bytes(k)
        self.left -= k
        return k

    def readable(self):
        return True


def _archive(path, members: dict[str, int]):
    with gzip.open(path, "wb", compresslevel=1) as gz, tarfile.open(fileobj=gz, mode="w") as tar:
        for name, size in members.items():
            info = tarfile.TarInfo(name)
            info.size = size
            tar.addfile(info, io.BufferedReader(_Zeros(size), 1 << 20))


def test_an_archive_member_past_the_bound_is_refused_without_reading_it(tmp_path):
    """A crafted archive: a member of 300 MiB of zeros compresses to about 0.3 MB. It is refused from its
    header, and the reader's memory stays far below the member's size."""
    arc = tmp_path / "obp-9.9.9.tar.gz"
    size = 300 * 2**20
    _archive(arc, {"obp/dataset/obd/random/all/all.csv": size, "obp/dataset/obd/random/all/item_context.csv": 10})
    assert arc.stat().st_size < 2 * 2**20
    tracemalloc.start()
    try:
        with pytest.raises(PoxmInputError) as e:
            read_obd(arc, "random", "all")
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert f"declares {size} bytes" in str(e.value) and str(arc) in str(e.value)
    assert peak < 20 * 2**20, peak


def test_the_members_read_are_bounded_in_total(tmp_path, monkeypatch):
    monkeypatch.setattr(obd, "MAX_MEMBER_BYTES", 4000)
    monkeypatch.setattr(obd, "MAX_TOTAL_BYTES", 5000)
    arc = tmp_path / "obp-9.9.9.tar.gz"
    _archive(arc, {"obp/dataset/obd/random/all/all.csv": 3000, "obp/dataset/obd/random/all/item_context.csv": 3000})
    with pytest.raises(PoxmInputError, match="5000 in all"):
        read_obd(arc, "random", "all")


def test_too_many_members_is_one_line(tmp_path, monkeypatch):
    monkeypatch.setattr(obd, "MAX_MEMBERS", 5)
    arc = tmp_path / "obp-9.9.9.tar.gz"
    _archive(arc, {f"junk/{i}": 1 for i in range(10)})
    with pytest.raises(PoxmInputError, match="more than 5 members"):
        read_obd(arc, "random", "all")


@pytest.mark.skipif(not (default_data_root() / "obd").is_dir(), reason="OBD sample not in the data root")
def test_the_real_sample_archive_is_read_as_before():
    log = read_obd(default_data_root() / "obd", "bts", "women")
    assert log.n == 10000 and log.n_actions == 46 and np.isclose(log.propensity.min(), 1e-6)
