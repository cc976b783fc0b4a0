"""Seed 001 (bridge training): gradients per bridge depth, exact random-label ratio, outlier
statistics, the appendix-A measure, the pre-registered decisions, and one tiny arm end to end."""

import numpy as np
import pytest
import torch

from prh.studies.bridge.align import run_alignment
from prh.claims import interval_verdict
from prh.studies.bridge.analysis import analyse, paired_bootstrap
from prh.studies.bridge.arm import run_arm
from prh.studies.bridge.covariance import input_basis, off_diagonal_mass
from prh.studies.bridge.design import expand_arms
from prh.studies.bridge.model import build_model, load_backbone, set_bridge
from prh.studies.bridge.outliers import outlier_stats
from prh.studies.bridge.train import random_labels


@pytest.fixture(scope="module")
def tiny_gpt2(tmp_path_factory):
    """A 3-block GPT-2 saved with save_pretrained: the paper config's loading path."""
    from transformers import GPT2Config, GPT2Model

    torch.manual_seed(0)
    path = tmp_path_factory.mktemp("gpt2")
    GPT2Model(GPT2Config(n_layer=3, n_embd=32, n_head=2, n_positions=64, vocab_size=50)).save_pretrained(path)
    return str(path)


def _grads(model, k):
    set_bridge(model, blocks=k)
    model.zero_grad(set_to_none=True)
    x, y = torch.randn(4, 3, 32, 32), torch.tensor([0, 1, 2, 0])
    torch.nn.functional.cross_entropy(model(x), y).backward()
    return {n for n, p in model.named_parameters() if p.grad is not None and p.grad.abs().sum() > 0}


@pytest.mark.parametrize("source", ["gpt2", "minilm"])
def test_k0_only_patch_embedding_and_head_get_gradients(source, tiny_gpt2):
    model = build_model(source=tiny_gpt2 if source == "gpt2" else "minilm", image_size=32, patch_size=8,
                        num_classes=3)
    got = _grads(model, 0)
    assert got and all(n.startswith(("embed.", "head.")) for n in got)
    assert {"embed.proj.weight", "head.weight"} <= got
    got2 = _grads(model, 2)
    blocks = {n.split(".")[1] for n in got2 if n.startswith("blocks.")}
    assert blocks == {"0", "1"}
    got_all = _grads(model, "all")
    assert {n.split(".")[1] for n in got_all if n.startswith("blocks.")} == {str(i) for i in range(len(model.blocks))}


def test_set_bridge_rejects_bad_depth(tiny_gpt2):
    model = build_model(source=tiny_gpt2, image_size=32, patch_size=8, num_classes=3)
    with pytest.raises(ValueError, match="blocks"):
        set_bridge(model, blocks=4)


def test_shuffled_keeps_each_tensors_values_but_not_their_order(tiny_gpt2):
    pre, _, _ = load_backbone(tiny_gpt2, init="pretrained")
    shuf, _, _ = load_backbone(tiny_gpt2, init="shuffled", seed=1)
    for (name, a), b in zip(pre.state_dict().items(), shuf.state_dict().values()):
        assert torch.equal(a.flatten().sort().values, b.flatten().sort().values), name
    w = "0.attn.c_attn.weight"
    assert not torch.equal(pre.state_dict()[w], shuf.state_dict()[w])


@pytest.mark.parametrize("n,ratio", [(100, 0.0), (100, 0.2), (97, 0.5), (1000, 1.0), (7, 0.33)])
def test_random_label_ratio_is_exact_and_seeded(n, ratio):
    y = np.arange(n) % 5
    new, mask = random_labels(y, ratio=ratio, num_classes=5, seed=3)
    assert mask.sum() == round(ratio * n)
    assert np.array_equal(new[~mask], y[~mask])
    assert new.min() >= 0 and new.max() < 5
    again, mask2 = random_labels(y, ratio=ratio, num_classes=5, seed=3)
    assert np.array_equal(again, new) and np.array_equal(mask, mask2)
    if 0 < round(ratio * n) < n:
        _, other = random_labels(y, ratio=ratio, num_classes=5, seed=4)
        assert not np.array_equal(other, mask)


