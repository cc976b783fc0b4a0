"""Convergence experiments (PRH Figs 2, 3; platonic reference): hand-computed examples on tiny inputs."""

import json
import math
from pathlib import Path

import numpy as np
import pytest
from scipy import stats

from prh.data.shapes import sample_scene, world_features
from prh.figures import draw_from
from prh.io import save_features
from prh.studies.convergence.run import (
    competence_bins,
    language_vision,
    model_map,
    run_convergence,
    run_platonic,
    solved_counts,
)

ROOT = Path(__file__).resolve().parents[1]
PROBES = {"models": {
    "a": {"tasks": {"t1": {"accuracy": 0.90}, "t2": {"accuracy": 0.50}}},
    "b": {"tasks": {"t1": {"accuracy": 0.73}, "t2": {"accuracy": 0.60}}},
    "c": {"tasks": {"t1": {"accuracy": 0.71}, "t2": {"accuracy": 0.30}}},
    "d": {"tasks": {"t1": {"accuracy": 0.10}, "t2": {"accuracy": 0.47}}},
}}


def test_solved_counts_hand_example():
    # thresholds: t1 0.8 * 0.90 = 0.72, t2 0.8 * 0.60 = 0.48
    assert solved_counts(PROBES, solve_fraction=0.8) == {"a": 2, "b": 2, "c": 0, "d": 0}
    assert solved_counts(PROBES, solve_fraction=0.4) == {"a": 2, "b": 2, "c": 2, "d": 1}  # 0.36, 0.24
    with pytest.raises(ValueError, match="solve_fraction"):
        solved_counts(PROBES, solve_fraction=0)


def test_competence_bins_mean_and_sem():
    names = ["a", "b", "c", "d", "e"]
    s = np.full((5, 5), 0.1)
    np.fill_diagonal(s, 1.0)
    s[0, 1] = s[1, 0] = 0.5
    s[0, 2] = s[2, 0] = 0.6
    s[1, 2] = s[2, 1] = 0.7
    solved = {"a": 2, "b": 2, "c": 3, "d": 0, "e": 0}
    low, high = competence_bins(scores=s, names=names, solved=solved, bins=[0, 2, 4])
    assert low["models"] == ["d", "e"] and low["n_pairs"] == 1 and low["mean"] == pytest.approx(0.1)
    assert math.isnan(low["sem"])
    assert high["models"] == ["a", "b", "c"] and high["n_pairs"] == 3
    assert high["mean"] == pytest.approx(0.6)
    assert high["sem"] == pytest.approx(0.1 / math.sqrt(3))  # std(0.5, 0.6, 0.7; ddof=1) = 0.1
    with pytest.raises(ValueError, match="bins"):
        competence_bins(scores=s, names=names, solved=solved, bins=[3, 1])


def test_model_map_mds_keeps_distances():
    a = np.array([[1.0, 0.5, 0.3], [0.5, 1.0, 0.4], [0.3, 0.4, 1.0]])
    emb = model_map(scores=a, min_umap_models=5)
    assert emb["method"].startswith("classical MDS")
    xy = np.asarray(emb["coords"])
    got = np.linalg.norm(xy[:, None] - xy[None], axis=-1)
    want = -np.log(a)
    np.fill_diagonal(want, 0.0)
    np.testing.assert_allclose(got, want, atol=1e-9)  # any metric triangle embeds exactly in 2-D


def test_language_vision_fits_and_skips_masked_lms():
    bpb = {"l1": 1.0, "l2": 0.5, "l3": 0.2}  # 1 - bpb: 0, 0.5, 0.8
    cross = {"x_names": ["l1", "l2", "l3", "masked"], "y_names": ["v1", "v2"],
             "scores": [[0.1, 0.2], [0.2, 0.3], [0.26, 0.36], [0.9, 0.9]]}
    out = language_vision(cross=cross, bpb=bpb, families={"v1": "f1", "v2": "f2"})
    assert out["skipped_no_bpb"] == ["masked"] and len(out["points"]) == 6
    assert out["fits"]["f1"]["slope"] == pytest.approx(0.2) and out["fits"]["f1"]["intercept"] == pytest.approx(0.1)
    assert out["fits"]["f2"]["intercept"] == pytest.approx(0.2)
    assert out["fits"]["f1"]["pearson_r"] == pytest.approx(1.0)
    x, y = [0, 0, 0.5, 0.5, 0.8, 0.8], [0.1, 0.2, 0.2, 0.3, 0.26, 0.36]  # pooled over both families
    assert out["pooled"]["spearman_r"] == pytest.approx(stats.spearmanr(x, y).statistic)
    assert out["pooled"]["pearson_r"] == pytest.approx(np.corrcoef(x, y)[0, 1]) and out["pooled"]["n"] == 6


