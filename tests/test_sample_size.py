"""The sweep of alignment against N (prh.metrics.sample_size): the null's floors, the cells
against single-N runs of the engine, and linear CKA from features against the engine's Gram CKA."""

from __future__ import annotations

import numpy as np
import pytest

from prh.metrics import layer_pair_scores, measure, prepare_features
from prh.metrics.sample_size import cell, linear_cka, linear_cka_null, subsets, sweep


@pytest.mark.parametrize("n, k", [(200, 10), (800, 10), (800, 40)])
def test_the_mutual_knn_null_on_independent_features_is_k_over_n_minus_1(n, k):
    rng = np.random.default_rng(n + k)
    a, b = rng.normal(size=(n, 16)), rng.normal(size=(n, 16))
    out = cell("mutual_knn", a, b, k=k, quantile=0.95, permutations=40, seed=0)
    assert out["chance"] == pytest.approx(k / (n - 1))
    # the mean of 40 permutations of a mean over n items: within 4 standard errors of the chance level
    se = np.sqrt(k / (n - 1) / k / n / 40) * 2
    assert out["null_mean"] == pytest.approx(k / (n - 1), abs=4 * se)
    assert out["raw"] == pytest.approx(k / (n - 1), abs=8 * np.sqrt(k / (n - 1) / k / n))  # independent: raw is chance too


def test_sweep_cells_equal_single_n_runs_of_the_engine():
    rng = np.random.default_rng(0)
    z = rng.normal(size=(600, 8))
    a = np.c_[z, rng.normal(size=(600, 8))]
    b = np.c_[z @ rng.normal(size=(8, 8)), rng.normal(size=(600, 4))]
    cells = sweep(a, b, grid=[100, 300, 600], metrics=["mutual_knn", "cknna", "cka"], k_fixed=10, k_fraction=0.05,
                  quantile=0.95, permutations=5, seed=3)
    assert len(cells) == 3 * (2 + 2 + 1)
    parts = subsets(600, [100, 300, 600], seed=3)
    for c in cells:
        idx = parts[c["n"]]
        if c["metric"] == "cka":
            continue
        single = layer_pair_scores(c["metric"], prepare_features(a[idx][:, None], 0.95),
                                   prepare_features(b[idx][:, None], 0.95), topk=c["k"], null_permutations=5, seed=3)
        assert c["raw"] == single.best_score and c["null_mean"] == single.calibration["null_max_mean"]
        assert c["calibrated"] == pytest.approx(c["raw"] - c["null_mean"])
    ks = {(c["n"], c["k_mode"]): c["k"] for c in cells if c["metric"] == "mutual_knn"}
    assert ks == {(100, "fixed"): 10, (300, "fixed"): 10, (600, "fixed"): 10,
                  (100, "fraction"): 5, (300, "fraction"): 15, (600, "fraction"): 30}
    # shared structure: the calibrated score is well above the null at every N
    assert all(c["calibrated"] > 5 * c["null_std"] for c in cells)


def test_subsets_are_nested_and_checked():
    parts = subsets(50, [5, 20, 50], seed=1)
    assert set(parts[5]) <= set(parts[20]) <= set(parts[50]) == set(range(50))
    for grid in ([20, 5], [5, 5], [2, 10], [10, 60], []):
        with pytest.raises(ValueError):
            subsets(50, grid, seed=0)


def test_linear_cka_from_features_equals_the_engine_s_gram_cka():
    rng = np.random.default_rng(1)
    x = rng.normal(size=(300, 12)).astype(np.float32)
    y = (x @ rng.normal(size=(12, 6)) + rng.normal(size=(300, 6))).astype(np.float32)
    assert linear_cka(x, y) == pytest.approx(measure("cka", x, y), abs=1e-5)
    null = linear_cka_null(x, rng.normal(size=(300, 6)), permutations=50, seed=0)
    # chance linear CKA of independent features grows with width over N (the Aristotelian floor)
    assert 0 < null["null_mean"] < 0.2 and null["p"] > 0.01
    with pytest.raises(ValueError, match="same items"):
        linear_cka(x, y[:10])


