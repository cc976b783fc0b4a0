"""Fig 10 (PRH appendix A): CKNNA over k, centred on the weakest LM and standardised."""

import json

import numpy as np
import pytest
import torch

from prh.cli import main as prh_main
from prh.io import save_features
from prh.metrics.engine import alignment_table
from prh.studies.metric_agreement.locality import locality_table, locality_trends, resolve_ks


def write_features(folder, names, n=48, seed=0):
    """Models sharing a latent with noise growing by model (so scores differ), 2-3 layers each."""
    g = torch.Generator().manual_seed(seed)
    latent = torch.randn(n, 5, generator=g)
    paths = []
    for i, name in enumerate(names):
        layers = [latent @ torch.randn(5, 8, generator=g) + (0.5 + i + l) * torch.randn(n, 8, generator=g)
                  for l in range(2 + i % 2)]
        paths.append(folder / f"{name}.safetensors")
        save_features(paths[-1], torch.stack(layers, dim=1), {"model": name})
    return [str(p) for p in paths]


def test_resolve_ks_turns_n_minus_1_into_an_int_and_sorts():
    assert resolve_ks([50, "N-1", 10], 64) == [10, 50, 63]
    assert resolve_ks(["-1"], 64) == resolve_ks([-1], 64) == [63]
    for bad, match in ((1, "between 2"), (64, "between 2"), ("ten", "not an integer"), (["N-1", 63], "distinct")):
        with pytest.raises(ValueError, match=match):
            resolve_ks(bad if isinstance(bad, list) else [bad], 64)


def test_trends_centre_on_the_weakest_lm_and_divide_by_the_std_over_lms():
    # rows lm_a, lm_b, lm_c, bert (no bpb); columns v1, v2 (family f1), v3 (f2, constant over LMs)
    scores = [[0.4, 0.3, 0.2], [0.1, 0.3, 0.2], [0.2, 0.1, 0.2], [0.9, 0.9, 0.9]]
    tables = {"settings": {"n": 100}, "x_names": ["lm_a", "lm_b", "lm_c", "bert"], "y_names": ["v1", "v2", "v3"],
              "tables": [{"k": 10, "metric": "cknna", "scores": scores}]}
    out = locality_trends(tables, lm_score={"lm_a": 0.5, "lm_b": -0.2, "lm_c": 0.1},
                          families={"v1": "f1", "v2": "f1", "v3": "f2"})
    assert [lm["name"] for lm in out["lms"]] == ["lm_b", "lm_c", "lm_a"] and out["weakest_lm"] == "lm_b"
    assert out["skipped_no_bpb"] == ["bert"] and out["family_order"] == ["f1", "f2"]
    row = out["per_k"][0]
    # v1 over (b, c, a) = 0.1, 0.2, 0.4: centred 0, .1, .3; population variance .14/9
    z1 = np.array([0, 0.3, 0.9]) / np.sqrt(0.14)
    z2 = np.array([0, -0.6, 0]) / np.sqrt(0.08)  # v2 = .3, .1, .3: variance .08/9
    np.testing.assert_allclose(row["standardised"]["v1"], z1, atol=1e-12)
    np.testing.assert_allclose(row["standardised"]["v2"], z2, atol=1e-12)
    for v in ("v1", "v2"):
        assert row["standardised"][v][0] == 0 and np.std(row["standardised"][v]) == pytest.approx(1.0)
    assert np.isnan(row["standardised"]["v3"]).all() and row["degenerate"] == ["v3"]
    np.testing.assert_allclose(row["family_mean"]["f1"], (z1 + z2) / 2, atol=1e-12)
    np.testing.assert_allclose(row["family_mean"]["all"], (z1 + z2) / 2, atol=1e-12)  # v3 has no finite value
    assert np.isnan(row["family_mean"]["f2"]).all()
    np.testing.assert_allclose(row["raw"]["v1"], [0.1, 0.2, 0.4])
    assert row["mean_alignment"] == pytest.approx(2.0 / 9)
    # per-LM means over vision 0.2, 1/6, 0.3 against ascending 1 - bpb: ranks 2,1,3 -> rho = 1 - 6*2/24
    assert row["alignment_vs_lm"]["spearman_r"] == pytest.approx(0.5)
    assert row["family_vs_lm"]["f1"]["spearman_r"] == pytest.approx(0.5)  # f1 means .2, .15, .35
    with pytest.raises(ValueError, match="two language models"):
        locality_trends(tables, lm_score={"lm_a": 0.5}, families={})