def _write(path, obj):
    path.write_text(json.dumps(obj))
    return str(path)


def _out(folder, command="run-convergence"):
    """Each file the command writes, under the workflow's name (the figures find their inputs by name)."""
    from prh.studies.convergence.run import OUTPUTS

    names = {"metrics": "platonic_metrics"} if command == "run-platonic" else {}
    return {name: str(folder / f"{names.get(name, name)}.json") for name in OUTPUTS[command]}


def test_run_convergence_and_figures(tmp_path):
    names = ["a", "b", "c", "d"]
    rng = np.random.default_rng(0)
    s = rng.uniform(0.1, 0.6, (4, 4))
    s = (s + s.T) / 2
    np.fill_diagonal(s, 1.0)
    settings = {"metric": "mutual_knn", "topk": 10}
    vis = _write(tmp_path / "vv.json", {"settings": settings, "x_names": names, "y_names": names, "scores": s.tolist()})
    cross = _write(tmp_path / "lv.json", {"settings": settings, "x_names": ["l1", "l2", "l3"], "y_names": names,
                                          "scores": rng.uniform(0, 0.3, (3, 4)).tolist()})
    lang = _write(tmp_path / "lang.json", {"models": {"l1": {"bpb": 2.0}, "l2": {"bpb": 1.0}, "l3": {"bpb": 0.5}}})
    probes = _write(tmp_path / "probes.json", PROBES)
    out = tmp_path / "exp"
    metrics = run_convergence(probes=probes, vision_alignment=vis, cross_alignment=cross, language=lang,
                              families={"a": "x", "b": "x", "c": "y", "d": "y"}, out=_out(out),
                              config={"bins": [0, 1, 3]})
    assert metrics["competence_bins"]["1-2"]["mean"] == pytest.approx(s[0, 1])
    assert metrics["competence_bins"]["0-0"]["mean"] == pytest.approx(s[2, 3])
    pooled = metrics["language_vision_descriptive"]
    assert all(math.isfinite(pooled[k]) for k in ("pearson_r", "pearson_p", "spearman_r", "spearman_p"))
    assert pooled["note"] == "pairs are not independent: descriptive only"
    written = json.loads((out / "metrics.json").read_text())
    assert written["language_vision_descriptive"]["n"] == 12 and "language_vision_preregistered" not in written
    paths = draw_from(out, ["convergence_fig02_competence_alignment", "convergence_fig02_model_map", "convergence_fig03_language_vision"], tmp_path / "fig")
    assert len(paths) == 6 and all(p.stat().st_size > 0 for p in paths)
    with pytest.raises(ValueError, match="unknown keys"):
        run_convergence(probes=probes, vision_alignment=vis, cross_alignment=cross, language=lang,
                        families={}, out=_out(out), config={"bin": [0, 1]})
    with pytest.raises(ValueError, match="square"):
        run_convergence(probes=probes, vision_alignment=cross, cross_alignment=cross, language=lang,
                        families={}, out=_out(out))
    with pytest.raises(ValueError, match=r"run-convergence: no path for \['model_map'\] \(--model-map PATH\)"):
        run_convergence(probes=probes, vision_alignment=vis, cross_alignment=cross, language=lang, families={},
                        out={k: v for k, v in _out(out).items() if k != "model_map"})