def test_a_cell_refuses_a_k_it_cannot_use():
    a = np.random.default_rng(0).normal(size=(20, 4))
    with pytest.raises(ValueError, match="k = 20"):
        cell("mutual_knn", a, a, k=20, quantile=1.0, permutations=1, seed=0)
    with pytest.raises(ValueError, match="svcca"):
        cell("svcca", a, a, k=5, quantile=1.0, permutations=1, seed=0)


def test_kernel_cells_match_the_engine_on_the_kernel_s_own_features():
    """A kernel K = F Fᵀ given as a matrix scores as the engine scores its features F: the same k-NN lists
    (mutual k-NN) and the same CKA, with the null of the same permutations."""
    from prh.metrics.sample_size import _prepared, kernel_cell

    rng = np.random.default_rng(4)
    z = rng.normal(size=(300, 6))
    a = np.c_[z, rng.normal(size=(300, 6))]
    f = _prepared(np.c_[z @ rng.normal(size=(6, 6)), rng.normal(size=(300, 3))], 1.0)
    kern = f @ f.T
    mk = kernel_cell("mutual_knn", a, kern, k=10, quantile=0.95, permutations=5, seed=2)
    ref = cell("mutual_knn", a, f, k=10, quantile=1.0, permutations=5, seed=2)
    # the same lists up to float32 (engine) against float64 (kernel) order of near-equal similarities
    assert mk["raw"] == pytest.approx(ref["raw"], abs=5e-3) and mk["null_mean"] == pytest.approx(ref["null_mean"], abs=5e-3)
    ck = kernel_cell("cka", a, kern, k=10, quantile=0.95, permutations=5, seed=2)
    assert ck["raw"] == pytest.approx(linear_cka(_prepared(a, 0.95), f), rel=1e-9)
    assert ck["calibrated"] > 5 * ck["null_std"] and mk["calibrated"] > 5 * mk["null_std"]
    with pytest.raises(ValueError, match="N x N"):
        kernel_cell("cka", a[:10], kern, k=3, quantile=1.0, permutations=1, seed=0)
    with pytest.raises(ValueError, match="scored with"):
        kernel_cell("cknna", a, kern, k=3, quantile=1.0, permutations=1, seed=0)


# ---- the study (prh.studies.sample_size.run): pairs, layer choice, cells, claims ----

CFG = {"grid": [60, 120, 240], "k_fixed": 5, "k_fraction": 0.05, "metrics": ["mutual_knn", "cknna", "cka"],
       "permutations": 4, "quantile": 0.95, "kernel_max_n": 120, "margin_sd": 2.0,
       "kernel": {"position_scale": 0.25, "color_scale": 60.0, "size_scale": 1.0, "shape_floor": 0.5,
                  "background_weight": 0.05}}


def _study_inputs(tmp_path, n=240):
    from prh.data.shapes import sample_scene, world_features
    from prh.io import save_features, write_jsonl

    rng = np.random.default_rng(0)
    scenes = [sample_scene(rng) for _ in range(n)]
    write_jsonl(tmp_path / "scenes.jsonl", [{"scene": s} for s in scenes])
    f = world_features(scenes)[:, :12]  # the scenes' own structure, shared by every "model"
    paths = {}
    for i, name in enumerate(["v1", "v2", "lm"]):
        layers = [rng.normal(size=(n, 12)), f @ rng.normal(size=(12, 12)) + 0.3 * rng.normal(size=(n, 12))]
        paths[name] = tmp_path / f"{name}.safetensors"
        save_features(paths[name], np.stack(layers, 1).astype(np.float32), {"model": name})
    return paths