def test_cknna_at_n_minus_1_is_unbiased_cka_not_cka(tmp_path):
    lang = write_features(tmp_path, ["lm_1", "lm_2"], n=40)
    vis = write_features(tmp_path, ["v_1", "v_2"], n=40, seed=1)
    kw = dict(x_names=["lm_1", "lm_2"], x_features=lang, y_names=["v_1", "v_2"], y_features=vis, quantile=0.95)
    engine = locality_table(ks=["N-1", 38], full_k_as_unbiased_cka=False, **kw)["tables"]
    assert [t["k"] for t in engine] == [38, 39] and all(t["metric"] == "cknna" for t in engine)
    shortcut = locality_table(ks=[-1], **kw)["tables"][0]
    assert shortcut["k"] == 39 and shortcut["metric"] == "unbiased_cka"
    np.testing.assert_allclose(engine[1]["scores"], shortcut["scores"], atol=1e-6)  # the same number
    assert engine[1]["best_pairs"] == shortcut["best_pairs"]
    cka = alignment_table("cka", topk=10, **kw)["scores"]
    assert np.abs(engine[1]["scores"] - cka).max() > 0.02  # biased CKA is another number
    assert np.abs(engine[0]["scores"] - shortcut["scores"]).max() > 1e-3  # k = N-2 already differs


def test_cli_writes_tables_trends_metrics_and_the_figure_renders(tmp_path):
    lang = write_features(tmp_path, ["gpt_s", "gpt_l", "bert"], n=48)
    vis = write_features(tmp_path, ["v_sup", "v_rand", "v_ssl"], n=48, seed=1)
    language = tmp_path / "language.json"
    language.write_text(json.dumps({"models": {"gpt_s": {"bpb": 1.2}, "gpt_l": {"bpb": 0.8}, "bert": {"bpb": None}}}))
    out = tmp_path / "exp"
    prh_main(["run-locality", "--x-names", "gpt_s", "gpt_l", "bert", "--x-features", *lang,
              "--y-names", "v_sup", "v_rand", "v_ssl", "--y-features", *vis, "--locality-ks", "N-1", "5", "10",
              "--language", str(language), "--families", '{"v_sup": "sup", "v_ssl": "ssl"}',
              "--quantile", "0.9", "--locality", str(out / "locality.json"), "--metrics", str(out / "locality_metrics.json"),
              "--threads", "1"])
    assert sorted(p.name for p in out.iterdir()) == ["locality.json", "locality_metrics.json"]
    data = json.loads((out / "locality.json").read_text())
    assert data["settings"]["ks"] == [5, 10, 47] and data["settings"]["n"] == 48
    assert [t["metric"] for t in data["tables"]] == ["cknna", "cknna", "unbiased_cka"]
    direct = alignment_table("cknna", x_names=["gpt_s", "gpt_l", "bert"], x_features=lang,
                             y_names=["v_sup", "v_rand", "v_ssl"], y_features=vis, topk=5, quantile=0.9)
    np.testing.assert_allclose(data["tables"][0]["scores"], direct["scores"], atol=1e-12)
    assert [lm["name"] for lm in data["lms"]] == ["gpt_s", "gpt_l"] and data["skipped_no_bpb"] == ["bert"]
    assert data["family_order"] == ["sup", "v_rand", "ssl"]
    for row in data["per_k"]:
        assert set(row["family_mean"]) == {"sup", "v_rand", "ssl", "all"}
        assert all(z[0] == 0 for z in row["standardised"].values())
        # two LMs: z = (0, ±2) since the population std of two values is half their gap
        assert all(abs(abs(z[1]) - 2) < 1e-9 for z in row["standardised"].values())
    metrics = json.loads((out / "locality_metrics.json").read_text())["locality"]
    assert list(metrics) == ["k5", "k10", "k47"] and metrics["k47"]["full_k"] and not metrics["k5"]["full_k"]
    assert metrics["k5"]["spearman_r"] is None  # two LMs: no correlation, written as null
    assert metrics["k10"]["mean_alignment"] == pytest.approx(np.mean(np.array(data["tables"][1]["scores"])[:2]))
    prh_main(["plot", "metric_agreement_fig10_locality", "--out", str(tmp_path / "fig" / "metric_agreement_fig10_locality.pdf"),
              "--input", f"locality={out / 'locality.json'}"])
    for suffix in (".pdf", ".png"):
        assert (tmp_path / "fig" / f"metric_agreement_fig10_locality{suffix}").stat().st_size > 1000
