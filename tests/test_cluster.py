"""One GPU-count formula, a SLURM profile whose notes agree with it and that
has account / QoS / GPU-type placeholders, GPU-hour estimates of a plan, and DVC leaving the
paper suite's per-layer features out of its cache and remote."""

from __future__ import annotations

import json
import math
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from prh.checks import check_config
from prh.cluster import (
    PLAN_COST_ENV,
    emit_plan_cost,
    estimate_gpu_seconds,
    format_plan_cost,
    gpu_table,
    gpus_needed,
    job_tokens,
    job_work,
    plan_cost,
)
from prh.config import schema_defaults

ROOT = Path(__file__).resolve().parents[1]
PARAMS = check_config(yaml.safe_load((ROOT / "params.yaml").read_text()))  # as the workflow sees it: defaults filled
MODELS = PARAMS["paper"]["models"]


def test_gpus_needed_is_bf16_weights_plus_a_fifth_over_the_card():
    # ceil(2 x n x 1.2 / (mem x 1e9)), at least 1
    assert gpus_needed(n_params=70_553_700_000, gpu_memory_gb=80) == 3      # 169.3 GB
    assert gpus_needed(n_params=65_285_700_000, gpu_memory_gb=80) == 2      # 156.7 GB
    assert gpus_needed(n_params=32_528_900_000, gpu_memory_gb=80) == 1      # 78.1 GB
    assert gpus_needed(n_params=70_553_700_000, gpu_memory_gb=40) == 5
    assert gpus_needed(n_params=10_000_000, gpu_memory_gb=80) == 1
    assert gpus_needed(n_params=100e9, gpu_memory_gb=80, overhead=0.0, bytes_per_param=4) == 5
    with pytest.raises(ValueError, match="gpu_memory_gb"):
        gpus_needed(n_params=1e9, gpu_memory_gb=0)
    with pytest.raises(ValueError, match="n_params"):
        gpus_needed(n_params=0, gpu_memory_gb=80)


def test_card_memory_is_a_config_value_with_a_schema_default():
    assert schema_defaults("cluster") == {"gpu_memory_gb": 80, "rates_file": None}
    assert PARAMS["cluster"]["gpu_memory_gb"] == 80


def test_rules_have_one_gpu_formula():
    """No rule file computes a GPU count of its own: hub-model rules ask gpus_for (prh.cluster.gpus_needed)."""
    rules = {smk.name: smk.read_text() for smk in (ROOT / "workflow" / "rules").glob("*.smk")}
    assert "gpus_needed(n_params=" in rules["common.smk"]
    for name, text in rules.items():
        assert "math.ceil" not in text and "GPU_MEM_GB" not in text, f"{name} computes a GPU count of its own"
    assert "gpu=lambda w: gpus_for(w.model)" in rules["phase.smk"] and "gpu=gpus_for(" in rules["density.smk"]
    # and --device-map auto wherever a hub LM may need more than one GPU
    assert "device_map=device_map_arg(" in rules["density.smk"] and "device_map_arg(w.model)" in rules["paper_data.smk"]


def test_profile_notes_agree_with_the_formula():
    """The README's table of multi-GPU models is the formula's, at the configured card memory, and
    partitions.yaml fits the largest count (main said 2 for 70B while the rules asked for 3)."""
    memory = PARAMS["cluster"]["gpu_memory_gb"]
    rows = gpu_table(models=MODELS, gpu_memory_gb=memory)
    readme = (ROOT / "profiles" / "slurm" / "README.md").read_text()
    block = re.search(rf"<!-- gpu-table: generated from prh.cluster.gpu_table\(gpu_memory_gb={memory}\) -->\n"
                      r"(.*?)<!-- /gpu-table -->", readme, re.S)
    assert block, "profiles/slurm/README.md lost its generated GPU table"
    expected = ["| model | parameters | GPUs |", "| --- | --- | --- |"] + [
        f"| {r['model']} | {r['n_params'] / 1e9:.1f}B | {r['gpus']} |" for r in rows]
    assert block.group(1).strip().splitlines() == expected
    partitions = (ROOT / "profiles" / "slurm" / "partitions.yaml").read_text()
    gpu = yaml.safe_load(partitions)["partitions"]["gpu"]
    largest = max(r["gpus"] for r in rows)
    assert gpu["max_gpu"] >= largest
    assert re.search(r"max_gpu:.*the most one model asks for \((\d+) on (\d+) GB", partitions).groups() == (
        str(largest), str(memory))


