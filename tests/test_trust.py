"""Trust, round two: nothing silently wrong, nothing checked only after the expensive work.

One test per defect found on d1ac618: each limit fails in the one config pass before any job, naming the key and
the layer that set it; make pull refuses to stamp results built with other params; corrupt or wrong-shape artifacts
raise CorruptFileError with a remedy that works for that kind of file; names have a pattern; user errors are one
line; unknown names get close matches."""

from __future__ import annotations

import copy
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import yaml
from test_workflow import copy_repo, run
from tiny_models import save_language_model

from prh import config
from prh.checks import check_config, check_device
from prh.lock import check_lock
from prh.errors import ConfigError, CorruptFileError, did_you_mean

ROOT = Path(__file__).resolve().parents[1]
PRH = Path(sys.executable).parent / "prh"


@pytest.fixture(scope="module")
def cfg():
    return config.load(ROOT / "params.yaml")


def bad(cfg, edit) -> str:
    """The one-line message check_config gives ``cfg`` after ``edit``."""
    c = copy.deepcopy(cfg)
    edit(c)
    with pytest.raises(ConfigError) as err:
        check_config(c)
    message = str(err.value)
    assert "\n" not in message, message  # one problem, one line
    return message


# ---- silent wrong results ----

def test_a_model_listed_twice_in_a_set_is_refused(cfg):
    msg = bad(cfg, lambda c: c["model_sets"]["zoo_vision"].append(c["model_sets"]["zoo_vision"][0]))
    assert "model_sets.zoo_vision: lists 'resnet_xs_random' more than once" in msg


def test_topk_of_n_minus_1_is_refused(cfg):
    n = cfg["datasets"]["shapes_vision"]["n"]
    msg = bad(cfg, lambda c: c["alignment"].update(topk=n - 1))
    assert f"alignment.topk: {n - 1} must be at most N - 2 = {n - 2} for the {n} items of shapes_vision" in msg
    assert "mutual k-NN is 1.0 for any two models" in msg
    c = copy.deepcopy(cfg)
    c["alignment"]["topk"] = n - 2
    with pytest.raises(ConfigError) as err:  # N - 2 is allowed: only Fig 12's batch sizes (below N) are left too small
        check_config(c)
    assert "alignment.topk:" not in str(err.value) and "metric_agreement.batch_sizes:" in str(err.value)


# ---- limits checked before any job ----

@pytest.mark.parametrize("sizes, expected", [
    ([1000], "metric_agreement.batch_sizes: 1000 must be below the 1000 items of shapes_vision"),
    ([11], "metric_agreement.batch_sizes: 11 must be at least alignment.topk + 2 = 12"),
    ([500, 500], "metric_agreement.batch_sizes: lists 500 more than once"),
])
def test_fig12_batch_sizes(cfg, sizes, expected):
    assert expected in bad(cfg, lambda c: c["metric_agreement"].update(batch_sizes=sizes))


def test_competence_bins_are_checked_with_the_config(cfg):
    msg = bad(cfg, lambda c: c["convergence"].setdefault("bins", {}).update(offline=[0, 4, 7, 10]))
    assert msg.endswith("convergence.bins.offline: bins [0, 4, 7, 10] leave counts of solved tasks outside every bin: "
                        "with 10 tasks the edges must increase from 0 to >= 11, e.g. [0, ..., 11]")


def test_bridge_topk_against_its_probe_items(cfg):
    msg = bad(cfg, lambda c: c["bridge"]["offline"].setdefault("config", {}).update(topk=600))
    assert "bridge.offline.config.topk: 600 must be at most n_probe - 2 = 598" in msg


def test_checkpoints_beyond_steps_name_the_key(cfg):
    msg = bad(cfg, lambda c: c["zoo"]["language"]["gpt2_s_r0"].update(steps=2000))
    assert "zoo.language.gpt2_s_r0.checkpoints: [3000] beyond its steps (2000)" in msg


