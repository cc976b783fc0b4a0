"""Language-modelling score of PRH Figure 3's x-axis: ``1 - bits-per-byte`` on OpenWebText.

The paper measures each LLM's competence over 4M tokens of OpenWebText (Gokaslan &
Cohen 2019) as ``1 - bpb``, where bits-per-byte normalises the cross-entropy by the UTF-8
bytes of the text, so models with different tokenizers are compared on the same footing:

    bpb = sum_pieces sum_j -log2 p(x_j | x_<j)  /  sum_pieces bytes_utf8(piece)

Two steps, so every model is scored on exactly the same text:

1. ``sample_openwebtext`` (``prh sample-lm-text``, once): stream the corpus at a pinned revision
   through a seeded shuffle buffer, cut each document at whitespace into pieces of at most
   ``chunk_chars`` characters (every piece fits every model's context), and keep pieces
   until ``n_bytes`` bytes are collected; written to ``texts.jsonl`` + ``meta.json``.
2. ``lm_score`` (``prh score-lm``, one job per model): ``prh.features.bits_per_byte`` per
   piece, aggregated byte-weighted (total bits / total bytes, the formula above), written
   to ``results/experiments/lm_score/<model>.json``. Resumable via the batch checkpoints
   of ``bits_per_byte``.

    prh sample-lm-text --repo Skylion007/openwebtext --revision main --n-bytes 16000000 \\
        --out results/data/openwebtext_sample
    prh score-lm --model bigscience/bloomz-560m --revision main --name bloomz-560m \\
        --sample results/data/openwebtext_sample --out results/experiments/lm_score/bloomz-560m.json

3. ``merge_lm_scores`` (``prh merge-lm-scores``): the per-model JSONs as one
   ``{"models": {name: {"bpb", "lm_score", "n_params"}}}`` file, the language input of
   ``prh run-convergence`` (same shape as ``results/experiments/zoo/language.json``).

    prh merge-lm-scores --scores results/experiments/lm_score/*.json \\
        --out results/experiments/lm_score/language.json
"""

from __future__ import annotations

import argparse
import re
import shutil
from pathlib import Path

import numpy as np

from prh.data.hub_datasets import is_local_repo
from prh.errors import DatasetNotAvailableError, UsageError
from prh.io import read_json, read_jsonl, sha256_file, write_json, write_jsonl

__all__ = ["SAMPLE_CONFIG", "SCORE_CONFIG", "chunk_text", "sample_openwebtext", "lm_score", "merge_lm_scores"]

# the params.yaml keys `prh sample-lm-text` and `prh score-lm` read (their rules' one --config argument, prh.slices)
SAMPLE_CONFIG = {"paper.lm_score": ("repo", "revision", "split", "text_column", "n_bytes", "chunk_chars",
                                    "shuffle_buffer", "seed")}
SCORE_CONFIG = {"paper.lm_score": ("batch_size",)}

_SPACE = re.compile(r"\s")


def chunk_text(text: str, max_chars: int) -> list[str]:
    """Cut ``text`` at whitespace into stripped, non-empty pieces of at most ``max_chars``
    characters (a word longer than that is cut inside)."""
    if max_chars < 1:
        raise ValueError(f"max_chars={max_chars} must be >= 1")
    pieces, text = [], text.strip()
    while len(text) > max_chars:
        window = text[: max_chars + 1]
        cut = max((m.start() for m in _SPACE.finditer(window)), default=0)
        cut = cut if cut > 0 else max_chars
        pieces.append(text[:cut].strip())
        text = text[cut:].strip()
    if text:
        pieces.append(text)
    return [p for p in pieces if p]