def test_the_study_sweeps_every_pair_and_judges_its_claims(tmp_path):
    from prh.studies.sample_size.run import claims, pairs_of, run_sample_size

    paths = _study_inputs(tmp_path)
    out = {"sweep": tmp_path / "sweep.json", "metrics": tmp_path / "metrics.json"}
    m = run_sample_size(names=list(paths), features=[str(p) for p in paths.values()], language=["lm"], config=CFG,
                        out=out, scenes=str(tmp_path / "scenes.jsonl"), seed=0)
    import json

    sweep = json.loads(out["sweep"].read_text())
    assert pairs_of(["v1", "v2"], ["lm"], kernel=True) == [
        ("vision-vision", "v1", "v2"), ("language-vision", "lm", "v1"), ("language-vision", "lm", "v2"),
        ("model-kernel", "v1", "world_kernel"), ("model-kernel", "v2", "world_kernel"), ("model-kernel", "lm", "world_kernel")]
    # every model reads its last layer, fixed in advance (no choice on the sweep's own items)
    assert all(v["layer_a"] == 1 and v["layer_b"] in (1, None) for v in sweep["layers"].values())
    # and records each layer's width, for the d/N floor (none for the kernel)
    assert all(v["width_a"] == 12 and v["width_b"] == (None if v["b"] == "world_kernel" else 12)
               for v in sweep["layers"].values())
    assert sweep["settings"]["layers"] == "last"
    by = {(c["pair"], c["metric"], c["k_mode"], c["n"]) for c in sweep["cells"]}
    assert ("v1 / v2", "mutual_knn", "fraction", 240) in by and ("lm / world_kernel", "cka", "none", 120) in by
    assert not any(c["n"] > 120 for c in sweep["cells"] if c["group"] == "model-kernel")  # kernel_max_n
    assert ("v1 / world_kernel", "cknna", "fixed", 60) not in by
    assert set(m["claims"]) == {"raw_falls", "calibrated_flat", "kernel_tracks_models"}
    assert all(c["verdict"] in ("reproduced", "not reproduced", "inconclusive", "not testable") for c in m["claims"].values())
    assert m["claims"]["raw_falls"]["n"] == 3 and m["claims"]["raw_falls"]["n_models"] == 3
    # the same claims again from the written cells: the file is the evidence
    assert claims(sweep["cells"], grid=CFG["grid"], kernel_max_n=120, margin_sd=2.0) == m["claims"]
    from prh.figures import draw

    files = draw("sample_size_alignment_vs_n", tmp_path / "fig.pdf", {"sweep": str(out["sweep"])})
    assert sorted(p.suffix for p in files) == [".pdf", ".png"] and all(p.stat().st_size > 1000 for p in files)


def _cells(raw_changes, cal_changes, *, null_std=0.01, group="vision-vision", aristotelian=None):
    """Cells of pairs whose raw / corrected / Aristotelian scores change by the given amounts from N 100 to 1000
    (the Aristotelian change defaults to half the corrected one: a different number, so a test can tell them apart)."""
    cells = []
    arist = [dc / 2 for dc in cal_changes] if aristotelian is None else aristotelian
    for i, (dr, dc, da) in enumerate(zip(raw_changes, cal_changes, arist)):
        for n, (r, c, a) in ((100, (0.5, 0.3, 0.4)), (1000, (0.5 + dr, 0.3 + dc, 0.4 + da))):
            cells.append({"group": group, "pair": f"m{i} / x{i}", "metric": "mutual_knn", "k_mode": "fixed", "n": n,
                          "raw": r, "calibrated": c, "aristotelian": a, "null_std": null_std})
    return cells


def test_calibrated_flat_reports_the_authors_score_and_keeps_the_corrected_one_beside_it():
    """The claim cites the Aristotelian view, so its value is the change of the authors' calibrated score;
    the registered rule's corrected score (raw minus the null mean) stays beside it, named as what it is."""
    from prh.studies.sample_size.run import claims

    out = claims(_cells([-0.1, -0.2], [-0.04, -0.02], aristotelian=[0.01, 0.03]), grid=[100, 1000],
                 kernel_max_n=None, margin_sd=2.0)["calibrated_flat"]
    assert out["value"] == pytest.approx(0.02) and out["corrected_change"] == pytest.approx(-0.03)
    assert out["verdict"] == "not reproduced"  # the registered rule: both pairs fall by more than 2 null sd


