"""Config slices (prh.slices): a rule hands its command the params.yaml keys it reads as one JSON argument, the
command fills the rest from the schema, takes a flag over the JSON, and refuses a bad or unknown key by name."""

from __future__ import annotations

import argparse
import json
import shlex

import pytest

from prh.config import schema_defaults
from prh.slices import add_slice, block_keys, slice_arg

KEYS = {"alignment": ("topk", "quantile", "dtype"), "metric_agreement": ("batch_sizes",)}


def _parser():
    parser = argparse.ArgumentParser(prog="prh toy")
    parser.add_argument("--out")
    return parser, add_slice(parser, KEYS)


def test_the_json_slice_then_the_schema_defaults_then_flags():
    parser, read = _parser()
    given = {"alignment": {"topk": 7}, "metric_agreement": {"batch_sizes": [30, 60]}}
    assert read(parser.parse_args(["--config", json.dumps(given)])) == {
        "alignment": {"topk": 7, "quantile": schema_defaults("alignment")["quantile"], "dtype": "float32"},
        "metric_agreement": {"batch_sizes": [30, 60]},
    }
    args = parser.parse_args(["--config", json.dumps(given), "--topk", "3", "--batch-sizes", "5", "--dtype", "float64"])
    assert read(args) == {"alignment": {"topk": 3, "quantile": 0.95, "dtype": "float64"},
                          "metric_agreement": {"batch_sizes": [5]}}
    assert read(parser.parse_args([])) == {  # a run by hand with no settings: the schema's defaults
        "alignment": {k: schema_defaults("alignment")[k] for k in KEYS["alignment"]},
        "metric_agreement": {"batch_sizes": schema_defaults("metric_agreement")["batch_sizes"]},
    }


def test_what_a_rule_passes_reads_back_as_the_same_values():
    cfg = {"alignment": {"topk": 12, "quantile": 1.0, "dtype": "float64", "metric": "cka"},
           "metric_agreement": {"batch_sizes": [50]}}
    text = slice_arg(cfg, KEYS)
    assert text == slice_arg(json.loads(json.dumps(cfg)), KEYS)  # one string per set of values (Snakemake's params)
    parser, read = _parser()
    (argument,) = shlex.split(text)
    assert read(parser.parse_args(["--config", argument])) == {
        "alignment": {"topk": 12, "quantile": 1.0, "dtype": "float64"}, "metric_agreement": {"batch_sizes": [50]}}


@pytest.mark.parametrize(("argv", "message"), [
    (["--config", '{"alignment": {"topk": 0}}'], "invalid settings: alignment.topk: 0 is less than the minimum of 1"),
    (["--quantile", "1.5"], "alignment.quantile: 1.5 is greater than the maximum of 1"),
    (["--config", '{"alignment": {"cca_dim": 3}}'], "alignment.cca_dim is not read by this command"),
    (["--config", '{"world": {"seed": 3}}'], "world.seed is not read by this command; it reads alignment.topk"),
    (["--topk", str(10 ** 30)], f"alignment.topk: {10 ** 30} is beyond 64-bit integers"),
    (["--quantile", "nan"], "alignment.quantile: nan is not a finite number"),
    (["--config", '{"metric_agreement": {"batch_sizes": [10, Infinity]}}'],
     "metric_agreement.batch_sizes: inf is not a finite number"),
])
def test_a_bad_or_unknown_key_is_one_error_naming_it(argv, message):
    """One line, through the commands' user errors (``prh <command>: ...``), whichever sub-command reads it."""
    from prh.errors import UsageError

    parser, read = _parser()
    with pytest.raises(UsageError) as err:
        read(parser.parse_args(argv))
    assert message in str(err.value) and "\n" not in str(err.value)


@pytest.mark.parametrize(("argv", "message"), [
    (["--config", '{"alignment": 3}'], "must map each params.yaml block to its keys"),
    (["--config", "{topk: 3}"], "not valid JSON"),
    (["--dtype", "float16"], "invalid choice: 'float16'"),
])
def test_what_argparse_refuses_is_its_usage_error(argv, message, capsys):
    parser, _ = _parser()
    with pytest.raises(SystemExit) as err:
        parser.parse_args(argv)
    assert err.value.code == 2 and message in capsys.readouterr().err


def test_the_flags_come_from_the_schema():
    """Each flag's help is its key's description and default in the schema, never typed in the command."""
    parser, _ = _parser()
    text = " ".join(parser.format_help().split())
    assert "--topk TOPK alignment.topk: k of the k-NN metrics and CKNNA (default: 10)" in text
    assert "--dtype {float32,float64}" in text
    assert '--config JSON the slice a rule hands over: {"alignment": ["topk", "quantile", "dtype"]' in text
    with pytest.raises(ValueError, match="params.yaml block alignment has no key 'top_k'"):
        add_slice(argparse.ArgumentParser(), {"alignment": ("top_k",)})
    assert block_keys("lte.claims") == ("max_ratio", "min_gap")
    assert "batch_size" in block_keys("downstream.harness") and "harness" in block_keys("downstream")


@pytest.mark.parametrize("command", ["align", "run-density", "run-metric-agreement"])
def test_a_command_s_keys_are_flags_only_through_its_slice(command):
    """The commands that read a slice declare none of its keys by hand (argparse would refuse the second flag)."""
    from prh.cli import main as prh_main

    with pytest.raises(SystemExit) as err:
        prh_main([command, "--help"])
    assert err.value.code == 0


def test_a_key_of_several_types_reads_as_json_else_as_text():
    from prh.slices import _flag

    several = _flag({"type": ["integer", "string"]})["type"]  # e.g. a bridge arm's blocks: k or "all"
    assert several("3") == 3 and several("all") == "all"
    assert _flag({"type": "array", "items": {"type": ["integer", "string"]}})["type"]("N-1") == "N-1"
    assert _flag({"type": ["integer", "null"]})["type"] is int
    assert _flag({"type": "array", "items": {"type": "integer"}}) == {"nargs": "+", "type": int}


def test_nested_settings_come_back_sorted_at_every_level_whoever_set_them():
    """A rule's JSON is sorted at every level; a default filled from the schema comes back in the same order."""
    parser = argparse.ArgumentParser()
    read = add_slice(parser, {"world": ("kernel",)})
    kernel = read(parser.parse_args([]))["world"]["kernel"]
    assert list(kernel) == sorted(kernel) and kernel == schema_defaults("world")["kernel"]
    (argument,) = shlex.split(slice_arg({"world": {"kernel": kernel}}, {"world": ("kernel",)}))
    assert json.dumps(read(parser.parse_args(["--config", argument]))) == json.dumps(read(parser.parse_args([])))
