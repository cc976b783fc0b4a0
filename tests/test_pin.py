"""`prh pin-revisions`: branch/tag revisions -> commit SHAs, by exact text substitution.

The hub is unreachable here, so the hub client is passed in: ``FakeHub`` answers
``model_info`` / ``dataset_info`` like ``huggingface_hub.HfApi`` does (an object with ``.sha``).
"""

from __future__ import annotations

import hashlib
import shutil
from pathlib import Path
from types import SimpleNamespace

import pytest
import yaml

from prh.errors import ConfigError
from prh.pin import check_pinned, hub_entries, pin_revisions, unpinned_entries

ROOT = Path(__file__).resolve().parents[1]

PARAMS = """\
# a comment that must survive
datasets:
  wit: {kind: hub, repo: minhuh/prh, revision: wit_1024, split: train}   # trailing comment
  wit_again: {kind: hub, repo: minhuh/prh, revision: wit_1024, split: test}
  local: {kind: hub, repo: ./data/dci, revision: null, split: train}
  shapes: {kind: shapes, n: 10, seed: 1}
paper:
  models:
    vit-s: {repo: vit_small_patch14_dinov2.lvd142m, revision: main, modality: vision, n_params: 1}
    bloom: {repo: bigscience/bloomz-560m, revision: "main", modality: language, n_params: 1}
    done: {repo: huggyllama/llama-7b, revision: %s, modality: language, n_params: 1}
  lm_score:
    repo: Skylion007/openwebtext   # the corpus
    split: train
    revision: main   # pin me
    seed: 0
bridge:
  offline:
    config:
      source: minilm            # packaged: nothing to pin
  paper:
    config:
      source: gpt2
      revision: main            # the bridged hub LM
      patch_size: 4
""" % ("a" * 40)


def sha(kind, repo, rev):
    return hashlib.sha1(f"{kind}:{repo}@{rev}".encode()).hexdigest()


class FakeHub:
    """Answers like HfApi: ``model_info(repo_id, revision=...)`` -> object with ``.sha``."""

    def __init__(self, missing=()):
        self.calls, self.missing = [], set(missing)

    def _info(self, kind, repo_id, revision=None):
        self.calls.append((kind, repo_id, revision))
        if repo_id in self.missing:
            raise FileNotFoundError(f"404 Client Error: Repository Not Found for url: .../{repo_id}")
        return SimpleNamespace(sha=sha(kind, repo_id, revision), id=repo_id)

    def model_info(self, repo_id, revision=None):
        return self._info("model", repo_id, revision)

    def dataset_info(self, repo_id, revision=None):
        return self._info("dataset", repo_id, revision)


def test_pins_every_hub_entry_and_keeps_the_rest(tmp_path):
    p = tmp_path / "params.yaml"
    p.write_text(PARAMS)
    hub = FakeHub()
    pin_revisions(p, api=hub)
    new = p.read_text()
    cfg = yaml.safe_load(new)
    assert cfg["datasets"]["wit"]["revision"] == sha("dataset", "minhuh/prh", "wit_1024")
    assert cfg["datasets"]["wit_again"]["revision"] == cfg["datasets"]["wit"]["revision"]
    assert cfg["paper"]["models"]["vit-s"]["revision"] == sha("model", "timm/vit_small_patch14_dinov2.lvd142m", "main")
    assert cfg["paper"]["models"]["bloom"]["revision"] == sha("model", "bigscience/bloomz-560m", "main")
    assert cfg["paper"]["models"]["done"]["revision"] == "a" * 40
    assert cfg["paper"]["lm_score"]["revision"] == sha("dataset", "Skylion007/openwebtext", "main")
    assert cfg["datasets"]["local"]["revision"] is None
    # one query per distinct (repo, revision); SHAs and local folders are not queried
    assert sorted(hub.calls) == sorted([
        ("dataset", "minhuh/prh", "wit_1024"),
        ("model", "timm/vit_small_patch14_dinov2.lvd142m", "main"),
        ("model", "bigscience/bloomz-560m", "main"),
        ("dataset", "Skylion007/openwebtext", "main"),
        ("model", "gpt2", "main"),
    ])
    # only revision values changed: comments, quotes and layout are as they were
    old_lines, new_lines = PARAMS.splitlines(), new.splitlines()
    assert len(old_lines) == len(new_lines)
    changed = [(a, b) for a, b in zip(old_lines, new_lines) if a != b]
    assert len(changed) == 6
    for a, b in changed:
        assert "revision:" in a and a.split("revision:")[0] == b.split("revision:")[0]
    assert new_lines[0] == "# a comment that must survive"
    assert new_lines[2].endswith("}   # trailing comment")
    assert 'revision: "' in new_lines[9]  # the quoted value stays quoted
    assert new_lines[14].endswith("   # pin me")
    # pinned params are a fixed point: a second run asks nothing and changes nothing
    hub2 = FakeHub()
    pin_revisions(p, api=hub2)
    assert p.read_text() == new and hub2.calls == []


