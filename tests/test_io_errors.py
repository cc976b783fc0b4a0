"""A corrupt artifact is named with its remedy, and what a killed job leaves
inside DVC-tracked folders is ignored by DVC."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import torch

from prh.errors import CorruptFileError
from prh.evaluation.probe_splits import load_probe_layers
from prh.io import load_features, read_json, read_jsonl, save_features, write_json, write_jsonl
from prh.studies.metric_agreement.locality import n_items_of


def truncate(path: Path, keep: float = 0.5) -> None:
    data = path.read_bytes()
    path.write_bytes(data[: int(len(data) * keep)])


def test_truncated_json_and_jsonl_name_the_file_and_the_remedy(tmp_path):
    write_json(tmp_path / "m.json", {"a": list(range(50))})
    write_jsonl(tmp_path / "c.jsonl", [{"id": i, "text": "x" * 40} for i in range(5)])
    for path, read in ((tmp_path / "m.json", read_json), (tmp_path / "c.jsonl", read_jsonl)):
        truncate(path, 0.7)
        with pytest.raises(CorruptFileError, match=rf"{path}.*delete it and rerun `snakemake {path}`.*dvc checkout"):
            read(path)


@pytest.mark.parametrize("reader", [load_features, n_items_of, lambda p: load_probe_layers(p, "last")],
                         ids=["load_features", "header", "probe_layers"])
def test_truncated_features_name_the_file(tmp_path, reader):
    path = tmp_path / "features" / "m.safetensors"
    save_features(path, torch.randn(8, 2, 4), {"model": "m"})
    assert load_features(path).shape == (8, 2, 4)
    truncate(path, 0.3)
    with pytest.raises(CorruptFileError, match=rf"{path} is not a readable safetensors features file"):
        reader(path)


def test_dvc_ignores_what_killed_jobs_leave(repo_root):
    leftovers = ["results/models/.gpt2_s_100.k3j2x9", "results/features/shapes_eval/m.safetensors.partial",
                 "results/features/shapes_eval/.m.safetensors.a1b2c3.tmp"]
    kept = ["results/features/shapes_eval/m.safetensors", "results/models/gpt2_s_100/config.json"]
    dvc = Path(sys.executable).with_name("dvc")
    out = subprocess.run([str(dvc), "check-ignore", *leftovers, *kept], cwd=repo_root, capture_output=True, text=True)
    assert sorted(out.stdout.split()) == sorted(leftovers), out.stdout + out.stderr
