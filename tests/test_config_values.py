"""Values the config check used to let through: NaN and infinity in any number, integers torch or numpy
would overflow, floats for integers, over-long names, duplicate keys and alias bombs in a YAML file, and config files
that are a directory or not UTF-8. Each is one ConfigError line naming the key (or file and line)."""

from __future__ import annotations

import copy
from pathlib import Path

import pytest
import yaml

from prh.checks import check_config
from prh.config import config_layers, load
from prh.errors import ConfigError

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def filled():
    return check_config(yaml.safe_load((ROOT / "params.yaml").read_text()))


def _numbers(node, path=()):
    if isinstance(node, dict):
        for k, v in node.items():
            yield from _numbers(v, path + (k,))
    elif isinstance(node, list):
        for i, v in enumerate(node):
            yield from _numbers(v, path + (i,))
    elif isinstance(node, (int, float)) and not isinstance(node, bool):
        yield path


def _set(cfg, path, value):
    for key in path[:-1]:
        cfg = cfg[key]
    cfg[path[-1]] = value


def test_nan_and_infinity_are_refused_in_every_number(filled):
    paths = list(_numbers(filled))
    assert len(paths) > 200
    for value in (float("nan"), float("inf"), float("-inf")):
        for path in paths:
            cfg = copy.deepcopy(filled)
            _set(cfg, path, value)
            with pytest.raises(ConfigError, match="is not a number a run can use") as err:
                check_config(cfg)
            dotted = ".".join(str(p) for p in path if not isinstance(p, int))
            assert f"{dotted}: {value!r} is not a number" in str(err.value), str(err.value)


@pytest.mark.parametrize("edit, text", [
    ({"seed": 1.2e29}, "seed: 1.2e+29 is not of type 'integer'"),
    ({"seed": 12 * 10**28}, "beyond the 64-bit integers"),
    ({"seed": 2**32}, "a seed must be between 0 and 4294967295"),
    ({"datasets": {"shapes_eval": {"n": 1e20}}}, "datasets.shapes_eval.n: 1e+20 is not of type 'integer'"),
    ({"datasets": {"shapes_eval": {"n": 10**20}}}, "datasets.shapes_eval.n: 100000000000000000000 is beyond"),
])
def test_integers_are_bounded(filled, edit, text):
    cfg = copy.deepcopy(filled)
    for key, value in edit.items():
        cfg[key] = value if not isinstance(value, dict) else {**cfg[key], **{
            k: {**cfg[key][k], **v} for k, v in value.items()}}
    with pytest.raises(ConfigError, match=__import__("re").escape(text)):
        check_config(cfg)


def test_names_have_a_maximum_length(filled):
    for length, ok in ((100, True), (101, False), (300, False)):
        cfg = copy.deepcopy(filled)
        cfg["datasets"]["a" * length] = {"kind": "shapes", "n": 8, "seed": 0}
        if ok:
            check_config(cfg)
        else:
            with pytest.raises(ConfigError, match="at most 100 characters"):
                check_config(cfg)


@pytest.mark.parametrize("text, message", [
    ("seed: 1\nseed: 7\n", "line 2, column 1: key 'seed' appears twice (first on line 1); keep one"),
    ("alignment:\n  topk: 5\n  topk: 6\n", "line 3, column 3: key 'topk' appears twice"),
    ("a: &a [x, x]\n" + "".join(f"{c}: &{c} [{', '.join([f'*{p}'] * 9)}]\n"
                                for p, c in zip("abcdefgh", "bcdefghi")), "expand to more than 1,000,000 values"),
    ("a: &a [x]\n" + "".join(f"b{i}: *a\n" for i in range(101)), "more than 100 aliases"),
    ("a: &a [1, *a]\n", "an alias (*name) inside the value it names"),
])
def test_yaml_duplicates_and_alias_bombs_are_refused(tmp_path, text, message):
    path = tmp_path / "override.yaml"
    path.write_text(text)
    with pytest.raises(ConfigError, match=__import__("re").escape(message)) as err:
        config_layers(base=ROOT / "params.yaml", configfiles=[path])
    assert str(path) in str(err.value) and "\n" not in str(err.value)


def test_a_few_aliases_still_load(tmp_path):
    path = tmp_path / "override.yaml"
    path.write_text("shared: &s {n: 8}\nx: *s\ny: *s\n")
    assert load(path) == {"shared": {"n": 8}, "x": {"n": 8}, "y": {"n": 8}}


def test_unreadable_config_files_are_one_line(tmp_path):
    (tmp_path / "utf16.yaml").write_text("seed: 1\n", encoding="utf-16")
    cases = {tmp_path: "is a directory", tmp_path / "utf16.yaml": "is not UTF-8 text",
             tmp_path / "utf16.yaml" / "x.yaml": "does not exist"}
    for path, text in cases.items():
        with pytest.raises(ConfigError, match=text):
            load(path)