def test_profile_has_account_qos_and_gpu_type_placeholders():
    slurm = yaml.safe_load((ROOT / "profiles" / "slurm" / "config.yaml").read_text())
    default = yaml.safe_load((ROOT / "profiles" / "default" / "config.yaml").read_text())
    # account and extra flags: default-resources of the workflow profile, which replaces the slurm profile's
    assert {"slurm_account", "slurm_extra"} <= set(default["default-resources"])
    assert "default-resources" not in slurm
    assert "slurm-qos" in slurm  # the plugin's QoS setting (it refuses --qos inside slurm_extra)
    gpu_rules = {"extract_vision", "extract_language", "extract_language_density", "lm_score",
                 "summarise_captions", "phase_model"}
    assert gpu_rules <= set(slurm["set-resources"])
    assert all("gpu_model" in slurm["set-resources"][r] for r in gpu_rules)


def test_dvc_keeps_the_per_layer_features_out_of_cache_and_remote():
    """Hundreds of GB of paper-suite features are not a DVC out, so never cached or pushed;
    figures, metrics and experiment tables stay cached and pushed. No out is `cache: false`: such an
    out is absent after `dvc pull`, DVC then calls the stage changed and `dvc repro` fails on it."""
    outs = {}
    for out in yaml.safe_load((ROOT / "dvc.yaml").read_text())["stages"]["workflow"]["outs"]:
        (path, opts), = out.items()
        outs[path] = opts or {}
    assert not [p for p in outs if p == "results/features" or p.startswith("results/features/")]
    assert all(opts.get("cache", True) for opts in outs.values()), outs
    for kept in ("results/figures", "results/experiments", "results/alignment"):
        assert outs[kept].get("cache", True) and outs[kept].get("push", True), kept


def test_estimate_of_one_job_is_startup_load_and_flops():
    # per GPU: 10 s + 2e9 B / 1e9 B/s + 2 x 1e9 x 1e6 / (0.5 x 1e15) = 10 + 2 + 4 = 16 s; two GPUs held
    kw = dict(peak_flops=1e15, mfu=0.5, startup_s=10, load_bytes_per_s=1e9)
    assert estimate_gpu_seconds(n_params=1e9, gpus=2, tokens=1e6, **kw) == pytest.approx(32.0)
    # decoding: 100 steps x 2e9 bytes / 2e12 B/s = 0.1 s more per GPU
    assert estimate_gpu_seconds(n_params=1e9, gpus=1, tokens=1e6, decode_steps=100, hbm_bytes_per_s=2e12,
                                **kw) == pytest.approx(16.1)
    with pytest.raises(ValueError, match="mfu"):
        estimate_gpu_seconds(n_params=1e9, gpus=1, tokens=1, mfu=0)


