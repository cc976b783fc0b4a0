"""Hub dataset materialisation on tiny local datasets in the hub's formats."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import numpy as np
import pytest
from PIL import Image

from prh.data.hub_datasets import (
    DatasetNotAvailableError,
    materialize_hub_dataset,
    square_rgb,
    subsample_indices,
)
from prh.errors import ModelNotAvailableError
from prh.io import read_json, read_jsonl

N = 12
NAMES = ["cat", "dog", "ship"]


def _images(n=N, seed=0):
    rng = np.random.default_rng(seed)
    # different sizes and aspect ratios, as real hub sets have
    return [Image.fromarray(rng.integers(0, 256, (20 + i, 30 + 2 * i, 3), dtype=np.uint8)) for i in range(n)]


@pytest.fixture(scope="module")
def parquet_repo(tmp_path_factory):
    """A dataset repo as the hub stores it: data/<split>-*.parquet with Image/ClassLabel features."""
    import datasets

    root = tmp_path_factory.mktemp("repo")
    feats = datasets.Features(
        {
            "image": datasets.Image(),
            "text": datasets.Sequence(datasets.Value("string")),
            "label": datasets.ClassLabel(names=NAMES),
        }
    )
    ds = datasets.Dataset.from_dict(
        {
            "image": _images(),
            "text": [[f"caption {i}", f"other {i}"] for i in range(N)],
            "label": [i % 3 for i in range(N)],
        },
        features=feats,
    )
    (root / "data").mkdir()
    ds.to_parquet(str(root / "data" / "train-00000-of-00001.parquet"))
    return root


def test_subsample_is_seeded_sorted_and_capped():
    a = subsample_indices(100, 10, seed=3)
    assert np.array_equal(a, subsample_indices(100, 10, seed=3))
    assert not np.array_equal(a, subsample_indices(100, 10, seed=4))
    assert len(set(a.tolist())) == 10 and np.all(np.diff(a) > 0) and a.max() < 100
    assert np.array_equal(subsample_indices(5, 10, seed=0), np.arange(5))
    assert np.array_equal(subsample_indices(5, None, seed=0), np.arange(5))
    with pytest.raises(ValueError, match="n=0"):
        subsample_indices(5, 0, seed=0)


def test_square_rgb_crops_the_centre():
    img = np.zeros((10, 30, 3), dtype=np.uint8)
    img[:, 10:20] = 255  # the central square is white, the sides black
    out = square_rgb(Image.fromarray(img), 10)
    assert out.shape == (10, 10, 3) and out.dtype == np.uint8
    assert out.min() == 255
    gray = square_rgb(np.full((8, 8), 7, dtype=np.uint8), 4)
    assert gray.shape == (4, 4, 3) and np.all(gray == 7)


def test_materialise_full_split(parquet_repo, tmp_path):
    out = tmp_path / "wit"
    meta = materialize_hub_dataset(
        out, repo=str(parquet_repo), split="train", image_column="image",
        text_column="text", label_column="label", n=None, seed=0, image_size=16,
    )
    images = np.load(out / "images.npy")
    caps = read_jsonl(out / "captions.jsonl")
    labels = np.load(out / "labels.npy")
    assert images.shape == (N, 16, 16, 3) and images.dtype == np.uint8
    assert [c["id"] for c in caps] == list(range(N))
    assert caps[5]["text"] == "caption 5" and caps[5]["texts"] == ["caption 5", "other 5"]
    assert labels.tolist() == [i % 3 for i in range(N)]
    # each stored image is the resized-and-cropped original, in split order
    originals = _images()
    for i in (0, 7, N - 1):
        assert np.array_equal(images[i], square_rgb(originals[i], 16))
    assert meta["count"] == N and meta["split_size"] == N and meta["label_names"] == NAMES
    assert read_json(out / "meta.json")["sha256"] == meta["sha256"] and len(meta["sha256"]) == 64


def test_materialise_subsample_is_seeded(parquet_repo, tmp_path):
    kw = dict(repo=str(parquet_repo), split="train", image_column="image", label_column="label", n=5, image_size=8)
    m1 = materialize_hub_dataset(tmp_path / "a", seed=1, **kw)
    m2 = materialize_hub_dataset(tmp_path / "b", seed=1, **kw)
    m3 = materialize_hub_dataset(tmp_path / "c", seed=2, **kw)
    src = lambda d: [c["source_index"] for c in read_jsonl(tmp_path / d / "captions.jsonl")]  # noqa: E731
    assert src("a") == src("b") == subsample_indices(N, 5, seed=1).tolist()
    assert src("a") != src("c")
    assert m1["sha256"] == m2["sha256"] != m3["sha256"]
    # no text column: the caption is the class name
    caps = read_jsonl(tmp_path / "a" / "captions.jsonl")
    assert [c["text"] for c in caps] == [NAMES[i % 3] for i in src("a")]


def test_imagefolder_with_captions(tmp_path):
    """A set not on the hub (DCI, Places-365) as a local imagefolder with metadata.jsonl."""
    folder = tmp_path / "dci" / "train"
    folder.mkdir(parents=True)
    with open(folder / "metadata.jsonl", "w") as f:
        for i, im in enumerate(_images(4)):
            im.save(folder / f"{i}.png")
            f.write(json.dumps({"file_name": f"{i}.png", "text": f"dense caption {i}"}) + "\n")
    meta = materialize_hub_dataset(tmp_path / "out", repo=str(tmp_path / "dci"), text_column="text", image_size=8)
    caps = read_jsonl(tmp_path / "out" / "captions.jsonl")
    assert np.load(tmp_path / "out" / "labels.npy").tolist() == [-1] * 4  # no label column
    assert meta["count"] == 4 and sorted(c["text"] for c in caps) == [f"dense caption {i}" for i in range(4)]


def test_bad_column_names_the_columns(parquet_repo, tmp_path):
    with pytest.raises(ValueError, match=r"columns \['img'\].*'image'"):
        materialize_hub_dataset(tmp_path / "x", repo=str(parquet_repo), image_column="img")


def test_missing_local_folder(tmp_path):
    with pytest.raises(DatasetNotAvailableError, match="dvc pull results/data"):
        materialize_hub_dataset(tmp_path / "x", repo=str(tmp_path / "nowhere"))


def test_offline_uncached_repo_gives_one_clear_error(tmp_path):
    """HF_DATASETS_OFFLINE/HF_HUB_OFFLINE and an empty cache: the CLI fails at once with one message."""
    env = {
        **os.environ,
        "HF_HOME": str(tmp_path / "hf"),
        "HF_DATASETS_OFFLINE": "1",
        "HF_HUB_OFFLINE": "1",
    }
    cmd = [
        sys.executable, "-m", "prh.cli", "fetch-dataset", "--repo", "minhuh/prh", "--revision", "wit_1024",
        "--split", "train", "--out", str(tmp_path / "wit"),
    ]
    r = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=120)
    assert r.returncode != 0
    msg = r.stderr.strip().splitlines()[-1]  # one line, the last thing the job prints
    assert "'minhuh/prh'" in msg and "'wit_1024'" in msg
    assert "download it into the cache" in msg and "dvc pull results/data" in msg
    assert "Traceback" not in r.stderr
    assert not (tmp_path / "wit").exists()
    assert issubclass(DatasetNotAvailableError, ModelNotAvailableError)


def test_offline_copy_prepared_for_other_data_files_gives_the_clear_error(tmp_path):
    """Offline, a prepared copy of the repo that holds another config / data_files: datasets raises a bare
    ValueError ("Couldn't find cache ... for config ..."); it becomes the one DatasetNotAvailableError."""
    import yaml

    from prh.standin.datasets import build_dataset_standins

    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    cfg = yaml.safe_load(open(os.path.join(root, "params.yaml")))
    build_dataset_standins(cfg, tmp_path / "hf" / "hub", tmp_path / "hf" / "datasets", only="vtab_kitti_dist_test")
    env = {**os.environ, "HF_HOME": str(tmp_path / "hf"), "HF_DATASETS_OFFLINE": "1", "HF_HUB_OFFLINE": "1"}
    cmd = [sys.executable, "-m", "prh.cli", "fetch-dataset", "--repo",
           "djghosh/wds_vtab-kitti_closest_vehicle_distance_test", "--split", "test", "--image-column", "webp",
           "--label-column", "cls", "--data-files", '{"test": "test/0*.tar"}', "--out", str(tmp_path / "kitti")]
    r = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=120)
    assert r.returncode != 0
    msg = r.stderr.strip().splitlines()[-1]
    assert "is not in the Hugging Face datasets cache" in msg and "Couldn't find cache" in msg, r.stderr[-2000:]
    assert "Traceback" not in r.stderr and not (tmp_path / "kitti").exists()


def test_fetch_dataset_defaults_are_the_hub_entry_schema_defaults(repo_root):
    """The command's defaults are read from the schema, which fills every hub entry of params.yaml the same way."""
    from prh.checks import check_config
    from prh.config import load
    from prh.data.hub_datasets import hub_entry_defaults

    d = hub_entry_defaults()
    assert (d["split"], d["image_column"], d["seed"], d["image_size"]) == ("train", "image", 0, 224)
    cfg = load(repo_root / "params.yaml")
    name = next(n for n, s in cfg["datasets"].items() if s["kind"] == "hub" and "label_column" not in s)
    filled = check_config(cfg)["datasets"][name]
    assert all(filled[k] == v for k, v in d.items() if k not in cfg["datasets"][name])