def test_device_cuda_without_a_gpu_fails_before_any_job(tmp_path):
    if torch.cuda.is_available():
        pytest.skip("this machine has a GPU: device: cuda is valid here")
    with pytest.raises(ConfigError, match="device: cuda, but this machine has no CUDA GPU"):
        check_device({"device": "cuda"}, local=True)
    check_device({"device": "cuda"}, local=False)  # a cluster's jobs run on GPU nodes, not here
    repo = copy_repo(ROOT, tmp_path / "repo")
    proc = run(["snakemake", "--cores", "1", "--config", "device=cuda"], repo, check=False)
    assert proc.returncode != 0
    assert "device: cuda, but this machine has no CUDA GPU" in proc.stderr and "Traceback" not in proc.stderr
    assert not (repo / "results").exists() or not any((repo / "results").rglob("*.json"))  # no job ran


def test_limit_errors_name_the_layer_that_set_the_value(cfg, tmp_path):
    override = tmp_path / "over.yaml"
    override.write_text("alignment: {topk: 999}\n")
    proc = subprocess.run([str(PRH), "check-config", "--configfile", str(override)], cwd=ROOT, capture_output=True,
                          text=True)
    assert proc.returncode == 1
    assert proc.stderr.startswith(f"prh check-config: the merged configuration (params.yaml + --configfile {override}) "
                                  "asks for what the data cannot give: alignment.topk: 999 must be at most N - 2 = 998")
    assert f"(this value comes from --configfile {override}, not from params.yaml)" in proc.stderr
    assert "params.yaml asks for" not in proc.stderr


# ---- make pull refuses to stamp ----

def test_check_lock_refuses_params_that_differ_from_the_lock(cfg, tmp_path):
    params = tmp_path / "params.yaml"
    params.write_text(yaml.safe_dump(cfg))
    built = copy.deepcopy(cfg)
    built["datasets"]["shapes_vision"]["n"] = 200
    lock = tmp_path / "dvc.lock"
    lock.write_text(yaml.safe_dump({"schema": "2.0", "stages": {"workflow": {"params": {"params.yaml": {
        "datasets": built["datasets"], "seed": built["seed"]}}}}}))
    with pytest.raises(ConfigError) as err:
        check_lock(params=str(params), lock=str(lock))
    assert "workflow: datasets.shapes_vision.n: 200 in dvc.lock, 1000 now" in str(err.value)
    built["datasets"]["shapes_vision"]["n"] = 1000
    lock.write_text(yaml.safe_dump({"stages": {"workflow": {"params": {"params.yaml": {"datasets": built["datasets"]}}}}}))
    assert check_lock(params=str(params), lock=str(lock)) == ["workflow"]
    # nothing to compare is a failure, in one line naming the file (a typo in --lock used to pass)
    for bad, text in ((tmp_path / "none.lock", "does not exist"), (tmp_path, "a directory")):
        with pytest.raises(ConfigError, match=text):
            check_lock(params=str(params), lock=str(bad))
    for body, text in (("- a\n- b\n", "not a DVC lock file"), ("stages: {workflow: {deps: []}}\n", "nothing to compare"),
                       ("<<<<<<< HEAD\nstages: {}\n=======\nstages: {}\n>>>>>>> other\n", "merge-conflict markers"),
                       ("stages: [\n", "not valid YAML")):
        (tmp_path / "bad.lock").write_text(body)
        with pytest.raises(ConfigError, match=text):
            check_lock(params=str(params), lock=str(tmp_path / "bad.lock"))
    # DVC writes params as YAML 1.2: 2e-05 unquoted, which PyYAML (YAML 1.1) reads back as a string: still equal
    params.write_text("lr: 2.0e-5\n")
    lock.write_text("stages:\n  workflow:\n    params:\n      params.yaml:\n        lr: 2e-05\n")
    assert check_lock(params=str(params), lock=str(lock)) == ["workflow"]
    # make pull runs it before pulling and stamping
    recipe = (ROOT / "Makefile").read_text().split("\npull:", 1)[1].split("\n\n", 1)[0]
    assert recipe.index("prh check-lock") < recipe.index("dvc pull") < recipe.index("--touch")


