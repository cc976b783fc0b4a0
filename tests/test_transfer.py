"""Representation alignment and transfer (Imani, Hu & White): peaks task, Proposition 1,
batched training, the S/T1/T2 direction on a fixed seed, and figures from JSON alone."""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pytest
import torch

from prh import cli
from prh.figures import FIGURES, draw_from
from prh.io import read_json
from prh.metrics import alignment_curve
from prh.studies.transfer.batched_mlp import (
    _backward,
    _forward_train,
    _loss_and_grad,
    init_mlp,
    train_mlp,
)
from prh.studies.transfer.linear_gd import (
    gd_loss_closed_form,
    gradient_descent,
    label_spectrum,
    learning_curves,
    log_steps,
    prepare_features,
)
from prh.studies.transfer.peaks import run_peaks
from prh.studies.transfer.peaks_task import (
    choose_tasks,
    peaks_function,
    rbf_encode,
    sample_peaks,
)
from prh.studies.transfer.transfer import run_transfer

SMOKE = {  # the sizes proposed for tests/smoke/params.yaml
    "runs": 2, "n_source": 400, "n_target": 50, "n_test": 100, "deep_layers": 2, "max_epochs": 4,
    "num_taus": 21, "max_steps": 1000, "num_steps": 20, "fig2_runs": 2, "fig2_epochs": 4,
    "fig7_width": 16, "fig7_max_epochs": 4,
}


def test_rbf_encoding_matches_hand_values():
    feats = rbf_encode([[0.0, 0.25, 0.9, 0.5, 0.05, 0.99]], normalize=False)
    assert feats.shape == (1, 60)
    # variable 0 = 0.0: 0.5 exp(-(0 - c)^2 / (2 * 0.01)) at c = 0.0, 0.1, 0.2
    np.testing.assert_allclose(feats[0, :3], [0.5, 0.5 * np.exp(-0.5), 0.5 * np.exp(-2.0)], rtol=1e-12)
    # variable 1 = 0.25 sits between the centres 0.2 and 0.3: equal values exp(-0.125) / 2
    np.testing.assert_allclose(feats[0, 12:14], [0.5 * np.exp(-0.125)] * 2, rtol=1e-12)
    # variable 2 = 0.9 peaks at the last centre
    assert feats[0, 29] == pytest.approx(0.5) and feats[0, 20] == pytest.approx(0.5 * np.exp(-40.5))
    unit = rbf_encode([[0.0, 0.25, 0.9, 0.5, 0.05, 0.99]])
    assert np.linalg.norm(unit) == pytest.approx(1.0)
    np.testing.assert_allclose(unit * np.linalg.norm(feats), feats, rtol=1e-12)


def test_peaks_function_matches_hand_values():
    values = np.array([[0.7, 0.2, 0.9, 0.1, 0.3, 0.4],
                       [0.5, 0.2, 0.9, 0.1, 0.3, 0.4],    # X = 0.5 is not > 0.5: Z
                       [0.1, 0.6, 0.8, 0.95, 0.3, 0.4]])
    np.testing.assert_array_equal(peaks_function(values, variables=(0, 1, 2)), [0.2, 0.9, 0.8])
    np.testing.assert_array_equal(peaks_function(values, variables=(3, 5, 4)), [0.3, 0.3, 0.4])
    with pytest.raises(ValueError, match="distinct"):
        peaks_function(values, variables=(0, 0, 1))


def test_tasks_related_and_unrelated():
    for seed in range(20):
        t = choose_tasks(rng=np.random.default_rng(seed))
        assert set(t["S"]) == set(t["T1"]) and t["S"] != t["T1"]
        assert set(t["T2"]).isdisjoint(t["S"]) and len(set(t["T2"])) == 3
    x, labels = sample_peaks(n=50, tasks=t, rng=np.random.default_rng(0))
    assert x.shape == (50, 60) and set(labels) == {"S", "T1", "T2"}
    np.testing.assert_allclose(np.linalg.norm(x, axis=1), 1.0)


def test_proposition1_matches_gradient_descent_float64():
    rng = np.random.default_rng(0)
    phi = prepare_features(rng.standard_normal((40, 9)))
    y = rng.standard_normal(40)
    eta = 0.9 / np.linalg.norm(phi, 2) ** 2
    steps = [0, 1, 2, 7, 50, 400]
    exact, iterated = gd_loss_closed_form(phi, y, eta=eta, steps=steps), gradient_descent(phi, y, eta=eta, steps=steps)
    np.testing.assert_allclose(exact, iterated, rtol=1e-8, atol=0)
    assert exact[0] == pytest.approx(y @ y)
    # the learning curves use the same closed form: n * train MSE is the loss, and ‖w_t‖ matches GD's
    curves = learning_curves(phi, y, phi[:5], y[:5], eta=eta, steps=steps)
    np.testing.assert_allclose(curves["train_mse"] * len(y), iterated, rtol=1e-8)
    w = np.zeros(phi.shape[1])
    for _ in range(50):
        w -= eta * phi.T @ (phi @ w - y)
    assert curves["weight_norm"][steps.index(50)] == pytest.approx(np.linalg.norm(w), rel=1e-8)


