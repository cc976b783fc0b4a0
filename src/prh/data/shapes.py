"""The shapes world: latent scenes Z, rendered images X, captions Y (PRH section 4.1).

The PRH's idealised world made literal. A scene Z is 1-4 objects (shape, colour, size,
centre) on a background colour, observed twice: as an RGB image X (``render_scene``)
and as captions Y at several densities (``prh.data.captions``). Every item keeps Z, so
a ground-truth kernel over items can be computed from it (``world_kernel``).

Attributes co-occur through a latent *scene type* (``sample_scene``), so text has more
to learn than grammar: ``type_tables`` draws, once from ``type_seed`` (the same for
every dataset, whatever its seed), each type's background distribution, colour palette
and shape preferences. Size is uniform and independent. Centres are discrete (a
distinct cell of the 3 x 3 grid each, jittered by whole percents), so the probability
of a scene, and of a caption, is exact (``prh.data.world_prob``).

The observations are (nearly) bijective, as section 4.1 assumes: no two objects of a
scene share both colour and shape (so "the red circle" names one object), and centres
lie in distinct cells >= 33 - 2 ``position_jitter`` percent (19) apart, objects drawn
largest first (so one is at most partly hidden). A large object in a border cell may
be cut by the image edge (by up to a quarter of its width at the default jitter).

    prh make-shapes --out results/data/shapes_eval --n 1024 --seed 2 --image-size 64

Images are N x H x W x 3 uint8; coordinates are fractions of the image side, x to the right and y downwards.
"""

from __future__ import annotations

import argparse
import copy
import functools
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from prh.config import schema_defaults
from prh.errors import UsageError
from prh.slices import add_slice
from prh.data.captions import LEVELS, caption
from prh.data.vocabulary import BACKGROUNDS, COLORS, MAX_OBJECTS, SHAPES, SIZES
from prh.io import read_json, read_jsonl, sha256_file, write_json, write_jsonl, write_npy

WORLD_DEFAULTS = schema_defaults("world")  # the `world:` block's (workflow/schemas/world.schema.yaml documents each)
# the world keys make-shapes reads (its rule's --config, prh.slices): all but the kernel, which changes no data
DATA_CONFIG = {"world": tuple(k for k in WORLD_DEFAULTS if k != "kernel")}


# Grid cell centres in whole percents of the image side (17, 50, 83), per axis.
CELL_PERCENTS = (17, 50, 83)
# The largest jitter that keeps adjacent cells' centres >= 19 percent apart (so no
# object hides another) and corner centres within 10..32 / 68..90 percent (mc_items'
# region items); any jitter <= 16 keeps every centre inside its own cell.
MAX_JITTER = 7


def world_config(world: dict | None = None) -> dict:
    """The world block with defaults filled in; raise ValueError on an unknown key or bad value."""
    world = dict(world or {})
    unknown = sorted(set(world) - set(WORLD_DEFAULTS))
    if unknown:
        raise ValueError(f"world: unknown key(s) {unknown}; allowed keys: {sorted(WORLD_DEFAULTS)}")
    cfg = {**copy.deepcopy(WORLD_DEFAULTS), **world}
    cfg["kernel"] = {**WORLD_DEFAULTS["kernel"], **(world.get("kernel") or {})}
    unknown = sorted(set(cfg["kernel"]) - set(WORLD_DEFAULTS["kernel"]))
    if unknown:
        raise ValueError(f"world.kernel: unknown key(s) {unknown}; allowed keys: {sorted(WORLD_DEFAULTS['kernel'])}")
    if not 1 <= cfg["min_objects"] <= cfg["max_objects"] <= MAX_OBJECTS:
        raise ValueError(f"world: need 1 <= min_objects <= max_objects <= {MAX_OBJECTS}, got "
                         f"{cfg['min_objects']}, {cfg['max_objects']}")
    r = cfg["radius"]
    if len(r) != 3 or not 0 < r[0] < r[1] < r[2] < 0.5:
        raise ValueError(f"world.radius must be 3 increasing fractions below 0.5, got {r}")
    if cfg["image_size"] < 8 or cfg["supersample"] < 1 or cfg["noise_std"] < 0:
        raise ValueError("world: image_size >= 8, supersample >= 1 and noise_std >= 0 are required")
    type_tables(scene_types=cfg["scene_types"], type_concentration=cfg["type_concentration"],
                type_seed=cfg["type_seed"])  # validates them
    if cfg["position_jitter"] not in range(MAX_JITTER + 1):
        raise ValueError(f"world.position_jitter must be an integer in 0..{MAX_JITTER} (whole percents), "
                         f"got {cfg['position_jitter']}")
    return cfg