def test_dry_run_writes_nothing(tmp_path):
    p = tmp_path / "params.yaml"
    p.write_text(PARAMS)
    entries = pin_revisions(p, api=FakeHub(), dry_run=True)
    assert p.read_text() == PARAMS
    assert {e["key"]: e["sha"] for e in entries}["paper.models.bloom"] == sha("model", "bigscience/bloomz-560m", "main")


def test_unresolvable_repo_names_it_and_writes_nothing(tmp_path):
    p = tmp_path / "params.yaml"
    p.write_text(PARAMS)
    with pytest.raises(ValueError, match=r"paper\.models\.bloom: model 'bigscience/bloomz-560m' revision 'main'"):
        pin_revisions(p, api=FakeHub(missing={"bigscience/bloomz-560m"}))
    assert p.read_text() == PARAMS


def test_the_real_params_file(tmp_path):
    """Every hub entry of the project's params.yaml is found and rewritten; nothing else moves."""
    p = tmp_path / "params.yaml"
    shutil.copy(ROOT / "params.yaml", p)
    old = yaml.safe_load(p.read_text())
    entries = pin_revisions(p, api=FakeHub())
    new = yaml.safe_load(p.read_text())
    models = {m: s for m, s in old["paper"]["models"].items() if s.get("source", "hub") == "hub"}
    assert sum(e["key"].startswith("paper.models.") for e in entries) == len(models) >= 40
    for name, spec in models.items():
        repo_id = spec["repo"] if "/" in spec["repo"] else "timm/" + spec["repo"]
        assert new["paper"]["models"][name] == {**spec, "revision": sha("model", repo_id, spec["revision"])}
    for name, spec in old["paper"]["models"].items():  # a plain-URL or seeded checkpoint: no revision to pin
        if name not in models:
            assert new["paper"]["models"][name] == spec and "revision" not in spec
    hub_sets = [e for e in hub_entries(old) if e["key"].startswith("datasets.")]
    assert any(e["repo"] == "minhuh/prh" for e in hub_sets)
    for e in hub_sets:
        name = e["key"].split(".", 1)[1]
        assert new["datasets"][name]["revision"] == sha("dataset", e["repo_id"], e["revision"])
    bridge = old["bridge"]["paper"]["config"]
    assert new["bridge"]["paper"]["config"] == {**bridge, "revision": sha("model", bridge["source"], bridge["revision"])}
    tasks = old["downstream"]["harness"]["tasks"]
    for task, spec in tasks.items():  # Fig 4's harness task data
        assert new["downstream"]["harness"]["tasks"][task] == {**spec, "revision": sha("dataset", spec["repo"],
                                                                                       spec["revision"])}
    assert check_pinned(new) is new  # every hub item the paper suite loads is pinned now
    new["bridge"]["paper"]["config"] = bridge
    new["downstream"]["harness"]["tasks"] = tasks
    strip = lambda c: {k: v for k, v in c.items() if k not in ("paper", "datasets")}  # noqa: E731
    assert strip(new) == strip(old)


def test_unreachable_hub_stops_at_the_first_query(tmp_path):
    class Offline(FakeHub):
        def _info(self, kind, repo_id, revision=None):
            self.calls.append((kind, repo_id, revision))
            raise ConnectionError("Cannot reach https://huggingface.co: offline mode is enabled")

    p = tmp_path / "params.yaml"
    p.write_text(PARAMS)
    hub = Offline()
    with pytest.raises(ValueError, match="the hub is unreachable"):
        pin_revisions(p, api=hub)
    assert len(hub.calls) == 1 and p.read_text() == PARAMS