def test_alignment_curve_at_zero_is_label_energy_and_matches_spectrum():
    rng = np.random.default_rng(1)
    x, labels = sample_peaks(n=200, tasks=choose_tasks(rng=rng), rng=rng)
    y = labels["T2"] - labels["T2"].mean()  # the processed labels: mean zero
    curve = alignment_curve(x, y, [0.0, 1.0, 3.0])
    assert curve[0] == pytest.approx(float(y @ y), rel=1e-12)
    # our preparation is the curve's: same numbers when the curve is told not to prepare again
    np.testing.assert_allclose(alignment_curve(prepare_features(x), y, [0.0, 1.0, 3.0], add_constant=False,
                                               normalize_rows=False), curve, rtol=1e-10)
    sigma, proj2 = label_spectrum(x, y)
    for k in (0, 3, 10):  # the curve at τ = σ_k is the label energy on the top k + 1 directions
        assert alignment_curve(x, y, [sigma[k]])[0] == pytest.approx(proj2[: k + 1].sum(), rel=1e-9)


def test_handwritten_gradients_match_autograd():
    params = init_mlp(runs=3, sizes=[5, 7, 6, 1], seed=0)
    x, y = torch.randn(3, 11, 5), torch.randn(3, 11, 1)
    for loss in ("mse", "bce"):
        target = y if loss == "mse" else (y > 0).float()
        out, pre, hidden = _forward_train(params, x)
        value, grad_out = _loss_and_grad(out, target, loss)
        manual = _backward(params, x, pre, hidden, grad_out)
        leaves = [t.clone().requires_grad_() for pair in params for t in pair]
        h = x
        for i in range(0, len(leaves), 2):
            h = torch.baddbmm(leaves[i + 1], h, leaves[i])
            h = torch.relu(h) if i < len(leaves) - 2 else h
        ref = (((h - target) ** 2).mean(dim=(1, 2)) if loss == "mse" else
               torch.nn.functional.binary_cross_entropy_with_logits(h, target, reduction="none").mean(dim=(1, 2)))
        torch.testing.assert_close(value, ref.detach())
        for g, r in zip(manual, torch.autograd.grad(ref.sum(), leaves)):
            torch.testing.assert_close(g, r)


def test_training_fits_and_stopping_rule_freezes_runs():
    rng = np.random.default_rng(0)
    x = rng.standard_normal((2, 128, 4))
    y = x @ np.array([1.0, -2.0, 0.5, 0.0])
    params = init_mlp(runs=2, sizes=[4, 16, 1], seed=0)
    trained, info = train_mlp(params, x=x, y=y, lr=1e-2, batch_size=16, max_epochs=60, patience=0)
    assert max(info["final_loss"]) < 0.1 * y.var()
    # an impossible improvement demand: every run stops after patience + 1 epochs
    _, info = train_mlp(params, x=x, y=y, lr=1e-2, batch_size=16, max_epochs=60, patience=2, min_improvement=0.999)
    assert info["epochs"] == [3, 3] and all(info["converged"])
    with pytest.raises(ValueError, match="loss"):
        train_mlp(params, x=x, y=y, loss="hinge")


def test_peaks_direction_on_fixed_seed():
    out = run_peaks(runs=2, n_source=2000, n_target=100, n_test=300, max_epochs=25, patience=0,
                    num_taus=41, max_steps=10000, num_steps=40, seed=0)
    auc = {s: {layer: {t: np.mean(v) for t, v in tasks.items()} for layer, tasks in d.items()}
           for s, d in out["alignment"]["auc"].items()}
    trained, init, inp = auc["trained"]["hidden1"], auc["init"]["hidden1"], auc["trained"]["input"]
    assert trained["S"] > max(init["S"], inp["S"])
    assert trained["T1"] > max(init["T1"], inp["T1"])
    assert trained["T2"] < inp["T2"]
    speed = {t: {r: np.mean(v["per_run"]["train_auc"]) for r, v in out["transfer"][t].items()} for t in ("T1", "T2")}
    assert speed["T1"]["trained"] < speed["T1"]["input"]
    assert speed["T2"]["trained"] > speed["T2"]["input"]
    assert out["prop1_check"]["max_rel_error"] < 1e-8