def test_fig2_states_which_of_the_papers_models_are_present(tmp_path):
    """The paper suite passes Fig 2's coverage of the paper's 78 models (design.fig2_coverage);
    run-convergence writes it into competence.json and metrics.json and the figure states it."""
    from prh.studies.convergence.design import fig2_coverage
    from prh.studies.convergence.run import main

    names = ["vit-tiny-in21k", "resnet50-random", "alexnet-au-stat-wmm", "d"]
    s = np.full((4, 4), 0.3)
    np.fill_diagonal(s, 1.0)
    settings = {"metric": "mutual_knn", "topk": 10}
    vis = _write(tmp_path / "vv.json", {"settings": settings, "x_names": names, "y_names": names, "scores": s.tolist()})
    cross = _write(tmp_path / "lv.json", {"settings": settings, "x_names": ["l1", "l2", "l3"], "y_names": names,
                                          "scores": np.full((3, 4), 0.2).tolist()})
    lang = _write(tmp_path / "lang.json", {"models": {"l1": {"bpb": 2.0}, "l2": {"bpb": 1.0}, "l3": {"bpb": 0.5}}})
    probes = {"models": {n: m for n, m in zip(names, PROBES["models"].values())}}
    cov = fig2_coverage(names, ROOT / "workflow/resources/prh_fig2_vision.yaml")
    assert cov["n_present"] == 3 and cov["not_in_paper"] == ["d"]
    out = tmp_path / "exp"
    args = [f"--{k.replace('_', '-')}={v}" for k, v in _out(out).items()]
    main(["--probes", _write(tmp_path / "p.json", probes), "--vision-alignment", vis, "--cross-alignment", cross,
          "--language", lang, "--bins", "0", "1", "3", "--coverage", json.dumps(cov), *args])
    for name in ("competence", "metrics"):
        assert json.loads((out / f"{name}.json").read_text())["coverage"] == cov
    paths = draw_from(out, ["convergence_fig02_competence_alignment"], tmp_path / "fig")
    assert all(p.stat().st_size > 0 for p in paths)


def test_platonic_reference(tmp_path):
    rng = np.random.default_rng(0)
    scenes = [sample_scene(rng) for _ in range(40)]
    (tmp_path / "scenes.jsonl").write_text("".join(json.dumps({"id": i, "scene": s}) + "\n" for i, s in enumerate(scenes)))
    world = world_features(scenes)
    noise = np.random.default_rng(1).normal(size=(40, 2, 40)).astype(np.float32)
    exact = np.stack([noise[:, 0], world], axis=1)  # layer 1 is the world itself
    for name, feats in [("exact", exact), ("noise", noise)]:
        save_features(tmp_path / f"{name}.safetensors", feats, {"model": name})
    paths = paths_in = [str(tmp_path / f"{n}.safetensors") for n in ("exact", "noise")]
    probes = _write(tmp_path / "probes.json", {"models": {"exact": {"tasks": {"t": {"accuracy": 0.9}}},
                                                          "noise": {"tasks": {"t": {"accuracy": 0.3}}}}})
    lang = _write(tmp_path / "lang.json", {"models": {"exact": {"bpb": 0.5}, "noise": {"bpb": None}}})
    scenes_path = str(tmp_path / "scenes.jsonl")
    run_platonic(vision_features=paths, vision_scenes=scenes_path, language_features=paths, paired_scenes=scenes_path,
                 probes=probes, language=lang, out=_out(tmp_path / "exp", "run-platonic"), config={"topk": 5, "quantile": 1.0})
    data = json.loads((tmp_path / "exp" / "platonic.json").read_text())
    assert data["vision"]["exact"]["score"] == pytest.approx(1.0) and data["vision"]["exact"]["layer"] == 1
    assert data["vision"]["noise"]["score"] < 0.5
    assert data["language"]["exact"]["lm_score"] == 0.5 and data["language"]["noise"]["lm_score"] is None
    paths = draw_from(tmp_path / "exp", ["convergence_platonic_reference"], tmp_path / "fig")
    assert [p.name for p in paths] == ["convergence_platonic_reference.pdf", "convergence_platonic_reference.png"]
    # the command writes the two paths it is given, and nothing else
    from prh.cli import main as prh_main

    prh_main(["run-platonic", "--vision-features", *paths_in, "--vision-scenes", scenes_path, "--language-features",
              *paths_in, "--paired-scenes", scenes_path, "--probes", probes, "--language", lang, "--config",
              json.dumps({"convergence": {"topk": 5, "quantile": 1.0}}), "--platonic", str(tmp_path / "cli" / "p.json"),
              "--metrics", str(tmp_path / "cli" / "m.json")])
    assert sorted(p.name for p in (tmp_path / "cli").iterdir()) == ["m.json", "p.json"]
    assert json.loads((tmp_path / "cli" / "p.json").read_text()) == data