@pytest.mark.parametrize("raw, cal, raw_label, cal_label", [
    ([-0.1, -0.2, -0.05], [0.0, 0.01, -0.019], "reproduced", "reproduced"),  # -0.019 is within 2 sd of 0.01
    ([0.1, 0.2, 0.05], [-0.03, -0.05, -0.021], "not reproduced", "not reproduced"),  # every pair falls beyond 2 sd
    ([-0.1, 0.1, -0.05], [-0.03, 0.0, 0.0], "inconclusive", "inconclusive"),
])
def test_the_claims_reach_every_label_at_their_boundaries(raw, cal, raw_label, cal_label):
    from prh.studies.sample_size.run import claims

    out = claims(_cells(raw, cal), grid=[100, 1000], kernel_max_n=None, margin_sd=2.0)
    assert out["raw_falls"]["verdict"] == raw_label and out["calibrated_flat"]["verdict"] == cal_label
    assert out["kernel_tracks_models"]["verdict"] == "not testable"
    assert claims(_cells(raw[:1], cal[:1]), grid=[100, 1000], kernel_max_n=None, margin_sd=2.0)[
        "raw_falls"]["verdict"] == "not testable"  # one pair: no rule across pairs


@pytest.mark.parametrize("mm, mk, label", [
    (0.05, 0.04, "reproduced"), (-0.05, -0.04, "reproduced"), (0.05, -0.04, "not reproduced"),
    (0.05, 0.01, "inconclusive"),  # the kernel's change is within 2 sd of 0.01
])
def test_kernel_tracks_models_needs_both_changes_beyond_their_margins(mm, mk, label):
    from prh.studies.sample_size.run import claims

    cells = _cells([0.0, 0.0], [mm, mm]) + _cells([0.0], [mk], group="model-kernel")
    assert claims(cells, grid=[100, 1000], kernel_max_n=1000, margin_sd=2.0)["kernel_tracks_models"]["verdict"] == label


@pytest.mark.parametrize("preset, n_max", [("sample_size", 100000), ("sample_size_gpu", 1000000)])
def test_the_sample_size_presets_plan_a_large_world_for_the_study(repo_root, preset, n_max):
    import subprocess
    import sys

    out = subprocess.run([sys.executable, "-m", "snakemake", "results/experiments/sample_size/metrics.json", "-n",
                          "--cores", "1", "--quiet", "rules", "--configfile", f"presets/{preset}.yaml"],
                         cwd=repo_root, capture_output=True, text=True, check=True).stdout
    rows = [line.split() for line in out.split("Job stats:", 1)[1].splitlines()[3:]]
    jobs = {r[0]: int(r[1]) for r in rows if len(r) == 2 and r[1].isdigit()}
    assert jobs["sample_size"] == 1 and jobs["extract_vision"] == 3 and jobs["extract_language"] == 2
    import yaml

    from prh.checks import check_config
    from prh.config import load, merge

    cfg = check_config(merge(load(repo_root / "params.yaml"),  # the schema's defaults filled, as the workflow's
                             yaml.safe_load((repo_root / "presets" / f"{preset}.yaml").read_text())))
    assert cfg["datasets"]["shapes_sweep"]["n"] == n_max == cfg["sample_size"]["grid"][-1]
    # the k/N rule's N x k lists: 10^5 x 10^3 at most (1.7 GB a CKNNA state), never 10^6 x 10^4
    from prh.metrics.sample_size import k_modes

    s = cfg["sample_size"]
    krules = dict(k_fixed=s["k_fixed"], k_fraction=s["k_fraction"], fraction_max_n=s["k_fraction_max_n"])
    most = {"sample_size": 30000 * 300, "sample_size_gpu": 100000 * 1000}[preset]
    assert max(n * k for n in s["grid"] for _, k in k_modes("cknna", n, **krules)) == most