def test_cli_writes_json_and_every_figure_renders_from_json_alone(tmp_path):
    import json

    from prh.studies.transfer.transfer import FILES

    exp = tmp_path / "exp"
    names = [name for files in FILES.values() for name in files]
    cli.main(["run-transfer", *(a for name in names for a in (f"--{name.replace('_', '-')}", str(exp / f"{name}.json"))),
              "--config", json.dumps({"transfer": SMOKE}), "--seed", "3"])
    assert sorted(p.name for p in exp.iterdir()) == sorted(f"{name}.json" for name in names)
    metrics = read_json(exp / "metrics.json")
    assert metrics["claims_total"] == len(metrics["claims"]) >= 15
    assert all(isinstance(c["reproduced"], bool) for c in metrics["claims"].values())
    assert metrics["claims"]["prop1_closed_form_matches_gd"]["reproduced"]
    alone = tmp_path / "alone"  # only the JSON files, nothing else from the run
    alone.mkdir()
    stems = [f.name for f in FIGURES.values() if f.draw.startswith("prh.plots.transfer:")]
    for stem in stems:
        for path in FIGURES[stem].inputs.values():
            shutil.copy(exp / Path(path).name, alone / Path(path).name)
    written = draw_from(alone, stems, tmp_path / "figs")
    assert len(written) == 2 * len(stems) == 10
    assert all(p.stat().st_size > 1000 for p in written)
    with pytest.raises(ValueError, match="unknown keys"):
        run_transfer(paths={"peaks_deep": tmp_path / "bad.json"}, config={"run": 3}, parts=("peaks_deep",))


def test_log_steps_and_bad_inputs():
    steps = log_steps(max_steps=1000, num=10)
    assert steps[0] == 0 and steps[-1] == 1000 and np.all(np.diff(steps) > 0)
    with pytest.raises(ValueError, match="eta"):
        gd_loss_closed_form(np.eye(3), np.ones(3), eta=0.0, steps=[1])
    from prh.studies.transfer.emergence import load_binary_digits

    with pytest.raises(ValueError, match="digits"):
        load_binary_digits(dataset="cifar")
    x, y = load_binary_digits(dataset="digits")
    assert x.shape == (360, 64) and set(np.unique(y)) == {0.0, 1.0}
    np.testing.assert_allclose(np.linalg.norm(x, axis=1), 1.0)


def test_mnist_loader_reads_the_hub_layout_from_a_local_folder(tmp_path):
    # the paper suite's path: same columns and file layout as ylecun/mnist, written here (no network)
    import datasets
    from PIL import Image

    from prh.studies.transfer.emergence import MNIST_REVISION, load_binary_digits

    rng = np.random.default_rng(0)
    images = [Image.fromarray((rng.random((28, 28)) * 255).astype("uint8")) for _ in range(12)]
    ds = datasets.Dataset.from_dict({"image": images, "label": [0, 1, 2] * 4}).cast_column("image", datasets.Image())
    (tmp_path / "mnist").mkdir()
    ds.to_parquet(tmp_path / "mnist" / "train-00000-of-00001.parquet")
    x, y = load_binary_digits(dataset="mnist", repo=str(tmp_path), per_class=3, revision=MNIST_REVISION)
    assert x.shape == (6, 784) and sorted(y) == [0, 0, 0, 1, 1, 1]
    np.testing.assert_allclose(np.linalg.norm(x, axis=1), 1.0)
    with pytest.raises(ValueError):  # 4 images of class 1 cannot give 5
        load_binary_digits(dataset="mnist", repo=str(tmp_path), per_class=5)


def test_each_part_reads_only_its_slice_and_every_key_has_a_part():
    """The rules pass each part its slice of the block: a key no part reads could never rerun anything."""
    from prh.studies.transfer.transfer import DEFAULTS, SLICES, _part_config

    assert set().union(*SLICES.values()) == set(DEFAULTS)
    assert set(_part_config({"width": 7, "fig2_runs": 3}, "peaks_deep")) == set(SLICES["peaks_deep"])
    assert _part_config({"width": 7}, "peaks_deep")["width"] == 7
    with pytest.raises(ValueError, match="parts \\['figs'\\] unknown"):
        run_transfer(paths={}, parts=("figs",))
    with pytest.raises(ValueError, match=r"no path for \['peaks_transfer'\] \(prh run-transfer --peaks-transfer"):
        run_transfer(paths={"peaks_alignment": "a.json"}, parts=("peaks",))
    with pytest.raises(ValueError, match=r"no path for \['peaks_alignment', 'peaks_transfer', 'peaks_deep'"):
        run_transfer(paths={"layerwise": "l.json", "metrics": "m.json"}, parts=("claims",))


def test_a_run_whose_effect_is_undefined_stays_a_run_and_makes_the_claim_not_testable():
    """A NaN per-run effect (written as null in metrics.json) crashed the ledger's join in the smoke and replay runs;
    it is one of the claim's runs, its mean is over the defined ones, and the weighed rule cannot test it."""
    import math

    from prh.claims import weigh
    from prh.studies.transfer.manifest import results

    metrics = {"claims": {"fig11_related_smaller_weights": {"verdict": "not reproduced", "reproduced": False,
                                                            "run_effects": [-1.22, None]}}}
    row = results("offline", 0.05, metrics=metrics, peaks={})["fig11_related_smaller_weights"]
    assert row["n"] == row["seeds"] == 2 and row["value"] == -1.22 and math.isnan(row["effects"][1])
    weighed = weigh({"kind": "sign_flip", "reason": "test", "set": "test"}, [row], alpha=0.05)
    assert weighed["verdict"] == "not testable"
