"""`prh prepare-dci` / `prh prepare-places` on tiny synthetic
downloads laid out as the official ones: DCI's ``densely_captioned_images/`` (``photos/``,
``complete/*.json``, ``splits.json``) and Places-365's ``val_256.tar`` + ``places365_val.txt``.
The folders they build are read by ``prh fetch-dataset`` as params.yaml's ``dci`` and
``places365_val`` are."""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
import tarfile
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from prh.data.hub_datasets import materialize_hub_dataset
from prh.io import read_json, read_jsonl

ROOT = Path(__file__).resolve().parents[1]


def _jpeg(seed: int, size=(40, 30)) -> bytes:
    arr = np.random.default_rng(seed).integers(0, 256, (size[1], size[0], 3), dtype=np.uint8)
    buf = io.BytesIO()
    Image.fromarray(arr).save(buf, format="JPEG")
    return buf.getvalue()


ENTRIES = {
    "sa_1.json": {"image": "sa_1.jpg", "short_caption": "A red car.", "extra_caption": "It is parked by a wall.",
                  "mask_data": {"0": {"idx": 0, "mask_quality": 0, "label": "car", "caption": "a small red car"},
                                "1": {"idx": 1, "mask_quality": 2, "label": "blur"},
                                "2": {"idx": 2, "mask_quality": 1, "label": "wall", "caption": ""}},
                  "mask_keys": ["0", "1", "2"]},
    "sa_2.json": {"image": "sa_2.jpg", "short_caption": "A dog.", "extra_caption": "",
                  "mask_data": {"0": {"idx": 0, "mask_quality": 2, "label": "x"}}, "mask_keys": ["0"]},
    "sa_3.json": {"image": "sa_3.jpg", "short_caption": "Two boats.", "extra_caption": "On a lake.",
                  "mask_data": {"5": {"idx": 5, "mask_quality": 0, "label": "boat", "caption": "a white boat"}},
                  "mask_keys": ["5"]},
}
# What DCI's DenseCaptionedImage.get_formatted_complete_description returns for them
EXPECTED = {
    "sa_1.jpg": "A red car.\nIt is parked by a wall.\nThe following can also be seen in the image:\ncar: a small red car\nwall",
    "sa_2.jpg": "A dog.\n",
    "sa_3.jpg": "Two boats.\nOn a lake.\nThe following can also be seen in the image:\nboat: a white boat",
}


def _dci_download(root: Path) -> Path:
    base = root / "densely_captioned_images"
    (base / "photos").mkdir(parents=True)
    (base / "complete").mkdir()
    for i, (key, entry) in enumerate(ENTRIES.items()):
        (base / "complete" / key).write_text(json.dumps(entry))
        (base / "photos" / entry["image"]).write_bytes(_jpeg(i))
    (base / "splits.json").write_text(json.dumps({"train": ["sa_1.json", "sa_3.json"], "valid": [], "test": ["sa_2.json"]}))
    return base


def test_prepare_dci_builds_the_imagefolder_with_the_reference_caption(tmp_path):
    from prh.data.prepare import prepare_dci

    src = _dci_download(tmp_path / "dl")
    stamp = prepare_dci(source=tmp_path / "dl", out=tmp_path / "data" / "dci", progress=False)
    assert stamp["count"] == 3
    recs = read_jsonl(tmp_path / "data" / "dci" / "train" / "metadata.jsonl")
    assert [r["file_name"] for r in recs] == ["sa_1.jpg", "sa_2.jpg", "sa_3.jpg"]
    assert {r["file_name"]: r["text"] for r in recs} == EXPECTED
    assert [r["split"] for r in recs] == ["train", "test", "train"]
    assert (tmp_path / "data" / "dci" / "train" / "sa_2.jpg").read_bytes() == (src / "photos" / "sa_2.jpg").read_bytes()
    assert not list((tmp_path / "data").glob(".*"))  # no staging left behind
    # read as params.yaml's `dci` entry reads it
    meta = materialize_hub_dataset(tmp_path / "mat", repo=str(tmp_path / "data" / "dci"), text_column="text",
                                   image_size=16)
    assert meta["count"] == 3
    assert [c["text"] for c in read_jsonl(tmp_path / "mat" / "captions.jsonl")] == list(EXPECTED.values())


def test_prepare_dci_is_idempotent_and_resumes(tmp_path):
    from prh.data.prepare import prepare_dci

    _dci_download(tmp_path / "dl")
    out = tmp_path / "dci"
    # a killed run left a staging folder with one complete and one truncated photo
    staging = tmp_path / ".dci.partial"
    (staging / "train").mkdir(parents=True)
    (staging / "train" / "sa_1.jpg").write_bytes((tmp_path / "dl/densely_captioned_images/photos/sa_1.jpg").read_bytes())
    (staging / "train" / "sa_3.jpg").write_bytes(b"trunc")
    prepare_dci(source=tmp_path / "dl/densely_captioned_images", out=out, progress=False)
    assert (out / "train" / "sa_3.jpg").read_bytes() == (tmp_path / "dl/densely_captioned_images/photos/sa_3.jpg").read_bytes()
    before = (out / "train" / "metadata.jsonl").stat().st_mtime_ns
    again = prepare_dci(source=tmp_path / "dl", out=out, progress=False)  # same download: nothing to do
    assert again == read_json(out / "prepare.json")
    assert (out / "train" / "metadata.jsonl").stat().st_mtime_ns == before
    # an unrelated folder in the way is not overwritten silently
    other = tmp_path / "other"
    other.mkdir()
    (other / "x.txt").write_text("mine")
    with pytest.raises(ValueError, match="overwrite"):
        prepare_dci(source=tmp_path / "dl", out=other, progress=False)
    prepare_dci(source=tmp_path / "dl", out=other, overwrite=True, progress=False)
    assert not (other / "x.txt").exists() and (other / "train" / "metadata.jsonl").is_file()