def sample_openwebtext(
    out_dir: str | Path,
    *,
    repo: str = "Skylion007/openwebtext",
    revision: str | None = "main",
    split: str = "train",
    text_column: str = "text",
    n_bytes: int = 16_000_000,
    chunk_chars: int = 2000,
    shuffle_buffer: int = 10_000,
    seed: int = 0,
) -> dict:
    """Write a seeded sample of about ``n_bytes`` UTF-8 bytes of the corpus to ``out_dir``.

    Parameters
    ----------
    out_dir : destination folder; gets ``texts.jsonl`` (``id``, ``text``, ``doc``) and ``meta.json``.
    repo, revision, split : the corpus (a hub dataset, or a local folder of text files).
    text_column : column of document text.
    n_bytes : stop once the pieces hold at least this many bytes.
    chunk_chars : maximum characters per piece.
    shuffle_buffer, seed : ``IterableDataset.shuffle(seed=seed, buffer_size=shuffle_buffer)``.

    Returns
    -------
    The meta dict written to ``meta.json``.
    """
    import datasets
    from tqdm import tqdm

    if n_bytes < 1:
        raise UsageError(f"n_bytes={n_bytes} must be >= 1 (about 4 bytes per token: 16e6 for 4M tokens)")
    records, total, n_docs = [], 0, 0
    bar = tqdm(total=n_bytes, unit="B", unit_scale=True, desc=f"sample {repo}")
    try:
        if is_local_repo(repo):
            if not Path(repo).expanduser().is_dir():
                raise FileNotFoundError(f"no folder {repo}")
            stream = datasets.load_dataset(str(Path(repo).expanduser()), split=split, streaming=True)
        else:
            stream = datasets.load_dataset(repo, revision=revision, split=split, streaming=True)
        for doc in stream.shuffle(seed=seed, buffer_size=shuffle_buffer):
            for piece in chunk_text(str(doc[text_column]), chunk_chars):
                size = len(piece.encode("utf-8"))
                records.append({"id": len(records), "text": piece, "doc": n_docs})
                total += size
                bar.update(size)
                if total >= n_bytes:
                    break
            n_docs += 1
            if total >= n_bytes:
                break
    except RuntimeError as e:
        if "scripts are no longer supported" not in str(e):
            raise
        raise DatasetNotAvailableError(
            f"corpus {repo!r} (revision {revision!r}) is a script-based dataset, which the `datasets` library "
            f"installed here no longer runs ({e}). Read the hub's parquet conversion of it instead: set "
            "`paper.lm_score.revision: refs/convert/parquet` in params.yaml (the default; then "
            "`prh pin-revisions params.yaml`), or point `paper.lm_score.repo` at a parquet copy of the corpus"
        ) from None
    except (ConnectionError, FileNotFoundError) as e:
        raise DatasetNotAvailableError(
            f"corpus {repo!r} (revision {revision!r}, split {split!r}) cannot be streamed: {e}. "
            "Run `prh sample-lm-text` on a machine with network (streaming reads the hub directly), "
            "or fetch the sample made elsewhere: `dvc pull results/data`."
        ) from e
    finally:
        bar.close()
    if total < n_bytes:
        raise ValueError(f"the corpus {repo} holds only {total} bytes of text; lower n_bytes={n_bytes}")

    out = Path(out_dir)
    write_jsonl(out / "texts.jsonl", records)
    meta = {
        "source": "hub-stream", "repo": repo, "revision": revision, "split": split, "text_column": text_column,
        "seed": seed, "shuffle_buffer": shuffle_buffer, "chunk_chars": chunk_chars,
        "n_bytes": total, "n_texts": len(records), "n_docs": n_docs,
        "sha256": sha256_file(out / "texts.jsonl"),
    }
    write_json(out / "meta.json", meta)
    return meta