def test_random_labels_reject_bad_ratio():
    with pytest.raises(ValueError, match="ratio"):
        random_labels([0, 1], ratio=1.5, num_classes=2, seed=0)


def test_outlier_statistics_gaussian_vs_student_t():
    rng = np.random.default_rng(0)
    g = outlier_stats(rng.normal(size=(400, 500)))
    assert g["outlier_fraction"] < 1e-5 and abs(g["excess_kurtosis"]) < 0.05 and g["max_ratio"] < 6
    t = outlier_stats(rng.standard_t(3, size=(400, 500)))
    assert t["outlier_fraction"] > 1e-3 and t["excess_kurtosis"] > 1 and t["max_ratio"] > 10


def test_off_diagonal_mass_zero_when_aligned():
    rng = np.random.default_rng(0)
    d = 12
    basis_true = np.linalg.qr(rng.normal(size=(d, d)))[0]
    x = rng.normal(size=(5000, d)) * np.linspace(3, 0.5, d) @ basis_true.T
    u = input_basis(x, top=4)
    aligned = rng.normal(size=(5000, d)) * np.linspace(2, 1, d) @ basis_true.T  # rows' covariance shares x's eigenvectors
    assert off_diagonal_mass(aligned, u) < 0.02
    assert off_diagonal_mass(rng.normal(size=(300, d)) @ rng.normal(size=(d, d)), u) > 0.1


def test_paired_bootstrap_of_a_constant_difference():
    s = paired_bootstrap(np.ones(10), np.zeros(10))
    assert s["mean"] == s["lo"] == s["hi"] == 1.0


def test_one_paired_unit_is_not_testable():
    """The offline replay: the paper suite's probe sets have one task (the class label), so the per-arm
    interval over tasks has one unit; the analysis crashed on it after every bridge arm had trained."""
    s = paired_bootstrap([0.7], [0.6])
    assert s == {"mean": pytest.approx(0.1), "lo": None, "hi": None, "n_units": 1}
    assert interval_verdict("beats", s["lo"], s["hi"], 0.02) == interval_verdict("matches", s["lo"], s["hi"], 0.02) \
        == "not testable"
    with pytest.raises(ValueError, match="1-d array"):
        paired_bootstrap([], None)


def test_expand_arms_names_sweeps():
    arms = expand_arms({"a": {"init": "scratch"}}, [{"init": ["pretrained"], "ratio": [0.0, 1.0], "blocks": [0, "all"]}])
    assert set(arms) == {"a", "pretrained_r0_k0_s0", "pretrained_r1_k0_s0", "pretrained_r0_kall_s0",
                         "pretrained_r1_kall_s0"}
    with pytest.raises(ValueError, match="unknown"):
        expand_arms({}, [{"lr": [1]}])


def test_tiny_arms_end_to_end(tmp_path, tiny_gpt2):
    from prh.data.shapes import build_dataset

    train = build_dataset(tmp_path / "train", n=40, seed=1, world={"image_size": 32})
    probe = build_dataset(tmp_path / "probe", n=40, seed=3, world={"image_size": 32})
    cfg = {"source": tiny_gpt2, "patch_size": 8, "n_train": 32, "n_eval": 8, "n_probe": 40, "epochs": 1,
           "batch_size": 16, "cov_top": 4, "cov_patches": 256, "probe_cs": [1.0], "min_size": 256}
    arms = {}
    for name, arm in {"pretrained_r1": {"ratio": 1.0}, "scratch_r1": {"init": "scratch"},
                      "pretrained_r1_k0": {"blocks": 0}, "pretrained_nobridge": {"epochs": 0}}.items():
        arms[name] = run_arm(name=name, arm=arm, config=cfg, train_data=str(train), probe_data=str(probe),
                             result=str(tmp_path / name / "result.json"),
                             features=str(tmp_path / name / "features.safetensors"))
    r = arms["pretrained_r1"]
    assert r["n_random"] == 32 and len(r["probes"]["tasks"]) == 10
    assert arms["pretrained_nobridge"]["curves"]["epoch"] == [0]
    align = run_alignment(features=[str(tmp_path / n / "features.safetensors") for n in arms], probe_data=str(probe),
                          out=str(tmp_path / "alignment.json"))
    assert set(align["arms"]) == set(arms) and all(0 <= a["world"] <= 1 for a in align["arms"].values())
    metrics, figures = analyse(arms=arms, outliers=None, alignment=align, config={"n_boot": 100})
    assert metrics["arms"]["pretrained_r1"]["mutual_knn"]["world"] == align["arms"]["pretrained_r1"]["world"]
    assert metrics["verdicts"]["fig8_first2_matches_all"] == "not testable"
    # the label is the pre-registered rule applied to the interval the claim records (no test
    # that asserts only membership in the label set)
    c = metrics["claims"]["fig3_random_labels"]
    assert c["lo"] <= c["mean"] <= c["hi"] and c["n_units"] == 10
    assert c["verdict"] == interval_verdict("beats", c["lo"], c["hi"], c["margin"]) == metrics["verdicts"]["fig3_random_labels"]
    assert set(figures["arms"]) == set(arms)


