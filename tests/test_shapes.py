"""The shapes world: scene sampler, renderer, dataset dirs, world kernel, CLI and sample sheet."""

from __future__ import annotations

import inspect
import json
from itertools import combinations

import numpy as np
import pytest
import yaml

from prh.cli import main as prh
from prh.data import shapes
from prh.data.captions import LEVELS
from prh.io import read_jsonl

SMALL = {"image_size": 32}  # keeps dataset tests fast; the defaults are tested on single images


@pytest.fixture(scope="module")
def scenes():
    rng = np.random.default_rng(0)
    return [shapes.sample_scene(rng) for _ in range(300)]


def one_object(shape="circle", color="red", size="large", x=0.5, y=0.5, background="grey"):
    return {"background": background, "objects": [{"shape": shape, "color": color, "size": size, "x": x, "y": y}]}


def test_vocabulary_is_rich_enough():
    assert len(shapes.SHAPES) >= 5 and len(shapes.COLORS) >= 8 and len(shapes.SIZES) == 3
    for rgb in [*shapes.COLORS.values(), *shapes.BACKGROUNDS.values()]:
        assert len(rgb) == 3 and all(0 <= c <= 255 for c in rgb)
    # an object never has its background's colour, so it is always visible
    assert not set(shapes.COLORS.values()) & set(shapes.BACKGROUNDS.values())


def test_scenes_follow_the_world_rules(scenes):
    counts = [len(s["objects"]) for s in scenes]
    assert set(counts) == {1, 2, 3, 4}
    for s in scenes:
        objs = s["objects"]
        assert s["background"] in shapes.BACKGROUNDS
        assert len({(o["color"], o["shape"]) for o in objs}) == len(objs)  # names are unique
        keys = [(-shapes.SIZES.index(o["size"]), o["x"]) for o in objs]
        assert keys == sorted(keys)  # largest first, ties left to right
        for o in objs:
            assert o["shape"] in shapes.SHAPES and o["color"] in shapes.COLORS and o["size"] in shapes.SIZES
            r = shapes.WORLD_DEFAULTS["radius"][shapes.SIZES.index(o["size"])]
            assert r <= o["x"] <= 1 - r and r <= o["y"] <= 1 - r
        for a, b in combinations(objs, 2):
            assert np.hypot(a["x"] - b["x"], a["y"] - b["y"]) >= 0.1
    # every attribute value occurs
    objs = [o for s in scenes for o in s["objects"]]
    assert {o["shape"] for o in objs} == set(shapes.SHAPES) and {o["color"] for o in objs} == set(shapes.COLORS)
    assert {s["background"] for s in scenes} == set(shapes.BACKGROUNDS)


def test_render_draws_exact_colours_with_antialiased_edges():
    image = shapes.render_scene(one_object())
    assert image.shape == (64, 64, 3) and image.dtype == np.uint8
    assert tuple(image[32, 32]) == shapes.COLORS["red"]
    assert tuple(image[0, 0]) == shapes.BACKGROUNDS["grey"]
    pure = np.all(image == shapes.COLORS["red"], -1) | np.all(image == shapes.BACKGROUNDS["grey"], -1)
    assert 20 < (~pure).sum() < 200  # the edge pixels are blends
    aliased = shapes.render_scene(one_object(), supersample=1)
    pure = np.all(aliased == shapes.COLORS["red"], -1) | np.all(aliased == shapes.BACKGROUNDS["grey"], -1)
    assert pure.all()
    # a large circle of radius 0.2 covers pi * 0.2^2 of the image
    coverage = np.abs(image.astype(float) - shapes.BACKGROUNDS["grey"]).sum(-1) / np.abs(
        np.subtract(shapes.COLORS["red"], shapes.BACKGROUNDS["grey"])).sum()
    assert coverage.sum() / 64**2 == pytest.approx(np.pi * 0.2**2, rel=0.02)


def test_every_shape_draws_a_different_mask():
    masks = {s: np.any(shapes.render_scene(one_object(shape=s)) != shapes.BACKGROUNDS["grey"], -1)
             for s in shapes.SHAPES}
    for s, m in masks.items():
        assert 0.03 < m.mean() < 0.15, s
    for a, b in combinations(shapes.SHAPES, 2):
        assert (masks[a] != masks[b]).sum() > 20, (a, b)


def test_small_objects_are_drawn_over_large_ones():
    scene = one_object()
    scene["objects"].append({"shape": "square", "color": "blue", "size": "small", "x": 0.5, "y": 0.5})
    assert tuple(shapes.render_scene(scene)[32, 32]) == shapes.COLORS["blue"]


def test_noise_is_mild_seeded_and_required_rng():
    clean = shapes.render_scene(one_object()).astype(float)
    noisy = shapes.render_scene(one_object(), noise_std=3.0, rng=np.random.default_rng(1))
    again = shapes.render_scene(one_object(), noise_std=3.0, rng=np.random.default_rng(1))
    assert np.array_equal(noisy, again)
    assert np.abs(noisy - clean).mean() == pytest.approx(3.0 * np.sqrt(2 / np.pi), rel=0.1)
    with pytest.raises(ValueError, match="rng"):
        shapes.render_scene(one_object(), noise_std=3.0)


