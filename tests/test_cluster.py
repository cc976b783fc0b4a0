"""Issue 22, operational: one GPU-count formula, a SLURM profile whose notes agree with it and that
has account / QoS / GPU-type placeholders, GPU-hour estimates of a plan, and DVC leaving the
paper suite's per-layer features out of its cache and remote."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import yaml

from prh.cluster import (
    PLAN_COST_ENV,
    emit_plan_cost,
    estimate_gpu_seconds,
    format_plan_cost,
    gpu_table,
    gpus_needed,
    job_tokens,
    plan_cost,
)
from prh.config import schema_defaults

ROOT = Path(__file__).resolve().parents[1]
PARAMS = yaml.safe_load((ROOT / "params.yaml").read_text())
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
    assert schema_defaults("cluster") == {"gpu_memory_gb": 80}
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
    """Hundreds of GB of paper-suite features (issue 22) are not a DVC out, so never cached or pushed;
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
    cost = plan_cost(jobs=jobs, config=config, results=tmp_path, **rates)
    fam = cost["families"]
    assert fam["extract_vision"]["reserved_gpu_h"] == pytest.approx(0.5)
    # vision runs in float32 (features.vision_dtype's default): 100 + 0.2 + 2e8 x 197000 / (0.5 x 2e14) s
    assert fam["extract_vision"]["estimated_gpu_h"] == pytest.approx((100 + 0.2 + 2e8 * 197_000 / 1e14) / 3600)
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