def lm_score(
    sample_dir: str | Path,
    out: str | Path,
    *,
    model: str,
    revision: str | None = None,
    name: str | None = None,
    batch_size: int = 8,
    device: str = "auto",
    dtype: str = "auto",
    device_map: str | None = None,
    load_in_4bit: bool = False,
    progress: bool = True,
) -> dict:
    """Score one causal LM on the sample: ``lm_score = 1 - total bits / total bytes``.

    Parameters
    ----------
    sample_dir : folder written by ``sample_openwebtext``.
    out : the result JSON (``results/experiments/lm_score/<model>.json``).
    model, revision : what ``prh.models.loaders.load_language_model`` loads (hub id or local dir).
    name : model name recorded in the result (default: the last part of ``model``).
    batch_size, device, dtype, device_map, load_in_4bit : as in ``prh extract-language``.

    Returns
    -------
    The result dict: ``bpb``, ``lm_score``, byte and text counts, model and sample provenance.
    """
    from prh.evaluation.likelihood import bits_per_byte
    from prh.models import loaders

    sample_dir, out = Path(sample_dir), Path(out)
    if not (sample_dir / "texts.jsonl").exists():
        raise UsageError(f"sample_dir={str(sample_dir)!r} has no texts.jsonl; run `prh sample-lm-text` first")
    texts = [r["text"] for r in read_jsonl(sample_dir / "texts.jsonl")]
    sample_meta = read_json(sample_dir / "meta.json") if (sample_dir / "meta.json").exists() else {}
    net, tok, dev, dt = loaders.load_causal_lm(model, revision=revision, device=device, dtype=dtype,
                                               device_map=device_map, load_in_4bit=load_in_4bit,
                                               needs="bits-per-byte needs next-token probabilities")
    partial = Path(str(out) + ".partial")
    bpb = bits_per_byte(net, tok, texts, batch_size=batch_size, device=dev, dtype=dt,
                           checkpoint_dir=partial, progress=progress)
    nbytes = np.array([len(t.encode("utf-8")) for t in texts], dtype=np.float64)
    total_bpb = float((bpb * nbytes).sum() / nbytes.sum())
    result = {
        "model": name or str(model).rstrip("/").split("/")[-1],
        "source": str(model),
        "revision": revision,
        "bpb": total_bpb,
        "lm_score": 1.0 - total_bpb,
        "mean_piece_bpb": float(bpb.mean()),
        "n_texts": len(texts),
        "n_bytes": int(nbytes.sum()),
        "n_params": loaders.count_params(net),
        "dtype": str(dt).removeprefix("torch."),
        "sample": {k: sample_meta.get(k) for k in ("repo", "revision", "split", "seed", "sha256")},
    }
    write_json(out, result)
    if partial.exists():
        shutil.rmtree(partial)
    del net
    loaders.free_model_memory()
    return result


def merge_lm_scores(paths: list[str | Path], out: str | Path, *, n_params: dict[str, int] | None = None) -> dict:
    """Gather per-model ``lm_score`` JSONs into one ``{"models": {name: ...}}`` file.

    Parameters
    ----------
    paths : JSONs written by ``lm_score`` (keys ``model``, ``bpb``, ``lm_score``, ``n_params``, ``sample``).
    out : the merged JSON.
    n_params : optional ``{name: parameter count}`` that overrides the counts in the files.

    Per model: ``bpb`` (bits per UTF-8 byte; ``1 - lm_score`` when a file holds only the
    score), ``lm_score = 1 - bpb``, ``n_params``. Every file must come from the same text
    sample (equal ``sample.sha256``), or the scores are not comparable.

    Returns
    -------
    ``{"models": {name: {"bpb", "lm_score", "n_params"}}, "source": "lm_score",
    "unit": ..., "sample": the shared sample provenance, "files": {name: path}}``, written to ``out``.
    """
    if not paths:
        raise ValueError("paths is empty; give the lm_score JSONs to merge (results/experiments/lm_score/*.json)")
    models, files, samples = {}, {}, {}
    for path in paths:
        r = read_json(path)
        name = r.get("model") or Path(path).stem
        if name in models:
            raise ValueError(f"model {name!r} is in both {files[name]} and {path}; merge each model once")
        if r.get("bpb") is not None:
            bpb = float(r["bpb"])
        elif r.get("lm_score") is not None:
            bpb = 1.0 - float(r["lm_score"])
        else:
            raise ValueError(f"{path} has neither 'bpb' nor 'lm_score'; pass files written by `prh score-lm`")
        count = (n_params or {}).get(name, r.get("n_params"))
        models[name] = {"bpb": bpb, "lm_score": 1.0 - bpb, "n_params": None if count is None else int(count)}
        files[name], samples[name] = str(path), r.get("sample") or {}
    shas = {s.get("sha256") for s in samples.values()}
    if len(shas) > 1:
        raise ValueError(f"the files were scored on different text samples (sha256 {sorted(map(str, shas))}); "
                         "score every model on the same `prh sample-lm-text` folder")
    unknown = sorted(set(n_params or {}) - set(models))
    if unknown:
        raise ValueError(f"n_params names {unknown}, which no file scores; check the model names")
    result = {"models": models, "source": "lm_score", "unit": "bits per UTF-8 byte",
              "sample": next(iter(samples.values())), "files": files}
    write_json(out, result)
    return result