def test_platonic_sensitivity_reruns_the_reference_under_each_kernel_setting(tmp_path):
    """Three models whose features are the world under three kernels: which one is nearest the world
    depends on the kernel, so the per-setting Spearman r must change with the setting (hand-checked)."""
    rng = np.random.default_rng(2)
    scenes = [sample_scene(rng) for _ in range(60)]
    (tmp_path / "scenes.jsonl").write_text("".join(json.dumps({"id": i, "scene": s}) + "\n" for i, s in enumerate(scenes)))
    kernels = {"bg1": {"background_weight": 1.0}, "objects": {"background_weight": 0.0},
               "broad": {"background_weight": 0.0, "position_scale": 2.0}}
    paths = []
    for name, kern in kernels.items():
        save_features(tmp_path / f"{name}.safetensors", world_features(scenes, **kern)[:, None, :], {"model": name})
        paths.append(str(tmp_path / f"{name}.safetensors"))
    # competence and 1 - bpb both rank bg1 < objects < broad
    probes = _write(tmp_path / "probes.json", {"models": {n: {"tasks": {"t": {"accuracy": a}}}
                                                          for n, a in zip(kernels, (0.3, 0.6, 0.9))}})
    lang = _write(tmp_path / "lang.json", {"models": {n: {"bpb": b} for n, b in zip(kernels, (0.9, 0.6, 0.3))}})
    scenes_path = str(tmp_path / "scenes.jsonl")
    config = {"topk": 5, "quantile": 1.0, "platonic_sensitivity": [{"background_weight": 1.0}, {"position_scale": 2.0}]}
    out = run_platonic(vision_features=paths, vision_scenes=scenes_path, language_features=paths,
                       paired_scenes=scenes_path, probes=probes, language=lang, out=_out(tmp_path / "exp", "run-platonic"),
                       config=config, kernel={"background_weight": 0.0})
    data = json.loads((tmp_path / "exp" / "platonic_metrics.json").read_text())
    assert data == json.loads(json.dumps(out))
    platonic = json.loads((tmp_path / "exp" / "platonic.json").read_text())
    assert platonic["settings"]["kernel"]["background_weight"] == 0.0  # the --kernel block, defaults filled in
    assert platonic["vision"]["objects"]["score"] == pytest.approx(1.0)  # the base kernel is the objects model's
    first, second = data["sensitivity"]
    assert first["setting"] == {"background_weight": 1.0} and first["kernel"]["position_scale"] == 0.25
    assert second["kernel"] == {**platonic["settings"]["kernel"], "position_scale": 2.0}
    # under background_weight 1 the bg1 model is exact and the least competent: r < 0; under the broad
    # kernel the broad model is exact and the most competent: r > 0
    assert first["vision"]["spearman_r"] < 0 and second["vision"]["spearman_r"] == pytest.approx(1.0)  # -0.5, 1
    assert first["language"] == first["vision"] and first["language"]["n"] == 3  # same features, same ranking
    with pytest.raises(ValueError, match="kernel: unknown"):
        run_platonic(vision_features=paths, vision_scenes=scenes_path, language_features=paths,
                     paired_scenes=scenes_path, probes=probes, language=lang, out=_out(tmp_path / "exp", "run-platonic"),
                     config={"platonic_sensitivity": [{"sigma": 1.0}]})


def test_null_summary_hand_example():
    from prh.studies.convergence.run import null_summary

    cross = {"x_names": ["a", "b"], "y_names": ["v"], "scores": [[0.3], [0.1]],
             "calibration": {"permutations": 19, "p_value": [[0.05], [0.5]], "null_max_mean": [[0.02], [0.04]]}}
    s = null_summary(cross)
    assert s["score_mean"] == pytest.approx(0.2) and s["null_max_mean"] == pytest.approx(0.03)
    assert s["fraction_p_below_0.05"] == 0.0 and s["min_p"] == pytest.approx(0.05) and s["aristotelian_mean"] is None
    square = {"x_names": ["a", "b"], "y_names": ["a", "b"], "scores": [[1.0, 0.4], [0.4, 1.0]],
              "calibration": {"permutations": 9, "p_value": [[0.1, 0.01], [0.01, 0.1]],
                              "null_max_mean": [[0.9, 0.1], [0.1, 0.9]], "aristotelian": [[1.0, 0.3], [0.5, 1.0]]}}
    s = null_summary(square)  # the diagonal (a model with itself) is left out
    assert s["score_mean"] == pytest.approx(0.4) and s["null_max_mean"] == pytest.approx(0.1)
    assert s["aristotelian_mean"] == pytest.approx(0.4)  # the authors' score, the diagonal left out too
    assert s["fraction_p_below_0.05"] == 1.0
    assert null_summary({"x_names": ["a"], "y_names": ["v"], "scores": [[0.1]]}) is None


