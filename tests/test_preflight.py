"""The paper suite's pre-flight (prh.preflight) lists every problem a run would meet hours later, in one
error, before any GPU job. The replay (tests/test_replay.py) runs it against the whole stand-in hub; here each check
on small real inputs: tiny local models, an offline datasets library, folders."""

from __future__ import annotations

import json

import pytest
from tiny_models import save_language_model, save_vision_zoo

from prh.errors import ConfigError
from prh.preflight import check_datasets, check_downloads, check_gated, check_models, model_families, preflight


def _models(tmp_path):
    return {
        "lm-s": {"repo": str(save_language_model("llama", tmp_path / "lm_s")), "modality": "language",
                 "family": "llama", "n_params": 1e6},
        "lm-l": {"repo": str(tmp_path / "lm_l_missing"), "modality": "language", "family": "llama", "n_params": 9e9},
        "gpt": {"repo": str(save_language_model("gpt2", tmp_path / "gpt")), "modality": "language", "family": "gpt2",
                "n_params": 2e6},
        "vit": {"repo": str(save_vision_zoo("vit", tmp_path / "vit")), "modality": "vision", "family": "vit",
                "n_params": 1e5},
    }


def test_one_batch_of_each_familys_smallest_model_and_the_spread_check(tmp_path):
    cfg = {"paper": {"models": _models(tmp_path)}, "cluster": {"gpu_memory_gb": 80}}
    names = list(cfg["paper"]["models"])
    assert model_families(cfg, names) == {"language:llama": "lm-s", "language:gpt2": "gpt", "vision:vit": "vit"}
    checked, problems = check_models(cfg, names, device="cpu", cards=0)
    assert problems == []
    assert {k: v for k, v in checked.items() if k != "spread"} == model_families(cfg, names)
    # lm-l (9e9 parameters) would not need two 80 GB cards; at 10 GB cards it does, and nothing is spread on a CPU
    small = {**cfg, "cluster": {"gpu_memory_gb": 10}}
    checked, problems = check_models(small, names, device="cpu", cards=0)
    assert checked["spread"].startswith("not run: lm-l needs several cards") and problems == []
    # a family whose smallest model does not load is a problem to list, with its name
    cfg["paper"]["models"]["gpt"]["repo"] = str(tmp_path / "nowhere")
    checked, problems = check_models(cfg, names, device="cpu", cards=0)
    assert len(problems) == 1 and problems[0].startswith("gpt (language:gpt2): one batch failed")


def test_gated_repos_the_token_cannot_read_are_named_with_their_licence_page():
    cfg = {"paper": {"models": {"a": {"repo": "org/open", "revision": "main"}, "b": {"repo": "org/gated",
                                                                                   "revision": "main"},
                                "c": {"repo": "org/gated-ok", "revision": "main"}}}}
    manifest = {"models": [{"id": "org/gated", "gated": True}, {"id": "org/gated-ok", "gated": True}]}

    class Hub:  # the hub's answers for this token (no network here)
        def auth_check(self, repo, token=None):
            if repo == "org/gated":
                raise PermissionError("403: accept the conditions")

    checked, problems = check_gated(cfg, manifest, online=True, api=Hub())
    assert checked == ["org/gated", "org/gated-ok"]
    assert problems == ["org/gated: this token cannot read it (PermissionError); accept its licence at "
                        "https://huggingface.co/org/gated with the account of `hf auth login` / HF_TOKEN"]
    # offline, a gated repo must be in the cache: neither is here
    checked, problems = check_gated(cfg, manifest, online=False)
    assert len(problems) == 2 and all("not in the cache" in p for p in problems)


def test_datasets_that_do_not_load_their_first_row_are_listed(tmp_path):
    """Offline (the tests' HF_HUB_OFFLINE) a hub dataset that was never fetched cannot load: listed, with its key."""
    cfg = {"datasets": {"pairs": {"kind": "hub", "repo": "nobody/never-fetched", "revision": "main", "split": "train",
                                  "image_column": "image"},
                        "local": {"kind": "hub", "repo": "./data/dci", "split": "train"},
                        "shapes": {"kind": "shapes", "n": 10}}}
    checked, problems = check_datasets(cfg)
    assert checked == [] and len(problems) == 1
    assert problems[0].startswith("nobody/never-fetched (revision main, split train; datasets.pairs): its first row "
                                  "does not load")


def test_manual_downloads_built_or_present(tmp_path):
    cfg = {"datasets": {
        "places": {"kind": "hub", "repo": "./data/places", "prepare": {"source": "./downloads/val_256.tar",
                                                                      "filelist": "./downloads/list.txt"}},
        "dci": {"kind": "hub", "repo": "./data/dci", "prepare": {"source": "./downloads/dci"}}}}
    checked, problems = check_downloads(cfg, tmp_path)
    assert checked == ["places", "dci"] and len(problems) == 3
    (tmp_path / "data" / "dci").mkdir(parents=True)  # built already: its download is not needed
    (tmp_path / "downloads").mkdir()
    (tmp_path / "downloads" / "val_256.tar").write_bytes(b"x")
    checked, problems = check_downloads(cfg, tmp_path)
    assert problems == ["datasets.places: neither its folder ./data/places nor its download ./downloads/list.txt "
                        "(prepare.filelist) exists; docs/paper_suite.md says where to download it"]


def test_preflight_lists_every_problem_in_one_error_or_writes_its_report(tmp_path, monkeypatch, repo_root):
    monkeypatch.chdir(tmp_path)
    models = _models(tmp_path)
    del models["lm-l"]
    cfg = {"paper": {"models": models}, "cluster": {"gpu_memory_gb": 80},
           "datasets": {"dci": {"kind": "hub", "repo": "./data/dci", "prepare": {"source": "./downloads/dci"}},
                        "pairs": {"kind": "hub", "repo": "nobody/never-fetched", "revision": "main"}}}
    manifest = repo_root / "workflow" / "resources" / "hub_manifest.yaml"
    out = tmp_path / "preflight.json"
    with pytest.raises(ConfigError, match=r"pre-flight found 2 problems; no GPU job has started") as err:
        preflight(cfg, out=out, manifest_path=manifest, models=list(models), device="cpu")
    assert "never-fetched" in str(err.value) and "./downloads/dci" in str(err.value) and not out.exists()
    del cfg["datasets"]
    report = preflight(cfg, out=out, manifest_path=manifest, models=list(models), device="cpu")
    assert json.loads(out.read_text()) == report and report["online"] is False
    assert set(report["models"]) == {"language:llama", "language:gpt2", "vision:vit", "spread"}