# ---------------------------------------------------------------- the paper suite refuses unpinned revisions


def test_check_pinned_lists_every_unpinned_item_and_the_command(tmp_path):
    cfg = yaml.safe_load(PARAMS)
    cfg["datasets"]["no_rev"] = {"kind": "hub", "repo": "org/data", "revision": None, "split": "train"}
    keys = {e["key"] for e in unpinned_entries(cfg)}
    assert keys == {"datasets.wit", "datasets.wit_again", "datasets.no_rev", "paper.models.vit-s",
                    "paper.models.bloom", "paper.lm_score", "bridge.paper.config"}
    with pytest.raises(ConfigError) as err:
        check_pinned(cfg)
    msg = str(err.value)
    assert "7 hub items" in msg
    for line in ("datasets.wit: dataset minhuh/prh at revision 'wit_1024'",
                 "paper.models.vit-s: model timm/vit_small_patch14_dinov2.lvd142m at revision 'main'",
                 "paper.lm_score: dataset Skylion007/openwebtext at revision 'main'",
                 "bridge.paper.config: model gpt2 at revision 'main'",
                 "datasets.no_rev: dataset org/data at revision None"):
        assert line in msg, line
    assert "`prh pin-revisions params.yaml`" in msg and "allow_unpinned: true" in msg
    assert "paper.models.done" not in msg and "datasets.local" not in msg  # a SHA; a local folder
    # the opt-out runs with the branches as they are
    assert check_pinned({**cfg, "allow_unpinned": True})["allow_unpinned"] is True


def test_pinned_params_pass_the_check(tmp_path):
    p = tmp_path / "params.yaml"
    p.write_text(PARAMS)
    with pytest.raises(ConfigError):
        check_pinned(yaml.safe_load(PARAMS))
    pin_revisions(p, api=FakeHub())
    cfg = yaml.safe_load(p.read_text())
    assert unpinned_entries(cfg) == [] and check_pinned(cfg) is cfg


@pytest.mark.parametrize("revision", ["A" * 40, "a" * 39, "a" * 41, "g" * 40, "v1.0"])
def test_only_a_40_hex_lowercase_commit_counts_as_pinned(revision):
    cfg = {"paper": {"models": {"m": {"repo": "org/m", "revision": revision, "modality": "language"}}}}
    assert [e["key"] for e in unpinned_entries(cfg)] == ["paper.models.m"]


def test_harness_task_data_is_pinned_like_any_dataset(tmp_path):
    """The datasets lm-evaluation-harness reads for Fig 4 are hub items too: pinned, checked, stood in."""
    from prh.pin import entry_spec, entry_splits, hub_entries

    p = tmp_path / "params.yaml"
    p.write_text("downstream:\n  harness:\n    tasks:\n"
                 "      hellaswag: {repo: Rowan/hellaswag, revision: main, num_fewshot: 10, metric: acc_norm, filter: none}\n"
                 "      gsm8k: {repo: openai/gsm8k, config: main, revision: main, num_fewshot: 5}   # keep me\n")
    cfg = yaml.safe_load(p.read_text())
    entries = {e["key"]: e for e in hub_entries(cfg)}
    assert set(entries) == {"downstream.harness.tasks.hellaswag", "downstream.harness.tasks.gsm8k"}
    assert entry_spec(cfg, entries["downstream.harness.tasks.gsm8k"])["config"] == "main"
    assert entry_splits(cfg, entries["downstream.harness.tasks.hellaswag"]) == ["train", "validation"]
    assert entry_splits(cfg, entries["downstream.harness.tasks.gsm8k"]) == ["train", "test"]
    hub = FakeHub()
    pin_revisions(p, api=hub)
    new = yaml.safe_load(p.read_text())["downstream"]["harness"]["tasks"]
    assert new["hellaswag"]["revision"] == sha("dataset", "Rowan/hellaswag", "main")
    assert new["gsm8k"]["revision"] == sha("dataset", "openai/gsm8k", "main")
    assert p.read_text().splitlines()[-1].endswith("}   # keep me")