# ---- corrupt files name the file and a remedy that works for it ----

def _truncate(path: Path) -> None:
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])


def test_truncated_zoo_checkpoints_are_corrupt_files(tmp_path):
    from prh.models.loaders import load_language_model, load_vision_model
    from prh.models.vision_zoo import build_model, load_checkpoint, save_checkpoint

    lm = save_language_model("gpt2", tmp_path / "lm")
    _truncate(lm / "model.safetensors")
    with pytest.raises(CorruptFileError, match=r"lm/model.safetensors is not a readable checkpoint weights file.*"
                                               r"dvc checkout results/models"):
        load_language_model(lm)
    lm2 = save_language_model("gpt2", tmp_path / "lm2")
    _truncate(lm2 / "config.json")
    with pytest.raises(CorruptFileError, match=r"lm2/config.json is not a readable checkpoint config"):
        load_language_model(lm2)
    model, conf = build_model(arch="resnet_xs")
    vis = save_checkpoint(tmp_path / "vis", model=model, config=conf)
    _truncate(vis / "model.safetensors")
    for load in (load_vision_model, load_checkpoint):
        with pytest.raises(CorruptFileError, match=r"vis/model.safetensors is not a readable checkpoint weights file"):
            load(vis)
    model, conf = build_model(arch="resnet_xs")
    vis2 = save_checkpoint(tmp_path / "vis2", model=model, config=conf)
    (vis2 / "config.json").write_text('{"timm_name": ')
    for load in (load_vision_model, load_checkpoint):
        with pytest.raises(CorruptFileError, match=r"vis2/config.json is not a readable checkpoint config"):
            load(vis2)


def test_alignment_json_of_the_wrong_shape(tmp_path):
    from prh.io import read_alignment, write_json

    write_json(tmp_path / "a.json", {"x_names": ["a"], "y_names": ["b"], "score": [[1.0]]})
    with pytest.raises(CorruptFileError, match=r"a.json is not a readable alignment table \(ValueError: it has "
                                               r"\['score', 'x_names', 'y_names'\], not x_names, y_names and scores\)"):
        read_alignment(tmp_path / "a.json")
    write_json(tmp_path / "b.json", {"x_names": ["a", "c"], "y_names": ["b"], "scores": [[1.0]]})
    with pytest.raises(CorruptFileError, match="scores is not 2 rows of 1"):
        read_alignment(tmp_path / "b.json")


def test_features_remedy_does_not_promise_dvc(tmp_path):
    from prh.io import features_layout

    path = tmp_path / "f.safetensors"
    path.write_bytes(b"\x10\x00\x00\x00\x00\x00\x00\x00{garbage")
    with pytest.raises(CorruptFileError) as err:
        features_layout(path)
    assert "features are not versioned by DVC" in str(err.value) and "restore it with `dvc checkout" not in str(err.value)


# ---- names, one-line errors, close matches ----

@pytest.mark.parametrize("edit, key", [
    (lambda c: c["zoo"]["vision"].update({"evil;touch /tmp/pwned;": c["zoo"]["vision"]["vit_xs_sup"]}), "zoo.vision"),
    (lambda c: c["datasets"].update({"a b": c["datasets"]["shapes_eval"]}), "datasets"),
    (lambda c: c["model_sets"].update({"$(x)": ["vit_xs_sup"]}), "model_sets"),
    (lambda c: c["model_sets"]["zoo_vision"].append("x;y"), "model_sets.zoo_vision.14"),
])
def test_names_have_a_pattern(cfg, edit, key):
    msg = bad(cfg, edit)
    assert f"{key}: " in msg and "is not a valid name: use letters, digits and . _ - only" in msg