def test_plan_cost_of_a_tiny_plan(tmp_path):
    config = {
        "suite": "paper", "suites": {"paper": {"paired_dataset": "pairs"}},
        "datasets": {"imgs": {"kind": "hub", "n": 1000, "image_size": 224}, "pairs": {"kind": "hub", "n": 500}},
        "paper": {"models": {"vit": {"repo": "vit_base_patch16_224.x", "n_params": 1e8},
                             "lm": {"repo": "org/lm", "n_params": 1e10}},
                  "lm_score": {"n_bytes": 4e6}},
    }
    jobs = [
        {"rule": "extract_vision", "wildcards": {"dataset": "imgs", "model": "vit"}, "resources": {"gpu": 1, "runtime": 30}},
        {"rule": "extract_language", "wildcards": {"dataset": "pairs", "model": "lm"}, "resources": {"gpu": 1, "runtime": 60}},
        {"rule": "lm_score", "wildcards": {"model": "lm"}, "resources": {"gpu": 2, "runtime": 90}},
        {"rule": "bridge_arm", "wildcards": {"arm": "a"}, "resources": {"gpu": 1, "runtime": 600}},
        {"rule": "align", "wildcards": {}, "resources": {"gpu": 0, "runtime": 600}},  # CPU: not counted
    ]
    # tokens: 1000 images x (224/16)^2 + 1 = 197 tokens; 500 captions x 32; 4e6 bytes / 4
    assert job_tokens(rule="extract_vision", wildcards=jobs[0]["wildcards"], config=config,
                      results=tmp_path) == (197_000, 0)
    rates = dict(peak_flops=1e15, fp32_peak_flops=2e14, mfu=0.5, startup_s=100, load_bytes_per_s=1e9)
    cost = plan_cost(jobs=jobs, config={**config, "features": {"vision_dtype": "float32"}}, results=tmp_path, **rates)
    fam = cost["families"]
    assert fam["extract_vision"]["reserved_gpu_h"] == pytest.approx(0.5)
    # vision in float32 (the reference's precision): 100 + 0.2 + 2e8 x 197000 / (0.5 x 2e14) s
    assert fam["extract_vision"]["estimated_gpu_h"] == pytest.approx((100 + 0.2 + 2e8 * 197_000 / 1e14) / 3600)
    # features.vision_dtype's default, tf32, runs at the TF32 peak
    tf32 = plan_cost(jobs=jobs[:1], config=config, results=tmp_path, **rates, tf32_peak_flops=4e14)
    assert tf32["families"]["extract_vision"]["estimated_gpu_h"] == pytest.approx((100 + 0.2 + 2e8 * 197_000 / 2e14) / 3600)
    assert "vision at 400 TFLOP/s TF32" in format_plan_cost(tf32)
    bf16 = plan_cost(jobs=jobs[:1], config={**config, "features": {"vision_dtype": "bfloat16"}}, results=tmp_path,
                     **rates)
    assert bf16["families"]["extract_vision"]["estimated_gpu_h"] == pytest.approx((100 + 0.2 + 2e8 * 197_000 / 5e14) / 3600)
    assert fam["extract_language"]["estimated_gpu_h"] == pytest.approx((100 + 20 + 2e10 * 16_000 / 5e14) / 3600)
    assert fam["lm_score"]["reserved_gpu_h"] == pytest.approx(3.0)
    assert fam["lm_score"]["estimated_gpu_h"] == pytest.approx(2 * (100 + 20 + 2e10 * 1e6 / 5e14) / 3600)
    assert fam["bridge_arm"] == {"gpu_jobs": 1, "reserved_gpu_h": 10.0, "estimated_gpu_h": 10.0, "modelled": False}
    assert "align" not in fam
    total = cost["total"]
    assert total["gpu_jobs"] == 4 and total["reserved_gpu_h"] == pytest.approx(0.5 + 1 + 3 + 10)
    assert total["estimated_modelled_gpu_h"] == pytest.approx(total["estimated_gpu_h"] - 10)
    text = format_plan_cost(cost)
    assert "reserved" in text and "bridge_arm" in text and "not modelled" in text
    assert re.search(r"^total\s+4\s+14\.5\s+", text, re.M)
    # the model's input side (timm name) below the stored 518 px; DINOv2 (no size in its name) reads 518
    config["datasets"]["big"] = {"kind": "hub", "n": 10, "image_size": 518}
    config["paper"]["models"]["dino"] = {"repo": "vit_small_patch14_dinov2.lvd142m", "n_params": 2e7}
    assert job_tokens(rule="extract_vision", wildcards={"dataset": "big", "model": "vit"}, config=config,
                      results=tmp_path) == (1970, 0)
    assert job_tokens(rule="extract_vision", wildcards={"dataset": "big", "model": "dino"}, config=config,
                      results=tmp_path) == (10 * (37 ** 2 + 1), 0)
    # one density job extracts every level: the num_words summaries and the dense caption
    config["density"] = {"num_words": [5, 10]}
    assert job_tokens(rule="extract_language_density", wildcards={"dataset": "pairs", "model": "lm"}, config=config,
                      results=tmp_path) == (pytest.approx(500 * (1.33 * 15 + 1400)), 0)
    # a materialised dataset's own count wins over params' n
    (tmp_path / "data" / "imgs").mkdir(parents=True)
    (tmp_path / "data" / "imgs" / "meta.json").write_text('{"count": 10}')
    assert job_tokens(rule="extract_vision", wildcards=jobs[0]["wildcards"], config=config,
                      results=tmp_path) == (1970, 0)


def test_emit_plan_cost_prints_to_stderr_or_writes_json_for_prh_plan_cost(tmp_path, monkeypatch, capsys):
    cost = plan_cost(jobs=[{"rule": "bridge_arm", "wildcards": {}, "resources": {"gpu": 2, "runtime": 30}}],
                     config={"datasets": {}})
    monkeypatch.delenv(PLAN_COST_ENV, raising=False)
    emit_plan_cost(cost)
    out = capsys.readouterr()
    assert out.out == "" and re.search(r"^total\s+1\s+1\.0\s+1\.0$", out.err, re.M)
    monkeypatch.setenv(PLAN_COST_ENV, str(tmp_path / "cost.json"))
    emit_plan_cost(cost)
    assert json.loads((tmp_path / "cost.json").read_text())["total"]["reserved_gpu_h"] == 1.0
    emit_plan_cost(plan_cost(jobs=[], config={}))  # no GPU job: nothing written, nothing printed
    assert capsys.readouterr().err == ""


