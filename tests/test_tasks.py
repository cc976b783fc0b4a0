"""The downstream task suite: labels defined for every scene, splits and chance levels."""

from __future__ import annotations

import numpy as np
import pytest

from prh.data.shapes import sample_scene
from prh.data.tasks import TASKS, Task, chance_level, task_labels, train_test_split


@pytest.fixture(scope="module")
def scenes():
    rng = np.random.default_rng(2)
    return [sample_scene(rng) for _ in range(2000)]


def obj(shape, color, size, x, y):
    return {"shape": shape, "color": color, "size": size, "x": x, "y": y}


def test_suite_has_varied_tasks():
    assert len(TASKS) >= 8
    for name, task in TASKS.items():
        assert task.name == name and task.num_classes >= 2 and len(task.classes) == task.num_classes


def test_every_label_is_valid_and_every_class_occurs(scenes):
    labels = task_labels(scenes)
    assert set(labels) == set(TASKS)
    for name, y in labels.items():
        assert y.dtype == np.int64 and y.shape == (2000,)
        assert set(np.unique(y)) == set(range(TASKS[name].num_classes)), name
        # no task is trivial: the majority class leaves room for a probe to learn
        assert np.bincount(y).max() / len(y) < 0.9, name


def test_labels_of_a_hand_made_scene():
    scene = {"background": "white", "objects": [
        obj("star", "red", "large", 0.7, 0.8),       # largest: lower right
        obj("circle", "red", "medium", 0.2, 0.3),    # left-most, top-most
        obj("square", "blue", "small", 0.75, 0.5),
    ]}
    labels = {name: t.label(scene) for name, t in TASKS.items()}
    assert TASKS["count"].classes[labels["count"]] == "3"
    assert TASKS["largest_color"].classes[labels["largest_color"]] == "red"
    assert TASKS["leftmost_shape"].classes[labels["leftmost_shape"]] == "circle"
    assert TASKS["topmost_size"].classes[labels["topmost_size"]] == "medium"
    assert TASKS["background"].classes[labels["background"]] == "white"
    assert TASKS["largest_quadrant"].classes[labels["largest_quadrant"]] == "lower right"
    assert TASKS["pair_distance"].classes[labels["pair_distance"]] == "far"  # |(0.5, 0.5)| = 0.71
    assert TASKS["largest_above_second"].classes[labels["largest_above_second"]] == "below"
    assert labels["shared_color"] == 1 and labels["has_circle"] == 1


def test_one_object_scenes_have_defined_labels():
    scene = {"background": "navy", "objects": [obj("cross", "green", "small", 0.2, 0.2)]}
    labels = {name: t.label(scene) for name, t in TASKS.items()}
    assert labels["count"] == 0 and labels["shared_color"] == 0 and labels["has_circle"] == 0
    assert TASKS["pair_distance"].classes[labels["pair_distance"]] == "one object"
    assert TASKS["largest_above_second"].classes[labels["largest_above_second"]] == "one object"
    with pytest.raises(ValueError, match="no objects"):
        TASKS["count"].label({"background": "navy", "objects": []})


def test_task_labels_selects_tasks_and_names_unknown_ones(scenes):
    assert list(task_labels(scenes[:5], ["count", "background"])) == ["count", "background"]
    with pytest.raises(ValueError, match="colour_of_largest"):
        task_labels(scenes[:5], ["colour_of_largest"])
    bad = Task("bad", 2, "always 2", ("a", "b"), lambda s: 2)
    with pytest.raises(ValueError, match="outside 0..1"):
        bad.label(scenes[0])


def test_split_is_seeded_disjoint_and_complete():
    train, test = train_test_split(100, test_fraction=0.25, seed=4)
    assert len(train) == 75 and len(test) == 25
    assert not set(train) & set(test) and sorted([*train, *test]) == list(range(100))
    again = train_test_split(100, test_fraction=0.25, seed=4)
    assert np.array_equal(again[0], train) and np.array_equal(again[1], test)
    assert not np.array_equal(train_test_split(100, test_fraction=0.25, seed=5)[1], test)
    with pytest.raises(ValueError, match="test_fraction"):
        train_test_split(100, test_fraction=1.0)
    with pytest.raises(ValueError, match="empty split"):
        train_test_split(2, test_fraction=0.1)


def test_chance_level_is_the_majority_baseline():
    assert chance_level([0, 1, 1, 2], [1, 1, 0, 2, 2]) == pytest.approx(2 / 5)
    assert chance_level([3, 3], [0, 1, 2, 3]) == pytest.approx(1 / 4)
    with pytest.raises(ValueError, match="non-empty"):
        chance_level([], [1])