def test_run_convergence_with_the_preregistered_test(tmp_path):
    from prh.cli import main as prh_main

    names = ["a", "b", "c", "d"]
    s = np.full((4, 4), 0.3)
    np.fill_diagonal(s, 1.0)
    settings = {"metric": "mutual_knn", "topk": 10, "skip_x_layers": 1}
    vis = _write(tmp_path / "vv.json", {"settings": settings, "x_names": names, "y_names": names, "scores": s.tolist()})
    lms = [f"l{i}" for i in range(8)]
    comp = np.linspace(0.2, 0.9, 8)
    outcome = np.vstack([comp ** 3] * 4).T  # rises with competence in every vision model
    null = np.full((9, 4), 0.05)
    scores = np.vstack([outcome + null[:8], [[0.5] * 4]])  # + a bag-of-words reference, not a unit
    cross = {"settings": settings, "x_names": [*lms, "bow"], "y_names": names, "scores": scores.tolist(),
             "calibration": {"permutations": 9, "seed": 0, "p_value": np.full((9, 4), 0.1).tolist(),
                             "null_max_mean": null.tolist()}}
    lang = _write(tmp_path / "lang.json", {"models": {lm: {"bpb": 2.0 - c} for lm, c in zip(lms, comp)}})
    competence = {"gate_passed": True, "language_models": lms,
                  "models": {lm: {"reducible_fraction": c, "mc_accuracy": 0.25 + c / 2} for lm, c in zip(lms, comp)}}
    args = ["run-convergence", "--probes", _write(tmp_path / "probes.json", PROBES), "--vision-alignment", vis,
            "--cross-alignment", _write(tmp_path / "lv.json", cross), "--language", lang,
            *(a for name, path in _out(tmp_path / "exp").items() for a in (f"--{name.replace('_', '-')}", path)),
            "--bins", "0", "1", "3", "--config", json.dumps({"convergence": {"preregistered": {"permutations": 999}}}),
            "--preregistered-competence", _write(tmp_path / "comp.json", competence),
            "--preregistered-vision-models", "a", "b"]
    prh_main(args)
    pre = json.loads((tmp_path / "exp" / "metrics.json").read_text())["language_vision_preregistered"]
    assert pre["unit"] == "language_model" and pre["n"] == 8 and pre["language_models"] == lms
    assert pre["vision_models"] == ["a", "b"] and pre["vision_set"] == "zoo_vision_trained"
    assert pre["spearman_r"] == pytest.approx(1.0) and pre["p_permutation"] == pytest.approx(1 / 1000)
    assert pre["permutations"] == 999 and pre["alternative"] == "greater" and pre["gate_passed"] is True
    assert pre["verdict"] == "reproduced" and set(pre["predictors"]) == {"reducible_fraction", "mc_accuracy"}
    assert pre["gate_rule"] == {"min_steps": 1000, "background": 0.9, "count": 0.8, "largest_color": 0.6}
    from prh.figures import draw_from

    paths = draw_from(tmp_path / "exp", ["convergence_fig03_preregistered"], tmp_path / "fig")
    assert all(p.stat().st_size > 1000 for p in paths) and {p.suffix for p in paths} == {".pdf", ".png"}
    # a failed gate: the same numbers, no verdict
    _write(tmp_path / "comp.json", {**competence, "gate_passed": False})
    prh_main(args)
    assert json.loads((tmp_path / "exp" / "metrics.json").read_text())["language_vision_preregistered"]["verdict"] == "inconclusive"
    with pytest.raises(SystemExit, match="both"):  # a user error: one line, no traceback
        prh_main(args[:-3])
    with pytest.raises(SystemExit) as err:  # the schema's check of the slice, naming the key: one line
        prh_main([*args[:args.index("--config") + 1], json.dumps({"convergence": {"preregistered": {"permutation": 9}}}),
                  *args[args.index("--config") + 2:]])
    assert "convergence.preregistered: Additional properties are not allowed ('permutation' was unexpected)" in \
        str(err.value.code)
    _write(tmp_path / "comp.json", competence["models"])
    with pytest.raises(ValueError, match="gate_passed"):
        prh_main(args)


