"""Fig 4's downstream scores by lm-evaluation-harness: `prh eval-harness` runs the harness's own
HellaSwag and GSM8K tasks, offline, on a tiny saved LM and the stand-in task data; `prh merge-harness` makes the
CSV `prh run-downstream` reads, and refuses results of mixed settings."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from tiny_models import save_language_model

from prh.evaluation.harness import merge_harness, task_yaml
from prh.io import write_json
from prh.standin.datasets import build_dataset_standins
from prh.studies.downstream.run import read_published_scores

ROOT = Path(__file__).resolve().parents[1]
PRH = Path(sys.executable).parent / "prh"
LIMIT = 4


def _params() -> dict:
    return yaml.safe_load((ROOT / "params.yaml").read_text())


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    """One harness run: a tiny BLOOM saved locally, the stand-ins of the two task datasets, no network."""
    base = tmp_path_factory.mktemp("harness")
    cfg = _params()
    build_dataset_standins(cfg, base / "hub", base / "ds", rows=24, only=["Rowan/hellaswag", "openai/gsm8k"])
    model = save_language_model("bloom", base / "bloom")  # ALiBi: no position limit below the harness's 2,048
    env = {k: v for k, v in os.environ.items() if not k.startswith(("HF_", "HUGGINGFACE"))}
    env.update(HF_HOME=str(base / "home"), HF_HUB_CACHE=str(base / "hub"), HF_DATASETS_CACHE=str(base / "ds"),
               HF_HUB_OFFLINE="1", HF_DATASETS_OFFLINE="1", TRANSFORMERS_OFFLINE="1")
    tasks = cfg["downstream"]["harness"]["tasks"]
    out = base / "out" / "tiny.json"
    proc = subprocess.run([str(PRH), "eval-harness", "--model", str(model), "--name", "tiny", "--tasks", json.dumps(tasks),
                           "--limit", str(LIMIT), "--batch-size", "4", "--device", "cpu", "--out", str(out)],
                          env=env, cwd=base, capture_output=True, text=True, timeout=1800)  # 94 s under load (10x)
    assert proc.returncode == 0, proc.stderr[-4000:]
    return {"base": base, "out": out, "tasks": tasks, "result": json.loads(out.read_text()), "log": proc.stdout}


def test_the_harness_scores_each_task_with_the_setting_of_params(run):
    r, tasks = run["result"], run["tasks"]
    assert r["model"] == "tiny" and r["limit"] == LIMIT and r["n_params"] > 0
    assert set(r["tasks"]) == {"hellaswag", "gsm8k"}
    for task, spec in tasks.items():
        s = r["tasks"][task]
        used = s["harness_config"]
        # what the harness actually ran: our shots, the pinned data (the task's own repo), LIMIT of the 24 rows
        assert used["num_fewshot"] == spec["num_fewshot"]
        assert used["dataset_path"] == spec["repo"] and used["dataset_kwargs"] == {"revision": spec["revision"]}
        assert s["n_items"] == LIMIT and s["n_available"] == 24
        # a mean over LIMIT items, in percent
        assert 0 <= s["score"] <= 100 and (s["score"] * LIMIT / 100) == pytest.approx(round(s["score"] * LIMIT / 100))
    assert r["tasks"]["hellaswag"]["setting"] == "10-shot acc_norm"
    assert r["tasks"]["gsm8k"]["setting"] == "5-shot exact_match (strict-match)"
    assert r["tasks"]["gsm8k"]["harness_config"]["dataset_name"] == "main"
    assert r["tasks"]["gsm8k"]["harness_config"]["test_split"] == "test"
    assert r["tasks"]["hellaswag"]["harness_config"]["validation_split"] == "validation"
    assert "tiny: hellaswag 10-shot acc_norm" in run["log"]


def test_merge_writes_the_csv_run_downstream_reads(run, tmp_path):
    other = json.loads(run["out"].read_text())
    other["model"] = "tiny2"
    other["tasks"]["hellaswag"]["score"] = 75.0
    write_json(tmp_path / "tiny2.json", other)
    merge_harness([run["out"], tmp_path / "tiny2.json"], tmp_path / "scores.csv")
    rows = read_published_scores(tmp_path / "scores.csv")
    assert set(rows) == {"tiny", "tiny2"}
    assert rows["tiny2"]["hellaswag"] == 75.0
    assert rows["tiny"]["gsm8k"] == pytest.approx(run["result"]["tasks"]["gsm8k"]["score"])
    assert rows["tiny"]["origin"] == "lm-eval-harness"
    assert rows["tiny"]["hellaswag_setting"] == "10-shot acc_norm"
    assert f"first {LIMIT} items only" in rows["tiny"]["source"] and "lm-evaluation-harness" in rows["tiny"]["source"]


def _result(model: str, shots: int = 10, limit=None, score=50.0) -> dict:
    return {"model": model, "source": model, "revision": "a" * 40, "limit": limit, "harness_version": "x",
            "dtype": "bfloat16", "tasks": {"hellaswag": {"score": score, "setting": f"{shots}-shot acc_norm",
                                                         "repo": "Rowan/hellaswag", "revision": "b" * 40}}}


def test_merge_refuses_mixed_settings_duplicates_and_foreign_files(tmp_path):
    paths = []
    for name, shots, limit in (("a", 10, None), ("b", 0, None), ("c", 10, 4)):
        write_json(tmp_path / f"{name}.json", _result(name, shots, limit))
        paths.append(tmp_path / f"{name}.json")
    with pytest.raises(ValueError, match="3 different settings; Fig 4 needs one"):
        merge_harness(paths, tmp_path / "out.csv")
    with pytest.raises(ValueError, match=r"models \['a'\] appear in several files"):
        merge_harness([paths[0], paths[0]], tmp_path / "out.csv")
    write_json(tmp_path / "bad.json", {"model": "x", "scores": {}})
    with pytest.raises(ValueError, match="bad.json: not a `prh eval-harness` result"):
        merge_harness([tmp_path / "bad.json"], tmp_path / "out.csv")
    assert not (tmp_path / "out.csv").exists()  # nothing half-written
    # a missing score cell is empty (left out of that panel), not zero
    one = _result("a")
    merge_harness([_write(tmp_path / "one.json", one)], tmp_path / "one.csv")
    assert read_published_scores(tmp_path / "one.csv")["a"]["gsm8k"] is None


def _write(path: Path, obj: dict) -> Path:
    write_json(path, obj)
    return path


def test_task_files_include_the_harness_task_and_check_the_name(tmp_path):
    spec = {"repo": "Rowan/hellaswag", "revision": "c" * 40, "num_fewshot": 10, "metric": "acc_norm", "filter": "none"}
    text = task_yaml("hellaswag", spec, tmp_path).read_text()
    assert "tasks/hellaswag/hellaswag.yaml" in text and "num_fewshot: 10" in text and "c" * 40 in text
    with pytest.raises(ValueError, match="task 'nope' is not one of its tasks"):
        task_yaml("nope", spec, tmp_path)
