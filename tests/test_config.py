"""params.yaml is checked before any job: schema (keys, types, values) and references (names)."""

from __future__ import annotations

import copy

import pytest

from prh import config
from prh.checks import check_limits, check_references


@pytest.fixture(scope="module")
def cfg(repo_root):
    return config.load(repo_root / "params.yaml")


def checked(cfg):
    return check_references(config.validate_schema(copy.deepcopy(cfg)))


def test_shipped_params_are_valid(cfg, repo_root):
    checked(cfg)
    smoke = config.load(repo_root / "tests" / "smoke" / "params.yaml")
    checked(config.merge(cfg, smoke))
    assert len((repo_root / "tests" / "smoke" / "params.yaml").read_text().splitlines()) < 120  # sizes only


def test_merge_layers_like_a_configfile():
    base = {"a": {"x": 1, "y": [1, 2]}, "b": 2}
    merged = config.merge(base, {"a": {"y": [3]}, "c": 4})
    assert merged == {"a": {"x": 1, "y": [3]}, "b": 2, "c": 4}
    assert base == {"a": {"x": 1, "y": [1, 2]}, "b": 2}  # unchanged


def test_unknown_top_level_key_is_named(cfg):
    bad = copy.deepcopy(cfg)
    bad["sede"] = 1
    with pytest.raises(config.ConfigError, match=r"'sede' was unexpected.*allowed keys: .*seed"):
        checked(bad)


def test_unknown_nested_key_is_named(cfg):
    bad = copy.deepcopy(cfg)
    bad["alignment"]["top_k"] = 10
    with pytest.raises(config.ConfigError, match=r"alignment: .*'top_k' was unexpected.*allowed keys: .*topk"):
        checked(bad)


def test_wrong_type_is_named(cfg):
    bad = copy.deepcopy(cfg)
    bad["alignment"]["topk"] = "ten"
    with pytest.raises(config.ConfigError, match=r"alignment.topk: 'ten' is not of type 'integer'"):
        checked(bad)


def test_bad_enum_lists_allowed_values(cfg):
    bad = copy.deepcopy(cfg)
    bad["sample_size"]["metrics"] = ["mutual-knn"]
    with pytest.raises(config.ConfigError,
                       match=r"sample_size.metrics.0: 'mutual-knn' is not allowed; choose one of .*mutual_knn"):
        checked(bad)


def test_an_unknown_metric_is_named_with_the_tables_metrics(cfg):
    """alignment.metric refers to an entry of the metric table (prh.metrics.names): a close name is suggested, any
    other gets the table's names."""
    from prh.metrics.names import SUPPORTED_METRICS

    bad = copy.deepcopy(cfg)
    bad["alignment"]["metric"] = "mutual-knn"
    with pytest.raises(config.ConfigError,
                       match=r"alignment.metric: unknown metric 'mutual-knn'; did you mean 'mutual_knn'"):
        checked(bad)
    bad["alignment"]["metric"] = "pearson"
    with pytest.raises(config.ConfigError, match=r"alignment.metric: unknown metric 'pearson'; choose one of "
                                                 + ", ".join(sorted(SUPPORTED_METRICS))):
        checked(bad)


def test_unknown_model_set_is_named(cfg):
    bad = copy.deepcopy(cfg)
    bad["suites"]["offline"]["vision_models"] = "zoo_visoin"
    with pytest.raises(config.ConfigError, match=r"suites.offline.vision_models: unknown model set 'zoo_visoin'; did you mean 'zoo_vision'"):
        checked(bad)


def test_unknown_dataset_is_named(cfg):
    bad = copy.deepcopy(cfg)
    bad["suites"]["offline"]["paired_dataset"] = "shapes_evl"
    with pytest.raises(config.ConfigError, match=r"unknown dataset 'shapes_evl'; did you mean 'shapes_eval'"):
        checked(bad)


def test_unknown_model_in_set_is_named(cfg):
    bad = copy.deepcopy(cfg)
    first_set = next(iter(bad["model_sets"]))
    bad["model_sets"][first_set].append("no_such_model")
    with pytest.raises(config.ConfigError, match=rf"model_sets.{first_set}: unknown model 'no_such_model'"):
        checked(bad)


def test_schema_defaults_are_filled(cfg):
    assert "topk" not in cfg["alignment"]  # params.yaml leaves defaults out (tests/test_params_defaults.py)
    assert config.validate_schema(copy.deepcopy(cfg))["alignment"]["topk"] == 10


def test_omitted_block_gets_every_default_of_its_own_schema_file(cfg):
    """Blocks live in sibling schema files ($ref); their defaults must be filled all the same."""
    trimmed = copy.deepcopy(cfg)
    del trimmed["features"], trimmed["alignment"]
    filled = config.validate_schema(trimmed)
    assert filled["features"]["vision_batch_size"] == 64
    assert filled["alignment"] == {
        "metric": "mutual_knn", "topk": 10, "quantile": 0.95, "cca_dim": 10, "null_permutations": 0, "dtype": "float32",
        "knn_precision": "auto",
        "skip_language_embedding": {"offline": True, "paper": False},
    }