# ---- training and Jacobian families: one formula each, from the job's config (job_work) ----

RATES = dict(fp32_peak_flops=1e14, train_mfu=0.5, startup_s=100, load_bytes_per_s=1e9)  # 5e13 FLOP/s sustained


def _seconds(flops, load_bytes=0.0, gpus=1):
    return gpus * (100 + load_bytes / 1e9 + flops / 5e13)


def test_lte_paper_counts_every_run_on_the_busiest_rank(tmp_path):
    """ViT-S/32 at 64 px (4 patches + class token) on 2 ranks: the sweep's standard and LTE runs, then standard
    (DDP: a rank does half), lora and lora_merge (one head: one rank does all) and LTE (4 heads: 2 per rank)."""
    vision = {"image_size": 64, "batch_size": 64, "samples": 1024, "sweep_fraction": 0.5, "lte_factor": 2.0,
              "heads": 4, "rank": 2, "merge_every": 2, "evals": 4, "lr_grid": {"standard": [1e-3], "lte": [1e-3]}}
    config = {"suite": "paper", "datasets": {"c10": {"kind": "hub", "n": 100}},
              "lte": {"paper": {"nproc": 2, "nnodes": 1, "models": {"vit": {"timm": "vit_small_patch32_224"}},
                                "vision": vision}}}
    c, patches, tokens, r = 384, 4, 5, 2
    embed = c * 3 * 32 * 32 * patches                      # the patch embedding (a Conv2d, trained whole)
    blocks = 12 * (3 * c * c + c * c + 4 * c * c + 4 * c * c) * tokens   # qkv, proj, fc1, fc2
    f = 2 * (embed + blocks)                                 # forward FLOPs of one image
    step = 2 * f + 2 * embed + 6 * r * 12 * ((3 * c + c) + (c + c) + (4 * c + c) + (c + 4 * c)) * tokens
    merge = 2 * r * 12 * (3 * c * c + c * c + 4 * c * c + 4 * c * c)   # one head's B A, every LoRA'd layer
    expected = (
        8 * 64 * 3 * f / 2 + 4 * 8 * f                        # sweep standard: 8 steps, 4 evals of 0.08 x 100
        + 8 * 2 * 16 * step + 4 * 4 * merge + 4 * 8 * f       # sweep LTE: 2 heads of 16 items per rank, 4 merges
        + 16 * 64 * 3 * f / 2 + 4 * 20 * f                    # standard: 16 steps, 4 evals of 0.2 x 100
        + 16 * 64 * step + 4 * merge + 4 * 20 * f             # lora: one head, merged at its 4 evaluations
        + 16 * 64 * step + 8 * merge + 4 * 20 * f             # lora_merge: 8 merges
        + 32 * 2 * 16 * step + 16 * 4 * merge + 4 * 20 * f    # LTE: 2048 samples, 16 merges of 4 heads
    )
    work = job_work(rule="lte_paper", wildcards={"dataset": "c10", "model": "vit"}, config=config, results=tmp_path)
    assert work[0] == pytest.approx(expected) and work[1:] == (0.0, 2)
    # the estimate holds nproc x nnodes GPUs (the job's gpu resource is per node) at the float32 peak
    jobs = [{"rule": "lte_paper", "wildcards": {"dataset": "c10", "model": "vit"}, "resources": {"gpu": 1, "runtime": 60}}]
    fam = plan_cost(jobs=jobs, config=config, results=tmp_path, **RATES)["families"]["lte_paper"]
    assert fam["modelled"] and fam["reserved_gpu_h"] == 2.0  # both ranks' cards are held for the hour
    assert fam["estimated_gpu_h"] == pytest.approx(_seconds(expected, gpus=2) / 3600)
    # a measured language or vision utilisation (bench_device.py) does not apply to fp32 training
    measured = plan_cost(jobs=jobs, config=config, results=tmp_path, **RATES, mfu=0.14, vision_mfu=0.65)
    assert measured["families"]["lte_paper"]["estimated_gpu_h"] == pytest.approx(fam["estimated_gpu_h"])
    with pytest.raises(ValueError, match="mfu"):
        plan_cost(jobs=jobs, config=config, results=tmp_path, train_mfu=0)