def test_user_errors_are_one_line_and_debug_shows_the_traceback():
    proc = subprocess.run([str(PRH), "plot", "downstrem_fig04"], capture_output=True, text=True)
    assert proc.returncode == 1
    assert proc.stderr == "prh plot: unknown figure 'downstrem_fig04'; did you mean 'downstream_fig04'?\n"
    for extra, env in ((["--debug"], {}), ([], {"PRH_DEBUG": "1"})):
        proc = subprocess.run([str(PRH), "plot", "downstrem_fig04", *extra], capture_output=True, text=True,
                              env={**os.environ, **env})
        assert proc.returncode == 1 and "Traceback (most recent call last)" in proc.stderr


def test_one_line_for_a_removed_model_every_key_names(cfg):
    msg = bad(cfg, lambda c: c["paper"]["models"].pop("vit-giant-dinov2"))
    assert "model_sets.prh_fig4_vision" in msg and "bridge.paper.strongest_vision" in msg
    assert "unknown model 'vit-giant-dinov2'" in msg


def test_colour_images_name_a_dataset_or_the_packaged_photos(cfg):
    msg = bad(cfg, lambda c: c["color"]["images"].update(offline="shapes_evl"))
    assert msg.endswith("color.images.offline: unknown dataset 'shapes_evl'; did you mean 'shapes_eval' or 'shapes_vision' or "
                        "'shapes_train'?")


def test_unknown_names_get_close_matches(cfg):
    msg = bad(cfg, lambda c: c["model_sets"]["zoo_vision"].append("vit_xs_sup_"))
    assert "model_sets.zoo_vision: unknown model 'vit_xs_sup_'; did you mean 'vit_xs_sup'" in msg
    assert len(msg) < 300  # not all 110 names
    assert did_you_mean("zz", ["a", "b"]) == "unknown name 'zz'; choose one of a, b"


def test_check_config_layers_override_files(tmp_path):
    proc = subprocess.run([str(PRH), "check-config", "--configfile", "tests/smoke/params.yaml"], cwd=ROOT,
                          capture_output=True, text=True)
    assert proc.returncode == 0 and proc.stdout.endswith("--configfile tests/smoke/params.yaml): ok\n")
    proc = subprocess.run([str(PRH), "check-config", "tests/smoke/params.yaml"], cwd=ROOT, capture_output=True,
                          text=True)
    assert proc.returncode == 1 and "it looks like an override file" in proc.stderr and "\n" == proc.stderr[-1:]
    assert proc.stderr.count("\n") == 1
    proc = subprocess.run([str(PRH), "check-config", "--config", "suite=ofline"], cwd=ROOT, capture_output=True,
                          text=True)
    assert "suite: 'ofline' is not allowed; choose one of ['offline', 'paper']" in proc.stderr


def test_broken_yaml_names_file_and_line(tmp_path):
    repo = copy_repo(ROOT, tmp_path / "repo")
    text = (repo / "params.yaml").read_text().splitlines()
    line = next(i for i, t in enumerate(text) if t.startswith("seed:"))
    text[line] = "seed: [0"
    (repo / "params.yaml").write_text("\n".join(text) + "\n")
    proc = run(["snakemake", "-n"], repo, check=False)
    assert proc.returncode == 1 and "Traceback" not in proc.stderr
    assert f"params.yaml, line {line + 2}, column 7: not valid YAML (expected ',' or ']'" in proc.stderr, proc.stderr
    over = tmp_path / "over.yaml"
    over.write_text("alignment:\n\ttopk: 5\n")
    proc = subprocess.run([str(PRH), "check-config", "--configfile", str(over)], cwd=ROOT, capture_output=True, text=True)
    assert f"{over}, line 2, column 1: not valid YAML" in proc.stderr


def test_booleans_on_the_command_line_get_a_hint(cfg):
    msg = bad(cfg, lambda c: c.update(allow_unpinned="true"))
    assert "On the command line write True (capitalised" in msg and "--config allow_unpinned=True" in msg
