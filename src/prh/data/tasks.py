"""Downstream tasks over the shapes world: the offline analogue of VTAB (PRH section 3.2, fig. 3).

Each task maps a latent scene (``prh.data.shapes``) to a class label, so linear
probes on a model's features measure what the model knows about the world. The
tasks vary in kind: counting, recognising an attribute of a chosen object,
global appearance, geometry, relations and set predicates. Every label is defined
for every scene: where a task needs two objects, class 0 means "one object only".

"The largest object" is the scene's first object (largest, ties broken by x, then
y; ``sample_scene`` sorts them so) and "the second" its second. "Above" is
``prh.data.captions.above`` (equal y decided by x), as the captions state it.

    >>> labels = task_labels(dataset.scenes)          # name -> int array
    >>> train, test = train_test_split(len(dataset), test_fraction=0.25, seed=0)
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import numpy as np

from prh.data.captions import above
from prh.data.vocabulary import BACKGROUNDS, COLORS, MAX_OBJECTS, SHAPES, SIZES

# Tertiles of the distance between the two largest objects' centres in the default world
# (scenes with two or more objects; a design constant, not fitted to results), from
#   rng = np.random.default_rng(0); scenes = [sample_scene(rng) for _ in range(20000)]
#   np.quantile([hypot(dx, dy) of objects 0 and 1 of each scene with >= 2], [1/3, 2/3])  -> 0.406, 0.660
# rounded to 0.41, 0.66 (classes near / middle / far: 34 / 33 / 33 %).
DISTANCE_BINS = (0.41, 0.66)


@dataclass(frozen=True)
class Task:
    """A classification task: ``label(scene)`` is an int in ``range(num_classes)``."""

    name: str
    num_classes: int
    description: str
    classes: tuple[str, ...]
    label_fn: Callable[[dict], int]

    def label(self, scene: dict) -> int:
        y = int(self.label_fn(scene))
        if not 0 <= y < self.num_classes:
            raise ValueError(f"task {self.name}: label {y} outside 0..{self.num_classes - 1} for scene {scene}")
        return y


def _objects(scene: dict) -> list[dict]:
    objs = scene["objects"]
    if not objs:
        raise ValueError("scene has no objects; shapes-world scenes hold 1 to 4")
    return objs


def _pair(scene: dict):
    objs = _objects(scene)
    return (objs[0], objs[1]) if len(objs) > 1 else None


def _distance_bin(scene: dict) -> int:
    pair = _pair(scene)
    if pair is None:
        return 0
    d = np.hypot(pair[0]["x"] - pair[1]["x"], pair[0]["y"] - pair[1]["y"])
    return 1 + int(np.searchsorted(DISTANCE_BINS, d))


def _above(scene: dict) -> int:
    pair = _pair(scene)
    return 0 if pair is None else 1 if above(*pair) else 2


def _quadrant(obj: dict) -> int:
    return 2 * int(obj["y"] >= 0.5) + int(obj["x"] >= 0.5)


_TASK_LIST = [
    Task("count", MAX_OBJECTS, "number of objects", tuple(str(n) for n in range(1, MAX_OBJECTS + 1)),
         lambda s: len(_objects(s)) - 1),
    Task("largest_color", len(COLORS), "colour of the largest object", tuple(COLORS),
         lambda s: list(COLORS).index(_objects(s)[0]["color"])),
    Task("leftmost_shape", len(SHAPES), "shape of the left-most object", SHAPES,
         lambda s: SHAPES.index(min(_objects(s), key=lambda o: o["x"])["shape"])),
    Task("topmost_size", len(SIZES), "size of the top-most object", SIZES,
         lambda s: SIZES.index(min(_objects(s), key=lambda o: o["y"])["size"])),
    Task("background", len(BACKGROUNDS), "background colour", tuple(BACKGROUNDS),
         lambda s: list(BACKGROUNDS).index(s["background"])),
    Task("largest_quadrant", 4, "image quadrant of the largest object's centre",
         ("upper left", "upper right", "lower left", "lower right"), lambda s: _quadrant(_objects(s)[0])),
    Task("pair_distance", 4, "distance between the two largest objects, binned at DISTANCE_BINS",
         ("one object", "near", "middle", "far"), _distance_bin),
    Task("largest_above_second", 3, "whether the largest object is above the second largest",
         ("one object", "above", "below"), _above),
    Task("shared_color", 2, "whether two objects share a colour", ("no", "yes"),
         lambda s: int(len({o["color"] for o in _objects(s)}) < len(_objects(s)))),
    Task("has_circle", 2, "whether a circle is present", ("no", "yes"),
         lambda s: int(any(o["shape"] == "circle" for o in _objects(s)))),
]
TASKS: dict[str, Task] = {t.name: t for t in _TASK_LIST}


def task_labels(scenes: list[dict], tasks: list[str] | None = None) -> dict[str, np.ndarray]:
    """Labels of every scene for each task (all by default): name -> int64 array of length N."""
    names = list(TASKS) if tasks is None else list(tasks)
    unknown = [t for t in names if t not in TASKS]
    if unknown:
        raise ValueError(f"tasks: unknown task(s) {unknown}; choose from {list(TASKS)}")
    return {t: np.array([TASKS[t].label(s) for s in scenes], dtype=np.int64) for t in names}


def train_test_split(n: int, *, test_fraction: float = 0.25, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """A seeded random split of ``range(n)``: (sorted train indices, sorted test indices)."""
    if not 0 < test_fraction < 1:
        raise ValueError(f"test_fraction must lie strictly between 0 and 1, got {test_fraction}")
    n_test = int(round(n * test_fraction))
    if n_test < 1 or n_test > n - 1:
        raise ValueError(f"n={n} with test_fraction={test_fraction} leaves an empty split; use more items")
    perm = np.random.default_rng(seed).permutation(n)
    return np.sort(perm[n_test:]), np.sort(perm[:n_test])


def chance_level(train_labels: np.ndarray, test_labels: np.ndarray) -> float:
    """Accuracy on ``test_labels`` of always predicting the most frequent class of ``train_labels``.

    The baseline a probe must beat; it is 1 / num_classes only when classes are balanced.
    """
    train_labels, test_labels = np.asarray(train_labels), np.asarray(test_labels)
    if train_labels.size == 0 or test_labels.size == 0:
        raise ValueError("train_labels and test_labels must be non-empty")
    majority = np.bincount(train_labels).argmax()
    return float(np.mean(test_labels == majority))
