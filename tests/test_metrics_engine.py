"""The all-layer-pairs engine against a direct per-pair computation, and the model-set table + CLI."""

import json
from pathlib import Path

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from hypothesis import given, settings
from hypothesis import strategies as st
from sklearn.cross_decomposition import CCA

from prh.cli import main as prh_main
from prh.io import save_features
from prh.metrics import SUPPORTED_METRICS, layer_pair_scores, measure, prepare_features

# ---- direct implementations, written plainly after the reference code (PRH appendix A-B) ----


def knn_lists(f, k):
    return (f @ f.T).fill_diagonal_(float("-inf")).argsort(dim=1, descending=True)[:, :k]


def lcs_length(x, y):
    dp = [[0] * (len(y) + 1) for _ in range(len(x) + 1)]
    for i in range(1, len(x) + 1):
        for j in range(1, len(y) + 1):
            dp[i][j] = dp[i - 1][j - 1] + 1 if x[i - 1] == y[j - 1] else max(dp[i - 1][j], dp[i][j - 1])
    return dp[-1][-1]


def levenshtein(x, y):
    dp = [[i + j if i * j == 0 else 0 for j in range(len(y) + 1)] for i in range(len(x) + 1)]
    for i in range(1, len(x) + 1):
        for j in range(1, len(y) + 1):
            dp[i][j] = min(dp[i - 1][j] + 1, dp[i][j - 1] + 1, dp[i - 1][j - 1] + (x[i - 1] != y[j - 1]))
    return dp[-1][-1]


def hsic_biased(K, L):
    H = torch.eye(K.shape[0], dtype=K.dtype) - 1 / K.shape[0]
    return torch.trace(K @ H @ L @ H)


def hsic_unbiased(K, L):
    m = K.shape[0]
    Kt, Lt = K.clone().fill_diagonal_(0), L.clone().fill_diagonal_(0)
    value = (Kt * Lt.T).sum() + Kt.sum() * Lt.sum() / ((m - 1) * (m - 2)) - 2 * (Kt @ Lt).sum() / (m - 2)
    return value / (m * (m - 3))


# One plain implementation per metric of the table (prh.metrics.names): f(a, b, k, cca_dim) on one layer pair of
# L2-normalised features, recomputing everything. A metric added to the table adds its reference here.


def mutual_knn(a, b, k, cca_dim):
    n, A, B = a.shape[0], knn_lists(a, k), knn_lists(b, k)
    mask_a = torch.zeros(n, n).scatter_(1, A, 1)
    mask_b = torch.zeros(n, n).scatter_(1, B, 1)
    return ((mask_a * mask_b).sum(1) / k).mean().item()


def cycle_knn(a, b, k, cca_dim):
    n, A, B = a.shape[0], knn_lists(a, k), knn_lists(b, k)
    return (A[B] == torch.arange(n).view(-1, 1, 1)).reshape(n, -1).any(1).double().mean().item()


def lcs_knn(a, b, k, cca_dim):
    return np.mean([lcs_length(x, y) for x, y in zip(knn_lists(a, k).tolist(), knn_lists(b, k).tolist())]) / k


def edit_distance_knn(a, b, k, cca_dim):
    return 1 - np.mean([levenshtein(x, y) for x, y in zip(knn_lists(a, k).tolist(), knn_lists(b, k).tolist())]) / k


def cka(a, b, k, cca_dim, hsic=hsic_biased):
    K, L = a @ a.T, b @ b.T
    return (hsic(K, L) / torch.sqrt(hsic(K, K) * hsic(L, L))).item()


def unbiased_cka(a, b, k, cca_dim):
    return cka(a, b, k, cca_dim, hsic=hsic_unbiased)


