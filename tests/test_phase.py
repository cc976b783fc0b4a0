"""Seed 000 phase study: NTK, sketch, similarity, AGOP, retrieval chance, and a tiny end-to-end run."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from prh.checks import check_config
from prh.claims import verdict
from prh.config import load
from prh.studies.phase import ntk as nt
from prh.studies.phase.alignment import pair_retrieval, ridge_retrieval
from prh.studies.phase.spectra import participation_ratio, power_law_exponent
from prh.studies.phase.stats import (
    balanced_accuracy,
    mantel_partial,
    modality_permutation,
)


def _mlp(d_in=5, width=7, d_out=3, seed=0):
    torch.manual_seed(seed)
    return torch.nn.Sequential(torch.nn.Linear(d_in, width), torch.nn.Tanh(), torch.nn.Linear(width, d_out)).double()


def _fn(net):
    from torch.func import functional_call

    return lambda p, x: functional_call(net, p, (x[None],))[0]


def _full_jacobian(net, x, readouts):
    """Direct J: rows (item, readout), columns every parameter, by autograd one output at a time."""
    d = readouts.shape[1]
    rows = []
    for i in range(len(x)):
        for r in readouts:
            out = (net(x[i : i + 1])[0] @ r) / d**0.5
            g = torch.autograd.grad(out, list(net.parameters()))
            rows.append(torch.cat([t.reshape(-1) for t in g]))
    return torch.stack(rows).reshape(len(x), len(readouts), -1)


def test_ntk_from_per_sample_gradients_equals_j_jt():
    net = _mlp()
    x = torch.randn(9, 5, dtype=torch.float64)
    r = nt.random_readouts(3, 2, seed=1).double()
    jac = nt.per_sample_jacobian(_fn(net), {k: v.detach() for k, v in net.named_parameters()}, x, readouts=r, chunk=4)
    direct = _full_jacobian(net, x, r)
    assert torch.allclose(jac, direct, atol=1e-10)
    theta = nt.ntk_from_jacobian(jac)
    jj = sum(direct[:, k] @ direct[:, k].T for k in range(2)) / 2
    assert torch.allclose(theta, jj, atol=1e-5)
    # the loop (vectorize=False) gives the same Jacobian
    loop = nt.per_sample_jacobian(_fn(net), dict(net.named_parameters()), x, readouts=r, vectorize=False)
    assert torch.allclose(loop, jac, atol=1e-10)


def test_count_sketch_error_below_two_percent():
    net = _mlp(d_in=40, width=400, d_out=16)  # P = 23 216
    x = torch.randn(24, 40, dtype=torch.float64)
    r = nt.random_readouts(16, 2, seed=0).double()
    params = {k: v.detach() for k, v in net.named_parameters()}
    exact = nt.per_sample_jacobian(_fn(net), params, x, readouts=r)
    sketch = nt.CountSketch(exact.shape[2], 1 << 15, seed=0)
    sketched = nt.per_sample_jacobian(_fn(net), params, x, readouts=r, sketch=sketch)
    assert sketched.shape[2] == 1 << 15
    assert torch.allclose(sketched, sketch.apply(exact), atol=1e-10)
    assert nt.sketch_error(exact, sketched) < 0.02


def test_similarity_scale_invariant_and_in_unit_interval():
    gen = torch.Generator().manual_seed(0)
    for _ in range(20):
        a, b = torch.randn(12, 30, generator=gen, dtype=torch.float64), torch.randn(12, 8, generator=gen, dtype=torch.float64)
        ta, tb = a @ a.T, b @ b.T
        for centred in (False, True):
            assert nt.ntk_similarity(ta, 3.7 * ta, centred=centred) == pytest.approx(1.0, abs=1e-12)
            assert -1e-12 <= nt.ntk_similarity(ta, tb, centred=centred) <= 1 + 1e-12
        sa, sb = nt.ntk_states(ta), nt.ntk_states(tb)
        assert nt.state_similarity(sa["literal"], sb["literal"]) == pytest.approx(nt.ntk_similarity(ta, tb))
        assert nt.state_similarity(sa["centred"], sb["centred"]) == pytest.approx(nt.ntk_similarity(ta, tb, centred=True))


def test_agop_eigenvalues_are_ntk_eigenvalues_over_n():
    net = _mlp(d_in=3, width=4, d_out=2)  # P = 26: the P x P AGOP is formed directly
    x = torch.randn(6, 3, dtype=torch.float64)
    r = nt.random_readouts(2, 1, seed=0).double()
    jac = nt.per_sample_jacobian(_fn(net), {k: v.detach() for k, v in net.named_parameters()}, x, readouts=r)
    g = jac[:, 0]
    agop = g.T @ g / len(x)
    ev_agop = torch.linalg.eigvalsh(agop).flip(0)[: len(x)]
    ev_theta = torch.linalg.eigvalsh(nt.ntk_from_jacobian(jac)).flip(0)
    assert torch.allclose(len(x) * ev_agop, ev_theta, atol=1e-10)
    assert torch.allclose(nt.agop_eigenvalues(nt.jacobian_gram(jac), len(x)), ev_agop, atol=1e-12)


def test_random_features_give_chance_retrieval():
    rng = np.random.default_rng(0)
    n, n_test = 400, 100
    train, test = np.arange(n_test, n), np.arange(n_test)
    scores = [ridge_retrieval(rng.normal(size=(n, 20)), rng.normal(size=(n, 15)), train=train, test=test)
              for _ in range(20)]
    # mean of 20 x 100 Bernoulli(1/100) draws: 0.01 +- 0.0022 (s.d.)
    assert abs(np.mean(scores) - 1 / n_test) < 0.008
    x = rng.normal(size=(n, 20))
    res = pair_retrieval(x, x @ rng.normal(size=(20, 20)), train=train, test=test)
    assert res["retrieval"] == pytest.approx(1.0) and res["chance"] == pytest.approx(0.01)


def test_spectra_and_stats():
    assert participation_ratio(np.ones(10)) == pytest.approx(10.0)
    assert power_law_exponent(np.arange(1, 101, dtype=float) ** -2.0) == pytest.approx(2.0)
    assert balanced_accuracy([1, 1, 0, 0], [1, 0, 0, 0]) == pytest.approx(5 / 6)
    assert np.isnan(balanced_accuracy([1, 0], [1, 1]))
    rng = np.random.default_rng(0)
    x = rng.normal(size=(6, 5))
    res = mantel_partial(x, x + 0.1 * rng.normal(size=(6, 5)), [rng.normal(size=(6, 5))], n_permutations=200)
    assert res["statistic"] > 0.8 and res["p_value"] < 0.05
    labels = np.array([1, 1, 1, 0, 0, 0], dtype=bool)
    m = np.where(labels[:, None] == labels[None, :], 1.0, 0.0)
    perm = modality_permutation(m, labels, n_permutations=200)
    assert perm["statistic"] == pytest.approx(1.0) and perm["p_value"] <= 0.1
    with pytest.raises(ValueError, match="n_ntk"):
        from prh.studies.phase.run import item_split

        item_split(10, n_ntk=20, seed=0)


def test_tiny_end_to_end(tmp_path):
    """Tiny zoo-contract checkpoints through every command: model jobs, adaptive LR, analysis, figures."""
    import yaml
    from tiny_models import save_encoder, save_language_model, save_vision_zoo

    from prh.data.shapes import build_dataset
    from prh.extract import extract_language_dataset, extract_vision_dataset
    from prh.figures import draw_from
    from prh.io import read_json, read_jsonl, write_jsonl
    from prh.models.vision_zoo import build_model, save_checkpoint
    from prh.studies.phase.adaptive_lr import run_adaptive_lr
    from prh.studies.phase.analysis import analyse
    from prh.studies.phase.design import SLICES
    from prh.studies.phase.run import main as phase_main

    data = build_dataset(tmp_path / "data", n=24, seed=0)
    records = read_jsonl(data / "captions.jsonl")  # the sparsest captions fit the tiny GPT-2's 128 positions
    write_jsonl(data / "captions.jsonl", [{**r, "text": r["texts"][0]} for r in records])
    net, cfg = build_model(arch="densenet_xs", seed=0)
    paths = {"densenet": (save_checkpoint(tmp_path / "densenet", model=net, config=cfg), "vision", "CNN"),
             "vit": (save_vision_zoo("vit", tmp_path / "vit"), "vision", "ViT"),
             "gpt2": (save_language_model("gpt2", tmp_path / "gpt2"), "language", "GPT"),
             "bert": (save_encoder(tmp_path / "bert"), "language", "BERT")}
    config = check_config(load("params.yaml"))["phase"]  # the schema's defaults filled in, as the workflow sees it
    smoke = yaml.safe_load(open("tests/smoke/params.yaml"))["phase"]
    config.update({k: v for k, v in smoke.items() if k != "adaptive_lr"})
    config["adaptive_lr"].update(smoke["adaptive_lr"])
    config.update(n_ntk=8, n_stability=6, permutations=20, exact_max_params=20000, sketch_dim=4096)
    config["adaptive_lr"].update(n_pairs=1, n_items=6)
    config["rules"] = {**config["rules"], "low_s": 0.3}  # the figures draw the analysis's thresholds, not 0.25
    # each command gets only its keys of the block, as its rule passes them (a key it reads but lacks: KeyError)
    part = {command: {k: config[k] for k in keys} for command, keys in SLICES.items()}
    models = {}
    for name, (path, modality, group) in paths.items():
        feats = tmp_path / "features" / f"{name}.safetensors"
        extract = extract_vision_dataset if modality == "vision" else extract_language_dataset
        extract(model=str(path), data=str(data), out=str(feats), name=name, progress=False)
        out = tmp_path / "phase" / "models" / f"{name}.json"
        phase_main(["--name", name, "--path", str(path), "--modality", modality, "--data", str(data),
                    "--out", str(out), "--config", json.dumps({"phase": part["model"]})])
        models[name] = {"modality": modality, "group": group, "ntk": str(out), "features": str(feats)}
        res = read_json(out)
        assert 0 <= res["stability"] <= 1 + 1e-9 and res["agop"]["lambda1"] > 0
        assert res["sketched"] == (res["n_params"] > 20000)
    assert read_json(tmp_path / "phase/models/densenet.json")["sketch_error"] < 0.2
    lr = run_adaptive_lr(pairs=[{"vision": {"name": "vit", "path": str(paths["vit"][0])},
                                 "language": {"name": "bert", **models["bert"]}}],
                         data=str(data), config=part["adaptive_lr"], out=str(tmp_path / "phase/adaptive_lr.json"))
    assert len(lr["pairs"]) == 1 and lr["pairs"][0]["adaptive"]["s_trace"]
    from prh.cli import main as prh_main

    prh_main(["run-phase-analysis", "--models", json.dumps(models), "--config", json.dumps({"phase": part["analysis"]}),
              "--adaptive-lr", str(tmp_path / "phase/adaptive_lr.json"), "--pairs", str(tmp_path / "phase/pairs.csv"),
              "--model-table", str(tmp_path / "models.csv"), "--table1", str(tmp_path / "phase/table1.csv"),
              "--metrics", str(tmp_path / "phase/metrics.json")])
    metrics = read_json(tmp_path / "phase/metrics.json")
    assert metrics["config"] == part["analysis"] and "C2a_fraction_below_0.3_s_literal" in metrics["claims"]
    assert (tmp_path / "models.csv").read_text().startswith("model,modality,group,")
    with pytest.raises(ValueError, match=r"run-phase-analysis: no path for \['model_table'\] \(--model-table PATH\)"):
        analyse(models=models, config=part["analysis"], out={"pairs": "p.csv", "table1": "t.csv", "metrics": "m.json"})
    verdicts = metrics["verdicts"]
    # each label is the pre-registered rule on the numbers the claim records (not mere membership in the labels)
    alpha, rules = metrics["config"]["alpha"], metrics["config"]["rules"]
    for claim, sign in (("C2b_cross_below_within", 1), ("C3_s_explains_alignment", 1),
                        ("T1_spectral_decay_vision_gt_language", 1), ("T1_agop_language_gt_vision", -1)):
        c = metrics["claims"][claim]
        assert verdicts[claim] == verdict(sign * c["statistic"] > 0 and c["p_value"] < alpha), claim
    c2a = metrics["claims"][f"C2a_fraction_below_{rules['low_s']}_s_literal"]
    assert verdicts[f"C2a_fraction_below_{rules['low_s']}_s_literal"] == verdict(c2a["statistic"] >= rules["low_s_fraction"])
    assert verdicts["T2_phase_regularisation"] == "not testable"
    for claim in ("C1_alignment_gap", "C2b_cross_below_within", "C3_s_explains_alignment"):
        assert 0 < metrics["claims"][claim]["p_value"] <= 1
    assert 0 <= metrics["failure_base_rate"] <= 1
    stems = ["phase_fig01a_landscape", "phase_fig01b_families", "phase_fig02_histograms"]
    draw_from(tmp_path / "phase", stems, tmp_path / "fig")
    for stem in stems:
        assert (tmp_path / "fig" / f"{stem}.png").exists()


def test_phase_figures_draw_the_thresholds_the_analysis_ran_with(tmp_path, monkeypatch):
    """phase.rules' low_s, chaotic and lazy come from metrics.json (config.rules), not from the plotting code."""
    import csv

    import matplotlib.axes

    from prh.plots.phase import plot_fig1a, plot_fig2

    lines, axvline = [], matplotlib.axes.Axes.axvline
    monkeypatch.setattr(matplotlib.axes.Axes, "axvline", lambda ax, x=0, *a, **k: lines.append(x) or axvline(ax, x, *a, **k))
    pairs = tmp_path / "pairs.csv"
    with open(pairs, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=["a", "b", "kind", "phase", "s_literal", "s_centred", "retrieval"])
        w.writeheader()
        w.writerows([{"a": "v", "b": "l", "kind": "cross", "phase": "chaotic", "s_literal": 0.2, "s_centred": 0.1,
                      "retrieval": 0.05}, {"a": "v", "b": "w", "kind": "vision", "phase": "lazy", "s_literal": 0.97,
                                           "s_centred": 0.9, "retrieval": 0.9}])
    metrics = {"config": {"rules": {"low_s": 0.3, "chaotic": 0.6, "lazy": 0.95}}, "chance": 0.1,
               "claims": {"C3_s_explains_alignment": {"statistic": 0.5, "p_value": 0.01, "verdict": "reproduced"},
                          "C2a_fraction_below_0.3_s_literal": {"statistic": 1.0}}}
    plot_fig1a(pairs, metrics, tmp_path / "fig1a.pdf")
    assert sorted(set(lines)) == [0.3, 0.6, 0.95]
    lines.clear()
    plot_fig2(pairs, metrics, tmp_path / "fig2.pdf")
    assert sorted(set(lines)) == [0.3, 0.6] and (tmp_path / "fig2.png").exists()