def test_extraction_streams_the_images_by_item_block_and_equals_the_in_memory_one(tmp_path):
    """Large N is extracted without holding the images in memory: `prh extract-vision` reads
    images.npy memory-mapped (pages in one batch of items at a time); its features equal those of the
    same images held in memory."""
    import torch
    from tiny_models import save_vision_zoo

    from prh.cli import main
    from prh.extract import _read_images
    from prh.features import extract_vision_features
    from prh.io import load_features, write_npy
    from prh.models.loaders import load_vision_model

    images = np.random.default_rng(0).integers(0, 256, size=(10, 32, 32, 3), dtype=np.uint8)
    write_npy(tmp_path / "data" / "images.npy", images)
    assert isinstance(_read_images(tmp_path / "data"), np.memmap)
    ckpt = save_vision_zoo("resnet", tmp_path / "resnet")
    main(["extract-vision", "--model", str(ckpt), "--data", str(tmp_path / "data"), "--out", str(tmp_path / "f.safetensors"),
          "--device", "cpu", "--no-progress", "--vision-batch-size", "3"])
    model, pre = load_vision_model(ckpt)
    kw = {k: pre[k] for k in ("pooling", "mean", "std", "input_size", "interpolation", "crop_pct")}
    torch.testing.assert_close(load_features(tmp_path / "f.safetensors"),
                               extract_vision_features(model, np.array(images), progress=False, batch_size=10, **kw))


def test_small_grids_keep_k_at_least_2_and_refuse_k_beyond_n(tmp_path):
    """The smoke config's grid (16 items): k = 1% of N rounds to 0, CKNNA needs k >= 2 (found by the smoke run)."""
    from prh.studies.sample_size.run import run_sample_size

    paths = _study_inputs(tmp_path, n=64)
    out = {"sweep": tmp_path / "sweep.json", "metrics": tmp_path / "metrics.json"}
    cfg = {**CFG, "grid": [16, 32, 64], "k_fixed": 10, "k_fraction": 0.01, "kernel_max_n": 64}
    run_sample_size(names=list(paths), features=[str(p) for p in paths.values()], language=["lm"], config=cfg, out=out,
                    scenes=str(tmp_path / "scenes.jsonl"))
    import json

    cells = json.loads(out["sweep"].read_text())["cells"]
    assert {c["k"] for c in cells if c["k_mode"] == "fraction"} == {2}
    with pytest.raises(ValueError, match="k_fixed = 16 must be below the grid's smallest N = 16"):
        run_sample_size(names=list(paths), features=[str(p) for p in paths.values()], language=["lm"],
                        config={**cfg, "k_fixed": 16}, out=out)


def test_independent_features_do_not_fall_after_calibration(tmp_path):
    """The review's case: with independent multi-layer features and no layer chosen on the sweep's items,
    calibrated mutual k-NN stays at 0 at every N, so calibrated_flat cannot be judged on noise."""
    from prh.io import save_features
    from prh.studies.sample_size.run import run_sample_size

    rng = np.random.default_rng(7)
    paths = {}
    for name in ("v1", "v2", "v3"):
        paths[name] = tmp_path / f"{name}.safetensors"
        save_features(paths[name], rng.normal(size=(600, 6, 16)).astype(np.float32), {"model": name})
    out = {"sweep": tmp_path / "sweep.json", "metrics": tmp_path / "metrics.json"}
    cfg = {**CFG, "grid": [150, 600], "metrics": ["mutual_knn"], "permutations": 20}
    m = run_sample_size(names=list(paths), features=[str(p) for p in paths.values()], language=[], config=cfg, out=out)
    assert m["claims"]["calibrated_flat"]["verdict"] == "reproduced"


