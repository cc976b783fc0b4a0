"""Linear probes: splits, accuracy on informative vs uninformative features, chance, layer choice, the CLI."""

from __future__ import annotations

import json

import numpy as np
import pytest

from prh.evaluation.probe_splits import (
    load_probe_layers,
    merge_main,
    merge_split_probes,
    run_split_probes,
    split_train,
    splits_main,
)
from prh.evaluation.probes import (
    fit_score,
    main,
    probe_features,
    probe_task,
    run_probes,
    split_indices,
)
from prh.io import save_features, write_json, write_npy

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


# ---- datasets with their own train / test splits (the paper suite's VTAB probes) ----------


def _dataset(root, name: str, labels: np.ndarray, label_names=None):
    """A hub-dataset-like folder holding only what the probes read: labels.npy (+ meta.json)."""
    d = root / "data" / name
    write_npy(d / "labels.npy", np.asarray(labels, dtype=np.int64))
    if label_names:
        write_json(d / "meta.json", {"label_names": label_names})
    return d


def _split_suite(tmp_path, *, seed: int = 0):
    """Two tasks (3 and 2 classes), models "good" (last layer one-hot-ish, layer_dims padding) and "noise"."""
    rng = np.random.default_rng(seed)
    tasks = {}
    for t, k, n_tr, n_te in (("three", 3, 300, 90), ("two", 2, 200, 80)):
        y_tr, y_te = rng.integers(0, k, n_tr), rng.integers(0, k, n_te)
        tr = _dataset(tmp_path, f"{t}_train", y_tr, label_names=[f"c{i}" for i in range(k)])
        te = _dataset(tmp_path, f"{t}_test", y_te)
        for d, y in ((tr, y_tr), (te, y_te)):
            good = np.zeros((len(y), 2, 8), dtype=np.float32)
            good[:, 0] = rng.normal(size=(len(y), 8))            # first layer: noise
            good[:, 1, :6] = _informative(y, k=k, d=6, seed=len(y))  # last layer: 6 real dims + 2 of padding
            save_features(tmp_path / "features" / d.name / "good.safetensors", good,
                          {"model": "good", "layer_dims": [8, 6]})
            save_features(tmp_path / "features" / d.name / "noise.safetensors",
                          rng.normal(size=(len(y), 2, 8)).astype(np.float32), {"model": "noise"})
        tasks[t] = {"train": str(tr), "test": str(te)}
    return tasks


def test_split_train_is_a_seeded_cut_of_the_labelled_items():
    y = np.arange(100) % 4
    y[::10] = -1  # 10 unlabelled items
    s = split_train(y, seed=1, val_fraction=0.25)
    assert (len(s["train"]), len(s["val"])) == (68, 22)  # round(90 * 0.25) = 22
    assert sorted(np.concatenate([s["train"], s["val"]]).tolist()) == np.flatnonzero(y >= 0).tolist()
    again, other = split_train(y, seed=1, val_fraction=0.25), split_train(y, seed=2, val_fraction=0.25)
    assert np.array_equal(s["val"], again["val"]) and not np.array_equal(s["val"], other["val"])
    capped = split_train(y, seed=1, val_fraction=0.25, max_train=40)
    assert (len(capped["train"]), len(capped["val"])) == (30, 10)
    assert np.all(y[np.concatenate([capped["train"], capped["val"]])] >= 0)
    with pytest.raises(ValueError, match="too few"):
        split_train(np.array([0, 1, -1]), val_fraction=0.2)


def test_load_probe_layers_reads_the_last_layer_at_its_real_width(tmp_path):
    feats = np.arange(2 * 3 * 4, dtype=np.float32).reshape(2, 3, 4)
    save_features(tmp_path / "m.safetensors", feats, {"layer_dims": [4, 4, 2]})
    last, first = load_probe_layers(tmp_path / "m.safetensors", "last")
    assert first == 2 and last.shape == (2, 1, 2) and np.array_equal(last[:, 0], feats[:, 2, :2])
    every, first = load_probe_layers(tmp_path / "m.safetensors", "best")
    assert first == 0 and np.array_equal(every, feats)
    save_features(tmp_path / "bad.safetensors", feats, {"layer_dims": [4, 4]})
    with pytest.raises(ValueError, match="layer_dims"):
        load_probe_layers(tmp_path / "bad.safetensors")


def test_split_probes_solve_with_informative_features_and_feed_solved_counts(tmp_path):
    from prh.studies.convergence.run import solved_counts

    tasks = _split_suite(tmp_path)
    out = tmp_path / "vtab.json"
    splits_main(["--tasks", json.dumps(tasks), "--names", "good", "noise", "--features-root",
                 str(tmp_path / "features"), "--out", str(out), "--cs", "0.1", "1.0", "--seed", "3"])
    result = json.loads(out.read_text())
    assert set(result["models"]) == {"good", "noise"} and set(result["tasks"]) == {"three", "two"}
    for t, k, n_tr, n_te in (("three", 3, 300, 90), ("two", 2, 200, 80)):
        good, noise = result["models"]["good"]["tasks"][t], result["models"]["noise"]["tasks"][t]
        assert good["accuracy"] >= 0.9 and abs(noise["accuracy"] - noise["chance"]) < 0.15
        assert good["C"] in (0.1, 1.0) and good["layer"] == noise["layer"] == 1  # index in the file
        assert (good["n_train"] + good["n_val"], good["n_val"], good["n_test"]) == (n_tr, round(0.2 * n_tr), n_te)
        # chance: majority class of the whole train split, scored on the test split
        y_tr, y_te = (np.load(f"{tasks[t][s]}/labels.npy") for s in ("train", "test"))
        assert result["tasks"][t]["chance"] == pytest.approx(np.mean(y_te == np.bincount(y_tr).argmax()))
        assert result["tasks"][t]["num_classes"] == k and result["tasks"][t]["uniform_chance"] == pytest.approx(1 / k)
    good = result["models"]["good"]
    assert good["mean_accuracy"] == pytest.approx(np.mean([r["accuracy"] for r in good["tasks"].values()]))
    assert result["settings"]["max_train"] == 10_000 and result["settings"]["seed"] == 3
    assert solved_counts(result) == {"good": 2, "noise": 0}