@functools.lru_cache(maxsize=16)
def type_tables(*, scene_types: int = 6, type_concentration: float = 0.5, type_seed: int = 0) -> dict[str, np.ndarray]:
    """The latent scene types' attribute distributions, drawn once from ``type_seed`` (cached).

    For t = 0..T-1 in turn, from ``default_rng(type_seed)`` with α = ``type_concentration``:
    p_bg[t] ~ Dir(α 1_4), p_color[t] ~ Dir(α 1_9), p_shape[t] ~ Dir(α 1_7) (α < 1: peaked).
    Returns {"p_bg": T x 4, "p_color": T x 9, "p_shape": T x 7}, read-only float64 rows
    summing to 1, columns in the order of ``BACKGROUNDS``, ``COLORS``, ``SHAPES``.
    """
    if int(scene_types) != scene_types or scene_types < 1 or not type_concentration > 0:
        raise ValueError(f"scene_types must be an integer >= 1 and type_concentration > 0, got {scene_types}, "
                         f"{type_concentration}")
    rng = np.random.default_rng(type_seed)
    draws = [[rng.dirichlet(np.full(len(v), float(type_concentration))) for v in (BACKGROUNDS, COLORS, SHAPES)]
             for _ in range(int(scene_types))]
    tables = {key: np.array([d[i] for d in draws]) for i, key in enumerate(("p_bg", "p_color", "p_shape"))}
    for table in tables.values():
        table.flags.writeable = False
    if ((tables["p_color"][:, :, None] * tables["p_shape"][:, None, :]) > 0).sum((1, 2)).min() < MAX_OBJECTS:
        raise ValueError(f"type_concentration={type_concentration} leaves a type with fewer than {MAX_OBJECTS} "
                         "(colour, shape) pairs of nonzero probability; use a larger concentration")
    return tables