def test_the_study_reads_only_each_model_s_last_layer(tmp_path):
    """A 2.1 GB float16 features file (sparse on disk: 1,000 items x 256 layers x 4,096; the paper suite stores
    half precision) whose last layer alone holds data: the sweep reads that layer (8 MB), so it runs in a few
    hundred MB and equals the same sweep on a file of that one layer. Loading the file whole and converting
    it to float32 takes 4.3 GB."""
    import json
    import subprocess
    import sys

    from prh.io import features_layout, save_features

    n, layers, width = 1000, 256, 4096
    rng = np.random.default_rng(3)
    last = rng.normal(size=(n, width)).astype(np.float16)
    other = (last[:, :64] @ rng.normal(size=(64, 32)) + rng.normal(size=(n, 32))).astype(np.float32)
    save_features(tmp_path / "big_one_layer.safetensors", last[:, None], {"model": "big"})
    save_features(tmp_path / "other.safetensors", other[:, None], {"model": "other"})
    big = tmp_path / "big.safetensors"
    save_features(big, np.zeros((1, layers, width), np.float16), {"model": "big"})  # a real header, then:
    header = json.loads(big.read_bytes()[8:8 + int.from_bytes(big.read_bytes()[:8], "little")])
    header["feats"]["shape"][0] = n
    header["feats"]["data_offsets"] = [0, n * layers * width * 2]
    text = json.dumps(header).encode()
    text += b" " * (-len(text) % 8)
    with open(big, "wb") as f:
        f.write(len(text).to_bytes(8, "little") + text)
        f.truncate(8 + len(text) + n * layers * width * 2)  # sparse: unwritten layers read as zeros
        layout = features_layout(big)
        for i in range(n):
            f.seek(layout["offset"] + (i * layers + layers - 1) * width * 2)
            f.write(last[i].tobytes())
    cfg = {**CFG, "grid": [100, 1000], "metrics": ["mutual_knn", "cka"], "permutations": 2}
    script = (
        "import json, resource, sys\n"
        "from prh.studies.sample_size.run import run_sample_size\n"
        "names, files, out = ['big', 'other'], sys.argv[1:3], sys.argv[3]\n"
        f"cfg = {cfg!r}\n"
        "run_sample_size(names=names, features=files, language=['other'], config=cfg, seed=0,\n"
        "                out={'sweep': out + '/sweep.json', 'metrics': out + '/metrics.json'})\n"
        "from prh.bench import peak_rss_kib\n"
        "print(peak_rss_kib() / 1024)\n")  # not ru_maxrss: it keeps this worker's RSS at the fork
    cells = {}
    for name, path in (("big", big), ("one", tmp_path / "big_one_layer.safetensors")):
        (tmp_path / name).mkdir()
        done = subprocess.run([sys.executable, "-c", script, str(path), str(tmp_path / "other.safetensors"),
                               str(tmp_path / name)], capture_output=True, text=True, timeout=600)
        assert done.returncode == 0, done.stderr[-2000:]
        peak_mb = float(done.stdout.strip().splitlines()[-1])
        assert peak_mb < 1500, f"{name}: peak RSS {peak_mb:.0f} MB"
        sweep = json.loads((tmp_path / name / "sweep.json").read_text())
        cells[name] = [{k: v for k, v in c.items()} for c in sweep["cells"]]
        read = {(v["a"], v["layer_a"], v["b"], v["layer_b"]) for v in sweep["layers"].values()}
        assert read == {("other", 0, "big", layers - 1 if name == "big" else 0)}
    assert cells["big"] == cells["one"]


@pytest.mark.parametrize("n, d_a, d_b", [(400, 8, 16), (1000, 32, 32), (2000, 64, 16)])
def test_the_cka_null_on_independent_features_sits_at_the_d_over_n_floor(n, d_a, d_b):
    """The figure's reference line for CKA (prh.plots.sample_size.floor): the permutation null of linear CKA on
    independent isotropic Gaussian features is sqrt(d_a d_b) / N, within 10 % (it is sqrt(d_a d_b / ((N + d_a)(N + d_b))))."""
    from prh.metrics.sample_size import linear_cka_null
    from prh.plots.sample_size import floor

    rng = np.random.default_rng(n + d_a)
    null = linear_cka_null(rng.normal(size=(n, d_a)), rng.normal(size=(n, d_b)), permutations=40, seed=0)
    layers = {"a / b": {"width_a": d_a, "width_b": d_b}, "a / world_kernel": {"width_a": d_a, "width_b": None}}
    expected = floor({"pair": "a / b", "metric": "cka", "n": n}, layers)
    assert expected == pytest.approx(np.sqrt(d_a * d_b) / n)
    assert null["null_mean"] == pytest.approx(expected, rel=0.1)
    # mutual k-NN's floor is k / (N - 1) whatever the widths; a kernel pair has no width, so no CKA floor
    assert floor({"pair": "a / b", "metric": "mutual_knn", "n": n, "k": 10}, layers) == 10 / (n - 1)
    assert floor({"pair": "a / world_kernel", "metric": "cka", "n": n}, layers) is None


