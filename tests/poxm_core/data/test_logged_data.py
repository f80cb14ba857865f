"""Logged feedback (poxm_core/data/logged.py): the OBD sample read from obp's archive, a plain
CSV/Parquet table through a column map, and the support checks as a table of malformed inputs."""
from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from poxm_core.common.errors import PoxmInputError
from poxm_core.config.schema import default_data_root
from poxm_core.data.logged import LoggedColumns, LoggedFeedback, encode_context, read_logged_table
from poxm_core.data.obd import read_obd

OBD = default_data_root() / "obd"
needs_obd = pytest.mark.skipif(not (OBD / "original").is_dir(), reason="OBD sample not in the data root")

COLS = LoggedColumns(action="item", position="pos", reward="click", propensity="ps", context=("age",),
                     categorical=("segment",), slate_size=3, n_actions=4)


def _table() -> pd.DataFrame:
    return pd.DataFrame({"item": [0, 3, 1, 2], "pos": [1, 2, 3, 1], "click": [0, 1, 0, 0],
                         "ps": [0.25, 0.5, 1.0, 0.125], "age": [0.5, 1.0, 0.0, 2.0],
                         "segment": ["b", "a", "b", "c"]})


@needs_obd
@pytest.mark.parametrize("policy", ["random", "bts"])
def test_obd_sample_read_from_the_archive(policy):
    log = read_obd(OBD, policy, "all")
    assert log.n == 10_000 and log.n_actions == 80 and log.slate_size == 3
    assert log.source.endswith(f"obd/{policy}/all/all.csv")
    assert set(np.unique(log.position)) == {0, 1, 2}
    assert log.action.min() >= 0 and log.action.max() == 79
    # 4 categorical user features one-hot (3 + 5 + 8 + 8 values here) + 80 affinity columns
    names = log.feature_names
    assert sum(n.startswith("user-item_affinity_") for n in names) == 80
    assert all(log.context[:, [i for i, n in enumerate(names) if n.startswith(f"user_feature_{f}=")]].sum(axis=1)
               .A1.tolist() == [1.0] * log.n for f in range(4))
    assert log.action_features.shape[0] == 80
    if policy == "random":
        np.testing.assert_array_equal(log.propensity, np.full(log.n, 1 / 80))
        assert log.on_policy_value()[0] == pytest.approx(0.0038)    # 38 clicks in 10,000 rows


@needs_obd
def test_obd_campaign_sizes_and_the_archive_equals_a_folder(tmp_path):
    assert read_obd(OBD, "bts", "men").n_actions == 34
    assert read_obd(OBD, "random", "women").n_actions == 46
    import tarfile
    with tarfile.open(next((OBD / "original").glob("obp-*.tar.gz"))) as tar:
        tar.extractall(tmp_path, members=[m for m in tar.getmembers() if "/obd/random/men/" in m.name],
                       filter="data")
    folder = next(tmp_path.rglob("obd"))
    a, b = read_obd(OBD, "random", "men"), read_obd(folder, "random", "men")
    np.testing.assert_array_equal(a.action, b.action)
    assert (a.context != b.context).nnz == 0


def test_plain_table_through_the_column_map(tmp_path):
    _table().to_csv(tmp_path / "log.csv", index=False)
    log = read_logged_table(tmp_path / "log.csv", COLS)
    np.testing.assert_array_equal(log.position, [0, 1, 2, 0])          # 1-based in the file
    np.testing.assert_array_equal(log.action, [0, 3, 1, 2])
    assert log.feature_names == ("age", "segment=a", "segment=b", "segment=c")
    np.testing.assert_array_equal(log.context.toarray(), [[0.5, 0, 1, 0], [1, 1, 0, 0], [0, 0, 1, 0], [2, 0, 0, 1]])
    assert log.on_policy_value()[0] == 0.25
    _table().to_parquet(tmp_path / "log.parquet")
    same = read_logged_table(tmp_path / "log.parquet", COLS)
    np.testing.assert_array_equal(same.propensity, log.propensity)


def test_action_features_fix_the_action_set(tmp_path):
    _table().to_csv(tmp_path / "log.csv", index=False)
    pd.DataFrame({"action": [1, 0, 2, 3, 4], "price": [1.0, 2.0, 3.0, 4.0, 5.0], "kind": list("xyxyx")}
                 ).to_csv(tmp_path / "items.csv", index=False)
    cols = LoggedColumns(action="item", position="pos", reward="click", propensity="ps", context=("age",))
    log = read_logged_table(tmp_path / "log.csv", cols, action_features=tmp_path / "items.csv")
    assert log.n_actions == 5 and log.slate_size == 3
    np.testing.assert_array_equal(log.action_features[:2], [[2.0, 0, 1], [1.0, 1, 0]])   # sorted by id