def cknna(a, b, k, cca_dim):
    def align(K, L):
        top_k = K.clone().fill_diagonal_(float("-inf")).topk(k, dim=1).indices
        top_l = L.clone().fill_diagonal_(float("-inf")).topk(k, dim=1).indices
        mask = torch.zeros_like(K).scatter_(1, top_k, 1) * torch.zeros_like(L).scatter_(1, top_l, 1)
        return hsic_unbiased(mask * K, mask * L)

    K, L = a @ a.T, b @ b.T
    return (align(K, L) / torch.sqrt(align(K, K) * align(L, L))).item()


def svcca(a, b, k, cca_dim):
    """Standardise, top singular vectors, then sklearn's CCA and the mean correlation."""
    def top_u(x):
        z = (x - x.mean(0)) / (x.std(0) + 1e-8)
        return torch.linalg.svd(z, full_matrices=False)[0][:, :cca_dim].numpy()

    ua, ub = top_u(a), top_u(b)
    xa, xb = CCA(n_components=cca_dim, max_iter=5000, tol=1e-12).fit(ua, ub).transform(ua, ub)
    return np.mean([np.corrcoef(xa[:, i], xb[:, i])[0, 1] for i in range(cca_dim)])


DIRECT = {f.__name__: f for f in (mutual_knn, cycle_knn, lcs_knn, edit_distance_knn, cka, unbiased_cka, cknna, svcca)}


def direct(metric, a, b, k, cca_dim=4):
    """One metric on one layer pair, recomputing everything, as the reference code does."""
    return DIRECT[metric](a, b, k, cca_dim)


def test_every_metric_of_the_table_has_a_plain_reference():
    missing = sorted(set(SUPPORTED_METRICS) - set(DIRECT))
    assert not missing, f"add a plain implementation of {missing} to DIRECT in {__file__} (the engine is tested on it)"


def model_feats(n, layers, d, seed):
    g = torch.Generator().manual_seed(seed)
    shared = torch.randn(n, 6, generator=g, dtype=torch.float64)
    return torch.stack([shared @ torch.randn(6, d, generator=g, dtype=torch.float64) + torch.randn(n, d, generator=g, dtype=torch.float64) * (l + 1) for l in range(layers)], dim=1)


@pytest.mark.parametrize("metric", SUPPORTED_METRICS)
def test_layer_pair_scores_equal_the_direct_per_pair_computation(metric):
    fa, fb = prepare_features(model_feats(40, 3, 10, 0)), prepare_features(model_feats(40, 2, 7, 1))
    res = layer_pair_scores(metric, fa, fb, topk=5, cca_dim=4, dtype=torch.float64)
    want = np.array([[direct(metric, F.normalize(fa[:, i], dim=1), F.normalize(fb[:, j], dim=1), 5) for j in range(2)] for i in range(3)])
    assert res.scores.shape == (3, 2)
    np.testing.assert_allclose(res.scores, want, atol=1e-6)
    assert res.best_score == pytest.approx(want.max(), abs=1e-6)
    assert res.best_pair == np.unravel_index(want.argmax(), want.shape)


@settings(max_examples=15, deadline=None)
@given(
    n=st.integers(12, 40), la=st.integers(1, 3), lb=st.integers(1, 3),
    d=st.integers(2, 8), k=st.integers(2, 6), seed=st.integers(0, 10_000),
    metric=st.sampled_from(SUPPORTED_METRICS),
)
def test_engine_matches_measure_for_any_shapes_and_k(n, la, lb, d, k, seed, metric):
    g = torch.Generator().manual_seed(seed)
    fa, fb = torch.randn(n, la, d, generator=g, dtype=torch.float64), torch.randn(n, lb, d + 1, generator=g, dtype=torch.float64)
    res = layer_pair_scores(metric, fa, fb, topk=k, cca_dim=2, dtype=torch.float64)
    assert res.scores.shape == (la, lb)
    i, j = la - 1, lb - 1
    want = measure(metric, F.normalize(fa[:, i], dim=1), F.normalize(fb[:, j], dim=1), topk=k, cca_dim=2, dtype=torch.float64)
    assert res.scores[i, j] == pytest.approx(want, abs=1e-9, nan_ok=True)
    if metric in ("mutual_knn", "lcs_knn", "edit_distance_knn", "cycle_knn", "svcca"):
        assert np.all((res.scores >= -1e-12) & (res.scores <= 1 + 1e-12))
    # cknna is not: its 1ᵀMP1 term differs from 1ᵀPM1 because k-NN masks are not symmetric
    if metric in ("mutual_knn", "lcs_knn", "edit_distance_knn", "cka", "unbiased_cka", "svcca"):
        swapped = layer_pair_scores(metric, fb, fa, topk=k, cca_dim=2, dtype=torch.float64).scores
        np.testing.assert_allclose(swapped, res.scores.T, atol=1e-9)  # symmetric metrics