def test_one_search_per_model_and_k_serves_both_knn_metrics_and_states_are_dropped_after_their_last_pair(tmp_path, monkeypatch):
    """Memory and work at large N: per N and k, each model's neighbours are searched once for mutual k-NN and
    CKNNA together, and with 3 vision and 2 language models at most 4 states are held at once (not all 5, nor
    one per metric: at N = 10^5, k = 1,000 a CKNNA state is 1.7 GB)."""
    import gc
    import weakref

    import prh.metrics.sample_size as ss
    from prh.io import save_features
    from prh.studies.sample_size.run import run_sample_size

    rng = np.random.default_rng(5)
    paths = {}
    for name in ["v1", "v2", "v3", "l1", "l2"]:
        paths[name] = tmp_path / f"{name}.safetensors"
        save_features(paths[name], rng.normal(size=(60, 1, 8)).astype(np.float32), {"model": name})
    calls, live, peak = [], weakref.WeakSet(), [0]
    real = ss.knn_states

    def counting(metrics, a, **kw):
        gc.collect()
        peak[0] = max(peak[0], len(live) + 1)
        calls.append(tuple(metrics))
        states = real(metrics, a, **kw)
        live.add(states["mutual_knn"])  # a tensor: alive while the sweep holds the model's states
        return states

    monkeypatch.setattr(ss, "knn_states", counting)
    cfg = {**CFG, "grid": [30, 60], "metrics": ["mutual_knn", "cknna"], "permutations": 2}
    run_sample_size(names=list(paths), features=[str(p) for p in paths.values()], language=["l1", "l2"], config=cfg,
                    out={"sweep": tmp_path / "s.json", "metrics": tmp_path / "m.json"}, seed=0)
    assert calls == [("mutual_knn", "cknna")] * (2 * 2 * 5)  # 2 N x 2 k rules x 5 models
    assert peak[0] == 4


def test_the_k_over_n_rule_stops_at_its_limit():
    from prh.metrics.sample_size import k_modes

    assert k_modes("mutual_knn", 10**6, k_fixed=10, k_fraction=0.01) == [("fixed", 10), ("fraction", 10000)]
    assert k_modes("mutual_knn", 10**6, k_fixed=10, k_fraction=0.01, fraction_max_n=10**5) == [("fixed", 10)]
    assert k_modes("cknna", 10**5, k_fixed=10, k_fraction=0.01, fraction_max_n=10**5) == [("fixed", 10), ("fraction", 1000)]
    assert k_modes("cka", 10**6, k_fixed=10, k_fraction=0.01, fraction_max_n=10**5) == [("none", 10)]


def test_the_study_leaves_out_the_k_over_n_cells_beyond_their_limit(tmp_path):
    import json

    from prh.studies.sample_size.run import run_sample_size

    paths = _study_inputs(tmp_path)
    cfg = {**CFG, "metrics": ["mutual_knn"], "k_fraction_max_n": 120, "permutations": 2}
    run_sample_size(names=list(paths), features=[str(p) for p in paths.values()], language=["lm"], config=cfg,
                    out={"sweep": tmp_path / "s.json", "metrics": tmp_path / "m.json"}, seed=0)
    cells = json.loads((tmp_path / "s.json").read_text())["cells"]
    assert {(c["k_mode"], c["n"]) for c in cells} == {("fixed", 60), ("fixed", 120), ("fixed", 240),
                                                       ("fraction", 60), ("fraction", 120)}