def test_each_phase_rule_gets_only_its_keys_of_the_block(repo_root):
    """Editing a plotting threshold (rules) reruns the analysis, not the per-model NTK jobs: each rule passes
    its command SLICES[command]; the commands index the block directly, so a key a slice lacks fails loudly
    (the end-to-end test above runs each command on its slice alone)."""
    import yaml

    from prh.studies.phase.design import SLICES

    schema = yaml.safe_load((repo_root / "workflow" / "schemas" / "phase.schema.yaml").read_text())
    workflow_keys = {"vision_models", "language_models", "paired_dataset", "groups"}  # read by phase.smk itself
    assert set().union(*SLICES.values()) | workflow_keys == set(schema["properties"])
    assert "rules" not in SLICES["model"] and "rules" not in SLICES["adaptive_lr"]
    rules = (repo_root / "workflow" / "rules" / "phase.smk").read_text()
    assert "json_param(PHASE_CFG)" not in rules
    assert all(rules.count(f'config=PHASE_CONFIG["{command}"]') == 1 for command in SLICES)


@pytest.mark.parametrize("rate, ba, p, label", [
    (0.0, 0.5, 1.0, "not testable"),  # the rule never fires: 0.5 by construction (the default run's C4a/C4b)
    (1.0, 0.5, 1.0, "not testable"),  # it always fires
    (0.3, float("nan"), float("nan"), "not testable"),  # a failure base rate of 0 or 1
    (0.3, 0.85, 0.01, "reproduced"),
    (0.3, 0.8, 0.01, "reproduced"),  # at min_balanced_accuracy
    (0.3, 0.79, 0.01, "not reproduced"),
    (0.3, 0.9, 0.05, "not reproduced"),  # p must be below alpha
])
def test_c4_rule_verdict(rate, ba, p, label):
    from prh.studies.phase.claims import rule_verdict

    res = {"predicted_failure_rate": rate, "balanced_accuracy": ba, "p_value": p}
    assert rule_verdict(res, min_balanced_accuracy=0.8, alpha=0.05) == label