def _suite_task_counts(cfg: dict) -> dict[str, int]:
    """Tasks a vision model can solve per suite: the shapes world's probe tasks offline, the VTAB
    tasks (every vtab_<task>_train dataset, as workflow/rules/convergence.smk reads them) in the paper suite."""
    from prh.data.tasks import TASKS

    vtab = [n for n in cfg["datasets"] if n.startswith("vtab_") and n.endswith("_train")]
    return {"offline": len(TASKS), "paper": len(vtab)}


def test_every_solved_count_falls_in_exactly_one_bin_per_suite():
    """Bins set for the 10 offline tasks dropped paper-suite models solving >= 11 of 19."""
    from prh.checks import check_config
    from prh.config import load

    cfg = check_config(load("params.yaml"))
    counts = _suite_task_counts(cfg)
    assert counts == {"offline": 10, "paper": 19}
    for suite, n_tasks in counts.items():
        bins = cfg["convergence"]["bins"][suite]
        for solved in range(n_tasks + 1):
            hits = [i for i, (lo, hi) in enumerate(zip(bins, bins[1:])) if lo <= solved < hi]
            assert len(hits) == 1, f"{suite}: {solved} tasks solved falls in bins {hits} of {bins}"
    assert cfg["convergence"]["bins"]["offline"] == [0, 4, 7, 11]   # unchanged (Fig 3's pre-registration)


def test_bins_that_drop_a_count_are_refused(tmp_path):
    """run_convergence refuses bins that leave a possible count of solved tasks outside every bin."""
    from prh.checks import check_bins

    assert check_bins(bins=[0, 7, 13, 20], n_tasks=19) == [0, 7, 13, 20]
    with pytest.raises(ValueError, match="bins"):
        check_bins(bins=[0, 4, 7, 11], n_tasks=19)   # 11..19 solved: in no bin
    with pytest.raises(ValueError, match="bins"):
        check_bins(bins=[1, 4, 11], n_tasks=10)      # 0 solved: in no bin
    with pytest.raises(ValueError, match="per suite"):
        check_bins(bins={"offline": [0, 4, 7, 11]}, n_tasks=10)
    names = ["a", "b", "c", "d"]
    s = np.full((4, 4), 0.3)
    np.fill_diagonal(s, 1.0)
    settings = {"metric": "mutual_knn", "topk": 10}
    vis = _write(tmp_path / "vv.json", {"settings": settings, "x_names": names, "y_names": names, "scores": s.tolist()})
    cross = _write(tmp_path / "lv.json", {"settings": settings, "x_names": ["l1"], "y_names": names,
                                          "scores": [[0.1, 0.2, 0.3, 0.4]]})
    lang = _write(tmp_path / "lang.json", {"models": {"l1": {"bpb": 1.0}}})
    with pytest.raises(ValueError, match="bins"):   # PROBES has 2 tasks: a model solving 2 is in no bin of [0, 1, 2]
        run_convergence(probes=_write(tmp_path / "p.json", PROBES), vision_alignment=vis, cross_alignment=cross,
                        language=lang, families={}, out=_out(tmp_path / "exp"), config={"bins": [0, 1, 2]})


def test_each_command_gets_only_its_slice_of_the_block():
    """The rules pass each command its keys (prh.studies.convergence.design.SLICES); a command fills a key left
    out with its default, so every key of the block must be some command's or the rules' own, exactly once."""
    from prh.studies.convergence.design import SLICES, WORKFLOW_KEYS
    from prh.studies.convergence.run import DEFAULTS, OUTPUTS

    keys = [k for keys in SLICES.values() for k in keys] + list(WORKFLOW_KEYS)
    assert sorted(keys) == sorted(DEFAULTS)
    assert set(SLICES) == set(OUTPUTS)  # the two commands


def test_figures_group_checkpoints_by_run():
    """Checkpoints of one run are one trajectory; untrained models form the floor band."""
    from prh.plots.convergence import _runs

    runs = _runs(["gpt2_s_r0_0", "gpt2_s_r0_300", "gpt2_s_r0_100", "gpt2_s_r1_100", "bert_m_300", "minilm"])
    assert runs == {"gpt2_s_r0": [(0, "gpt2_s_r0_0"), (100, "gpt2_s_r0_100"), (300, "gpt2_s_r0_300")],
                    "gpt2_s_r1_100": [(100, "gpt2_s_r1_100")], "bert_m_300": [(300, "bert_m_300")],
                    "minilm": [(-1, "minilm")]}