def test_world_config_fills_defaults_and_names_bad_keys(repo_root):
    assert shapes.world_config(None) == shapes.WORLD_DEFAULTS
    with pytest.raises(ValueError, match="image_szie"):
        shapes.world_config({"image_szie": 32})
    with pytest.raises(ValueError, match="world.radius"):
        shapes.world_config({"radius": [0.2, 0.1, 0.3]})
    with pytest.raises(ValueError, match="max_objects"):
        shapes.world_config({"max_objects": 5})
    with pytest.raises(ValueError, match="kernel: unknown"):
        shapes.world_config({"kernel": {"sigma": 1}})
    # params.yaml, the schema and the code agree on the world's keys and defaults
    params = yaml.safe_load((repo_root / "params.yaml").read_text())
    assert shapes.world_config(params["world"]) == shapes.WORLD_DEFAULTS
    schema = yaml.safe_load((repo_root / "workflow/schemas/world.schema.yaml").read_text())["properties"]
    for key, value in shapes.WORLD_DEFAULTS.items():
        if key != "kernel":
            assert schema[key]["default"] == value, key
    signature = inspect.signature(shapes.world_kernel).parameters
    for key, value in shapes.WORLD_DEFAULTS["kernel"].items():
        assert schema["kernel"]["properties"][key]["default"] == value == signature[key].default, key


def test_items_are_deterministic_and_independent_of_n(tmp_path):
    a = shapes.build_dataset(tmp_path / "a", n=10, seed=7, world=SMALL)
    b = shapes.build_dataset(tmp_path / "b", n=10, seed=7, world=SMALL)
    c = shapes.build_dataset(tmp_path / "c", n=4, seed=7, world=SMALL)
    for name in ("images.npy", "captions.jsonl", "scenes.jsonl"):
        assert (a / name).read_bytes() == (b / name).read_bytes(), name
    da, dc = shapes.load_dataset(a), shapes.load_dataset(c)
    assert np.array_equal(da.images[:4], dc.images) and da.texts[:4] == dc.texts and da.scenes[:4] == dc.scenes
    other = shapes.load_dataset(shapes.build_dataset(tmp_path / "d", n=10, seed=8, world=SMALL))
    assert not np.array_equal(da.images, other.images)


def test_cli_writes_a_valid_dataset_dir_and_sample_sheet(tmp_path, capsys):
    out = tmp_path / "data" / "shapes_tiny"
    prh(["make-shapes", "--out", str(out), "--n", "12", "--seed", "3", "--world", json.dumps(SMALL)])
    ds = shapes.load_dataset(out, verify=True)
    assert len(ds) == 12 and ds.images.shape == (12, 32, 32, 3) and ds.images.dtype == np.uint8
    assert ds.meta["count"] == 12 and ds.meta["params"]["seed"] == 3 and ds.meta["levels"] == list(LEVELS)
    records = read_jsonl(out / "captions.jsonl")
    assert [r["id"] for r in records] == list(range(12))
    assert all(r["text"] == r["texts"][-1] and len(r["texts"]) == len(LEVELS) for r in records)
    assert [r["id"] for r in read_jsonl(out / "scenes.jsonl")] == list(range(12))
    # a damaged image file is caught by the checksum
    images = np.load(out / "images.npy")
    images[0, 0, 0, 0] ^= 1
    np.save(out / "images.npy", images)
    with pytest.raises(ValueError, match="sha256"):
        shapes.load_dataset(out, verify=True)
    with pytest.raises(SystemExit):
        prh(["make-shapes", "--out", str(out), "--n", "2", "--seed", "0", "--world", "{image_size: 32"])
    assert "argument --world: not valid JSON" in capsys.readouterr().err

    fig = tmp_path / "figures" / "world_sample_sheet.pdf"
    prh(["plot", "world_sample_sheet", "--input", f"data={out / 'images.npy'}", "--out", str(fig)])
    assert fig.read_bytes()[:4] == b"%PDF" and fig.with_suffix(".png").read_bytes()[:4] == b"\x89PNG"


def test_world_kernel_is_a_normalised_psd_kernel(scenes):
    k = shapes.world_kernel(scenes)
    assert k.shape == (300, 300)
    np.testing.assert_allclose(k, k.T, atol=0)
    np.testing.assert_allclose(np.diag(k), 1.0, atol=1e-12)
    assert np.linalg.eigvalsh(k).min() > -1e-9 and k.min() >= 0 and k.max() <= 1 + 1e-12
    # it is a kernel over scenes, not lists: object order does not matter
    shuffled = [{**s, "objects": s["objects"][::-1]} for s in scenes]
    np.testing.assert_allclose(shapes.world_kernel(shuffled), k, atol=1e-12)
    feats = shapes.world_features(scenes[:50])
    np.testing.assert_allclose(feats @ feats.T, k[:50, :50], atol=1e-4)


def test_world_kernel_decreases_as_scenes_differ():
    base = one_object(x=0.3, y=0.3)
    variants = [one_object(x=0.3 + dx, y=0.3) for dx in (0.0, 0.1, 0.2, 0.4)]
    k = shapes.world_kernel([base, *variants])[0, 1:]
    assert k[0] == pytest.approx(1.0) and np.all(np.diff(k) < 0)
    others = [one_object(color="orange"), one_object(color="blue"), one_object(shape="star"),
              one_object(background="white")]
    k = shapes.world_kernel([one_object(), *others])[0, 1:]
    assert k[0] > k[1]  # orange is perceptually nearer red than blue is
    assert k[2] == pytest.approx(0.2 + 0.8 * 0.5)  # another shape: the shape floor
    assert k[3] == pytest.approx(0.8)  # another background: the background weight is lost
    with pytest.raises(ValueError, match="background_weight"):
        shapes.world_kernel([base], background_weight=2.0)