def write_models(tmp_path, n=30):
    paths = {}
    for seed, (name, layers, d) in enumerate([("m_small", 2, 6), ("m_deep", 4, 9), ("m_wide", 3, 16)]):
        paths[name] = tmp_path / f"{name}.safetensors"
        save_features(paths[name], model_feats(n, layers, d, seed).float(), {"model": name})
    return paths


def test_cli_writes_the_alignment_table_of_two_model_sets(tmp_path):
    paths = write_models(tmp_path)
    out = tmp_path / "alignment" / "x__y.json"
    prh_main([
        "align", "--metric", "mutual_knn", "--topk", "4", "--quantile", "0.9",
        "--x-names", "m_small", "m_deep", "--x-features", str(paths["m_small"]), str(paths["m_deep"]),
        "--y-names", "m_wide", "--y-features", str(paths["m_wide"]), "--out", str(out), "--layer-scores",
    ])
    table = json.loads(out.read_text())
    assert table["settings"] == {"metric": "mutual_knn", "topk": 4, "quantile": 0.9, "n": 30, "cca_dim": 10, "normalize": True, "dtype": "float32"}  # no skip_x_layers: 0
    assert table["x_names"] == ["m_small", "m_deep"] and table["y_names"] == ["m_wide"]
    assert table["x_layers"] == [2, 4] and table["y_layers"] == [3]
    assert np.array(table["scores"]).shape == (2, 1)
    from prh.io import load_features

    for i, name in enumerate(["m_small", "m_deep"]):
        res = layer_pair_scores("mutual_knn", prepare_features(load_features(paths[name]), q=0.9), prepare_features(load_features(paths["m_wide"]), q=0.9), topk=4)
        assert table["scores"][i][0] == pytest.approx(res.best_score, abs=1e-12)
        assert tuple(table["best_pairs"][i][0]) == res.best_pair
        np.testing.assert_allclose(table["layer_scores"][f"{name}__m_wide"], res.scores, atol=1e-12)
    assert "calibration" not in table


def test_a_set_against_itself_is_computed_once_and_has_a_unit_diagonal(tmp_path):
    paths = write_models(tmp_path)
    out = tmp_path / "x__x.json"
    prh_main([
        "align", "--metric", "cknna", "--topk", "5", "--quantile", "0.95", "--x-names", *paths, "--x-features", *map(str, paths.values()),
        "--out", str(out), "--null-permutations", "9", "--seed", "3",
    ])
    table = json.loads(out.read_text())
    scores = np.array(table["scores"])
    assert table["y_names"] == list(paths) and scores.shape == (3, 3)
    np.testing.assert_allclose(np.diag(scores), 1.0, atol=1e-6)
    assert np.all(scores[~np.eye(3, dtype=bool)] < 1 - 1e-3)
    calib = table["calibration"]
    assert calib["permutations"] == 9 and calib["seed"] == 3
    p = np.array(calib["p_value"])
    assert p.shape == (3, 3) and np.all((p >= 0.1) & (p <= 1))  # resolution 1/(P+1)
    np.testing.assert_allclose(np.diag(p), 0.1)  # a model is more aligned with itself than any shuffle
    # every cell carries the authors' calibrated score over the same permutations, and its tau. With 9
    # permutations tau (the ceil(0.95 x 10) = 10th of the observed and the 9 null maxima) is the largest of them, so
    # no cell clears it: the score is 0 everywhere, even for a model against itself (prh.metrics.calibration)
    arist, tau = np.array(calib["aristotelian"]), np.array(calib["aristotelian_tau"])
    assert np.all(tau >= scores - 1e-9) and np.all(arist == 0)


