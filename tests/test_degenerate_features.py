"""Features are checked before they are scored: NaN or inf rows, a model constant in every layer and
values that overflow normalisation are refused at alignment and at extraction, naming the file, model, layer and
rows; they used to score as numbers (all-NaN mutual k-NN 0.087, one NaN row 0.813, x1e30 0.087 instead of 1.0)."""

from __future__ import annotations

import subprocess
import sys

import pytest
import torch

from prh.errors import CorruptFileError, FeaturesError
from prh.io import save_features
from prh.metrics.engine import alignment_tables
from prh.metrics.registry import layer_states

N, L, D = 24, 3, 8


def _feats(seed=0):
    return torch.randn(N, L, D, generator=torch.Generator().manual_seed(seed))


def _align(tmp_path, bad, metric="mutual_knn", dtype="float32", cca_dim=10):
    good_path, bad_path = tmp_path / "good.safetensors", tmp_path / "bad.safetensors"
    save_features(good_path, _feats(1), {"model": "good"})
    save_features(bad_path, bad, {"model": "diverged"})
    return alignment_tables([metric], x_names=["good"], x_features=[str(good_path)], y_names=["diverged"],
                            y_features=[str(bad_path)], topk=3, dtype=dtype, cca_dim=cca_dim)


def _one_nan_row():
    x = _feats()
    x[7, 1, 2] = float("nan")
    return x


CASES = {
    "all NaN": (torch.full((N, L, D), float("nan")), r"bad\.safetensors \(model diverged\), layer 0: NaN or inf in "
                                                     rf"{N} of {N} rows \(0, 1, 2, 3, 4, \.\.\.\)"),
    "one NaN row": (_one_nan_row(), r"\(model diverged\), layer 1: NaN or inf in 1 of 24 rows \(7\)"),
    "inf": (_feats().index_fill_(0, torch.tensor([3]), float("inf")), r"layer 0: NaN or inf in 1 of 24 rows \(3\)"),
    "constant": (torch.ones(N, L, D), r"\(model diverged\): every layer is one constant vector for all 24 items"),
    "x1e30": (_feats() * 1e30, r"\(model diverged\), layer 0: values up to .*e\+30 overflow the L2 normalisation in "
                               r"float32 in 24 of 24 rows"),
}


@pytest.mark.parametrize("case", CASES)
def test_alignment_refuses_features_unfit_to_score(tmp_path, case):
    bad, message = CASES[case]
    with pytest.raises(FeaturesError, match=message):
        _align(tmp_path, bad)


def test_svcca_names_the_file(tmp_path):
    with pytest.raises(FeaturesError, match=r"bad\.safetensors \(model diverged\)"):
        _align(tmp_path, _one_nan_row(), metric="svcca", cca_dim=4)


def test_what_is_fit_still_scores(tmp_path):
    """A constant first layer (a ViT's CLS at the embedding) is not a constant model; x1e30 fits float64."""
    x = _feats()
    x[:, 0, :] = 1.0
    _align(tmp_path, x)
    scores = _align(tmp_path, _feats(1) * 1e30, dtype="float64")["mutual_knn"]
    assert max(max(row) for row in scores["scores"]) == pytest.approx(1.0)


def test_in_memory_states_refuse_them_too():
    with pytest.raises(FeaturesError, match="NaN or inf in 1 of 24 rows"):
        layer_states("mutual_knn", _one_nan_row(), topk=3)
    with pytest.raises(FeaturesError, match="constant"):
        layer_states("cka", torch.ones(N, L, D))


def test_extraction_refuses_them_before_writing(tmp_path):
    from prh.extract import _check_before_save

    out = tmp_path / "m.safetensors"
    (tmp_path / "m.safetensors.partial").mkdir()
    with pytest.raises(FeaturesError, match=r"m\.safetensors \(model m\), layer 1: NaN or inf in 1 of 24 rows \(7\)"):
        _check_before_save(_one_nan_row(), out, {"model": "m"})
    assert not (tmp_path / "m.safetensors.partial").exists()  # the rerun extracts again, not the same batches
    _check_before_save(_feats(), out, {"model": "m"})


def test_prh_align_prints_one_line(tmp_path):
    save_features(tmp_path / "a.safetensors", _feats(1), {"model": "a"})
    save_features(tmp_path / "b.safetensors", _one_nan_row(), {"model": "b"})
    proc = subprocess.run([sys.executable, "-m", "prh.cli", "align", "--metric", "mutual_knn", "--topk", "3",
                           "--quantile", "0.95", "--x-names", "a", "--x-features", str(tmp_path / "a.safetensors"),
                           "--y-names", "b", "--y-features", str(tmp_path / "b.safetensors"),
                           "--out", str(tmp_path / "o.json")], capture_output=True, text=True)
    assert proc.returncode == 1 and "Traceback" not in proc.stderr, proc.stderr
    errors = [line for line in proc.stderr.splitlines() if line.strip() and "it/s]" not in line]  # progress bars aside, one line
    assert len(errors) == 1 and "b.safetensors (model b), layer 1" in errors[0], proc.stderr


def test_a_truncated_features_file_does_not_break_the_plan(tmp_path):
    """`snakemake -n` sizes an align job from the files' headers: a truncated file used to end the dry run in a
    92-line traceback; it counts 0 there, and the job itself names the file."""
    from prh.metrics.memory import align_memory_mb

    path = tmp_path / "cut.safetensors"
    save_features(path, _feats(), {"model": "cut"})
    path.write_bytes(path.read_bytes()[:20])
    assert align_memory_mb(x_features=[str(path)], y_features=[str(path)], metric="mutual_knn") > 0
    with pytest.raises(CorruptFileError, match="cut.safetensors"):
        alignment_tables(["mutual_knn"], x_names=["cut"], x_features=[str(path)], topk=3)


def test_svcca_names_the_file_whose_width_is_below_cca_dim(tmp_path):
    from prh.errors import UsageError

    with pytest.raises(UsageError, match=r"bad\.safetensors \(model diverged\): svcca keeps cca_dim = 10 directions"):
        _align(tmp_path, _feats(), metric="svcca")  # D = 8 features
