"""The stand-in hub datasets (``prh.standin.datasets``) and downloads (``prh.standin.downloads``).

The stand-ins are built once into temporary caches; one subprocess then runs the project's real
loaders against them with the hub unreachable (``HF_HUB_OFFLINE=1``, ``HF_DATASETS_OFFLINE=1``,
``HF_HOME`` / ``HF_HUB_CACHE`` / ``HF_DATASETS_CACHE`` set before ``datasets`` is imported, which
reads them at import time) and reports what it found as JSON; each test checks one part of it:
``materialize_hub_dataset`` with params.yaml's arguments for representative datasets (parquet,
a named config, webdataset, carve, data_files), the columns of every stand-in against the manifest,
``prepare_dci`` / ``prepare_places`` on the stand-in downloads, and the openwebtext sample (a
streaming read of the prepared copy).
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import yaml

from prh.data.hub_datasets import carve_indices
from prh.standin.cache import STANDIN_NOTE
from prh.standin.datasets import (
    INT_CLASSES,
    MANIFEST,
    build_dataset_standins,
    build_download_standins,
    offline_config_id,
)

ROOT = Path(__file__).resolve().parents[1]
ROWS = 24
# one of each kind: parquet list[string] captions at a tag (wit), parquet class_label, a named config
# (svhn), a clip-benchmark webdataset split, a carved split, a carved split read through data_files
SAMPLE = ["wit_1024", "cifar10_phase", "svhn_phase", "vtab_caltech101_test", "vtab_sun397_train",
          "vtab_kitti_dist_test"]
DETERMINISM_ONLY = ["minhuh/prh", "svhn_phase", "vtab_kitti_dist_test", "paper.lm_score"]

OFFLINE_SCRIPT = r"""
import json, sys, traceback
import numpy as np

args = json.loads(sys.argv[1])
cfg, out = args["cfg"], {}

def attempt(fn):
    try:
        return fn()
    except Exception as e:  # reported, the test names it
        return {"error": f"{type(e).__name__}: {e}", "trace": traceback.format_exc()[-2000:]}

import datasets
from prh.data.hub_datasets import materialize_hub_dataset
from prh.data.hub_manifest import _feature_type

def materialize(name, repo=None):
    spec = {k: v for k, v in cfg["datasets"][name].items() if k not in ("kind", "prepare")}
    if repo:
        spec["repo"] = repo
    folder = f"results/data/{name}"
    meta = materialize_hub_dataset(folder, **spec)
    labels = np.load(f"{folder}/labels.npy")
    images = np.load(f"{folder}/images.npy", mmap_mode="r")
    captions = [json.loads(line) for line in open(f"{folder}/captions.jsonl")]
    return {"meta": meta, "labels": labels.tolist(), "images_shape": list(images.shape),
            "captions": [c["text"] for c in captions]}

out["materialize"] = {name: attempt(lambda name=name: materialize(name)) for name in args["sample"]}

def load_all(rec):
    kw = dict(name=rec["config"], revision=rec["revision"], data_files=rec["data_files"])
    res = {}
    for split in rec["splits"]:
        ds = datasets.load_dataset(rec["repo_id"], split=split, **kw)
        res[split] = {"rows": len(ds), "features": {k: _feature_type(v) for k, v in ds.features.items()}}
    return res

out["load"] = {r["repo_id"]: attempt(lambda r=r: load_all(r)) for r in args["records"]}

from prh.data.prepare import prepare_dci, prepare_places

def prepared(name):
    prep = cfg["datasets"][name]["prepare"]
    if prep["command"] == "dci":
        stamp = prepare_dci(source=prep["source"], out=cfg["datasets"][name]["repo"], progress=False)
    else:
        stamp = prepare_places(archive=prep["source"], filelist=prep.get("filelist"),
                               out=cfg["datasets"][name]["repo"], progress=False)
    return {"stamp": stamp, **materialize(name)}

out["downloads"] = {name: attempt(lambda name=name: prepared(name)) for name in ("dci", "places365_val")}

from prh.evaluation.lm_score import sample_openwebtext

from prh.config import schema_defaults

lm = {**schema_defaults("paper")["lm_score"], **cfg["paper"]["lm_score"]}  # params.yaml leaves its defaults out
lm_kw = dict(repo=lm["repo"], revision=lm["revision"], split=lm["split"], text_column=lm["text_column"],
             chunk_chars=lm["chunk_chars"], shuffle_buffer=lm["shuffle_buffer"], seed=lm["seed"])
out["owt"] = attempt(lambda: sample_openwebtext("results/data/lm_sample", n_bytes=4000, **lm_kw))
out["owt_params"] = attempt(lambda: sample_openwebtext("results/data/lm_sample_full", n_bytes=lm["n_bytes"], **lm_kw))

from prh.models.hub_cache import missing_hub_items