def test_every_schema_property_has_a_description(repo_root):
    """STYLE.md: every schema key has a description (and the reader learns what it does)."""
    import yaml

    missing = []

    def walk(node, where):
        if isinstance(node, dict):
            for key, sub in (node.get("properties") or {}).items():
                if isinstance(sub, dict) and "description" not in sub and "$ref" not in sub and "const" not in sub:
                    missing.append(f"{where}.{key}")
                walk(sub, f"{where}.{key}")
            for k in ("additionalProperties", "items", "then", "else"):
                if isinstance(node.get(k), dict):
                    walk(node[k], where)
            for sub in node.get("allOf", []) or []:
                walk(sub, where)
            for name, sub in (node.get("$defs") or {}).items():
                walk(sub, f"{where}.$defs.{name}")

    for path in sorted((repo_root / "workflow" / "schemas").glob("*.yaml")):
        walk(yaml.safe_load(path.read_text()), path.name)
    assert not missing, f"schema keys without a description: {missing}"


def test_every_schema_file_declares_its_draft(repo_root):
    """Snakemake's validate() cannot resolve a $ref'd file that does not name its JSON-schema draft."""
    for path in sorted((repo_root / "workflow" / "schemas").glob("*.yaml")):
        assert path.read_text().startswith("$schema:"), f"{path.name} must start with a $schema line"


def test_cli_json_blocks_are_checked_once_with_a_clear_message(tmp_path):
    """Every `prh` command that takes a params block as JSON parses it through one argparse type."""
    import argparse

    from prh.io import json_object

    assert json_object('{"width": 16}') == {"width": 16}
    with pytest.raises(argparse.ArgumentTypeError, match="not valid JSON"):
        json_object("{width: 16}")
    with pytest.raises(argparse.ArgumentTypeError, match="must be a JSON object"):
        json_object("[1, 2]")
    from prh.studies.simplicity.run import main

    with pytest.raises(SystemExit):  # argparse reports the bad --config and exits 2
        main(["--part", "products", "--products", str(tmp_path / "p.json"), "--config", "not json"])
    assert not any(tmp_path.iterdir())


@pytest.mark.parametrize(
    "edit, expected",
    [
        (lambda c: c["alignment"].update(topk=1024), r"alignment.topk: 1024 must be at most N - 2 = 998 for the 1000 items of shapes_vision"),
        (lambda c: c["alignment"].update(topk=1), r"alignment.topk: 1; CKNNA .* needs k >= 2"),
        (lambda c: c["metric_agreement"].update(locality_ks=[10, 2000]), r"locality_ks: 2000 must be in \[2, 1023\]"),
        (lambda c: c["metric_agreement"].update(batch_sizes=[1500]), r"batch_sizes: 1500 must be below the 1000 items"),
        (lambda c: c["suites"]["offline"].update(vision_models="zoo_language"),
         r"suites.offline.vision_models: set 'zoo_language' holds models that are not vision models"),
    ],
    ids=["topk-above-N", "topk-1-with-cknna", "locality-k", "batch-size", "language-set-as-vision"],
)
def test_data_limits_fail_before_any_job(cfg, edit, expected):
    """Limits that depend on the data are checked with the config, not inside jobs."""
    bad = config.validate_schema(copy.deepcopy(cfg))
    edit(bad)
    with pytest.raises(config.ConfigError, match=expected):
        check_limits(bad)
    check_limits(config.validate_schema(copy.deepcopy(cfg)))  # the shipped params pass


def test_a_run_with_checkpoints_yields_one_model_per_checkpoint(cfg):
    from prh.config import all_models, run_models

    spec = {"arch": "gpt2", "steps": 1000, "checkpoints": [0, 30, 1000], "seed": 1}
    models = run_models("gpt2_s_r1", spec)
    assert list(models) == ["gpt2_s_r1_0", "gpt2_s_r1_30", "gpt2_s_r1_1000"]
    assert models["gpt2_s_r1_30"] == {**spec, "steps": 30, "run": "gpt2_s_r1"}
    assert run_models("bert", {"arch": "bert", "steps": 5}) == {"bert": {"arch": "bert", "steps": 5, "run": "bert"}}
    everything = all_models(cfg)
    trained = [m for m in cfg["model_sets"]["zoo_language"]
               if everything[m].get("arch") == "gpt2" and everything[m]["steps"] > 0]
    assert len(trained) >= 18  # at least 18 trained causal LMs
    assert {everything[m]["run"] for m in trained} == {r for r, s in cfg["zoo"]["language"].items() if s.get("checkpoints")}