def test_prepare_dci_wrong_paths_say_what_to_download(tmp_path):
    from prh.data.prepare import prepare_dci

    with pytest.raises(ValueError, match="dci.tar.gz"):
        prepare_dci(source=tmp_path / "nowhere", out=tmp_path / "o", progress=False)
    src = _dci_download(tmp_path / "dl")
    (src / "photos" / "sa_3.jpg").unlink()
    with pytest.raises(ValueError, match="1 of 3 photos.*sa_000138.tar"):
        prepare_dci(source=src, out=tmp_path / "o", progress=False)
    assert not (tmp_path / "o").exists()


def _places_download(root: Path, n=5) -> tuple[Path, Path]:
    root.mkdir(parents=True)
    tar_path = root / "val_256.tar"
    with tarfile.open(tar_path, "w") as tar:
        for i in range(1, n + 1):
            data = _jpeg(i, (16, 16))
            info = tarfile.TarInfo(f"val_256/Places365_val_{i:08d}.jpg")
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    filelist = root / "places365_val.txt"
    filelist.write_text("".join(f"Places365_val_{i:08d}.jpg {(7 * i) % 365}\n" for i in range(1, n + 1)))
    return tar_path, filelist


def test_prepare_places_from_the_tar_with_labels(tmp_path):
    tar_path, filelist = _places_download(tmp_path / "dl")
    out = tmp_path / "data" / "places365" / "val_256"
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
    proc = subprocess.run([sys.executable, "-m", "prh.cli", "prepare-places", "--archive", str(tar_path),
                           "--filelist", str(filelist), "--out", str(out), "--no-progress"],
                          capture_output=True, text=True, env=env)
    assert proc.returncode == 0, proc.stderr
    recs = read_jsonl(out / "train" / "metadata.jsonl")
    assert [r["label"] for r in recs] == [7, 14, 21, 28, 35]
    assert sorted(p.name for p in (out / "train").glob("*.jpg")) == [r["file_name"] for r in recs]
    meta = materialize_hub_dataset(tmp_path / "mat", repo=str(out), label_column="label", n=3, seed=0, image_size=16)
    assert meta["count"] == 3 and meta["split_size"] == 5
    # second run: already prepared from the same archive
    assert subprocess.run([sys.executable, "-m", "prh.cli", "prepare-places", "--archive", str(tar_path),
                           "--filelist", str(filelist), "--out", str(out), "--no-progress"],
                          capture_output=True, text=True, env=env).returncode == 0


def test_prepare_places_errors(tmp_path):
    from prh.data.prepare import prepare_places

    with pytest.raises(ValueError, match="places2.csail.mit.edu"):
        prepare_places(archive=tmp_path / "val_256.tar", out=tmp_path / "o", progress=False)
    (tmp_path / "bad.tar").write_text("not a tar")
    with pytest.raises(ValueError, match="neither a tar"):
        prepare_places(archive=tmp_path / "bad.tar", out=tmp_path / "o", progress=False)
    tar_path, filelist = _places_download(tmp_path / "dl", n=3)
    filelist.write_text(filelist.read_text() + "Places365_val_00000009.jpg 1\n")
    with pytest.raises(ValueError, match="1 images of the filelist are not in archive"):
        prepare_places(archive=tar_path, filelist=filelist, out=tmp_path / "o", progress=False)
    assert not (tmp_path / "o").exists()


def test_snakemake_plans_the_prepare_rules_before_the_dataset(tmp_path):
    """`snakemake -n --config suite=paper` plans prepare_dci / prepare_places365_val from the
    download paths in params.yaml, and hub_dataset waits for the folders they build."""
    import re
    import shutil

    for folder in ("workflow", "profiles"):
        shutil.copytree(ROOT / folder, tmp_path / folder)
    for name in ("Snakefile", "params.yaml"):
        shutil.copy(ROOT / name, tmp_path / name)
    _dci_download(tmp_path / "downloads")  # the DCI download is there; Places' is not (the job will say so)
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"}
    proc = subprocess.run([sys.executable, "-m", "snakemake", "-n", "-p", "--config", "suite=paper", "--",
                           "results/data/dci/meta.json", "results/data/places365_val/meta.json"],
                          cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    log = proc.stdout + proc.stderr
    assert proc.returncode == 0, log[-4000:]
    assert re.search(r"prepare_dci\s+1", log) and re.search(r"prepare_places365_val\s+1", log)
    assert "prh prepare-dci --source ./downloads/densely_captioned_images --out data/dci" in log
    assert "input: data/dci/train/metadata.jsonl" in log
    assert "input: data/places365/val_256/train/metadata.jsonl" in log