def sample_scene(rng: np.random.Generator, *, world: dict | None = None) -> dict:
    """Draw one scene: ``{"type": t, "background": name, "objects": [{shape, color, size, x, y}, ...]}``.

    With the tables of ``type_tables`` (the world's ``scene_types``, ``type_concentration``,
    ``type_seed``) and J = ``position_jitter``::

        t ~ U{0..T-1},  background ~ p_bg[t],  n ~ U{min_objects..max_objects}
        pair_k ~ q_t restricted to the unused pairs, q_t(c, s) = p_color[t, c] p_shape[t, s]
        size_k ~ U(SIZES),  cell_k ~ U(unused cells of the 3 x 3 grid)
        x_k = (17 + 33 col_k + dx_k) / 100,  y_k = (17 + 33 row_k + dy_k) / 100,  dx, dy ~ U{-J..J}

    Objects are listed largest first, then by x, then by y (a total order: cells are
    distinct): the drawing order and the order in which captions mention them.
    ``prh.data.world_prob.scene_log2prob`` is this distribution's exact log2 probability.
    """
    w = world_config(world)
    tables = type_tables(scene_types=w["scene_types"], type_concentration=w["type_concentration"],
                         type_seed=w["type_seed"])
    t = int(rng.integers(w["scene_types"]))
    background = list(BACKGROUNDS)[rng.choice(len(BACKGROUNDS), p=tables["p_bg"][t])]
    n = int(rng.integers(w["min_objects"], w["max_objects"] + 1))
    joint = np.outer(tables["p_color"][t], tables["p_shape"][t]).ravel()  # pair index c * |SHAPES| + s
    cells = rng.choice(len(CELL_PERCENTS) ** 2, size=n, replace=False)
    jit = w["position_jitter"]
    objects = []
    for cell in cells:
        combo = int(rng.choice(len(joint), p=joint / joint.sum()))
        joint[combo] = 0.0
        size = SIZES[int(rng.integers(len(SIZES)))]
        row, col = divmod(int(cell), len(CELL_PERCENTS))
        dx, dy = (int(d) for d in rng.integers(-jit, jit + 1, size=2))
        color, shape = list(COLORS)[combo // len(SHAPES)], SHAPES[combo % len(SHAPES)]
        objects.append({"shape": shape, "color": color, "size": size, "x": (CELL_PERCENTS[col] + dx) / 100,
                        "y": (CELL_PERCENTS[row] + dy) / 100})
    objects.sort(key=lambda o: (-SIZES.index(o["size"]), o["x"], o["y"]))
    return {"type": t, "background": background, "objects": objects}


def _ring(k: int, start_deg: float, radii=(1.0,)) -> np.ndarray:
    t = np.deg2rad(start_deg + 360.0 * np.arange(k) / k)
    rad = np.resize(np.asarray(radii, dtype=np.float64), k)
    return np.stack([rad * np.cos(t), rad * np.sin(t)], axis=1)


def _half_planes(verts) -> tuple[np.ndarray, np.ndarray]:
    """A convex polygon as half-planes ``normals @ p <= offsets`` (normals pointing outwards)."""
    verts = np.asarray(verts, dtype=np.float64)
    edges = np.roll(verts, -1, axis=0) - verts
    normals = np.stack([edges[:, 1], -edges[:, 0]], axis=1)
    offsets = (normals * verts).sum(1)
    flip = normals @ verts.mean(0) > offsets
    normals[flip], offsets[flip] = -normals[flip], -offsets[flip]
    return normals, offsets


def _convex_pieces(shape: str) -> list[tuple[np.ndarray, np.ndarray]]:
    """``shape`` at circumradius 1 (y downwards) as a union of convex polygons; [] for the circle."""
    if shape == "circle":
        return []
    if shape == "star":  # an inner pentagon and five spikes
        v = _ring(10, -90, radii=(1.0, 0.45))
        return [_half_planes(v[1::2])] + [_half_planes(v[[2 * k, 2 * k + 1, 2 * k - 1]]) for k in range(5)]
    if shape == "cross":  # two bars
        a, b = 0.3, 0.9
        return [_half_planes([[-a, -b], [a, -b], [a, b], [-a, b]]), _half_planes([[-b, -a], [b, -a], [b, a], [-b, a]])]
    verts = {"square": _ring(4, 45), "diamond": _ring(4, 0) * [0.7, 1.0], "triangle": _ring(3, -90),
             "hexagon": _ring(6, 0)}
    return [_half_planes(verts[shape])]


_PIECES = {shape: _convex_pieces(shape) for shape in SHAPES}


def shape_mask(shape: str, u: np.ndarray, v: np.ndarray) -> np.ndarray:
    """Whether points (u, v), in units of the circumradius from the centre, lie inside ``shape``."""
    if shape not in _PIECES:
        raise ValueError(f"shape must be one of {SHAPES}, got {shape!r}")
    if shape == "circle":
        return u**2 + v**2 <= 1.0
    inside = np.zeros(np.broadcast_shapes(u.shape, v.shape), dtype=bool)
    for normals, offsets in _PIECES[shape]:
        piece = np.ones_like(inside)
        for (nu, nv), d in zip(normals, offsets):
            piece &= nu * u + nv * v <= d
        inside |= piece
    return inside


def render_scene(scene: dict, *, image_size=64, supersample=4, radius=(0.09, 0.14, 0.2), noise_std=0.0,
                 rng: np.random.Generator | None = None) -> np.ndarray:
    """Render a scene to an ``image_size x image_size x 3`` uint8 RGB image.

    Objects are painted in list order (largest first) into a label map at
    ``supersample`` times the resolution, which is coloured and box-filtered down
    (anti-aliasing); then Gaussian noise of std ``noise_std`` (0-255 units, drawn
    from ``rng``, required when ``noise_std > 0``) is added and the result rounded and
    clipped to 0..255. ``scene``: ``sample_scene``'s format; the other arguments as in the
    world block (``WORLD_DEFAULTS``). Returns a uint8 array, image_size x image_size x 3.
    """
    if noise_std > 0 and rng is None:
        raise ValueError("rng is required when noise_std > 0: pass np.random.default_rng(seed)")
    side = image_size * supersample
    labels = np.zeros((side, side), dtype=np.uint8)
    palette = [BACKGROUNDS[scene["background"]]]
    for obj in scene["objects"]:
        palette.append(COLORS[obj["color"]])
        cx, cy, r = obj["x"] * side, obj["y"] * side, radius[SIZES.index(obj["size"])] * side
        r0, r1 = max(int(cy - r), 0), min(int(np.ceil(cy + r)) + 1, side)
        c0, c1 = max(int(cx - r), 0), min(int(np.ceil(cx + r)) + 1, side)
        # pixel i covers [i, i + 1) in supersampled units, so its centre is i + 0.5
        v = ((np.arange(r0, r1) + 0.5 - cy) / r)[:, None]
        u = ((np.arange(c0, c1) + 0.5 - cx) / r)[None, :]
        labels[r0:r1, c0:c1][shape_mask(obj["shape"], u, v)] = len(palette) - 1
    # box filter as a histogram: how many fine pixels of each label fall in each output pixel
    s, k = supersample, len(palette)
    blocks = labels.reshape(image_size, s, image_size, s).transpose(0, 2, 1, 3).reshape(-1, s * s)
    counts = np.bincount((blocks + k * np.arange(len(blocks))[:, None]).ravel(), minlength=len(blocks) * k)
    image = counts.reshape(image_size, image_size, k).astype(np.float32) @ np.asarray(palette, np.float32) / s**2
    if noise_std > 0:
        image += rng.normal(0.0, noise_std, size=image.shape).astype(np.float32)
    return np.clip(np.rint(image), 0, 255).astype(np.uint8)


def make_item(index: int, *, seed: int, world: dict | None = None) -> tuple[np.ndarray, list[str], dict]:
    """Item ``index`` of the world seeded by ``seed``: (image, captions sparsest first, scene).

    Each item has its own random streams (scene, noise, one per caption level), keyed
    by (seed, index), so a dataset of n items is the first n items of any larger one.
    """
    w = world_config(world)
    scene = sample_scene(np.random.default_rng([seed, index, 0]), world=w)
    image = render_scene(scene, image_size=w["image_size"], supersample=w["supersample"], radius=w["radius"],
                         noise_std=w["noise_std"], rng=np.random.default_rng([seed, index, 1]))
    texts = [caption(scene, level=lv, rng=np.random.default_rng([seed, index, 2 + lv])) for lv in range(len(LEVELS))]
    return image, texts, scene


def caption_samples(scene: dict, *, index: int, seed: int, k: int) -> list[str]:
    """``k`` independent densest (level-5) captions of item ``index``: sample 0 is ``make_item``'s level-5
    caption (stream (seed, index, 2 + 5)), sample j >= 1 is drawn from ``default_rng([seed, index, 100 + j])``."""
    if isinstance(k, bool) or int(k) != k or k < 1:
        raise ValueError(f"k (world.caption_samples) must be an integer >= 1, got {k!r}")
    streams = [1 + len(LEVELS)] + [100 + j for j in range(1, int(k))]
    return [caption(scene, level=len(LEVELS) - 1, rng=np.random.default_rng([seed, index, s])) for s in streams]


@dataclass
class ShapesDataset:
    """A shapes dataset dir in memory: ``images`` N x H x W x 3 uint8, ``texts`` per item per level, ``scenes``."""

    images: np.ndarray
    texts: list[list[str]]
    scenes: list[dict]
    meta: dict

    def __len__(self) -> int:
        return len(self.scenes)


def build_dataset(out: str | Path, *, n: int, seed: int, world: dict | None = None) -> Path:
    """Generate ``n`` items (item i is ``make_item(i, seed=seed)``) and write ``images.npy``,
    ``captions.jsonl``, ``scenes.jsonl``, ``meta.json`` to ``out`` (created if absent); return it as a Path.

    ``world``: the params.yaml world block (missing keys take ``WORLD_DEFAULTS``). A caption record is
    ``{"id", "text": densest caption, "texts": one per level (sparsest first), "samples":
    caption_samples(..., k=world.caption_samples)}`` (``samples[0] == text``). ``meta.json`` is written
    last and holds the sha256 of ``images.npy``.
    """
    from tqdm import tqdm

    if not (1 <= n <= 10 ** 8 and 0 <= seed < 2 ** 63):  # numpy refuses a negative seed, np.empty a huge n
        raise UsageError(f"n must be a positive number of items, got {n}" if n < 1 else
                         f"n ({n}) must be at most 10^8 and seed ({seed}) between 0 and 2^63 - 1")
    w = world_config(world)
    out = Path(out)
    s = w["image_size"]
    images = np.empty((n, s, s, 3), dtype=np.uint8)
    captions, scenes = [], []
    for i in tqdm(range(n), desc=f"shapes {out.name}", mininterval=2.0):
        images[i], texts, scene = make_item(i, seed=seed, world=w)
        samples = caption_samples(scene, index=i, seed=seed, k=w["caption_samples"])
        captions.append({"id": i, "text": texts[-1], "texts": texts, "samples": samples})
        scenes.append({"id": i, "scene": scene})
    write_npy(out / "images.npy", images)
    write_jsonl(out / "captions.jsonl", captions)
    write_jsonl(out / "scenes.jsonl", scenes)
    sha = sha256_file(out / "images.npy")
    data_world = {k: v for k, v in w.items() if k != "kernel"}  # the kernel does not change the data
    write_json(out / "meta.json", {"source": "prh.data.shapes", "params": {"n": n, "seed": seed, "world": data_world},
                                   "count": n, "levels": list(LEVELS), "sha256": sha})
    return out


def load_dataset(path: str | Path, *, verify: bool = False) -> ShapesDataset:
    """Load a dataset dir written by ``build_dataset``; ``verify`` checks the images' sha256."""
    path = Path(path)
    if not (path / "meta.json").exists():
        raise FileNotFoundError(f"{path} is not a shapes dataset dir (no meta.json): run "
                                f"`snakemake {path}/meta.json` or `prh make-shapes --out {path} ...`")
    meta = read_json(path / "meta.json")
    if verify and sha256_file(path / "images.npy") != meta["sha256"]:
        raise ValueError(f"{path}/images.npy does not match the sha256 in meta.json; rebuild the dataset")
    images = np.load(path / "images.npy", allow_pickle=False)
    texts = [rec["texts"] for rec in read_jsonl(path / "captions.jsonl")]
    scenes = [rec["scene"] for rec in read_jsonl(path / "scenes.jsonl")]
    if not len(images) == len(texts) == len(scenes) == meta["count"]:
        raise ValueError(f"{path}: images, captions, scenes and meta.count disagree; rebuild the dataset")
    return ShapesDataset(images=images, texts=texts, scenes=scenes, meta=meta)


def _lab_palette() -> np.ndarray:
    from skimage.color import rgb2lab

    return rgb2lab(np.array(list(COLORS.values()), dtype=np.float64)[None] / 255.0)[0]


def world_kernel(scenes: list[dict], *, position_scale=0.25, color_scale=60.0, size_scale=1.0, shape_floor=0.5,
                 background_weight=0.05) -> np.ndarray:
    """Ground-truth similarity of scenes: a normalised set (mean-map) kernel over objects.

    Object kernel (a product of positive semi-definite kernels, so PSD)::

        k(a, b) = exp(-|p_a - p_b|² / 2σ_p² - |lab_a - lab_b|² / 2σ_c² - (s_a - s_b)² / 2σ_s²)
                  · (f + (1 - f) [shape_a = shape_b])

    with p the centre, lab the CIELAB colour (perceptual distance, as in PRH fig. 8),
    s the size index. Scenes A and B (object sets)::

        G(A, B) = Σ_{a∈A} Σ_{b∈B} k(a, b),      K_obj = G(A, B) / sqrt(G(A, A) G(B, B))
        K(A, B) = w [bg_A = bg_B] + (1 - w) K_obj

    Why this one: it is permutation invariant (a scene is a set), exactly PSD and
    has ones on the diagonal (a kernel in the PRH's sense, usable by CKA and k-NN
    metrics alike), equals 1 only for the same scene (k is characteristic, and a
    scene's objects are distinct), and costs O(M²) for M objects in all.
    Optimal-assignment kernels are not PSD in general (Vert, 2008).

    Parameters
    ----------
    scenes: list of scene dicts (``sample_scene``'s format).
    position_scale, color_scale, size_scale: σ_p (fraction of side), σ_c (ΔE), σ_s (size steps).
    shape_floor: f, the similarity of two different shapes (1 ignores shape).
    background_weight: w in [0, 1].

    Returns
    -------
    K: float64 N x N, symmetric, PSD, unit diagonal.
    """
    if not 0 <= background_weight <= 1 or not 0 <= shape_floor <= 1:
        raise ValueError("background_weight and shape_floor must lie in [0, 1]")
    if min(position_scale, color_scale, size_scale) <= 0:
        raise ValueError("position_scale, color_scale and size_scale must be positive")
    lab, color_idx = _lab_palette(), {c: i for i, c in enumerate(COLORS)}
    counts, feats, shape = [], [], []
    for scene in scenes:
        counts.append(len(scene["objects"]))
        for o in scene["objects"]:
            shape.append(SHAPES.index(o["shape"]))
            feats.append([o["x"] / position_scale, o["y"] / position_scale,
                          *(lab[color_idx[o["color"]]] / color_scale), SIZES.index(o["size"]) / size_scale])
    if not scenes or min(counts) < 1:
        raise ValueError("scenes must be a non-empty list of scenes with at least one object each")
    feats, shape = np.asarray(feats), np.asarray(shape)
    first = np.concatenate([[0], np.cumsum(counts)])  # scene i owns objects first[i]:first[i+1]
    sq = (feats**2).sum(1)
    gram = np.empty((len(scenes), len(scenes)))
    for s0 in range(0, len(scenes), 512):  # blocks of scenes keep memory at (objects in 512 scenes) x M
        s1 = min(s0 + 512, len(scenes))
        rows = slice(first[s0], first[s1])
        d2 = np.maximum(sq[rows, None] + sq[None, :] - 2 * feats[rows] @ feats.T, 0.0)
        k = np.exp(-0.5 * d2) * (shape_floor + (1 - shape_floor) * (shape[rows, None] == shape[None, :]))
        k = np.add.reduceat(k, first[:-1], axis=1)  # sum over B's objects
        gram[s0:s1] = np.add.reduceat(k, first[s0:s1] - first[s0], axis=0)  # and over A's
    d = np.sqrt(np.diag(gram))
    bg = np.array([list(BACKGROUNDS).index(s["background"]) for s in scenes])
    kern = background_weight * (bg[:, None] == bg[None, :]) + (1 - background_weight) * gram / np.outer(d, d)
    return (kern + kern.T) / 2


def world_features(scenes: list[dict], **kernel_kwargs) -> np.ndarray:
    """N x N features F with F Fᵀ = world_kernel(scenes) (F = U Λ^½), for feature-based metrics."""
    evals, evecs = np.linalg.eigh(world_kernel(scenes, **kernel_kwargs))
    return (evecs * np.sqrt(np.clip(evals, 0.0, None)))[:, ::-1].astype(np.float32)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="prh make-shapes", description="Generate a shapes-world dataset dir.")
    parser.add_argument("--out", required=True, help="dataset dir, e.g. results/data/shapes_eval")
    parser.add_argument("--n", type=int, required=True, help="number of items")
    parser.add_argument("--seed", type=int, required=True, help="seed of the scene sampler")
    settings = add_slice(parser, DATA_CONFIG)
    args = parser.parse_args(argv)
    out = build_dataset(args.out, n=args.n, seed=args.seed, world=settings(args)["world"])
    print(f"wrote {args.n} items to {out}")