def merge_main(argv: list[str] | None = None) -> None:
    from prh.io import json_object

    p = argparse.ArgumentParser(prog="prh merge-lm-scores", description="merge per-model lm_score JSONs")
    p.add_argument("--scores", nargs="+", required=True, help="JSONs written by `prh score-lm`")
    p.add_argument("--out", required=True, help="merged JSON: {models: {name: {bpb, lm_score, n_params}}}")
    p.add_argument("--n-params", type=json_object, default=None,
                   help="optional JSON {model: parameter count} overriding the counts in the files")
    a = p.parse_args(argv)
    r = merge_lm_scores(a.scores, a.out, n_params=a.n_params)
    print(f"{a.out}: {len(r['models'])} models")


def sample_main(argv: list[str] | None = None) -> None:
    from prh.slices import add_slice

    p = argparse.ArgumentParser(prog="prh sample-lm-text", description="seeded OpenWebText sample for the LM score")
    p.add_argument("--out", required=True, help="output folder, e.g. results/data/openwebtext_sample")
    settings = add_slice(p, SAMPLE_CONFIG)  # the hub dataset, its column, how many bytes, chunking, shuffle, seed
    a = p.parse_args(argv)
    meta = sample_openwebtext(a.out, **settings(a)["paper.lm_score"])
    print(f"{a.out}: {meta['n_texts']} pieces, {meta['n_bytes']} bytes from {meta['n_docs']} documents")


def main(argv: list[str] | None = None) -> None:
    from prh.device import DTYPES
    from prh.slices import add_slice

    p = argparse.ArgumentParser(prog="prh score-lm", description="1 - bits-per-byte of a causal LM (PRH Fig. 3)")
    p.add_argument("--model", required=True, help="hub repo id or save_pretrained dir")
    p.add_argument("--revision", default=None)
    p.add_argument("--name", default=None, help="model name recorded in the result")
    p.add_argument("--sample", required=True, help="folder written by `prh sample-lm-text`")
    p.add_argument("--out", required=True, help="results/experiments/lm_score/<model>.json")
    p.add_argument("--device", default="auto", choices=["auto", "cuda", "cpu"])
    p.add_argument("--dtype", default="auto", choices=["auto", *DTYPES])
    p.add_argument("--device-map", default=None, help="'auto' to spread a large model over devices")
    p.add_argument("--load-in-4bit", action="store_true")
    p.add_argument("--no-progress", action="store_true")
    settings = add_slice(p, SCORE_CONFIG)
    a = p.parse_args(argv)
    r = lm_score(a.sample, a.out, model=a.model, revision=a.revision, name=a.name, **settings(a)["paper.lm_score"],
                 device=a.device, dtype=a.dtype, device_map=a.device_map, load_in_4bit=a.load_in_4bit,
                 progress=not a.no_progress)
    print(f"{r['model']}: bpb {r['bpb']:.4f}, lm_score {r['lm_score']:.4f} over {r['n_bytes']} bytes")
