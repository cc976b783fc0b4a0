"""Splits the hub does not have, carved reproducibly from one it has."""

from __future__ import annotations

import numpy as np
import pytest
import yaml
from PIL import Image

from prh.data.hub_datasets import carve_indices, materialize_hub_dataset
from prh.io import read_json, read_jsonl

PARTS = {"train": 0.5, "test": 0.5}


def test_carved_parts_are_disjoint_seeded_and_sized():
    tr = carve_indices(101, parts=PARTS, part="train", seed=3)
    te = carve_indices(101, parts=PARTS, part="test", seed=3)
    assert not set(tr.tolist()) & set(te.tolist())
    assert sorted(tr.tolist() + te.tolist()) == list(range(101))  # fractions summing to 1 use every row
    assert (len(te), len(tr)) == (50, 51)  # sorted names: test gets floor(101 * 0.5), train the rest
    assert np.all(np.diff(tr) > 0)
    assert np.array_equal(tr, carve_indices(101, parts=PARTS, part="train", seed=3))
    assert not np.array_equal(tr, carve_indices(101, parts=PARTS, part="train", seed=4))
    # the order the parts are listed in does not matter
    assert np.array_equal(tr, carve_indices(101, parts={"test": 0.5, "train": 0.5}, part="train", seed=3))
    # a fraction below 1 leaves rows out, still disjoint
    a = carve_indices(10, parts={"a": 0.3, "b": 0.3}, part="a", seed=0)
    b = carve_indices(10, parts={"a": 0.3, "b": 0.3}, part="b", seed=0)
    assert len(a) == 3 and len(b) == 3 and not set(a.tolist()) & set(b.tolist())


@pytest.mark.parametrize("parts, part, match", [
    ({"train": 0.7, "test": 0.5}, "train", "sum to 1.2"),
    ({"train": 0.0}, "train", "in \\(0, 1\\]"),
    ({"train": 0.5}, "val", "part='val'"),
    ({}, "train", "parts is empty"),
])
def test_bad_carves_name_the_problem(parts, part, match):
    with pytest.raises(ValueError, match=match):
        carve_indices(10, parts=parts, part=part, seed=0)


@pytest.fixture(scope="module")
def test_only_repo(tmp_path_factory):
    """A repo with only a test split (like clip-benchmark/wds_sun397)."""
    import datasets

    root = tmp_path_factory.mktemp("testonly")
    rng = np.random.default_rng(0)
    imgs = [Image.fromarray(rng.integers(0, 256, (6, 6, 3), dtype=np.uint8)) for _ in range(20)]
    ds = datasets.Dataset.from_dict({"image": imgs, "label": [i % 4 for i in range(20)]},
                                    features=datasets.Features({"image": datasets.Image(),
                                                                "label": datasets.ClassLabel(num_classes=4)}))
    (root / "data").mkdir()
    ds.to_parquet(str(root / "data" / "test-00000-of-00001.parquet"))
    return root


def test_materialised_train_and_test_do_not_overlap(test_only_repo, tmp_path):
    carve = {"from": "test", "parts": PARTS, "seed": 0}
    kw = dict(repo=str(test_only_repo), image_column="image", label_column="label", image_size=8, carve=carve)
    m_tr = materialize_hub_dataset(tmp_path / "tr", split="train", n=None, **kw)
    m_te = materialize_hub_dataset(tmp_path / "te", split="test", n=None, **kw)
    src = lambda d: [c["source_index"] for c in read_jsonl(tmp_path / d / "captions.jsonl")]  # noqa: E731
    assert src("tr") == carve_indices(20, parts=PARTS, part="train", seed=0).tolist()
    assert src("te") == carve_indices(20, parts=PARTS, part="test", seed=0).tolist()
    assert not set(src("tr")) & set(src("te")) and len(src("tr")) + len(src("te")) == 20
    assert np.load(tmp_path / "tr" / "labels.npy").tolist() == [i % 4 for i in src("tr")]
    assert (m_tr["split"], m_tr["split_size"], m_tr["source_split_size"], m_tr["carve"]) == ("train", 10, 20, carve)
    assert (m_te["split"], m_te["split_size"], m_te["source_split_size"], m_te["carve"]) == ("test", 10, 20, carve)
    assert read_json(tmp_path / "te" / "meta.json")["split_size"] == 10
    # the n cap subsamples within the part: still inside it, still seeded
    materialize_hub_dataset(tmp_path / "tr3", split="train", n=3, seed=1, **kw)
    assert set(src("tr3")) <= set(src("tr")) and len(src("tr3")) == 3
    # a split that is not one of the parts fails before any data is read
    with pytest.raises(ValueError, match="part='val'"):
        materialize_hub_dataset(tmp_path / "v", split="val", **kw)


def test_params_carves_are_consistent(repo_root):
    """Every dataset carved from the same repo and source split uses the same seed and parts (so the
    parts are disjoint), and no two datasets take the same part."""
    cfg = yaml.safe_load((repo_root / "params.yaml").read_text())
    groups: dict = {}
    for name, spec in cfg["datasets"].items():
        if spec.get("carve"):
            key = (spec["repo"], spec.get("revision"), spec.get("config"), spec["carve"]["from"])
            groups.setdefault(key, []).append((name, spec))
    assert {k[0] for k in groups} >= {"clip-benchmark/wds_sun397"}
    for key, members in groups.items():
        specs = {yaml.safe_dump({k: v for k, v in s["carve"].items()}) for _, s in members}
        assert len(specs) == 1, f"{key}: {[n for n, _ in members]} carve differently and could overlap"
        parts = [s["split"] for _, s in members]
        assert len(parts) == len(set(parts)) and set(parts) <= set(members[0][1]["carve"]["parts"]), key


def test_cli_carves_as_the_rule_calls_it(test_only_repo, tmp_path):
    """The hub_dataset rule passes --carve and --data-files as JSON ("null" when unset)."""
    import json
    import subprocess
    import sys

    carve = json.dumps({"from": "test", "parts": PARTS, "seed": 0})
    cmd = [sys.executable, "-m", "prh.cli", "fetch-dataset", "--repo", str(test_only_repo), "--revision", "None",
           "--split", "test", "--image-column", "image", "--label-column", "label", "--image-size", "8",
           "--out", str(tmp_path / "te"), "--carve", carve, "--data-files", "null"]
    r = subprocess.run(cmd, capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    assert [c["source_index"] for c in read_jsonl(tmp_path / "te" / "captions.jsonl")] == \
        carve_indices(20, parts=PARTS, part="test", seed=0).tolist()


def test_check_config_refuses_carves_that_could_overlap(repo_root):
    """Editing the seed (or parts) of one of two datasets carved from one split would make their rows
    overlap silently: the config check names both datasets."""
    from prh.checks import check_references
    from prh.config import ConfigError

    cfg = yaml.safe_load((repo_root / "params.yaml").read_text())
    check_references(cfg)
    cfg["datasets"]["vtab_sun397_test"]["carve"] = {**cfg["datasets"]["vtab_sun397_test"]["carve"], "seed": 1}
    with pytest.raises(ConfigError, match=r"vtab_sun397_train, vtab_sun397_test: carved from the same split"):
        check_references(cfg)
    cfg["datasets"]["vtab_sun397_test"]["carve"]["seed"] = 0
    cfg["datasets"]["vtab_sun397_test"]["split"] = "validation"
    with pytest.raises(ConfigError, match=r"vtab_sun397_test.split: 'validation' is not one of its carve parts"):
        check_references(cfg)