def test_errors_name_the_merged_layers_and_where_a_value_came_from(cfg, tmp_path, repo_root):
    override = tmp_path / "override.yaml"
    override.write_text("alignment: {topk: ten}\nseed: 0\n")
    layers = config.config_layers(base=repo_root / "params.yaml", configfiles=[override], overrides={"suite": "nope"})
    merged = config.merge(config.merge(cfg, config.load(override)), {"suite": "nope"})
    with pytest.raises(config.ConfigError) as err:
        config.validate_schema(merged, layers=layers)
    message = str(err.value)
    assert message.startswith(f"the merged configuration ({repo_root / 'params.yaml'} + --configfile {override} "
                              f"+ --config suite='nope') is invalid")
    assert f"alignment.topk: 'ten' is not of type 'integer' (this value comes from --configfile {override}" in message
    assert "suite: 'nope' is not allowed" in message and "comes from the command line (--config)" in message
    # alone, params.yaml is named as before
    bad = copy.deepcopy(cfg)
    bad["alignment"]["topk"] = "ten"
    with pytest.raises(config.ConfigError, match=r"^params.yaml is invalid: alignment.topk: 'ten' is not of type "
                                                 r"'integer'$"):  # one problem, one line
        config.validate_schema(bad)


@pytest.mark.parametrize("override, expected", [
    ({"alignment": "{topk: 5}"}, r"alignment: '\{topk: 5\}' is not of type 'object'\. A nested value given with "
                                 r"--config arrives as a string: put nested values in a YAML file .*--configfile FILE"),
    ({"alignment": {"topk": "5"}}, r"alignment.topk: '5' is not of type 'integer'\. A value nested in --config "
                                   r"arrives as a string: .*--configfile FILE"),
])
def test_nested_command_line_values_point_to_configfile(cfg, override, expected):
    with pytest.raises(config.ConfigError, match=expected):
        config.validate_schema(config.merge(cfg, override), layers=[("params.yaml", cfg), ("--config", override)])


def test_scientific_notation_read_as_a_string_gets_a_hint(cfg):
    bad = copy.deepcopy(cfg)
    bad["alignment"]["quantile"] = __import__("yaml").safe_load("q: 3e-3")["q"]
    assert bad["alignment"]["quantile"] == "3e-3"  # PyYAML (YAML 1.1) needs a dot and a signed exponent
    with pytest.raises(config.ConfigError, match=r"alignment.quantile: '3e-3' is not of type 'number'\. YAML 1.1 "
                                                 r"\(PyYAML\) reads 3e-3 as a string.*\(3\.0e-3\) or as a decimal \(0\.003\)"):
        config.validate_schema(bad)
    assert __import__("yaml").safe_load("q: 3.0e-3")["q"] == 0.003


def test_vtab_tasks_default_to_every_pair_and_a_list_picks_a_subset(repo_root):
    """The offline replay: Fig 2's VTAB tasks are a config key (null = the 19 pairs of params.yaml)."""
    from prh.checks import check_references
    from prh.config import ConfigError, load, vtab_tasks

    cfg = load(repo_root / "params.yaml")
    tasks = vtab_tasks(cfg)
    assert len(tasks) == 19 and tasks["kitti_dist"] == ("vtab_kitti_dist_train", "vtab_kitti_dist_test")
    picked = {**cfg, "convergence": {**cfg["convergence"], "vtab_tasks": ["dtd", "caltech101"]}}
    assert list(vtab_tasks(picked)) == ["dtd", "caltech101"]
    check_references(picked)
    bad = {**cfg, "convergence": {**cfg["convergence"], "vtab_tasks": ["dtd", "imagenet"]}}
    with pytest.raises(ConfigError, match="task 'imagenet' has no dataset vtab_imagenet_train or vtab_imagenet_test"):
        check_references(bad)


def _enums(node, where=""):
    """(dotted schema path, values) of every ``enum`` in a schema tree."""
    if isinstance(node, dict):
        if isinstance(node.get("enum"), list):
            yield where, node["enum"]
        for k, v in node.items():
            yield from _enums(v, f"{where}.{k}" if where else k)
    elif isinstance(node, list):
        for i, v in enumerate(node):
            yield from _enums(v, f"{where}[{i}]")


def test_the_metric_names_come_from_the_table_alone(repo_root, cfg):
    """The schema's `alignment.metric` lists no names of its own: the metric table (prh.metrics.names) is the one list,
    which the config check reads, so a metric added to the table is accepted with no schema to edit, and one dropped
    from it is refused. Any other enum of metric names (sample_size's sweep) is a subset of the table."""
    from prh.metrics.names import SUPPORTED_METRICS

    schemas = repo_root / "workflow" / "schemas"
    metric = config.load_schema(schemas / "alignment.schema.yaml")["properties"]["metric"]
    assert "enum" not in metric, ("workflow/schemas/alignment.schema.yaml lists metric names: drop the enum, the "
                                  "table in src/prh/metrics/names.py is the one list (prh.checks.check_references)")
    assert metric["default"] in SUPPORTED_METRICS
    for name in SUPPORTED_METRICS:
        checked({**cfg, "alignment": {**cfg.get("alignment", {}), "metric": name}})
    found = 0
    for path in sorted(schemas.glob("*.schema.yaml")):
        for where, values in _enums(config.load_schema(path)):
            if set(values) & set(SUPPORTED_METRICS):
                found += 1
                unknown = sorted(set(values) - set(SUPPORTED_METRICS))
                assert not unknown, (f"{path.name}: {where} names metrics the table (src/prh/metrics/names.py) "
                                     f"lacks: {unknown}")
    assert found >= 1  # sample_size.metrics
