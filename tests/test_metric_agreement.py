"""Figs 12-14 (PRH appendix B): rank agreement of the metrics, and cross-modal alignment per metric."""

import json

import numpy as np
import pytest
import torch
from scipy import stats

from prh.cli import main as prh_main
from prh.io import load_features, save_features
from prh.metrics.engine import alignment_table
from prh.studies.metric_agreement.run import (
    spearman_matrix,
    upper_triangle,
    variant_label,
)


def write_features(folder, names, n=40, seed=0):
    g = torch.Generator().manual_seed(seed)
    latent = torch.randn(n, 5, generator=g)
    paths = []
    for i, name in enumerate(names):
        layers = [latent @ torch.randn(5, 8, generator=g) + (0.3 + 0.6 * i + l) * torch.randn(n, 8, generator=g)
                  for l in range(2 + i % 2)]
        paths.append(folder / f"{name}.safetensors")
        save_features(paths[-1], torch.stack(layers, dim=1), {"model": name})
    return [str(p) for p in paths]


def test_upper_triangle_takes_pairs_i_below_j_row_by_row():
    m = np.arange(16.0).reshape(4, 4)
    np.testing.assert_array_equal(upper_triangle(m), [1, 2, 3, 6, 7, 11])
    with pytest.raises(ValueError, match="square"):
        upper_triangle(np.ones((2, 3)))


def test_spearman_matrix_is_scipys_symmetric_with_a_unit_diagonal():
    a = np.array([0.1, 0.5, 0.3, 0.9, 0.7])
    b = np.array([1.0, 3.0, 2.0, 4.0, 0.0])  # one inversion of the order of a
    vecs = [a, 2 * a + 1, b, -a]
    rho, p = spearman_matrix(vecs)
    want = stats.spearmanr(np.stack(vecs, axis=1))
    np.testing.assert_allclose(rho, want.statistic, atol=1e-12)
    np.testing.assert_allclose(p[~np.eye(4, dtype=bool)], want.pvalue[~np.eye(4, dtype=bool)], atol=1e-12)
    np.testing.assert_array_equal(rho, rho.T)
    np.testing.assert_array_equal(np.diag(rho), 1.0)
    assert rho[0, 1] == pytest.approx(1.0) and rho[0, 3] == pytest.approx(-1.0)  # same ranks / reversed
    assert rho[0, 2] == pytest.approx(0.4)  # ranks 1 3 2 5 4 vs 2 4 3 5 1: 1 - 6 (1 + 1 + 1 + 0 + 9) / (5 (25 - 1))
    assert np.isnan(spearman_matrix([a, np.ones(5)])[0][0, 1])  # constant scores: undefined


