"""The hub manifest: params.yaml asks only for hub datasets, splits and
columns that the recorded manifest shows; the manifest builder on tiny local repos in the hub's formats."""

from __future__ import annotations

import io
import subprocess
import sys
import tarfile
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
import yaml
from PIL import Image

from prh.data.hub_manifest import (
    build_manifest,
    check_manifest,
    describe_files,
    hub_targets,
    read_manifest,
    write_manifest,
)

ROOT = Path(__file__).resolve().parents[1]
MANIFEST = ROOT / "workflow" / "resources" / "hub_manifest.yaml"


def _params() -> dict:
    return yaml.safe_load((ROOT / "params.yaml").read_text())


def _webp(seed: int) -> bytes:
    buf = io.BytesIO()
    Image.fromarray(np.random.default_rng(seed).integers(0, 256, (8, 8, 3), dtype=np.uint8)).save(buf, format="webp")
    return buf.getvalue()


def _shard(path: Path, start: int, count: int) -> None:
    """A webdataset shard as CLIP_benchmark writes them: s%07d.webp and s%07d.cls per sample."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with tarfile.open(path, "w") as tar:
        for i in range(start, start + count):
            for ext, data in (("webp", _webp(i)), ("cls", str(i % 3).encode())):
                info = tarfile.TarInfo(f"s{i:07d}.{ext}")
                info.size = len(data)
                tar.addfile(info, io.BytesIO(data))


@pytest.fixture(scope="module")
def wds_repo(tmp_path_factory) -> Path:
    """A clip-benchmark style repo: train/ with two shards, test/ with ONE shard, nshards.txt in each."""
    root = tmp_path_factory.mktemp("wds")
    _shard(root / "train" / "0.tar", 0, 5)
    _shard(root / "train" / "1.tar", 5, 2)
    _shard(root / "test" / "0.tar", 7, 4)
    (root / "train" / "nshards.txt").write_text("2\n")
    (root / "test" / "nshards.txt").write_text("1\n")
    (root / "classnames.txt").write_text("a\nb\nc\n")
    return root


@pytest.fixture(scope="module")
def parquet_repo(tmp_path_factory) -> Path:
    import datasets

    root = tmp_path_factory.mktemp("pq")
    feats = datasets.Features({"img": datasets.Image(), "label": datasets.ClassLabel(names=["x", "y"]),
                               "text": datasets.Sequence(datasets.Value("string"))})
    imgs = [Image.fromarray(np.full((4, 4, 3), i, dtype=np.uint8)) for i in range(6)]
    for split, sl in (("train", slice(0, 4)), ("test", slice(4, 6))):
        ds = datasets.Dataset.from_dict({"img": imgs[sl], "label": [0, 1, 0, 1][: len(imgs[sl])],
                                         "text": [["a", "b"]] * len(imgs[sl])}, features=feats)
        (root / "data").mkdir(exist_ok=True)
        ds.to_parquet(str(root / "data" / f"{split}-00000-of-00001.parquet"))
    return root


def test_webdataset_splits_columns_and_rows_from_the_shards(wds_repo):
    d = describe_files(str(wds_repo), data_files={"train": "train/*.tar", "test": "test/*.tar"})
    assert d["splits"] == {"train": {"format": "webdataset", "num_rows": 7, "files": 2},
                           "test": {"format": "webdataset", "num_rows": 4, "files": 1}}
    assert d["features"] == {"__key__": "string", "__url__": "string", "cls": "int64", "webp": "image"}


def test_one_shard_beside_nshards_is_read_as_text(wds_repo):
    """What load_dataset does with such a folder (the djghosh/*_test copies): the split becomes text."""
    d = describe_files(str(wds_repo))
    assert d["splits"]["train"]["format"] == "webdataset"
    assert d["splits"]["test"] == {"format": "text", "num_rows": 1, "files": 1}  # nshards.txt's one line


def test_parquet_features_and_rows_from_the_footers(parquet_repo):
    d = describe_files(str(parquet_repo))
    assert {s: v["num_rows"] for s, v in d["splits"].items()} == {"train": 4, "test": 2}
    assert d["features"] == {"img": "image", "label": "class_label(2)", "text": "list[string]"}


def _not_found():
    from huggingface_hub.errors import RepositoryNotFoundError

    err = RepositoryNotFoundError.__new__(RepositoryNotFoundError)
    Exception.__init__(err, "404")
    return err


class FakeApi:
    def __init__(self, repos):
        self.repos = repos

    def dataset_info(self, repo_id, revision=None):
        if repo_id not in self.repos:
            raise _not_found()
        return SimpleNamespace(sha="a" * 40, card_data=self.cards.get(repo_id), siblings=[])

    cards = {"org/card": {"dataset_info": {  # a card's YAML header, as uoft-cs/cifar10's
        "features": [{"name": "img", "dtype": "image"},
                     {"name": "label", "dtype": {"class_label": {"names": {"0": "a", "1": "b", "2": "c"}}}}],
        "splits": [{"name": "train", "num_examples": 50000}, {"name": "test", "num_examples": 10000}]}}}

    def model_info(self, repo_id, revision=None):
        return SimpleNamespace(sha="b" * 40, card_data=None,
                               siblings=[SimpleNamespace(rfilename=n) for n in ("tokenizer.model", "config.json", "x/y")])


def test_build_and_write_the_manifest(wds_repo, parquet_repo, tmp_path):
    cfg = {
        "datasets": {
            "w_train": {"kind": "hub", "repo": "org/wds", "revision": "main", "split": "train",
                        "image_column": "webp", "label_column": "cls"},
            "p_test": {"kind": "hub", "repo": "org/pq", "revision": "main", "split": "test",
                       "image_column": "img", "label_column": "label"},
            "gone": {"kind": "hub", "repo": "org/gone", "revision": "main", "split": "train", "image_column": "image"},
            "local": {"kind": "hub", "repo": "./data/x", "revision": None, "split": "train", "image_column": "image"},
        },
        "paper": {"models": {"m": {"repo": "vit_tiny_patch16_224.augreg_in21k", "revision": "main"}}},
    }
    assert [t["id"] for t in hub_targets(cfg)["datasets"]] == ["org/wds", "org/pq", "org/gone"]
    cfg["datasets"]["c"] = {"kind": "hub", "repo": "org/card", "revision": "main", "split": "test",
                            "image_column": "img", "label_column": "label"}
    roots = {"org/wds": wds_repo, "org/pq": parquet_repo, "org/card": tmp_path / "empty"}
    (tmp_path / "empty").mkdir()
    m = build_manifest(cfg, api=FakeApi(roots), root_of=lambda repo, sha: str(roots[repo]), count_rows=True)
    by_id = {d["id"]: d for d in m["datasets"]}
    assert by_id["org/wds"]["revision"] == "a" * 40 and by_id["org/wds"]["splits"]["train"]["num_rows"] == 7
    assert by_id["org/pq"]["features"]["label"] == "class_label(2)"
    assert by_id["org/gone"]["exists"] is False and by_id["org/gone"]["splits"] == {}
    # no data files readable, a card with dataset_info: splits, rows and features from the card
    assert {s: v["num_rows"] for s, v in by_id["org/card"]["splits"].items()} == {"train": 50000, "test": 10000}
    assert by_id["org/card"]["features"] == {"img": "image", "label": "class_label(3)"}
    assert m["models"] == [{"id": "timm/vit_tiny_patch16_224.augreg_in21k", "revision": "b" * 40, "exists": True,
                            "files": ["config.json", "tokenizer.model"], "source": "hub", "asked_revision": "main"}]
    out = tmp_path / "out" / "manifest.yaml"
    write_manifest(out, m, header="# test\n")
    assert read_manifest(out) == m and out.read_text().startswith("# test\n")
    assert [p.name for p in out.parent.iterdir()] == ["manifest.yaml"]  # no temporary file left
    # the check: the repo that is gone, and nothing else
    found = check_manifest(cfg, m)
    assert len(found["missing"]) == 1 and "org/gone" in found["missing"][0] and found["unverified"] == []


def test_check_names_missing_splits_and_columns():
    manifest = {"datasets": [{"id": "o/d", "config": None, "data_files": None, "exists": True,
                              "splits": {"test": {}}, "features": {"webp": "image", "cls": "int64"}}]}
    base = {"kind": "hub", "repo": "o/d", "revision": "main", "image_column": "webp", "label_column": "cls"}
    cfg = {"datasets": {"a": {**base, "split": "train"}, "b": {**base, "split": "test", "label_column": "label"},
                        "c": {**base, "split": "train", "carve": {"from": "test", "parts": {"train": 0.5}, "seed": 0}}}}
    found = check_manifest(cfg, manifest)
    assert len(found["missing"]) == 2 and found["unverified"] == []
    assert "datasets.a" in found["missing"][0] and "split 'train'" in found["missing"][0]
    assert "datasets.b" in found["missing"][1] and "['label']" in found["missing"][1]
    # a partial split list, an unknown repo: unverified, not missing
    partial = {"datasets": [{**manifest["datasets"][0], "splits_complete": False},
                            {"id": "o/e", "config": None, "exists": None, "source": "not found"}]}
    cfg["datasets"]["e"] = {**base, "repo": "o/e", "split": "test"}
    found = check_manifest(cfg, partial)
    assert [m.split(" ")[0] for m in found["missing"]] == ["datasets.b"]
    assert [m.split(" ")[0] for m in found["unverified"]] == ["datasets.a", "datasets.e"]


# params.yaml entries the hand-filled manifest cannot confirm (no hub page showed a train split of these two
# repos; public code loads their test split). `prh hub-manifest` on a machine with network settles them;
# any other unverified entry fails the test below until it is confirmed or listed here with its reason.
# paper.lm_score: OpenWebText is streamed, never materialised, and no page of it was searched (listed since
# check_manifest reads every hub dataset entry)
ACKNOWLEDGED_UNVERIFIED = {"datasets.vtab_dtd_train", "datasets.vtab_flowers_train", "paper.lm_score"}


def test_params_ask_only_for_what_the_manifest_records():
    """Fails on the params.yaml before this fix: sun397 `train` (the hub has only `test`) and the VTAB
    kitti repo clip-benchmark/wds_vtab-kitti_closest_vehicle_distance (no page of it was found)."""
    found = check_manifest(_params(), read_manifest(MANIFEST))
    assert found["missing"] == [], "\n".join(found["missing"])
    assert {m.split(" ")[0] for m in found["unverified"]} == ACKNOWLEDGED_UNVERIFIED, "\n".join(found["unverified"])


def test_every_hub_dataset_and_model_has_an_entry_with_a_source():
    manifest, targets = read_manifest(MANIFEST), hub_targets(_params())
    entries = {(d["id"], d.get("config")): d for d in manifest["datasets"]}
    for t in targets["datasets"]:
        assert (t["id"], t["config"]) in entries, t
    models = {m["id"]: m for m in manifest["models"]}
    assert {t["id"] for t in targets["models"]} <= set(models)
    for e in [*manifest["datasets"], *manifest["models"]]:
        assert e.get("source"), e["id"]
        assert e.get("revision") is None or len(e["revision"]) == 40, e["id"]  # a full SHA or unknown


def test_recorded_facts_of_the_issue():
    entries = {d["id"]: d for d in read_manifest(MANIFEST)["datasets"]}
    assert set(entries["clip-benchmark/wds_sun397"]["splits"]) == {"test"}
    assert entries["clip-benchmark/wds_vtab-kitti_closest_vehicle_distance"]["exists"] is not True


def test_cli_check_is_offline_and_passes(tmp_path):
    r = subprocess.run([sys.executable, "-m", "prh.cli", "hub-manifest", "--params", str(ROOT / "params.yaml"),
                        "--out", str(MANIFEST), "--check"], capture_output=True, text=True, cwd=tmp_path)
    assert r.returncode == 0, r.stdout + r.stderr


def test_a_mistyped_model_repo_id_is_missing_offline():
    """Model entries are all `exists: null` by hand, so a typo passed every offline check."""
    cfg = _params()
    cfg["paper"]["models"]["bloomz-560m"]["repo"] = "bigscience/bloomz-506m"
    found = check_manifest(cfg, read_manifest(MANIFEST))
    assert len(found["missing"]) == 1
    assert "paper.models.bloomz-560m (model bigscience/bloomz-506m): not in the manifest" in found["missing"][0]