def test_table_rejects_feature_files_with_different_items(tmp_path):
    paths = write_models(tmp_path)
    save_features(tmp_path / "short.safetensors", torch.randn(20, 2, 4), {"model": "short"})
    with pytest.raises(SystemExit, match="same items"):  # a user error: one line, no traceback
        prh_main(["align", "--metric", "mutual_knn", "--topk", "10", "--quantile", "0.95", "--x-names", "a", "b", "--x-features", str(paths["m_small"]), str(tmp_path / "short.safetensors"), "--out", str(tmp_path / "o.json")])


@pytest.mark.parametrize("metric", ["mutual_knn", "unbiased_cka"])
def test_n_items_equals_the_table_of_truncated_feature_files(tmp_path, metric):
    from prh.io import load_features
    from prh.metrics.engine import alignment_table

    paths = write_models(tmp_path)
    cut = {}
    for name, path in paths.items():
        cut[name] = tmp_path / f"cut_{name}.safetensors"
        save_features(cut[name], load_features(path)[:18], {"model": name})
    out = tmp_path / "cli.json"
    prh_main(["align", "--metric", metric, "--topk", "4", "--quantile", "0.95", "--x-names", *paths, "--x-features", *map(str, paths.values()),
              "--n-items", "18", "--out", str(out)])
    table = json.loads(out.read_text())
    want = alignment_table(metric, x_names=list(cut), x_features=list(map(str, cut.values())), topk=4)
    assert table["settings"]["n"] == want["settings"]["n"] == 18
    np.testing.assert_allclose(table["scores"], want["scores"], atol=1e-12)
    assert table["best_pairs"] == want["best_pairs"]
    full = alignment_table(metric, x_names=list(paths), x_features=list(map(str, paths.values())), topk=4)
    assert not np.allclose(full["scores"], want["scores"])  # 30 items give other numbers: the cut is real
    with pytest.raises(ValueError, match="n_items=31"):
        alignment_table(metric, x_names=list(paths), x_features=list(map(str, paths.values())), topk=4, n_items=31)


