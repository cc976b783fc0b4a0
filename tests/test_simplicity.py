"""Simplicity-bias experiments (Huh's thesis, chapter 2): numbers on smoke sizes, and figures from JSON alone."""

from __future__ import annotations

import json
import math
import shutil

import numpy as np
import pytest
import torch

from prh.figures import FIGURES, draw_from
from prh.io import read_json
from prh.metrics import effective_rank
from prh.stats import depth_trend
from prh.studies.simplicity import run as S

SMOKE = {  # the sizes proposed for tests/smoke/params.yaml
    "width": 16,
    "random_nets": {"max_depth": 6, "n_inputs": 64, "n_samples": 64, "bins": 20},
    "products": {"dims": [16, 64], "max_depth": 6, "n_samples": 8},
    "trained": {"depths": [1, 2, 3], "n_train": 8, "n_test": 64, "task_rank": 3, "n_seeds": 3,
                "steps": 300, "tol": 1e-3},
}


def test_kernel_rank_matches_full_gram_matrix():
    # ρ is computed from the w x w matrix Φ̂ᵀΦ̂; it must equal ρ of the p x p cosine Gram matrix itself
    phi = torch.randn(3, 40, 8, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    unit = phi / phi.norm(dim=-1, keepdim=True)
    direct = [effective_rank(u @ u.T) for u in unit]
    np.testing.assert_allclose(S._kernel_ranks(phi), direct, atol=1e-9)


def test_random_relu_rank_decreases_with_depth():
    # seed 0, smoke sizes: every added layer lowers the mean kernel rank by > 0.05 nats
    ranks = S.random_net_ranks(width=16, depth=6, n_inputs=64, n_samples=64, activation="relu", init="normal", seed=0)
    mean = ranks.mean(0)
    assert np.all(np.diff(mean) < -0.05), mean
    trend = depth_trend(np.broadcast_to(np.arange(1, 7), ranks.shape), ranks)
    assert trend["spearman_rho"] < -0.8 and trend["p_value"] < 1e-10
    assert np.all(ranks <= math.log(16) + 1e-9) and np.all(ranks > 0)


def test_random_nets_are_seeded():
    kw = dict(width=8, depth=3, n_inputs=16, n_samples=8, activation="linear", init="uniform")
    np.testing.assert_array_equal(S.random_net_ranks(**kw, seed=3), S.random_net_ranks(**kw, seed=3))
    assert not np.allclose(S.random_net_ranks(**kw, seed=3), S.random_net_ranks(**kw, seed=4))


def test_gaussian_products_lose_rank_monotonically_on_average():
    for dim in (16, 64):
        ranks, spectra = S.gaussian_product_ranks(dim=dim, max_depth=6, n_samples=8, seed=0)
        assert np.all(np.diff(ranks.mean(0)) < 0), (dim, ranks.mean(0))
        np.testing.assert_allclose(spectra.sum(1), 1.0)
    # at n = 64 (closer to the theorem's n -> infinity) every sample decreases at every factor
    assert np.all(np.diff(ranks, axis=1) < 0)


def test_gd_depth_one_reaches_the_closest_fit_to_its_initialisation():
    # GD on least squares never leaves W0 + span of the inputs' rows: it converges to W0 + (Y − W0 X) X⁺
    task = S.make_task(width=8, n_train=4, n_test=16, task_rank=2, n_seeds=2, seed=0, dtype=torch.float64)
    w0 = S._weights((2, 1, 8, 8), init="normal", gen=S._gen(1, 3, 1), dtype=torch.float64)
    w, diverged = S._first_order(w0, task["X"], task["Y"], optimizer="gd", lrs=torch.full((2,), 0.3, dtype=torch.float64), steps=500)
    x, y, w0 = task["X"], task["Y"], w0[:, 0]
    expected = w0 + (y - w0 @ x) @ torch.linalg.pinv(x)
    assert not diverged.any()
    torch.testing.assert_close(w[:, 0], expected, atol=1e-6, rtol=0)


@pytest.mark.parametrize("optimizer,lrs", [("gd", [0.2, 0.1, 0.05]), ("nesterov", [0.02, 0.01]), ("adam", [0.01]), ("lbfgs", [1.0])])
def test_training_converges_and_deeper_nets_fit_lower_rank(optimizer, lrs):
    task = S.make_task(width=16, n_train=8, n_test=64, task_rank=3, n_seeds=3, seed=0)
    runs = [S.train_deep_linear(depth=d, optimizer=optimizer, lrs=lrs, task=task, steps=600, seed=0, tol=1e-3)
            for d in (1, 3)]
    assert all(runs[0]["converged"]), runs[0]["train_loss"]
    assert all(runs[1]["converged"]), runs[1]["train_loss"]
    # the fit is underdetermined (8 samples, 16 dims): depth 3 picks the lower-rank map
    assert np.median(runs[1]["map_rank"]) < np.median(runs[0]["map_rank"]) - 0.1
    assert np.median(runs[1]["kernel_rank"]) < np.median(runs[0]["kernel_rank"])


def test_diverging_learning_rate_is_flagged_not_chosen():
    task = S.make_task(width=8, n_train=4, n_test=16, task_rank=2, n_seeds=2, seed=0)
    run = S.train_deep_linear(depth=2, optimizer="gd", lrs=[50.0, 0.1], task=task, steps=200, seed=0, tol=1e-2)
    assert run["best_lr"] == 0.1 and all(np.isfinite(run["kernel_rank"]))


def test_bad_inputs_name_the_argument():
    with pytest.raises(ValueError, match="simplicity.random_nets.n_sample"):
        S.run_simplicity({}, config={"random_nets": {"n_sample": 3}})
    with pytest.raises(ValueError, match="activation"):
        S.random_net_ranks(width=4, depth=2, n_inputs=4, n_samples=2, activation="tanh", init="normal", seed=0)
    with pytest.raises(ValueError, match="task_rank"):
        S.make_task(width=4, n_train=2, n_test=4, task_rank=5, n_seeds=1, seed=0)


def test_smoke_run_writes_finite_metrics_and_figures_render_from_json_alone(tmp_path):
    out = tmp_path / "exp"
    S.main([*(a for name in S.FILES for a in (f"--{name.replace('_', '-')}", str(out / f"{name}.json"))),
            "--config", json.dumps({"simplicity": SMOKE}), "--seed", "0"])
    metrics = read_json(out / "metrics.json")
    for name, m in metrics.items():
        if isinstance(m, dict):
            assert -1 <= m["spearman_rho"] <= 1 and 0 <= m["p_value"] <= 1, name
    assert metrics["random_net/relu/normal"]["spearman_rho"] < -0.8
    assert metrics["products/n64"]["spearman_rho"] < -0.9
    assert metrics["trained/gd/converged_fraction"] == 1.0
    assert read_json(out / "random_nets.json")["settings"]["relu/uniform"]["hist"]["edges"][-1] == pytest.approx(math.log(16))

    alone = tmp_path / "json_only"  # the figures may read nothing but the experiment's JSON
    alone.mkdir()
    for name in ("random_nets.json", "products.json", "trained.json"):
        shutil.copy(out / name, alone / name)
    stems = [f.name for f in FIGURES.values() if f.draw.startswith("prh.plots.simplicity:")]
    paths = draw_from(alone, stems, tmp_path / "figures")
    assert sorted(p.name for p in paths) == sorted(f"{stem}.{ext}" for stem in stems for ext in ("pdf", "png"))
    assert len(stems) == 4
    assert all(p.stat().st_size > 1000 for p in paths)


def test_plotting_without_results_says_what_to_run(tmp_path):
    with pytest.raises(FileNotFoundError, match="run `snakemake .*random_nets.json` first"):
        draw_from(tmp_path, ["simplicity_fig2.2_random_net_rank"], tmp_path / "figures")


def _schema_defaults(schema: dict):
    if schema.get("type") == "object" and "properties" in schema:
        return {key: _schema_defaults(sub) for key, sub in schema["properties"].items()}
    return schema["default"]


def test_schema_params_and_library_defaults_agree(repo_root):
    import yaml

    from prh.config import validate_schema

    schema = yaml.safe_load((repo_root / "workflow/schemas/simplicity.schema.yaml").read_text())
    # DEFAULTS come from the schema (prh.config.schema_defaults, which skips keys without a default);
    # _schema_defaults raises on such a key, so this fails if any key of the block lacks one
    assert _schema_defaults(schema) == S.DEFAULTS
    params = yaml.safe_load((repo_root / "params.yaml").read_text())
    assert validate_schema(params)["simplicity"] == S.DEFAULTS


def test_parts_run_alone_and_metrics_summarise_their_json(tmp_path):
    out = tmp_path / "exp"
    S.main(["--products", str(out / "p.json"), "--config", json.dumps({"simplicity": SMOKE}), "--seed", "0", "--part", "products"])
    assert sorted(p.name for p in out.iterdir()) == ["p.json"]  # the path it was given, nothing else
    with pytest.raises(ValueError, match="parts \\['bogus'\\] unknown"):
        S.run_simplicity({}, parts=("bogus",))
    with pytest.raises(ValueError, match=r"no path for \['random_nets', 'trained'\] \(prh run-simplicity --random-nets"):
        S.run_simplicity({"products": out / "p.json", "metrics": out / "m.json"}, parts=("metrics",))
