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
from prh.data.captions import LEVELS, REGIONS, region
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
    jitter = shapes.WORLD_DEFAULTS["position_jitter"]
    for s in scenes:
        objs = s["objects"]
        assert s["background"] in shapes.BACKGROUNDS and s["type"] in range(shapes.WORLD_DEFAULTS["scene_types"])
        assert len({(o["color"], o["shape"]) for o in objs}) == len(objs)  # names are unique
        keys = [(-shapes.SIZES.index(o["size"]), o["x"], o["y"]) for o in objs]
        assert keys == sorted(keys) and len(set(keys)) == len(keys)  # largest first, then x, then y: a total order
        cells = []
        for o in objs:
            assert o["shape"] in shapes.SHAPES and o["color"] in shapes.COLORS and o["size"] in shapes.SIZES
            xy = [round(100 * o[k]) for k in "xy"]
            assert [100 * o[k] for k in "xy"] == pytest.approx(xy, abs=1e-9)  # whole percents
            col, row = ((p - 17 + jitter) // 33 for p in xy)
            assert all(abs(p - 17 - 33 * c) <= jitter for p, c in zip(xy, (col, row)))  # cell centre +- jitter
            assert region(o) == REGIONS[row][col]  # the captions' grid cell is the object's own
            cells.append((row, col))
        assert len(set(cells)) == len(cells)  # one cell per object
        for a, b in combinations(objs, 2):
            assert np.hypot(a["x"] - b["x"], a["y"] - b["y"]) >= 0.19
    # every attribute value occurs
    objs = [o for s in scenes for o in s["objects"]]
    assert {o["shape"] for o in objs} == set(shapes.SHAPES) and {o["color"] for o in objs} == set(shapes.COLORS)
    assert {s["background"] for s in scenes} == set(shapes.BACKGROUNDS)


def test_grid_keeps_cells_apart_and_regions_exact_at_every_jitter():
    """Checked over every whole-percent centre the world can draw, not a sample."""
    j = shapes.MAX_JITTER
    for col in range(3):
        for d in range(-j, j + 1):
            p = 17 + 33 * col + d
            assert region({"x": p / 100, "y": p / 100}) == REGIONS[col][col]
            if col != 1:  # corner cells stay within mc_items' region band, so their mirror images have as many digits
                assert 10 <= p <= 32 or 68 <= p <= 90
    assert (17 + 33 - j) - (17 + j) >= 19  # adjacent cells' centres stay >= 19 percent apart
    with pytest.raises(ValueError, match="position_jitter"):
        shapes.world_config({"position_jitter": j + 1})
    with pytest.raises(ValueError, match="type_concentration"):
        shapes.world_config({"type_concentration": 0})


def test_scene_types_make_attributes_co_occur():
    """Types are drawn once from type_seed: the same tables for every dataset seed; they couple
    background and colour (mutual information > 0), which a world of independent attributes lacks."""
    a, b = shapes.type_tables(), shapes.type_tables(scene_types=6, type_concentration=0.5, type_seed=0)
    assert a["p_bg"].shape == (6, 4) and a["p_color"].shape == (6, 9) and a["p_shape"].shape == (6, 7)
    np.testing.assert_array_equal(a["p_color"], b["p_color"])
    for table in a.values():
        np.testing.assert_allclose(table.sum(1), 1.0)
    assert not np.array_equal(shapes.type_tables(type_seed=1)["p_color"], a["p_color"])
    rng = np.random.default_rng(3)
    scenes = [shapes.sample_scene(rng) for _ in range(3000)]
    joint = np.zeros((4, 9))
    for s in scenes:
        joint[list(shapes.BACKGROUNDS).index(s["background"]), list(shapes.COLORS).index(s["objects"][0]["color"])] += 1
    joint /= joint.sum()
    indep = joint.sum(1, keepdims=True) * joint.sum(0, keepdims=True)
    mi = float(np.sum(joint[joint > 0] * np.log2(joint[joint > 0] / indep[joint > 0])))
    assert mi > 0.05  # 0.097 bits here; independent attributes: the plug-in bias, ~(3 * 8) / (2 * 3000 * ln 2) = 0.006
    flat = [shapes.sample_scene(rng, world={"scene_types": 1, "type_concentration": 1e4}) for _ in range(3000)]
    counts = np.bincount([list(shapes.BACKGROUNDS).index(s["background"]) for s in flat], minlength=4)
    assert np.abs(counts / 3000 - 0.25).max() < 0.03  # a huge concentration: nearly uniform again


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
    prh(["make-shapes", "--out", str(out), "--n", "12", "--seed", "3", "--config", json.dumps({"world": SMALL})])
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
        prh(["make-shapes", "--out", str(out), "--n", "2", "--seed", "0", "--config", "{image_size: 32"])
    assert "argument --config: not valid JSON" in capsys.readouterr().err

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
    w = shapes.WORLD_DEFAULTS["kernel"]["background_weight"]
    assert w == 0.05
    assert k[2] == pytest.approx(w + (1 - w) * 0.5)  # another shape: the shape floor
    assert k[3] == pytest.approx(1 - w)  # another background: the background weight is lost
    with pytest.raises(ValueError, match="background_weight"):
        shapes.world_kernel([base], background_weight=2.0)