@pytest.mark.parametrize("metric", ["mutual_knn", "cknna"])
def test_skip_x_layers_drops_the_embedding_layer_from_scores_and_null(tmp_path, metric):
    from prh.metrics.engine import alignment_table

    g = torch.Generator().manual_seed(0)
    vision = torch.randn(40, 2, 8, generator=g)
    # an "LM" whose layer 0 (its embedding layer) is a copy of the vision model's layer 1
    lm = torch.cat([vision[:, 1:2], torch.randn(40, 2, 8, generator=g)], dim=1)
    files = {}
    for name, feats in [("lm", lm), ("vision", vision), ("lm_cut", lm[:, 1:]), ("vision_cut", vision[:, 1:])]:
        files[name] = str(tmp_path / f"{name}.safetensors")
        save_features(files[name], feats, {"model": name})
    kw = dict(topk=5, quantile=1.0, null_permutations=9, seed=4, y_names=["vision"], y_features=[files["vision"]])
    full = alignment_table(metric, x_names=["lm", "vision"], x_features=[files["lm"], files["vision"]], layer_scores=True, **kw)
    assert full["scores"][0][0] == pytest.approx(1.0) and full["best_pairs"][0][0] == [0, 1]
    out = tmp_path / "skip.json"
    prh_main(["align", "--metric", metric, "--topk", "5", "--quantile", "1", "--x-names", "lm", "vision",
              "--x-features", files["lm"], files["vision"], "--y-names", "vision", "--y-features", files["vision"],
              "--null-permutations", "9", "--seed", "4", "--skip-x-layers", "1", "--layer-scores", "--out", str(out)])
    skip = json.loads(out.read_text())
    assert skip["settings"]["skip_x_layers"] == 1 and "skip_x_layers" not in full["settings"]
    assert skip["scores"][0][0] < 0.9  # the copy is gone: only the random layers are left
    assert skip["x_layers"] == [3, 2] and skip["y_layers"] == [2]  # all layers counted, y untouched
    # the same table as one of files without layer 0, scores and null alike; pairs in the file's numbering
    cut = alignment_table(metric, x_names=["lm", "vision"], x_features=[files["lm_cut"], files["vision_cut"]], **kw)
    np.testing.assert_allclose(skip["scores"], cut["scores"], atol=1e-12)
    for key in ("null_max_mean", "p_value", "corrected"):
        np.testing.assert_allclose(skip["calibration"][key], cut["calibration"][key], atol=1e-12)
    assert skip["best_pairs"] == [[[a + 1, b] for a, b in row] for row in cut["best_pairs"]]
    # the same permutations, fewer layer pairs: every null maximum can only fall; the copy's cell is no longer significant
    assert np.all(np.array(skip["calibration"]["null_max_mean"]) <= np.array(full["calibration"]["null_max_mean"]) + 1e-12)
    assert full["calibration"]["p_value"][0][0] == pytest.approx(0.1)
    rows = skip["layer_scores"]["lm__vision"]  # skipped rows NaN (null), kept rows as in the full table
    assert rows[0] == [None, None]
    np.testing.assert_allclose(rows[1:], full["layer_scores"]["lm__vision"][1:], atol=1e-12)
    with pytest.raises(ValueError, match="leaves no layer of x model 'vision'"):
        alignment_table(metric, x_names=["lm", "vision"], x_features=[files["lm"], files["vision"]], skip_x_layers=2, **kw)
    with pytest.raises(ValueError, match="skip_x_layers"):
        alignment_table(metric, x_names=["lm"], x_features=[files["lm"]], skip_x_layers=-1, **kw)


# ---- one pass over all metrics ----


def test_one_pass_over_all_metrics_writes_the_tables_each_metric_gives_alone(tmp_path):
    """The eight tables of one `prh align --metric ...` call equal eight single-metric calls:
    scores, best pairs, layer scores and, for the metric with a null, the calibration."""
    from prh.metrics.engine import alignment_table

    paths = write_models(tmp_path)
    files = list(map(str, paths.values()))
    outs = [str(tmp_path / "one_pass" / f"{m}.json") for m in SUPPORTED_METRICS]
    prh_main(["align", "--metric", *SUPPORTED_METRICS, "--topk", "4", "--quantile", "0.95", "--cca-dim", "3",
              "--x-names", "m_deep", "m_wide", "--x-features", files[1], files[2],
              "--y-names", *paths, "--y-features", *files, "--skip-x-layers", "1", "--layer-scores",
              "--null-permutations", "7", "--null-metrics", "mutual_knn", "--seed", "5", "--out", *outs])
    for metric, out in zip(SUPPORTED_METRICS, outs):
        got = json.loads(Path(out).read_text())
        want = alignment_table(metric, x_names=["m_deep", "m_wide"], x_features=files[1:], y_names=list(paths),
                               y_features=files, topk=4, quantile=0.95, cca_dim=3, skip_x_layers=1, layer_scores=True,
                               null_permutations=7 if metric == "mutual_knn" else 0, seed=5)
        want = json.loads(json.dumps(want, default=lambda a: np.asarray(a).tolist()))
        assert got["settings"] == want["settings"] and got["settings"]["metric"] == metric
        assert got["best_pairs"] == want["best_pairs"], metric
        np.testing.assert_allclose(got["scores"], want["scores"], rtol=1e-12, atol=1e-12)
        for key, rows in want["layer_scores"].items():
            np.testing.assert_allclose(np.array(got["layer_scores"][key], dtype=float), np.array(rows, dtype=float),
                                       rtol=1e-12, atol=1e-12)
        assert ("calibration" in got) == (metric == "mutual_knn")
        if metric == "mutual_knn":
            assert got["calibration"] == want["calibration"]  # integer counts: exactly the same null