def test_bridge_commands_write_the_paths_they_are_given(tmp_path, tiny_gpt2):
    """Each bridge command writes exactly the files the rule names (no folder where the library picks names):
    run-bridge-arm --result/--features, run-bridge-align reads the strongest vision model's file out of
    --vision-features, run-bridge-analysis --metrics/--figures."""
    import json
    import shutil

    from prh import cli
    from prh.data.shapes import build_dataset

    train = build_dataset(tmp_path / "train", n=40, seed=1, world={"image_size": 32})
    probe = build_dataset(tmp_path / "probe", n=40, seed=3, world={"image_size": 32})
    cfg = {"source": tiny_gpt2, "patch_size": 8, "n_train": 32, "n_eval": 8, "n_probe": 40, "epochs": 1,
           "batch_size": 16, "cov_top": 4, "cov_patches": 256, "probe_cs": [1.0], "min_size": 256}
    result, feats = tmp_path / "a" / "r.json", tmp_path / "b" / "f.safetensors"
    cli.main(["run-bridge-arm", "--name", "pretrained_r1", "--arm", "{}", "--config", json.dumps(cfg),
              "--train-data", str(train), "--probe-data", str(probe), "--device", "cpu",
              "--result", str(result), "--features", str(feats)])
    assert sorted(p.name for p in tmp_path.joinpath("a").iterdir()) == ["r.json"]
    assert sorted(p.name for p in tmp_path.joinpath("b").iterdir()) == ["f.json", "f.safetensors"]  # + its meta
    vision = tmp_path / "features"
    vision.mkdir()
    for model in ("v_strong", "v_weak"):
        shutil.copy(feats, vision / f"{model}.safetensors")
        shutil.copy(feats.with_suffix(".json"), vision / f"{model}.json")
    align = tmp_path / "align.json"
    cli.main(["run-bridge-align", "--arms", str(feats), "--probe-data", str(probe), "--vision-model", "v_strong",
              "--vision-features", str(vision / "v_weak.safetensors"), str(vision / "v_strong.safetensors"),
              "--topk", "5", "--quantile", "0.95", "--out", str(align)])
    row = json.loads(align.read_text())["arms"]["pretrained_r1"]
    assert row["vision"] == pytest.approx(1.0)  # the arm against a copy of its own features
    with pytest.raises(ValueError, match="v_missing"):
        run_alignment(features=[str(feats)], probe_data=str(probe), out=str(tmp_path / "x.json"),
                      vision_model="v_missing", vision_features=[str(vision / "v_weak.safetensors")])
    metrics, figures = tmp_path / "m" / "metrics.json", tmp_path / "f" / "figures.json"
    cli.main(["run-bridge-analysis", "--arms", str(result), "--alignment", str(align), "--config", '{"bridge.analysis": {"n_boot": 100}}',
              "--metrics", str(metrics), "--figures", str(figures)])
    assert json.loads(metrics.read_text())["vision_model"] == "v_strong"
    assert set(json.loads(figures.read_text())["arms"]) == {"pretrained_r1"}
