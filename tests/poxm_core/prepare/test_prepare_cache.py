"""The prepare cache keyed by content (issue 9 item 4): file datasets by the SHA-256 of their bytes,
every level's manifest with content_sha256, levels copied through storage and checked; and the
`num_workers` option refused in one line."""
from __future__ import annotations

import hashlib
import json
import os
import shutil
from pathlib import Path

import pytest

from orchestration.stages.gather import data_checksum
from orchestration.cluster.storage import Storage, sweep_storage
from poxm_core.config.schema import load_config
from poxm_core.data.registry import write_example_data
from poxm_core.common.errors import PoxmInputError
from poxm_core.prepare.pipeline import prepare
from poxm_core.prepare.cache import cache_keys, dir_sha256, file_sha256, variant_record



def _xc_cfg(folder: Path):
    return load_config(data={
        "name": "c", "datasets": [{"name": "my-xc", "format": "xc", "train": str(folder / "my_train.txt"),
                                   "test": str(folder / "my_test.txt"), "propensity": "default",
                                   "variants": [{"name": "A", "alpha": 0.5}]}],
        "methods": {"dm": {}}})


def test_file_dataset_key_is_its_content_not_its_name_size_or_mtime(tmp_path):
    a, b = tmp_path / "a", tmp_path / "b"
    write_example_data(a)                                                  # the example's files, generated
    shutil.copytree(a, b)
    os.utime(b / "my_train.txt", (1, 1))                                   # another mtime, same bytes
    key_a = cache_keys(_xc_cfg(a), "my-xc", 0).data[1]
    assert cache_keys(_xc_cfg(b), "my-xc", 0).data[1] == key_a             # copied elsewhere: same key
    text = (b / "my_train.txt").read_text()
    (b / "my_train.txt").write_text(text.replace("1:", "2:", 1))        # one byte changed, same size
    assert (b / "my_train.txt").stat().st_size == (a / "my_train.txt").stat().st_size
    assert cache_keys(_xc_cfg(b), "my-xc", 0).data[1] != key_a


def test_file_and_dir_sha256_hand_values(tmp_path):
    (tmp_path / "d" / "sub").mkdir(parents=True)
    (tmp_path / "d" / "x.bin").write_bytes(b"abc")
    (tmp_path / "d" / "sub" / "y").write_bytes(b"")
    (tmp_path / "d" / "manifest.json").write_text("{}")                   # not part of the content
    sha = lambda b: hashlib.sha256(b).hexdigest()  # noqa: E731
    assert file_sha256(tmp_path / "d" / "x.bin") == "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
    expected = sha(f"sub/y\0{sha(b'')}\nx.bin\0{sha(b'abc')}\n".encode())
    assert dir_sha256(tmp_path / "d") == expected


SYN = {"name": "s", "datasets": [{"name": "synthetic",
                                  "synthetic": {"n_train": 120, "n_test": 40, "n_features": 30, "n_labels": 12},
                                  "variants": [{"name": "A", "alpha": 0.5}]}],
       "model": {"dim": 4, "epochs": 1, "n_candidates": 6, "slate_size": 2}, "training": {"mc_slates": 2},
       "methods": {"dm": {}}}


@pytest.fixture(scope="module")
def prepared(tmp_path_factory):
    cache = tmp_path_factory.mktemp("cache")
    cfg = load_config(data=SYN)
    return cache, prepare(cfg, "synthetic", 0, cache, progress=False)["A"]


def test_manifests_carry_their_content_checksum_and_the_tag_uses_it(prepared):
    cache, vdir = prepared
    rec = variant_record(cache, vdir)
    assert rec["dir"] == f"variant/{vdir.name}" and rec["levels"][-1] == rec["dir"] and len(rec["levels"]) == 4
    for rel in rec["levels"]:
        man = json.loads((cache / rel / "manifest.json").read_text())
        assert man["content_sha256"] == dir_sha256(cache / rel)
    assert data_checksum(rec) == dir_sha256(cache / rec["levels"][0])
    json.dumps(rec)                                                         # plain data for the object store


def test_levels_travel_through_storage_and_are_checked(prepared, tmp_path):
    cache, vdir = prepared
    rec = variant_record(cache, vdir)
    store = sweep_storage(str(tmp_path / "store"), "sweep-1")
    assert store.uri == f"{tmp_path}/store/sweep-1" and sweep_storage(None, "x") is None
    for rel in rec["levels"]:
        store.put_level(cache, rel)
    node = tmp_path / "node"
    for rel in rec["levels"]:
        got = store.get_level(node, rel)
        assert dir_sha256(got) == dir_sha256(cache / rel) and (got / "manifest.json").is_file()
    # a corrupted copy in storage is refused, and nothing is published on the node
    other = tmp_path / "node2"
    data = tmp_path / "store" / "sweep-1" / "cache" / rec["levels"][0]
    f = next(p for p in sorted(data.iterdir()) if p.name != "manifest.json")
    f.write_bytes(f.read_bytes() + b"\0")
    with pytest.raises(PoxmInputError, match="content does not match its manifest"):
        store.get_level(other, rec["levels"][0])
    assert not (other / rec["levels"][0]).exists() and not list((other / "data").glob(".tmp-*"))
    with pytest.raises(PoxmInputError, match="not in storage"):
        Storage(str(tmp_path / "empty")).get_level(other, rec["levels"][0])