def test_align_rejects_outputs_that_do_not_pair_with_metrics(tmp_path):
    from prh.metrics.engine import alignment_tables

    paths = write_models(tmp_path)
    files = list(map(str, paths.values()))
    with pytest.raises(SystemExit):
        prh_main(["align", "--metric", "mutual_knn", "cka", "--topk", "4", "--quantile", "0.95", "--x-names", *paths,
                  "--x-features", *files, "--out", str(tmp_path / "only_one.json")])
    with pytest.raises(ValueError, match="distinct"):
        alignment_tables(["cka", "cka"], x_names=list(paths), x_features=files)
    with pytest.raises(ValueError, match="not among the metrics"):
        alignment_tables(["cka"], x_names=list(paths), x_features=files, null_metrics=["mutual_knn"])
    assert not (tmp_path / "only_one.json").exists()  # nothing written


@pytest.mark.parametrize("n, k, seed", [(2, 1, 0), (30, 4, 1), (200, 17, 2), (64, 63, 3)])
def test_reciprocal_flags_are_the_definition(n, k, seed):
    """flag[i, p] = 1[i in the list of idx[i, p]], from the lists themselves (knn's, and arbitrary ones)."""
    from prh.metrics.knn import knn, reciprocal_flags

    g = torch.Generator().manual_seed(seed)
    lists = [knn(torch.nn.functional.normalize(torch.randn(n, 3, generator=g), dim=1), k)[0],
             torch.stack([torch.randperm(n, generator=g)[:k] for _ in range(n)])]
    for idx in lists:
        want = torch.tensor([[i in set(idx[j].tolist()) for j in row.tolist()] for i, row in enumerate(idx)]).view(n, k)
        assert torch.equal(reciprocal_flags(idx), want)


def test_reciprocal_flags_hold_n_k_not_n_k_squared():
    """3,000 items with k = 2,999 (a dense k-NN graph: every flag true): 9 million slots; gathering each
    neighbour's list (N x k x k) would take 216 GB."""
    from prh.metrics.knn import reciprocal_flags

    n = 3000
    idx = torch.stack([torch.cat([torch.arange(i + 1, n), torch.arange(0, i)]) for i in range(n)])
    assert reciprocal_flags(idx).all()
    idx[0, 0] = 0  # item 0 lists itself in place of item 1, which still lists 0: (1, 0) stays reciprocal
    flags = reciprocal_flags(idx)
    assert bool(flags[0, 0]) and not bool(flags[1, -1]) and int((~flags).sum()) == 1


@pytest.mark.parametrize("n, k, lb", [(2, 1, 1), (40, 6, 3), (300, 37, 2)])
def test_neighbour_positions_are_the_definition_with_and_without_the_table(n, k, lb):
    """pos[l, i, q] = p where idx_b[l, i, q] == idx_a[i, p], else -1: the dense table's lookup and the per-row
    binary search (N > DENSE_MAX_ITEMS) both, on lists of distinct items."""
    from prh.metrics.knn import neighbour_positions, position_table

    g = torch.Generator().manual_seed(n + k)
    idx_a = torch.stack([torch.randperm(n, generator=g)[:k] for _ in range(n)])
    idx_b = torch.stack([torch.stack([torch.randperm(n, generator=g)[:k] for _ in range(n)]) for _ in range(lb)])
    want = torch.full((lb, n, k), -1, dtype=torch.int32)
    for l in range(lb):
        for i in range(n):
            where = {item: p for p, item in enumerate(idx_a[i].tolist())}
            want[l, i] = torch.tensor([where.get(item, -1) for item in idx_b[l, i].tolist()])
    assert torch.equal(neighbour_positions(idx_a, idx_b), want)
    assert torch.equal(neighbour_positions(idx_a, idx_b, table=position_table(idx_a)), want)