@pytest.mark.parametrize("name, side, classes", [("vit_small_patch32_224", 224, 10), ("mixer_s32_224", 224, 100)])
def test_lte_matmul_shapes_are_timms(name, side, classes):
    """The widths, depths and rows LTE's formula counts are those of the timm model it trains."""
    timm, torch = pytest.importorskip("timm"), pytest.importorskip("torch")
    from prh.cluster.work import timm_matmuls as _timm_matmuls

    model = timm.create_model(name, pretrained=False, num_classes=classes)
    layers = [m for n, m in model.named_modules()
              if isinstance(m, (torch.nn.Linear, torch.nn.Conv2d)) and not n.startswith("head")]  # LTE skips the head
    matmuls = _timm_matmuls(name, side)
    assert [o * i for o, i, _, _ in matmuls] == [m.weight.numel() for m in layers]
    assert [lora for *_, lora in matmuls] == [isinstance(m, torch.nn.Linear) for m in layers]  # LoRA: nn.Linear only
    # rows per image: tokens (ViT: patches + class token; Mixer's channel MLP: patches, its token MLP: channels)
    x = torch.zeros(1, 3, side, side)
    rows = []
    hooks = [m.register_forward_hook(lambda m, i, o: rows.append(o[0].numel() // m.weight.shape[0])) for m in layers]
    with torch.no_grad():
        model(x)
    for h in hooks:
        h.remove()
    assert [r for _, _, r, _ in matmuls] == rows


def test_bridge_arm_trains_its_blocks_then_scores_and_extracts(tmp_path):
    from prh.studies.bridge.design import expand_arms

    config = {"suite": "paper", "datasets": {"train": {"kind": "hub", "image_size": 32}},
              "bridge": {"paper": {"train_data": "train", "arms": {"nobridge": {"epochs": 0}},
                                   "config": {"source": "gpt2", "patch_size": 4, "n_train": 100, "n_eval": 10,
                                              "n_probe": 20, "epochs": 3}}}}
    p, t = 12 * 12 * 768 ** 2, (32 // 4) ** 2 + 1            # GPT-2's blocks; 64 patches + class token

    def flops(arm):
        return job_work(rule="bridge_arm", wildcards={"arm": arm}, config=config, results=tmp_path)[0]

    # every block trained: 6 P per token; k of 12 blocks: 4 P + 2 P k / 12; held-out scores each epoch and before
    assert flops("pretrained_r1_kall_s0") == pytest.approx(3 * 100 * t * 6 * p + (4 * 10 + 20) * t * 2 * p)
    assert flops("pretrained_r0.2_k3_s2") == pytest.approx(3 * 100 * t * 4.5 * p + (4 * 10 + 20) * t * 2 * p)
    assert flops("scratch_r1_k0_s1_e5") == pytest.approx(5 * 100 * t * 4 * p + (6 * 10 + 20) * t * 2 * p)
    assert flops("nobridge") == pytest.approx((10 + 20) * t * 2 * p)     # no stage 1: scores and features only
    # every arm name the sweeps make is read back
    sweeps = [{"init": ["pretrained"], "ratio": [0.0, 1.0], "blocks": [0, 5, "all"], "seed": [0, 1], "epochs": [None, 7]}]
    config["bridge"]["paper"]["arms"] = {}
    for name, arm in expand_arms(None, sweeps).items():
        k = 12 if arm["blocks"] == "all" else arm["blocks"]
        e = 3 if arm["epochs"] is None else arm["epochs"]
        assert flops(name) == pytest.approx(e * 100 * t * (4 + 2 * k / 12) * p + ((e + 1) * 10 + 20) * t * 2 * p), name
    jobs = [{"rule": "bridge_arm", "wildcards": {"arm": "pretrained_r1_kall_s0"}, "resources": {"gpu": 1, "runtime": 600}}]
    fam = plan_cost(jobs=jobs, config=config, results=tmp_path, **RATES)["families"]["bridge_arm"]
    assert fam["modelled"] and fam["reserved_gpu_h"] == 10.0
    assert fam["estimated_gpu_h"] == pytest.approx(_seconds(flops("pretrained_r1_kall_s0"), 4 * p) / 3600)


def _phase_config():
    return {
        "suite": "paper", "suites": {"paper": {"paired_dataset": "wit", "vision_models": "v", "language_models": "l"}},
        "datasets": {"pairs": {"kind": "hub", "n": 40, "image_size": 224, "label_column": "label"}},
        "model_sets": {"pv": ["cnn", "vit"], "pl": ["lm", "lm2", "lm3"]},
        "paper": {"models": {"cnn": {"repo": "resnet50.tv_in1k", "modality": "vision", "n_params": 1e6},
                             "vit": {"repo": "vit_base_patch16_224.x", "modality": "vision", "n_params": 3e6},
                             "lm": {"repo": "org/lm", "modality": "language", "n_params": 500}}},
        "phase": {"vision_models": {"paper": "pv"}, "language_models": {"paper": "pl"}, "paired_dataset": {"paper": "pairs"},
                  "n_ntk": 8, "n_stability": 4, "n_readouts": 2, "exact_max_params": 1000, "sketch_dim": 64,
                  "sketch_check_items": 8, "train_steps": 3, "train_batch_size": 5, "test_fraction": 0.25,
                  "adaptive_lr": {"n_pairs": 2, "steps": 5, "every": 2, "n_items": 4, "batch_size": 3}},
    }


def test_phase_model_counts_jacobians_sketch_gram_and_training_steps(tmp_path):
    config = _phase_config()

    def work(model):
        return job_work(rule="phase_model", wildcards={"model": model}, config=config, results=tmp_path)

    # a CNN: 2 x 4.09 GMACs per image; sketched (P > exact_max_params): per NTK items x (1 + 2 R) f, R P sketch
    # adds per item and the Gram over sketch_dim; the exact check on min(8, 2^27 / (R P)) = 8 items
    f, p = 2 * 4.09e9, 1e6
    ntk8, ntk4 = 8 * 5 * f + 8 * 2 * p + 2 * 16 ** 2 * 64, 4 * 5 * f + 4 * 2 * p + 2 * 8 ** 2 * 64
    assert work("cnn") == (pytest.approx(ntk8 + ntk4 + 8 * 5 * f + 3 * 5 * 3 * f), 4 * p, None)
    # a ViT: 2 P x ((224 / 16)^2 + 1) per image
    f, p = 2 * 3e6 * 197, 3e6
    ntk8, ntk4 = 8 * 5 * f + 8 * 2 * p + 2 * 16 ** 2 * 64, 4 * 5 * f + 4 * 2 * p + 2 * 8 ** 2 * 64
    assert work("vit")[0] == pytest.approx(ntk8 + ntk4 + 8 * 5 * f + 45 * f)
    # a language model below exact_max_params: exact Jacobians (Gram over P, no check) of class-name captions
    f, p = 2 * 500 * 4, 500
    assert work("lm")[0] == pytest.approx(8 * 5 * f + 2 * 16 ** 2 * p + 4 * 5 * f + 2 * 8 ** 2 * p + 45 * f)
    # with a text column, captions are CAPTION_TOKENS long
    config["datasets"]["pairs"]["text_column"] = "text"
    assert work("lm")[0] == pytest.approx((12 * 5 + 45) * 2 * 500 * 32 + 2 * (16 ** 2 + 8 ** 2) * 500)


def test_phase_adaptive_lr_runs_two_modes_per_pair_with_ntks_between_steps(tmp_path):
    config = _phase_config()
    # pairs: min(2, 2 vision x 3 language) = 2, two runs each; f, P: the mean of the two vision models
    f, p = (2 * 4.09e9 + 2 * 3e6 * 197) / 2, 2e6
    ntk = 4 * 5 * f + 4 * 2 * p + 2 * 8 ** 2 * 64                     # n_items = 4, sketched
    run = 5 * 3 * 3 * f + 3 * ntk + 10 * f                             # 5 steps; NTKs at 0, 2, 4; 10 test items
    assert job_work(rule="phase_adaptive_lr", wildcards={}, config=config, results=tmp_path) == (
        pytest.approx(4 * run), pytest.approx(4 * 4 * p), None)


def test_color_language_is_a_forward_pass_over_the_prompts(tmp_path):
    from prh.cluster.rates import COLOR_PROMPTS
    from prh.studies.color.run import TEMPLATES

    assert COLOR_PROMPTS == len(TEMPLATES)
    config = {"suite": "paper", "model_sets": {"cl": ["a", "b"]},
              "paper": {"models": {"a": {"n_params": 1e8}, "b": {"n_params": 3e8}}},
              "color": {"language_models": {"paper": "cl"}, "language": {"terms": ["red", "green", "blue", "tan"]}}}
    # 2 P x 4 terms x 3 templates x 12 tokens per model; one load of each
    assert job_work(rule="color_language", wildcards={}, config=config, results=tmp_path) == (
        pytest.approx(2 * 4e8 * 4 * 3 * 12), 4 * 4e8, None)
    jobs = [{"rule": "color_language", "wildcards": {}, "resources": {"gpu": 1, "runtime": 60}}]
    cost = plan_cost(jobs=jobs, config=config, results=tmp_path, **RATES)
    assert cost["families"]["color_language"]["estimated_gpu_h"] == pytest.approx(
        _seconds(2 * 4e8 * 4 * 3 * 12, 16e8) / 3600)
    # every family modelled: one headline total, no "modelled families alone" line
    text = format_plan_cost(cost)
    assert text.splitlines()[-1].startswith("total") and "not modelled" not in text


def test_every_gpu_family_of_the_paper_plan_is_modelled(paper_dry_run):
    """The paper suite's dry run (as `snakemake -n --config suite=paper` writes it to PLAN_COST_ENV, in a copy of the
    repository: conftest's shared run): every GPU family, LTE, bridge arms and seed 000 included, costed from its
    work; reservations kept."""
    assert paper_dry_run["returncode"] == 0, paper_dry_run["log"][-4000:]
    cost = paper_dry_run["cost"]
    assert cost, paper_dry_run["log"][-4000:]
    families = cost["families"]
    assert {"lte_paper", "bridge_arm", "phase_model", "phase_adaptive_lr", "color_language", "extract_vision",
            "extract_language", "lm_score"} <= set(families)
    assert [name for name, f in families.items() if not f["modelled"]] == []
    for name, f in families.items():
        assert 0 < f["estimated_gpu_h"] and 0 < f["reserved_gpu_h"], name
    for name in ("lte_paper", "bridge_arm", "phase_model", "phase_adaptive_lr", "color_language"):
        assert families[name]["estimated_gpu_h"] < families[name]["reserved_gpu_h"], name
    total = cost["total"]
    assert total["estimated_modelled_gpu_h"] == pytest.approx(total["estimated_gpu_h"])
    assert total["reserved_gpu_h"] == pytest.approx(sum(f["reserved_gpu_h"] for f in families.values()))
    text = format_plan_cost(cost)
    assert "not modelled" not in text and "modelled families alone" not in text
    assert re.match(rf"total\s+{total['gpu_jobs']}\s+{total['reserved_gpu_h']:.1f}\s+{total['estimated_gpu_h']:.1f}$",
                    text.splitlines()[-1])


def test_harness_jobs_count_their_prompts_and_decoding_steps():
    """Fig 4's lm-evaluation-harness family. HellaSwag: 10,042 items x 4 endings x 11 examples x 100 tokens;
    GSM8K: 1,319 x 1 x 6 x 200 prompt tokens and ceil(1,319 / 8) batches x 256 greedy steps; limit caps the items."""
    wc = {"model": "llama-7b"}
    assert job_tokens(rule="downstream_harness", wildcards=wc, config=PARAMS) == (
        10042 * 4 * 11 * 100 + 1319 * 6 * 200, 165 * 256)
    capped = {**PARAMS, "downstream": {**PARAMS["downstream"], "harness": {**PARAMS["downstream"]["harness"],
                                                                           "limit": 4}}}
    assert job_tokens(rule="downstream_harness", wildcards=wc, config=capped) == (4 * 4 * 11 * 100 + 4 * 6 * 200, 256)
    cost = plan_cost(jobs=[{"rule": "downstream_harness", "wildcards": wc, "resources": {"gpu": 1, "runtime": 86}}],
                     config=PARAMS)
    fam = cost["families"]["downstream_harness"]
    assert fam["modelled"] and 0.2 < fam["estimated_gpu_h"] < fam["reserved_gpu_h"]


def test_measured_rates_replace_the_assumed_ones(tmp_path):
    """`benchmarks/bench_device.py` writes the rates `prh plan-cost --rates` and cluster.rates_file read."""
    from prh.cluster import read_rates
    from prh.errors import ConfigError

    path = tmp_path / "card.json"
    path.write_text(json.dumps({"device": "NVIDIA H100 80GB HBM3", "rates": {"mfu": 0.1, "vision_mfu": 0.5}}))
    rates = read_rates(path)
    assert rates["mfu"] == 0.1 and rates["rates_from"] == f"NVIDIA H100 80GB HBM3 ({path})"
    jobs = [{"rule": "extract_language", "wildcards": {"model": "llama-7b", "dataset": "wit_1024"},
             "resources": {"gpu": 1, "runtime": 60}},
            {"rule": "extract_vision", "wildcards": {"model": "vit-large-clip", "dataset": "wit_1024"},
             "resources": {"gpu": 1, "runtime": 60}}]
    assumed, measured = plan_cost(jobs=jobs, config=PARAMS), plan_cost(jobs=jobs, config=PARAMS, **rates)
    assert measured["families"]["extract_language"]["estimated_gpu_h"] > assumed["families"]["extract_language"][
        "estimated_gpu_h"]  # 10 % instead of the default 18 %
    assert measured["families"]["extract_vision"]["estimated_gpu_h"] < assumed["families"]["extract_vision"][
        "estimated_gpu_h"]  # 50 % instead of the default 30 %
    assert "rates measured on NVIDIA H100 80GB HBM3" in format_plan_cost(measured)
    assert "utilisation measured on one H200 (training assumed)" in format_plan_cost(assumed)
    for bad, match in (({"mfu": 1.5}, "mfu=1.5 must be in"), ({"train_mfu": 0}, "train_mfu=0 must be in"),
                       ({"speed": 1}, "unknown rates"), ({}, "no `rates`")):
        path.write_text(json.dumps({"rates": bad}))
        with pytest.raises(ConfigError, match=match):
            read_rates(path)


def test_bench_device_writes_rates_plan_cost_reads(tmp_path):
    """The benchmark's CPU run at toy size (--toy) writes a JSON read_rates accepts (a GPU run is the same code)."""
    from prh.cluster import read_rates

    out = tmp_path / "cpu.json"
    # no timeout, toy size: a benchmark's pace on a loaded machine is not what this test checks
    subprocess.run([sys.executable, str(ROOT / "benchmarks" / "bench_device.py"), "--device", "cpu", "--toy", "--json",
                    str(out)], check=True, capture_output=True, text=True)
    data = json.loads(out.read_text())
    assert data["kind"] == "cpu" and set(data["measured"]) == {"peaks", "language", "vision", "knn", "toy"}
    assert data["measured"]["toy"] is True  # a toy run says so: its rates are no measurement
    rates = read_rates(out)
    assert 0 < rates["mfu"] <= 1 and 0 < rates["vision_mfu"] <= 1 and rates["fp32_peak_flops"] > 0
    assert data["measured"]["knn"]["precision"] == "fp32"  # auto on a CPU


def test_gpu_time_limits_are_twice_the_estimate_at_the_plan_rates(tmp_path):
    """A forward-pass GPU job's runtime is 2 x its estimated wall time at the plan's rates (never below the
    rule's floor); the four largest Fig 4 harness jobs had exceeded fixed limits by 15-20 % at the measured MFU."""
    from prh.cluster import RUNTIME_HEADROOM, runtime_minutes
    from prh.cluster.rates import MFU, PEAK_FLOPS, STARTUP_S

    wc = {"model": "llama-65b"}
    limit = runtime_minutes(rule="downstream_harness", wildcards=wc, config=PARAMS, results=tmp_path, floor=1)
    tokens, steps = job_tokens(rule="downstream_harness", wildcards=wc, config=PARAMS, results=tmp_path)
    seconds = estimate_gpu_seconds(n_params=MODELS["llama-65b"]["n_params"], gpus=1, tokens=tokens, decode_steps=steps)
    assert RUNTIME_HEADROOM == 2 and limit == math.ceil(2 * seconds / 60)
    fixed = int(30 + 8 * MODELS["llama-65b"]["n_params"] / 1e9)  # the rule's floor, its old fixed limit
    assert limit > fixed * 1.2  # the old limit was short of the estimate itself
    assert runtime_minutes(rule="downstream_harness", wildcards=wc, config=PARAMS, results=tmp_path,
                           floor=10**6) == 10**6
    assert runtime_minutes(rule="extract_vision", wildcards={"model": "not-a-hub-model", "dataset": "x"},
                           config=PARAMS, results=tmp_path, floor=7) == 7  # the cost model does not cover it
    # a measured rates file halves the utilisation: the limit about doubles
    rates = tmp_path / "slow.json"
    rates.write_text(json.dumps({"device": "slow card", "rates": {"mfu": MFU / 2}}))
    slow = runtime_minutes(rule="downstream_harness", wildcards=wc, results=tmp_path, floor=1,
                           config={**PARAMS, "cluster": {**PARAMS["cluster"], "rates_file": str(rates)}})
    assert 1.7 * limit < slow < 2.1 * limit
    assert STARTUP_S > 0 and PEAK_FLOPS > 0