def test_trial_files_round_trip_through_storage(tmp_path):
    from orchestration.stages.trial import TrialFiles, fetch_trial
    uri = str(tmp_path / "store")
    tf = TrialFiles("t1", None, uri)
    work = tmp_path / "work"
    work.mkdir()
    (work / "rows.csv").write_text("a\n1\n")
    (work / "checkpoints").mkdir()
    tf.publish(work)
    tf.set_state("running", epoch=1)
    tf.write_json("done.json", {"epoch": 2})
    run_root = tmp_path / "run"
    fetch_trial(run_root, "t1", Storage(uri))
    assert (run_root / "trials" / "t1" / "rows.csv").read_text() == "a\n1\n"
    assert json.loads((run_root / "trials" / "t1" / "done.json").read_text()) == {"epoch": 2}
    assert not (run_root / "trials" / "t1" / "checkpoints").exists()      # Ray stores checkpoints itself


def test_num_workers_above_one_is_refused_in_one_line():
    with pytest.raises(PoxmInputError) as e:
        load_config(data=SYN, overrides=["resources.num_workers=2"])
    msg = str(e.value)
    assert "\n" not in msg and "resources.num_workers" in msg and "no data parallelism" in msg
    assert "max_concurrent_trials" in msg


def test_bad_storage_path_is_refused_at_plan_time(tmp_path):
    from orchestration.stages.plan import plan_sweep
    cfg = load_config(data=SYN, overrides=["resources.storage_path=nosuchfs://bucket/x"])
    with pytest.raises(PoxmInputError, match="resources.storage_path.*nosuchfs://bucket/x") as e:
        plan_sweep(cfg, runs_dir=tmp_path)
    assert "\n" not in str(e.value)


# ------------------------------------------------------------------------------------- checked when loaded (issue 39, item 9)

def _tamper_header(f: Path) -> None:
    """An .npy whose header no longer parses (what gave np.load's ValueError traceback before)."""
    b = bytearray(f.read_bytes())
    b[10:20] = b"??????????"
    f.write_bytes(bytes(b))


def test_a_tampered_cache_array_is_refused_in_one_line_naming_it(tmp_path, capsys):
    import yaml

    from orchestration.cli import main
    from poxm_core.prepare.pipeline import load_variant

    cache = tmp_path / "cache"
    cfg = load_config(data=SYN)
    vdir = prepare(cfg, "synthetic", 0, cache, progress=False)["A"]
    man = json.loads((vdir / "manifest.json").read_text())
    assert man["files"] == {n: file_sha256(vdir / n) for n in man["files"]} and "covering.npy" in man["files"]
    load_variant(cache, vdir, mmap=True)                                   # as built: loads
    model = cache / man["key"]["parents"]["model"]
    z = model / "Z_train.npy"
    _tamper_header(z)
    with pytest.raises(PoxmInputError) as e:
        load_variant(cache, vdir, mmap=True)
    msg = str(e.value)
    assert "\n" not in msg and str(z) in msg and "differs from its cache manifest" in msg and f"delete the cache {cache} " in msg
    # `poxm train` on that cache: the same one line, exit 2, not np.load's ValueError traceback
    (tmp_path / "c.yaml").write_text(yaml.safe_dump(SYN))
    rc = main(["train", str(tmp_path / "c.yaml"), f"runs_dir={tmp_path}/runs", "--cache-dir", str(cache),
               "--out", str(tmp_path / "out")])
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and len(err) == 1 and err[0].startswith("poxm: error: ") and str(z) in err[0], err
    # the documented way out: delete the cache, and the next run builds it again
    shutil.rmtree(cache)
    vdir = prepare(cfg, "synthetic", 0, cache, progress=False)["A"]
    load_variant(cache, vdir, mmap=True)


def test_a_same_size_change_missing_or_added_file_and_an_older_manifest_are_refused(tmp_path):
    from poxm_core.prepare.pipeline import load_variant

    cache = tmp_path / "cache"
    vdir = prepare(load_config(data=SYN), "synthetic", 0, cache, progress=False)["A"]
    f = vdir / "policy_train_rho.npy"
    good = f.read_bytes()
    f.write_bytes(good[:-1] + bytes([good[-1] ^ 1]))                      # one bit, same size: silently other data before
    with pytest.raises(PoxmInputError, match=r"policy_train_rho.npy: content differs"):
        load_variant(cache, vdir)
    f.write_bytes(good)
    (vdir / "extra.npy").write_bytes(b"x")
    with pytest.raises(PoxmInputError, match=r"extra.npy: not in its cache manifest"):
        load_variant(cache, vdir)
    (vdir / "extra.npy").unlink()
    f.unlink()
    with pytest.raises(PoxmInputError, match=r"policy_train_rho.npy: missing from its cache level"):
        load_variant(cache, vdir)
    f.write_bytes(good)
    load_variant(cache, vdir)
    # a manifest written before per-file hashes: the whole directory against content_sha256, naming the level
    man = json.loads((vdir / "manifest.json").read_text())
    man.pop("files")
    (vdir / "manifest.json").write_text(json.dumps(man))
    load_variant(cache, vdir)
    f.write_bytes(good[:-1] + bytes([good[-1] ^ 1]))
    with pytest.raises(PoxmInputError, match=rf"{vdir}: content differs from its cache manifest's content_sha256"):
        load_variant(cache, vdir)
