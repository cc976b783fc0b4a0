"""The offline vision zoo: architectures, checkpoints (the loader contract), objectives, determinism."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
import torch
import yaml

from prh.models.loaders import load_vision_model
from prh.models.train_vision import (
    DEFAULTS,
    OBJECTIVES,
    augment,
    fit_vision_model,
    main,
    nt_xent,
)
from prh.models.vision_zoo import ARCHS, build_model, load_checkpoint, save_checkpoint

TINY = dict(epochs=1, batch_size=8, progress=False)


@pytest.fixture(scope="module")
def shapes_train(tmp_path_factory):
    from prh.data.shapes import build_dataset

    return build_dataset(tmp_path_factory.mktemp("shapes") / "train", n=24, seed=0)


def _images(n, seed=0):
    return np.random.default_rng(seed).integers(0, 256, size=(n, 64, 64, 3), dtype=np.uint8)


def _labels(n, seed=0):
    rng = np.random.default_rng(seed)
    return {"a": rng.integers(0, 3, n), "b": rng.integers(0, 2, n)}


def _same_state(m1, m2) -> bool:
    s1, s2 = m1.state_dict(), m2.state_dict()
    return s1.keys() == s2.keys() and all(torch.equal(s1[k], s2[k]) for k in s1)


@pytest.mark.parametrize("arch", sorted(ARCHS))
def test_every_arch_round_trips_through_the_hub_loader(arch, tmp_path):
    model, config = build_model(arch=arch, seed=0)
    save_checkpoint(tmp_path / arch, model=model, config=config)
    loaded, preprocess = load_vision_model(tmp_path / arch)
    x = torch.randn(2, 3, 64, 64)
    with torch.no_grad():
        expected, got = model.eval()(x), loaded(x)
    assert torch.equal(expected, got)
    assert got.shape == (2, config["feature_dim"])
    assert preprocess["input_size"] == [3, 64, 64]
    assert preprocess["pooling"] == ("cls" if arch.startswith("vit") else "avg")
    layers = loaded.forward_intermediates(x, intermediates_only=True)
    assert len(layers) >= 4  # one pooled feature per stage / block for the extractor
    assert config["n_params"] == sum(p.numel() for p in loaded.parameters())


def test_same_seed_same_weights_and_another_seed_differs():
    images, labels = _images(16), _labels(16)
    for arch, objective in [("resnet_xs", "supervised"), ("vit_xs", "simclr"), ("convnext_xs", "denoise")]:
        a, ca = fit_vision_model(arch=arch, objective=objective, images=images, labels=labels, seed=3, **TINY)
        b, cb = fit_vision_model(arch=arch, objective=objective, images=images, labels=labels, seed=3, **TINY)
        c, _ = fit_vision_model(arch=arch, objective=objective, images=images, labels=labels, seed=4, **TINY)
        assert _same_state(a, b), (arch, objective)
        assert not _same_state(a, c), (arch, objective)
        assert ca["training"]["epoch_loss"] == cb["training"]["epoch_loss"]
        assert ca["training"]["steps"] == 2


def test_random_objective_is_the_seeded_initialisation():
    model, config = fit_vision_model(arch="densenet_xs", objective="random", images=_images(4), seed=7)
    init, _ = build_model(arch="densenet_xs", seed=7)
    assert _same_state(model, init)
    assert config["training"]["steps"] == 0 and config["training"]["epochs"] == 0


def test_supervised_training_learns_an_easy_task():
    # Label = which colour fills the image (red or blue), under pixel noise.
    rng = np.random.default_rng(0)
    y = rng.integers(0, 2, 64)
    images = rng.integers(0, 60, size=(64, 64, 64, 3)).astype(np.uint8)
    images[y == 0, :, :, 0] += 180
    images[y == 1, :, :, 2] += 180
    model, config = fit_vision_model(arch="resnet_xs", objective="supervised", images=images, labels={"c": y},
                                     epochs=4, batch_size=16, lr=3e-3, progress=False)
    loss = config["training"]["epoch_loss"]
    assert loss[-1] < 0.5 * loss[0]
    assert config["training"]["tasks"] == ["c"]


def test_augment_crops_keep_uniform_images_and_jitter_stays_in_range():
    colours = torch.rand(5, 3, 1, 1, generator=torch.Generator().manual_seed(0))
    uniform = colours.expand(5, 3, 64, 64)
    cropped = augment(uniform, gen=torch.Generator().manual_seed(1), crop_min=0.3, jitter=0.0)
    assert torch.allclose(cropped, uniform, atol=1e-6)  # a crop of a flat image is that image
    x = torch.rand(5, 3, 64, 64, generator=torch.Generator().manual_seed(2))
    view = augment(x, gen=torch.Generator().manual_seed(1), crop_min=0.3, jitter=0.5)
    assert view.shape == x.shape and view.min() >= 0 and view.max() <= 1
    assert not torch.allclose(view, x, atol=1e-2)


def test_nt_xent_matches_its_formula_on_orthonormal_views():
    n, tau = 4, 0.5
    z = torch.eye(8)[:n]
    # Each view's positive has cosine 1, its 2n - 2 negatives cosine 0.
    expected = -math.log(math.exp(1 / tau) / (math.exp(1 / tau) + 2 * n - 2))
    assert nt_xent(z, z.clone(), temperature=tau).item() == pytest.approx(expected, rel=1e-6)
    assert nt_xent(z, z.roll(1, dims=0), temperature=tau).item() > expected


def test_cli_trains_on_the_shapes_world_and_writes_the_contract(shapes_train, tmp_path):
    from prh.data.tasks import TASKS

    out = tmp_path / "resnet_xs_sup"
    main(["--data", str(shapes_train), "--out", str(out), "--arch", "resnet_xs", "--objective", "supervised",
          "--seed", "1", "--epochs", "1", "--batch-size", "8", "--n-train", "16", "--threads", "1"])
    config = json.loads((out / "config.json").read_text())
    for key in ("timm_name", "timm_kwargs", "input_size", "mean", "std", "pooling"):
        assert key in config
    t = config["training"]
    assert t["objective"] == "supervised" and t["seed"] == 1 and t["n_train"] == 16 and t["steps"] == 2
    assert t["tasks"] == sorted(TASKS)
    assert t["dataset"]["sha256"] == json.loads((shapes_train / "meta.json").read_text())["sha256"]
    model, full = load_checkpoint(out)
    assert full == config
    assert torch.get_num_threads() >= 1 and not torch.are_deterministic_algorithms_enabled()


@pytest.mark.parametrize(
    "kwargs, match",
    [
        (dict(arch="alexnet", objective="random"), "arch"),
        (dict(arch="resnet_xs", objective="byol"), "objective"),
        (dict(arch="resnet_xs", objective="supervised"), "labels"),
        (dict(arch="resnet_xs", objective="simclr", batch_size=64), "batch_size"),
        (dict(arch="resnet_xs", objective="simclr", epochs=0), "epochs"),
    ],
)
def test_bad_arguments_raise_one_clear_error(kwargs, match):
    with pytest.raises(ValueError, match=match):
        fit_vision_model(images=_images(8), progress=False, **kwargs)


def test_params_zoo_is_valid_and_diverse(repo_root):
    cfg = yaml.safe_load((repo_root / "params.yaml").read_text())
    zoo = cfg["zoo"]["vision"]
    schema = yaml.safe_load((repo_root / "workflow/schemas/zoo_vision.schema.yaml").read_text())
    props = schema["additionalProperties"]["properties"]
    assert props["arch"]["enum"] == list(ARCHS)
    assert props["objective"]["enum"] == list(OBJECTIVES)
    # DEFAULTS are read from this schema (prh.config.entry_fields): every flag has a documented default
    assert all("default" in props[k] and props[k]["description"] for k in DEFAULTS)
    assert len(zoo) >= 12
    assert {s["objective"] for s in zoo.values()} == set(OBJECTIVES)
    families = {s["arch"].split("_")[0] for s in zoo.values()}
    assert {"resnet", "vit"} <= families and families & {"convnext", "densenet"}
    assert set(cfg["model_sets"]["zoo_vision"]) == set(zoo)