out["missing"] = attempt(lambda: [line for line in missing_hub_items(cfg) if line.lstrip().startswith("dataset")])
print("RESULT " + json.dumps(out))
"""


def _params() -> dict:
    return yaml.safe_load((ROOT / "params.yaml").read_text())


def _manifest_index() -> dict:
    manifest = yaml.safe_load(MANIFEST.read_text())
    return {(d["id"], d.get("config")): d for d in manifest["datasets"]}


def _tree(folder: Path) -> dict[str, str]:
    """Relative path -> sha256 of every file under ``folder``."""
    return {str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(folder.rglob("*")) if p.is_file()}


def _offline_env(base: Path) -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("HF_", "HUGGINGFACE"))}
    env.update(HF_HOME=str(base / "home"), HF_HUB_CACHE=str(base / "hub"), HF_DATASETS_CACHE=str(base / "ds"),
               HF_HUB_OFFLINE="1", HF_DATASETS_OFFLINE="1", TRANSFORMERS_OFFLINE="1", HF_HUB_DISABLE_TELEMETRY="1")
    return env


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    base = tmp_path_factory.mktemp("standin")
    cfg = _params()
    start = time.perf_counter()
    records = build_dataset_standins(cfg, base / "hub", base / "ds", rows=ROWS)
    downloads = build_download_standins(cfg, base / "root", rows=ROWS)
    seconds = time.perf_counter() - start
    print(f"stand-in build: {len(records)} hub datasets + {len(downloads)} downloads in {seconds:.1f} s")
    return {"base": base, "cfg": cfg, "records": records, "downloads": downloads, "seconds": seconds}


@pytest.fixture(scope="module")
def offline(built):
    args = {"cfg": built["cfg"], "sample": SAMPLE, "records": [
        {k: r[k] for k in ("repo_id", "revision", "config", "data_files", "splits")} for r in built["records"]]}
    proc = subprocess.run([sys.executable, "-c", OFFLINE_SCRIPT, json.dumps(args)], cwd=built["base"] / "root",
                          env=_offline_env(built["base"]), capture_output=True, text=True, timeout=600, check=False)
    line = next((x for x in proc.stdout.splitlines() if x.startswith("RESULT ")), None)
    assert line is not None, f"offline script failed (rc {proc.returncode}):\n{proc.stderr[-4000:]}"
    return json.loads(line[len("RESULT "):])


def _ok(result: dict, what: str) -> dict:
    assert "error" not in result, f"{what}: {result['error']}\n{result.get('trace', '')}"
    return result


def _class_count(kind: str) -> int:
    return int(kind[12:-1]) if kind.startswith("class_label(") else INT_CLASSES


def test_every_hub_dataset_has_a_standin_with_a_card(built):
    from prh.pin import hub_entries

    repos = {e["repo_id"] for e in hub_entries(built["cfg"], include_unset=True) if e["kind"] == "dataset"}
    assert {r["repo_id"] for r in built["records"]} == repos
    assert built["seconds"] < 60, f"the build took {built['seconds']:.1f} s"
    for r in built["records"]:
        assert STANDIN_NOTE in (Path(r["snapshot"]) / "README.md").read_text()
        assert (Path(r["prepared"]) / "dataset_info.json").is_file()
        ref = Path(r["snapshot"]).parents[1] / "refs" / (r["revision"] or "main")
        assert ref.read_text() == r["commit"] == Path(r["prepared"]).name


@pytest.mark.parametrize("name", SAMPLE)
def test_materialize_with_params_arguments(offline, built, name):
    got = _ok(offline["materialize"][name], name)
    spec = built["cfg"]["datasets"][name]
    carve = spec.get("carve")
    total = len(carve_indices(ROWS, parts=carve["parts"], part=spec["split"], seed=carve["seed"])) if carve else ROWS
    count = min(total, spec["n"] or total)
    assert got["meta"]["count"] == count and got["images_shape"] == [count, spec["image_size"], spec["image_size"], 3]
    assert len(got["captions"]) == count and all(got["captions"])
    labels = np.array(got["labels"])
    if spec.get("label_column"):
        entry = _manifest_index()[(spec["repo"], spec.get("config"))]
        assert 0 <= labels.min() and labels.max() < _class_count(entry["features"][spec["label_column"]])
    else:
        assert (labels == -1).all()


def test_columns_and_rows_match_the_manifest(offline, built):
    index = _manifest_index()
    lm = built["cfg"]["paper"]["lm_score"]
    for r in built["records"]:
        loaded = _ok(offline["load"][r["repo_id"]], r["repo_id"])
        expected = index[(r["repo_id"], r["config"])]["features"] or {lm["text_column"]: "string"}
        for split, got in loaded.items():
            assert got["features"] == expected, (r["repo_id"], split)
            assert got["rows"] == ROWS, (r["repo_id"], split)


def test_data_files_and_config_folders(built):
    kitti = next(r for r in built["records"] if r["data_files"])
    # offline load_dataset(data_files=...) reads <config>-<hash of the argument>, not what an online run names
    assert Path(kitti["prepared"]).parents[1].name == offline_config_id(None, kitti["data_files"])
    assert offline_config_id(None, kitti["data_files"]).startswith("default-")
    svhn = next(r for r in built["records"] if r["config"])
    assert Path(svhn["prepared"]).parents[1].name == svhn["config"] == "cropped_digits"
    # kitti's one tar is outnumbered by nshards.txt, as on the hub: hence params' data_files
    assert sorted(p.name for p in (Path(kitti["snapshot"]) / "test").iterdir()) == ["0.tar", "nshards.txt"]


def test_downloads_prepare_and_materialize(offline, built):
    dci = _ok(offline["downloads"]["dci"], "dci")
    assert dci["stamp"]["count"] == ROWS == dci["meta"]["count"]
    assert all("\n" in text for text in dci["captions"])  # dense captions: short caption, then extra caption
    places = _ok(offline["downloads"]["places365_val"], "places365_val")
    assert places["stamp"]["count"] == ROWS == places["meta"]["count"] and places["stamp"]["labelled"]
    root = built["base"] / "root" / "downloads"
    assert STANDIN_NOTE in (root / "densely_captioned_images" / "STANDIN.txt").read_text()
    assert STANDIN_NOTE in (root / "STANDIN.txt").read_text()


def test_openwebtext_streams_from_the_prepared_copy(offline):
    got = _ok(offline["owt"], "sample_openwebtext")
    assert got["n_bytes"] >= 4000 and got["n_texts"] >= 2
    # params' 16 MB sample is larger than any stand-in corpus: it fails with the function's own message
    assert "holds only" in offline["owt_params"]["error"]


def test_cache_check_finds_every_hub_dataset(offline):
    assert offline["missing"] == [], offline["missing"]  # a list of missing items, or the error dict


def test_builds_are_identical(built, tmp_path):
    cfg = built["cfg"]
    first = build_dataset_standins(cfg, tmp_path / "hub", tmp_path / "ds", rows=ROWS, only=DETERMINISM_ONLY)
    trees = [_tree(tmp_path / "hub"), _tree(tmp_path / "ds")]
    again = build_dataset_standins(cfg, tmp_path / "hub", tmp_path / "ds", rows=ROWS, only=DETERMINISM_ONLY)
    assert [_tree(tmp_path / "hub"), _tree(tmp_path / "ds")] == trees and again == first
    # the snapshots do not depend on where, or with which others, they were built
    for r in first:
        full = next(b for b in built["records"] if b["repo_id"] == r["repo_id"])
        assert _tree(Path(r["snapshot"])) == _tree(Path(full["snapshot"]))
    build_download_standins(cfg, tmp_path / "a", rows=ROWS)
    build_download_standins(cfg, tmp_path / "b", rows=ROWS)
    assert _tree(tmp_path / "a") == _tree(tmp_path / "b") != {}


def test_errors_name_the_bad_thing(built, tmp_path):
    cfg = built["cfg"]
    with pytest.raises(ValueError, match="only=.*nope"):
        build_dataset_standins(cfg, tmp_path / "h", tmp_path / "d", only=["nope/nope"])
    with pytest.raises(ValueError, match="rows=1"):
        build_dataset_standins(cfg, tmp_path / "h", tmp_path / "d", rows=1)
    manifest = yaml.safe_load(MANIFEST.read_text())
    manifest["datasets"] = [d for d in manifest["datasets"] if d["id"] != "uoft-cs/cifar10"]
    with pytest.raises(ValueError, match="uoft-cs/cifar10.*not in the manifest"):
        build_dataset_standins(cfg, tmp_path / "h", tmp_path / "d", manifest=manifest)
    bad = {"datasets": {"x": {"prepare": {"command": "dci", "source": "/abs/densely_captioned_images"}}}}
    with pytest.raises(ValueError, match="prepare.source.*absolute"):
        build_download_standins(bad, tmp_path)


def test_standin_hub_refuses_a_real_cache(tmp_path):
    """Stand-ins move refs/main of the real repo ids: written into a real HF_HOME they would be loaded
    instead of the real weights, silently. A non-empty home without the stand-in summary is refused."""
    real = tmp_path / "hf_home"
    (real / "hub" / "models--gpt2" / "refs").mkdir(parents=True)
    (real / "hub" / "models--gpt2" / "refs" / "main").write_text("a" * 40)
    r = subprocess.run([sys.executable, "-m", "prh.cli", "standin-hub", "--hf-home", str(real)],
                       capture_output=True, text=True, timeout=600, cwd=Path(__file__).resolve().parents[1])
    assert r.returncode != 0 and "looks like a real Hugging Face cache" in r.stderr
    assert (real / "hub" / "models--gpt2" / "refs" / "main").read_text() == "a" * 40
    assert not (real / "standin-hub.json").exists()