def test_split_probes_choose_c_on_validation_only(tmp_path):
    tasks = _split_suite(tmp_path)
    cs = (1e-3, 0.1, 10.0)
    kw = dict(tasks={"three": tasks["three"]}, names=["good", "noise"], features_root=str(tmp_path / "features"),
              cs=cs, seed=0, val_fraction=0.3)
    first = run_split_probes(out=str(tmp_path / "a.json"), **kw)
    # by hand: the fit / validation cut of the train split and the validation accuracy of every C
    y_tr = np.load(f"{tasks['three']['train']}/labels.npy")
    part = split_train(y_tr, seed=0, val_fraction=0.3)
    for name in ("good", "noise"):
        x, _ = load_probe_layers(tmp_path / "features" / "three_train" / f"{name}.safetensors")
        val = [fit_score(x[part["train"], 0], y_tr[part["train"]], x[part["val"], 0], y_tr[part["val"]], c=c)
               for c in cs]
        r = first["models"][name]["tasks"]["three"]
        assert r["C"] == cs[int(np.argmax(val))] and r["val_accuracy"] == max(val)
    # permuting the test labels changes the test accuracy but not what validation chose
    test_labels = f"{tasks['three']['test']}/labels.npy"
    write_npy(test_labels, np.random.default_rng(9).permutation(np.load(test_labels)))
    second = run_split_probes(out=str(tmp_path / "b.json"), **kw)
    for name in ("good", "noise"):
        a, b = first["models"][name]["tasks"]["three"], second["models"][name]["tasks"]["three"]
        assert (a["C"], a["val_accuracy"], a["layer"]) == (b["C"], b["val_accuracy"], b["layer"])
    assert second["models"]["good"]["tasks"]["three"]["accuracy"] < 0.7


def test_split_probes_refuse_bad_inputs(tmp_path):
    tasks = _split_suite(tmp_path)
    kw = dict(names=["good"], features_root=str(tmp_path / "features"), out=str(tmp_path / "x.json"), cs=(1.0,))
    # features extracted from another dataset: 200 rows against 300 labels
    short = {"three": {"train": tasks["three"]["train"], "test": tasks["three"]["test"]}}
    save_features(tmp_path / "features" / "three_train" / "good.safetensors",
                  np.zeros((200, 2, 8), dtype=np.float32), {"model": "good"})
    with pytest.raises(ValueError, match="has 200 items but .*three_train/labels.npy has 300"):
        run_split_probes(tasks=short, **kw)
    with pytest.raises(ValueError, match="no labels.npy"):
        run_split_probes(tasks={"x": {"train": str(tmp_path / "nowhere"), "test": tasks["two"]["test"]}}, **kw)
    unlabelled = _dataset(tmp_path, "unlabelled", np.full(50, -1))
    with pytest.raises(ValueError, match="all -1"):
        run_split_probes(tasks={"x": {"train": str(unlabelled), "test": tasks["two"]["test"]}}, **kw)
    with pytest.raises(ValueError, match="'train'"):
        run_split_probes(tasks={"x": {"train": tasks["two"]["train"]}}, **kw)
    with pytest.raises(FileNotFoundError, match="make pull"):
        run_split_probes(tasks={"two": tasks["two"]}, **{**kw, "names": ["absent"]})


def test_per_task_probes_gathered_equal_one_job_over_every_task(tmp_path):
    """The probe_vtab rule runs one job per VTAB task and a gather; the gathered file is the one
    a single job over every task writes (byte for byte), and mismatched inputs are refused."""
    tasks = _split_suite(tmp_path)
    kw = dict(names=["good", "noise"], features_root=str(tmp_path / "features"), cs=CS, seed=3)
    whole = run_split_probes(tasks=tasks, out=str(tmp_path / "whole.json"), **kw)
    parts = [tmp_path / f"{t}.json" for t in ("two", "three")]  # any order
    for t, out in zip(("two", "three"), parts):
        run_split_probes(tasks={t: tasks[t]}, out=str(out), **kw)
    merge_main(["--inputs", *map(str, parts), "--out", str(tmp_path / "gathered.json")])
    assert json.loads((tmp_path / "gathered.json").read_text()) == whole
    assert (tmp_path / "gathered.json").read_text() == (tmp_path / "whole.json").read_text()
    good = whole["models"]["good"]
    assert good["mean_accuracy"] == pytest.approx(np.mean([good["tasks"][t]["accuracy"] for t in ("two", "three")]))
    with pytest.raises(ValueError, match="appear in another input"):
        merge_split_probes(inputs=[parts[0], parts[0]], out=tmp_path / "x.json")
    run_split_probes(tasks={"three": tasks["three"]}, out=str(tmp_path / "seed4.json"), **{**kw, "seed": 4})
    with pytest.raises(ValueError, match="other settings"):
        merge_split_probes(inputs=[parts[0], tmp_path / "seed4.json"], out=tmp_path / "x.json")
    run_split_probes(tasks={"three": tasks["three"]}, out=str(tmp_path / "one.json"), **{**kw, "names": ["good"]})
    with pytest.raises(ValueError, match="same --names"):
        merge_split_probes(inputs=[parts[0], tmp_path / "one.json"], out=tmp_path / "x.json")
