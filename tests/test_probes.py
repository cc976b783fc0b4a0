"""Linear probes: splits, accuracy on informative vs uninformative features, chance, layer choice, the CLI."""

from __future__ import annotations

import json

import numpy as np
import pytest

from prh.experiments.probes import main, probe_features, probe_task, run_probes, split_indices
from prh.io import save_features

CS = (0.1, 1.0)


def _informative(labels: np.ndarray, *, k: int, d: int = 8, noise: float = 0.3, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    x = rng.normal(scale=noise, size=(len(labels), d))
    x[np.arange(len(labels)), labels % d] += 3.0
    return x.astype(np.float32)


def test_split_is_a_seeded_partition():
    s = split_indices(100, seed=3)
    assert sorted(np.concatenate([s["train"], s["val"], s["test"]]).tolist()) == list(range(100))
    assert (len(s["train"]), len(s["val"]), len(s["test"])) == (60, 20, 20)
    again, other = split_indices(100, seed=3), split_indices(100, seed=4)
    assert all(np.array_equal(s[k], again[k]) for k in s)
    assert not np.array_equal(s["test"], other["test"])
    with pytest.raises(ValueError, match="val_fraction"):
        split_indices(100, val_fraction=0.5, test_fraction=0.5)


def test_informative_features_are_solved_and_noise_sits_at_chance():
    rng = np.random.default_rng(0)
    y = rng.integers(0, 3, 600)
    splits = split_indices(600, seed=0)
    good = probe_task(_informative(y, k=3), y, splits, cs=CS)
    noise = probe_task(rng.normal(size=(600, 1, 16)).astype(np.float32), y, splits, cs=CS)
    assert good["accuracy"] >= 0.97
    assert abs(noise["accuracy"] - noise["chance"]) < 0.12
    majority = np.bincount(y[np.concatenate([splits["train"], splits["val"]])]).argmax()
    assert good["chance"] == pytest.approx(np.mean(y[splits["test"]] == majority))
    assert good["uniform_chance"] == pytest.approx(1 / 3)
    assert good["C"] in CS and (good["n_train"], good["n_val"], good["n_test"]) == (360, 120, 120)


def test_best_layer_is_chosen_on_validation():
    rng = np.random.default_rng(1)
    y = rng.integers(0, 4, 400)
    feats = np.stack([_informative(y, k=4), rng.normal(size=(400, 8)).astype(np.float32)], axis=1)
    splits = split_indices(400, seed=0)
    best = probe_task(feats, y, splits, cs=CS, layer="best")
    last = probe_task(feats, y, splits, cs=CS, layer="last")
    assert best["layer"] == 0 and best["accuracy"] >= 0.95
    assert last["layer"] == 1 and last["accuracy"] < 0.5


def test_undefined_labels_are_left_out_and_means_are_means():
    rng = np.random.default_rng(2)
    y = rng.integers(0, 2, 300)
    y_partial = np.where(np.arange(300) % 3 == 0, -1, y)
    splits = split_indices(300, seed=0)
    out = probe_features(_informative(y, k=2), {"full": y, "partial": y_partial}, splits, cs=CS)
    r = out["tasks"]["partial"]
    assert r["n_train"] + r["n_val"] + r["n_test"] == int(np.sum(y_partial >= 0))
    assert out["mean_accuracy"] == pytest.approx(np.mean([t["accuracy"] for t in out["tasks"].values()]))


def test_bad_arguments_raise():
    y = np.zeros(50, dtype=int)
    splits = split_indices(50, seed=0)
    with pytest.raises(ValueError, match="layer"):
        probe_task(np.zeros((50, 2, 3)), y, splits, layer="first")
    with pytest.raises(ValueError, match="N x L x D"):
        probe_task(np.zeros((49, 2, 3)), y, splits)
    with pytest.raises(ValueError, match="cs"):
        probe_task(np.zeros((50, 2, 3)), y, splits, cs=())


@pytest.fixture(scope="module")
def shapes_vision(tmp_path_factory):
    from prh.data.shapes import build_dataset

    return build_dataset(tmp_path_factory.mktemp("shapes") / "vision", n=120, seed=5)


def test_cli_probes_shapes_tasks_oracle_beats_noise(shapes_vision, tmp_path):
    from prh.data.shapes import load_dataset
    from prh.data.tasks import TASKS, task_labels

    labels = task_labels(load_dataset(shapes_vision).scenes)
    # An "oracle" model whose features one-hot encode every task label; a "noise" model.
    oracle = np.concatenate([np.eye(TASKS[t].num_classes)[y] * 3 for t, y in labels.items()], axis=1)
    rng = np.random.default_rng(0)
    save_features(tmp_path / "oracle.safetensors", oracle[:, None, :].astype(np.float32), {"model": "oracle"})
    save_features(tmp_path / "noise.safetensors", rng.normal(size=(120, 2, 8)).astype(np.float32), {"model": "noise"})
    out = tmp_path / "vision.json"
    main(["--data", str(shapes_vision), "--names", "oracle", "noise", "--features",
          str(tmp_path / "oracle.safetensors"), str(tmp_path / "noise.safetensors"),
          "--out", str(out), "--cs", "1.0"])
    result = json.loads(out.read_text())
    assert set(result["tasks"]) == set(TASKS) and set(result["models"]) == {"oracle", "noise"}
    oracle_r, noise_r = result["models"]["oracle"], result["models"]["noise"]
    assert all(r["accuracy"] == 1.0 for r in oracle_r["tasks"].values())
    assert noise_r["mean_accuracy"] < oracle_r["mean_accuracy"] - 0.3
    for t, r in noise_r["tasks"].items():
        assert r["chance"] == result["tasks"][t]["chance"]
        assert result["tasks"][t]["num_classes"] == TASKS[t].num_classes
    assert result["settings"]["cs"] == [1.0] and result["settings"]["n"] == 120


def test_run_probes_checks_names_and_sizes(shapes_vision, tmp_path):
    save_features(tmp_path / "short.safetensors", np.zeros((10, 1, 4), dtype=np.float32), {"model": "short"})
    with pytest.raises(ValueError, match="pair up"):
        run_probes(data=str(shapes_vision), names=["a", "b"], features=[str(tmp_path / "short.safetensors")],
                   out=str(tmp_path / "x.json"))
    with pytest.raises(ValueError, match="10 items"):
        run_probes(data=str(shapes_vision), names=["short"], features=[str(tmp_path / "short.safetensors")],
                   out=str(tmp_path / "x.json"))