# (change to the table, the column map's overrides, the one line expected)
MALFORMED = [
    (lambda d: d.assign(ps=[0.25, 0.0, 1.0, 0.1]), {}, "log.csv: row 2 (line 3), column 'ps': expected a propensity in [1e-06, 1], got 0.0"),
    (lambda d: d.assign(ps=[0.25, 0.5, 1.5, 0.1]), {}, "log.csv: row 3 (line 4), column 'ps': expected a propensity in [1e-06, 1], got 1.5"),
    (lambda d: d.assign(ps=[0.25, 0.5, -1, 0.1]), {}, "row 3 (line 4), column 'ps'"),
    (lambda d: d.assign(ps=[0.25, "x", 1.0, 0.1]), {}, "row 2 (line 3), column 'ps': expected a propensity in [1e-06, 1], got 'x'"),
    (lambda d: d.assign(pos=[1, 2, 4, 1]), {}, "row 3 (line 4), column 'pos': expected a position within the slate [1, 3], got 4"),
    (lambda d: d.assign(pos=[1, 0, 3, 1]), {}, "row 2 (line 3), column 'pos': expected a position within the slate [1, 3], got 0"),
    (lambda d: d.assign(pos=[1, 2, 1.5, 1]), {}, "row 3 (line 4), column 'pos': expected an integer position"),
    (lambda d: d.assign(item=[0, 3, 1, 4]), {}, "row 4 (line 5), column 'item': expected an action of the action set [0, 4), got 4"),
    (lambda d: d.assign(item=[0, -1, 1, 2]), {}, "row 2 (line 3), column 'item': expected an action of the action set"),
    (lambda d: d.drop(columns="ps"), {}, "log.csv: header (line 1), column 'ps': required column missing"),
    (lambda d: d.drop(columns="segment"), {}, "header (line 1), column 'segment': required column missing"),
    (lambda d: d.assign(age=[0.5, None, 0.0, 2.0]), {}, "row 2 (line 3), column 'age': expected a context value, got nothing"),
    (lambda d: d.assign(segment=["b", "a", None, "c"]), {}, "row 3 (line 4), column 'segment': expected a context value"),
    (lambda d: d.assign(age=[0.5, 1, "old", 2]), {}, "row 3 (line 4), column 'age': expected a number"),
    (lambda d: d.assign(click=[0, 1, None, 0]), {}, "row 3 (line 4), column 'click': expected a finite reward"),
    (lambda d: d.assign(pos=[0, 1, 2, 2]), {"position_base": 0, "slate_size": 2}, "row 3 (line 4), column 'pos': expected a position within the slate [0, 1], got 2"),
    (lambda d: d.iloc[:0], {}, "log.csv: expected at least one row, got none"),
]


@pytest.mark.parametrize("change, override, message", MALFORMED)
def test_malformed_table_is_one_line_naming_file_row_and_column(tmp_path, change, override, message):
    change(_table()).to_csv(tmp_path / "log.csv", index=False)
    cols = LoggedColumns(**{**COLS.__dict__, **override})
    with pytest.raises(PoxmInputError) as e:
        read_logged_table(tmp_path / "log.csv", cols)
    text = str(e.value)
    assert message in text and "\n" not in text and str(tmp_path / "log.csv") in text


def test_parquet_rows_have_no_line(tmp_path):
    _table().assign(ps=[0.25, 0.5, 1.0, 2.0]).to_parquet(tmp_path / "log.parquet")
    with pytest.raises(PoxmInputError, match=r"log.parquet: row 4, column 'ps': expected a propensity"):
        read_logged_table(tmp_path / "log.parquet", COLS)


@pytest.mark.parametrize("kwargs, message", [
    ({"context": (), "categorical": ()}, "columns.context: expected at least one context column"),
    ({"context": ("a",), "slate_size": 0}, "columns.slate_size: expected a positive int, got 0"),
    ({"context": ("a",), "position_base": 2}, "columns.position_base: expected 0 or 1, got 2"),
    ({"context": ("a",), "action": ""}, "columns.action: expected a column name"),
])
def test_column_map_checks_itself(kwargs, message):
    with pytest.raises(PoxmInputError, match=message.replace("(", r"\(").replace(")", r"\)")):
        LoggedColumns(**kwargs)


def test_container_refuses_what_the_checks_refuse():
    X = encode_context(_table(), ("age",), ())[0]
    ok = dict(source="t", context=X, action=np.array([0, 1, 2, 3]), position=np.array([0, 1, 2, 0]),
              reward=np.zeros(4), propensity=np.full(4, 0.5), n_actions=4, slate_size=3)
    LoggedFeedback(**ok)
    for bad in ({"propensity": np.array([0.5, 0.5, 0.0, 0.5])}, {"position": np.array([0, 1, 3, 0])},
                {"action": np.array([0, 1, 2, 4])}, {"reward": np.array([0, np.nan, 0, 0])}, {"action": np.zeros(3)}):
        with pytest.raises(ValueError):
            LoggedFeedback(**{**ok, **bad})


def test_missing_files_and_bad_names(tmp_path):
    with pytest.raises(PoxmInputError, match="logged table not found"):
        read_logged_table(tmp_path / "none.csv", COLS)
    with pytest.raises(PoxmInputError, match="no Open Bandit Dataset here"):
        read_obd(tmp_path, "random", "all")
    with pytest.raises(PoxmInputError, match="policy: expected one of random, bts, got 'ts'"):
        read_obd(tmp_path, "ts", "all")
    with pytest.raises(PoxmInputError, match="campaign: expected one of all, men, women"):
        read_obd(tmp_path, "bts", "kids")
