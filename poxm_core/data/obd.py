"""The Open Bandit Dataset (docs/data.md, "Logged feedback"): the `<policy>/<campaign>/<campaign>.csv` and
`item_context.csv` of a campaign, read from a folder or straight from obp's source archive (`.tar.gz`).

An archive is read within bounds, so a crafted one cannot take the machine's memory: its headers are
walked one at a time (at most MAX_MEMBERS), a member is read only when its header declares at most
MAX_MEMBER_BYTES and never beyond that, MAX_TOTAL_BYTES in all; only members whose names end in
`/obd/<policy>/<campaign>/...` are read, and nothing is extracted to disk. A larger dataset (the full
OBD) is read from its folder.
"""
from __future__ import annotations

import tarfile
from pathlib import Path

import pandas as pd

from poxm_core.common.errors import PoxmInputError
from poxm_core.data.logged import LoggedColumns, LoggedFeedback, action_features_matrix, build_feedback, read_frame

OBD_POLICIES = ("random", "bts")
OBD_CAMPAIGNS = ("all", "men", "women")
MAX_MEMBERS = 10_000
MAX_MEMBER_BYTES = 256 * 2**20     # obp's sample: 5 MB at most
MAX_TOTAL_BYTES = 512 * 2**20


def find_obd_source(path) -> Path:
    """The OBD source under `path`: the path itself if it is an archive or holds `random/` and `bts/`;
    else the newest `original/obp-*.tar.gz` below it (the data root's `obd/` folder)."""
    path = Path(path)
    if path.is_file() or (path / "random").is_dir():
        return path
    found = sorted(path.glob("original/obp-*.tar.gz")) + sorted(path.glob("obp-*.tar.gz"))
    if not found:
        raise PoxmInputError(f"{path}: no Open Bandit Dataset here (expected random/ and bts/ folders "
                             f"or original/obp-*.tar.gz)")
    return found[-1]


def _obd_members(tar: tarfile.TarFile, archive: Path, rels: tuple[str, ...]) -> list[tuple[bytes, str]]:
    """The members */obd/<rel> of `tar`, each read within the bounds: the archive's headers are walked
    one at a time (at most MAX_MEMBERS of them), a member is read only when its header declares at most
    MAX_MEMBER_BYTES, and then never more than that, and the members read hold MAX_TOTAL_BYTES in all."""
    found: dict[str, tarfile.TarInfo] = {}
    for n, m in enumerate(tar):
        if n >= MAX_MEMBERS:
            raise PoxmInputError(f"{archive}: more than {MAX_MEMBERS} members (obp's source archive has about "
                                 "100); extract the Open Bandit Dataset and give its folder")
        for rel in rels:
            if rel not in found and m.isfile() and m.name.endswith("/obd/" + rel):
                found[rel] = m
        if len(found) == len(rels):
            break
    out, total = [], 0
    for rel in rels:
        m = found.get(rel)
        if m is None:
            raise PoxmInputError(f"{archive}: no member */obd/{rel} in the archive")
        total += m.size
        if m.size > MAX_MEMBER_BYTES or total > MAX_TOTAL_BYTES:
            raise PoxmInputError(f"{archive}: member {m.name} declares {m.size} bytes, more than poxm reads from an "
                                 f"archive ({MAX_MEMBER_BYTES} per member, {MAX_TOTAL_BYTES} in all); extract the "
                                 "Open Bandit Dataset and give its folder")
        data = tar.extractfile(m).read(MAX_MEMBER_BYTES + 1)
        if len(data) != m.size:
            raise PoxmInputError(f"{archive}: member {m.name} holds {len(data)} bytes, not the {m.size} its header "
                                 "declares (a damaged or crafted archive)")
        out.append((data, f"{archive.name}:{m.name}"))
    return out


def obd_columns(df: pd.DataFrame, n_actions: int) -> LoggedColumns:
    """OBD's mapping: item_id, position (1-3), click, propensity_score; user_feature_* categorical,
    user-item_affinity_* numeric."""
    return LoggedColumns(action="item_id", position="position", reward="click", propensity="propensity_score",
                         context=tuple(c for c in df.columns if str(c).startswith("user-item_affinity_")),
                         categorical=tuple(c for c in df.columns if str(c).startswith("user_feature_")),
                         position_base=1, slate_size=3, n_actions=n_actions)


def read_obd(path, policy: str, campaign: str) -> LoggedFeedback:
    """The log of `policy` ('random' or 'bts') in `campaign` ('all', 'men', 'women') of the Open Bandit
    Dataset at `path` (obp's source archive, a folder holding it, or a folder with the
    `<policy>/<campaign>/` layout). Rows in file order; the action set is item_context.csv's items."""
    if policy not in OBD_POLICIES:
        raise PoxmInputError(f"policy: expected one of {', '.join(OBD_POLICIES)}, got {policy!r}")
    if campaign not in OBD_CAMPAIGNS:
        raise PoxmInputError(f"campaign: expected one of {', '.join(OBD_CAMPAIGNS)}, got {campaign!r}")
    src = find_obd_source(path)
    rel_log, rel_items = f"{policy}/{campaign}/{campaign}.csv", f"{policy}/{campaign}/item_context.csv"
    if src.is_file():
        try:
            with tarfile.open(src, "r:*") as tar:
                (log_bytes, log_name), (item_bytes, item_name) = _obd_members(tar, src, (rel_log, rel_items))
        except (tarfile.TarError, EOFError, OSError) as e:
            raise PoxmInputError(f"{src}: not a readable tar archive ({e})") from None
        df, items = read_frame(log_bytes, log_name), read_frame(item_bytes, item_name)
    else:
        log_name, item_name = str(src / rel_log), str(src / rel_items)
        for f in (log_name, item_name):
            if not Path(f).is_file():
                raise PoxmInputError(f"{f}: file not found")
        df, items = read_frame(Path(log_name), log_name), read_frame(Path(item_name), item_name)
    feats = action_features_matrix(items, "item_id", item_name, True)
    return build_feedback(df, obd_columns(df, feats.shape[0]), log_name, True, feats.shape[0], feats)