def test_run_writes_fig12_to_14_numbers_with_truncated_batches(tmp_path):
    vision = ["v_sup_a", "v_sup_b", "v_rand", "v_ssl"]
    vfiles = write_features(tmp_path / "vision", vision, n=40)
    metrics = ["mutual_knn", "cka", "svcca", "cknna"]  # cknna: one panel of Fig 14, the rest "not computed"
    kw = dict(topk=4, quantile=0.95, cca_dim=3)
    vjson = []
    for metric in metrics:
        vjson.append(str(tmp_path / f"v_{metric}.json"))
        alignment_table(metric, x_names=vision, x_features=vfiles, out=vjson[-1], **kw)
    lms = ["gpt_s", "gpt_m", "gpt_l", "bert"]
    lfiles = write_features(tmp_path / "eval", lms, n=36, seed=1)
    efiles = write_features(tmp_path / "eval_v", vision, n=36, seed=2)
    cjson = []
    for metric in metrics:
        cjson.append(str(tmp_path / f"c_{metric}.json"))
        alignment_table(metric, x_names=lms, x_features=lfiles, y_names=vision, y_features=efiles, out=cjson[-1], **kw)
    language = tmp_path / "language.json"
    bpb = {"gpt_s": 1.5, "gpt_m": 1.0, "gpt_l": 0.7}
    language.write_text(json.dumps({"models": {**{m: {"bpb": v} for m, v in bpb.items()}, "bert": {"bpb": None}}}))
    families = {"v_sup_a": "sup", "v_sup_b": "sup", "v_ssl": "ssl"}
    out = tmp_path / "exp"
    outputs = [a for name in ("metric_agreement", "cross_metrics", "metrics")
               for a in (f"--{name.replace('_', '-')}", str(out / f"{name}.json"))]
    prh_main(["run-metric-agreement", "--vision-alignments", *vjson, "--vision-names", *vision,
              "--vision-features", *vfiles, "--batch-sizes", "24", "--cross-alignments", *cjson,
              "--language", str(language), "--families", json.dumps(families), "--topk", "4", "--quantile", "0.95",
              "--cca-dim", "3", *outputs, "--threads", "1"])
    assert sorted(p.name for p in out.iterdir()) == ["cross_metrics.json", "metric_agreement.json", "metrics.json"]
    agree = json.loads((out / "metric_agreement.json").read_text())
    assert agree["labels"] == [variant_label(m, b) for m in metrics for b in (40, 24)]
    assert agree["labels"][0] == "mutual_knn (bsz=40)" and agree["settings"]["n_pairs"] == 6
    # the bsz=24 variant is the table of the first 24 items, written as truncated files
    cut = []
    for name, path in zip(vision, vfiles):
        cut.append(str(tmp_path / f"cut_{name}.safetensors"))
        save_features(cut[-1], load_features(path)[:24], {"model": name})
    for metric in metrics:
        want = upper_triangle(alignment_table(metric, x_names=vision, x_features=cut, **kw)["scores"])
        np.testing.assert_allclose(agree["pair_scores"][f"{metric} (bsz=24)"], want, atol=1e-12)
    full = upper_triangle(json.loads(open(vjson[1]).read())["scores"])
    np.testing.assert_allclose(agree["pair_scores"]["cka (bsz=40)"], full)
    rho = np.array(agree["spearman"], dtype=float)
    want = stats.spearmanr(np.stack([agree["pair_scores"][lab] for lab in agree["labels"]], axis=1)).statistic
    np.testing.assert_allclose(rho, want, atol=1e-12)
    off = rho[~np.eye(8, dtype=bool)]
    assert agree["summary"]["min_spearman"] == pytest.approx(off.min())
    assert agree["summary"]["median_spearman"] == pytest.approx(np.median(off))
    # the p the weighed verdict pools is the least-agreeing pair's own two-sided p, not the largest
    i, j = np.unravel_index(np.argmin(np.where(np.eye(8, dtype=bool), np.inf, rho)), rho.shape)
    x, y = (agree["pair_scores"][agree["labels"][k]] for k in (i, j))
    assert agree["summary"]["p_at_min"] == pytest.approx(stats.spearmanr(x, y).pvalue)

    cross = json.loads((out / "cross_metrics.json").read_text())
    assert cross["metrics"] == metrics
    rec = cross["per_metric"]["cka"]
    assert [lm["name"] for lm in rec["lms"]] == ["gpt_s", "gpt_m", "gpt_l"] and rec["skipped_no_bpb"] == ["bert"]
    assert list(rec["families"]) == ["sup", "v_rand", "ssl"]
    table = json.loads(open(cjson[1]).read())
    s = np.array(table["scores"])
    np.testing.assert_allclose(rec["families"]["sup"]["mean_alignment"], s[:3, :2].mean(axis=1), atol=1e-12)
    np.testing.assert_allclose(rec["families"]["ssl"]["mean_alignment"], s[:3, 3], atol=1e-12)
    assert rec["families"]["sup"]["spearman_r"] == pytest.approx(
        stats.spearmanr([-0.5, 0.0, 0.3], s[:3, :2].mean(axis=1)).statistic)
    assert rec["pooled"]["spearman_r"] == pytest.approx(
        stats.spearmanr(np.repeat([-0.5, 0.0, 0.3], 4), s[:3].ravel()).statistic)
    summary = json.loads((out / "metrics.json").read_text())
    assert summary["metric_agreement"]["min_spearman"] == pytest.approx(off.min())
    assert set(summary["cross_modal"]) == set(metrics)

    for stem in ("metric_agreement_fig12", "metric_agreement_fig13_cross_metrics", "metric_agreement_fig14_cross_metrics"):
        name = "metric_agreement" if stem.endswith("fig12") else "cross_metrics"
        prh_main(["plot", stem, "--out", str(tmp_path / "fig" / f"{stem}.pdf"),
                  "--input", f"{'agreement' if name == 'metric_agreement' else 'cross'}={out / f'{name}.json'}"])
    for stem in ("metric_agreement_fig12", "metric_agreement_fig13_cross_metrics", "metric_agreement_fig14_cross_metrics"):
        for suffix in (".pdf", ".png"):
            assert (tmp_path / "fig" / f"{stem}{suffix}").stat().st_size > 1000
    with pytest.raises(ValueError, match="one JSON per metric"):
        prh_main(["run-metric-agreement", "--vision-alignments", vjson[0], vjson[0], "--vision-names", *vision,
                  "--vision-features", *vfiles, "--cross-alignments", *cjson, "--language", str(language),
                  "--topk", "4", "--quantile", "0.95", "--cca-dim", "3", *outputs])
    with pytest.raises(ValueError, match="below the full N=40"):
        prh_main(["run-metric-agreement", "--vision-alignments", *vjson, "--vision-names", *vision,
                  "--vision-features", *vfiles, "--batch-sizes", "40", "--cross-alignments", *cjson,
                  "--language", str(language), "--topk", "4", "--quantile", "0.95", "--cca-dim", "3", *outputs])
    with pytest.raises(ValueError, match="other settings"):
        prh_main(["run-metric-agreement", "--vision-alignments", *vjson, "--vision-names", *vision,
                  "--vision-features", *vfiles, "--batch-sizes", "24", "--cross-alignments", *cjson,
                  "--language", str(language),
                  "--topk", "5", "--quantile", "0.95", "--cca-dim", "3", *outputs])


def test_figs_13_and_14_draw_every_metric_of_the_registry_once():
    """Fig 13 is the paper's four; Fig 14 is the rest of prh.metrics.names, so a new metric gets a panel. A panel's
    title gives k for the metrics that have one (the k-NN lists and CKNNA: their entries' topk)."""
    from prh.metrics.names import KNN_METRICS, SUPPORTED_METRICS
    from prh.plots.metric_agreement import FIG13_METRICS, FIG14_METRICS, TOPK_METRICS

    published = ["cknna", "cycle_knn", "edit_distance_knn", "lcs_knn"]
    assert not set(FIG13_METRICS) & set(FIG14_METRICS)
    assert sorted(FIG13_METRICS + FIG14_METRICS) == sorted(SUPPORTED_METRICS)
    assert FIG13_METRICS == ["cka", "unbiased_cka", "svcca", "mutual_knn"]  # the figures as published, in their order
    assert [m for m in FIG14_METRICS if m in published] == published
    assert {*KNN_METRICS, "cknna"} <= set(TOPK_METRICS) and not {"cka", "unbiased_cka", "svcca"} & set(TOPK_METRICS)
