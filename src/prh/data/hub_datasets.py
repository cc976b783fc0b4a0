"""Materialise a Hugging Face dataset as a paired dataset under ``results/data/<name>/``.

The paper suite's data (PRH appendix C: WIT-1024, a 1000-image Places-365 validation
subset, CIFAR-10, DCI, the VTAB tasks capped at 10,000 items) is read with
``datasets.load_dataset(repo, revision=..., split=...)`` at a pinned revision and written
in the same data contract as the shapes world (the files below):

- ``images.npy``: N x S x S x 3 uint8; every image is resized (shorter side to S, bicubic)
  and centre-cropped to S x S, so one array holds the whole set. The reference
  (platonic-rep ``extract_features.py``) applies each timm model's own transform to the
  original image; the equivalent here is S = the largest side the suite's models resize to
  (``floor(input_size / crop_pct)``: 518 for DINOv2), so a model needing less gets a
  downsample and none gets an upsample of pixels thrown away (``prh.extract`` warns otherwise);
- ``captions.jsonl``: one record per item: ``id`` (0..N-1), ``text`` (the caption; the first
  one when the column holds a list; the class name when the set has no captions),
  ``texts`` (all captions, when the column holds a list), ``source_index`` (row in the split);
- ``labels.npy``: int64 class labels (-1 when the set has no label column), so every hub
  dataset folder has the same files;
- ``meta.json``: repo, revision, split, count, the subsample's seed, sha256 of images.npy.

A split larger than ``n`` is subsampled with ``numpy.random.default_rng(seed)``: the same
arguments always select the same rows (kept in split order). Rows are decoded one at a time
into a preallocated array, so memory stays at one copy of the output.

A split the hub does not have is *carved* from one it has (``carve``): the source split's rows
are permuted once by ``numpy.random.default_rng(carve["seed"])`` and cut into consecutive
blocks, one per named part, in sorted part-name order, of sizes ``floor(N * cumulative
fraction)`` differences (``carve_indices``). Two datasets that name the same source, seed and
parts and ask for different parts get disjoint rows, whatever order their params list the
parts in; the ``n`` cap then subsamples within the part. ``data_files`` (split -> glob) makes
``load_dataset`` read only the matching files, for a repo whose default reading picks the wrong
ones (a webdataset repo whose only tar shard is outnumbered by text files).

``repo`` may also be a local folder (``./data/dci``) for sets that are not on the hub; it is
loaded by ``load_dataset(folder)`` (imagefolder layout, captions in ``metadata.jsonl``).

Offline: with ``HF_DATASETS_OFFLINE=1`` / ``HF_HUB_OFFLINE=1`` or no network, a dataset
missing from the cache raises one ``DatasetNotAvailableError`` naming the repo and revision
and the two remedies (download it into the cache; or ``dvc pull results/data``).

    prh fetch-dataset --repo minhuh/prh --revision wit_1024 --split train \\
        --image-column image --text-column text --n 1024 --out results/data/wit_1024
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path

import numpy as np

from prh.errors import DatasetNotAvailableError, UsageError
from prh.io import json_object, none_or, sha256_file, write_json, write_jsonl, write_npy

__all__ = ["carve_indices", "is_local_repo", "materialize_hub_dataset", "subsample_indices", "square_rgb"]


def subsample_indices(total: int, n: int | None, seed: int) -> np.ndarray:
    """Rows kept from a split of ``total`` rows: all of them when ``n`` is None or >= total,
    else ``n`` rows drawn without replacement by ``default_rng(seed)``, in increasing order.

    Parameters
    ----------
    total : number of rows in the split.
    n : cap on the count (None: no cap).
    seed : seed of the draw.

    Returns
    -------
    int64 array of row indices.
    """
    if n is not None and n < 1:
        raise ValueError(f"n={n} must be a positive count or None (all rows)")
    if n is None or n >= total:
        return np.arange(total, dtype=np.int64)
    rng = np.random.default_rng(seed)
    return np.sort(rng.choice(total, size=n, replace=False)).astype(np.int64)


def carve_indices(total: int, *, parts: dict[str, float], part: str, seed: int) -> np.ndarray:
    """Rows of a source split of ``total`` rows that make up part ``part`` of a seeded partition.

    With the part names sorted, fractions f_1..f_K (sum <= 1) and cumulative sums
    c_k = f_1 + ... + f_k (c_0 = 0), part k is ``perm[floor(total * c_{k-1}) : floor(total * c_k)]``
    where ``perm = default_rng(seed).permutation(total)``. Parts are disjoint by construction
    and the same arguments always give the same rows (returned in increasing order).

    Parameters
    ----------
    total : number of rows in the source split.
    parts : part name (the split it becomes, e.g. "train", "test") -> fraction of the source, in (0, 1].
    part : the part wanted; one of ``parts``.
    seed : seed of the permutation.

    Returns
    -------
    int64 array of row indices into the source split.
    """
    if not parts:
        raise ValueError("parts is empty; give each carved split a fraction, e.g. {train: 0.5, test: 0.5}")
    bad = {k: v for k, v in parts.items() if not isinstance(v, (int, float)) or not 0 < v <= 1}
    if bad:
        raise ValueError(f"parts {bad}: every fraction must be a number in (0, 1]")
    if sum(parts.values()) > 1 + 1e-9:
        raise ValueError(f"parts {parts} sum to {sum(parts.values()):g} > 1; the carved splits would overlap")
    if part not in parts:
        raise ValueError(f"part={part!r} is not one of the carve's parts {sorted(parts)}; set `split` to one of them")
    if total < 0:
        raise ValueError(f"total={total} must be >= 0")
    names = sorted(parts)
    cuts = np.floor(total * np.cumsum([parts[k] for k in names]) + 1e-9).astype(np.int64)
    k = names.index(part)
    lo, hi = (0 if k == 0 else int(cuts[k - 1])), int(min(cuts[k], total))
    perm = np.random.default_rng(seed).permutation(total)
    return np.sort(perm[lo:hi]).astype(np.int64)


def square_rgb(image, size: int) -> np.ndarray:
    """An image (PIL, or an H x W [x C] array) as a size x size x 3 uint8 array:
    RGB, shorter side resized to ``size`` (PIL bicubic), then centre-cropped, in the order and with
    the rounding of torchvision's ``Resize(size)`` + ``CenterCrop(size)`` (long side
    ``int(size * long / short)``, offset ``int(round((long' - size) / 2))``): a model whose timm
    transform resizes to ``size`` gets exactly what the reference feeds it from the original."""
    from PIL import Image

    if isinstance(image, np.ndarray):
        image = Image.fromarray(image)
    if not isinstance(image, Image.Image):
        raise ValueError(f"image of type {type(image).__name__} is not a PIL image or array; check image_column")
    image = image.convert("RGB")
    w, h = image.size
    if (w, h) != (size, size):
        nw, nh = (size, int(size * h / w)) if w <= h else (int(size * w / h), size)
        if (nw, nh) != (w, h):
            image = image.resize((nw, nh), Image.BICUBIC)
        left, top = int(round((nw - size) / 2.0)), int(round((nh - size) / 2.0))
        image = image.crop((left, top, left + size, top + size))
    return np.asarray(image, dtype=np.uint8)


def is_local_repo(repo: str) -> bool:
    # A hub id is exactly "owner/name"; anything path-like is a local folder.
    return repo.startswith((".", "/", "~")) or repo.count("/") != 1 or Path(repo).exists()


def _unavailable(repo: str, revision: str | None, split: str, cause: BaseException) -> DatasetNotAvailableError:
    rev = revision or "main"
    why = f"{type(cause).__name__}: {' '.join(str(cause).split())}"[:300]
    return DatasetNotAvailableError(
        f"dataset {repo!r} (revision {rev!r}, split {split!r}) is not in the Hugging Face datasets "
        "cache and cannot be downloaded (HF_DATASETS_OFFLINE/HF_HUB_OFFLINE is set or there is no "
        "network). Either download it into the cache on a machine with network, with the same "
        f"HF_HOME: `python -c \"import datasets; datasets.load_dataset('{repo}', revision='{rev}', "
        f"split='{split}')\"`, or fetch the materialised data computed elsewhere: `dvc pull results/data`. "
        f"(If the network is up, check that the repo and revision exist; the loader said: {why})"
    )


def _load_split(repo: str, *, revision: str | None, config: str | None, split: str, data_files=None):
    """``load_dataset`` with every 'not cached, not reachable' failure turned into one error."""
    import datasets
    from huggingface_hub.errors import LocalEntryNotFoundError

    if is_local_repo(repo):
        folder = Path(repo).expanduser()
        if not folder.is_dir():
            raise DatasetNotAvailableError(
                f"dataset folder {repo!r} does not exist. Prepare it as an imagefolder (images plus "
                "metadata.jsonl with file_name and the caption column), as params.yaml's comment on "
                "this dataset says, or fetch the materialised data: `dvc pull results/data`."
            )
        return datasets.load_dataset(str(folder), name=config, split=split, data_files=data_files)
    try:
        return datasets.load_dataset(repo, name=config, revision=revision, split=split, data_files=data_files)
    except (ConnectionError, FileNotFoundError, LocalEntryNotFoundError) as e:
        raise _unavailable(repo, revision, split, e) from e
    except ValueError as e:
        # Offline, a prepared copy of the repo exists but not for this config / data_files ("Couldn't find
        # cache for ... for config ..."): datasets hashes data_files differently online and offline
        # (huggingface/datasets#6837), so a copy prepared online with data_files is not found offline.
        if "Couldn't find cache" not in str(e):
            raise
        raise _unavailable(repo, revision, split, e) from e


def materialize_hub_dataset(
    out_dir: str | Path,
    *,
    repo: str,
    revision: str | None = None,
    split: str = "train",
    image_column: str = "image",
    text_column: str | None = None,
    label_column: str | None = None,
    n: int | None = None,
    seed: int = 0,
    image_size: int = 224,
    config: str | None = None,
    carve: dict | None = None,
    data_files: dict[str, str] | None = None,
) -> dict:
    """Write ``images.npy``, ``captions.jsonl``, ``labels.npy`` and ``meta.json`` to ``out_dir``.

    Parameters
    ----------
    out_dir : destination folder (``results/data/<name>``).
    repo, revision, config, split : what ``datasets.load_dataset`` reads; ``repo`` may be a local folder.
    image_column : column of images.
    text_column : column of captions (a string or a list of strings); None: the class name
        (or the label as text) when ``label_column`` is set, else "".
    label_column : column of integer class labels, written to ``labels.npy``; None: labels are -1.
    n : cap on the number of items (seeded subsample of a larger split); None: all rows.
    seed : seed of the subsample.
    image_size : side S of the square output images.
    carve : ``{"from": source split, "parts": {split: fraction}, "seed": int}``: ``split`` is carved
        from the source split (``carve_indices``) instead of read from the hub; None: read ``split``.
    data_files : split -> glob of the repo's files to read (``load_dataset(data_files=...)``); None: all.

    Returns
    -------
    The meta dict written to ``meta.json``.
    """
    from tqdm import tqdm

    if image_size < 8:
        raise UsageError(f"image_size={image_size} is too small; use the model input size, e.g. 224")
    if carve is not None and set(carve) != {"from", "parts", "seed"}:
        raise ValueError(f"carve={carve!r} must have exactly the keys from, parts, seed (datasets.schema.yaml)")
    if carve is not None:
        carve_indices(0, parts=carve["parts"], part=split, seed=carve["seed"])  # bad parts fail before any download
    source_split = carve["from"] if carve else split
    ds = _load_split(repo, revision=revision, config=config, split=source_split, data_files=data_files)
    wanted = [c for c in (image_column, text_column, label_column) if c is not None]
    missing = [c for c in wanted if c not in ds.column_names]
    if missing:
        raise ValueError(
            f"columns {missing} are not in {repo} (split {split!r}); its columns are {ds.column_names}: "
            "set image_column / text_column / label_column in params.yaml to one of them"
        )
    label_names = getattr(ds.features.get(label_column), "names", None) if label_column else None
    pool = (carve_indices(len(ds), parts=carve["parts"], part=split, seed=carve["seed"]) if carve
            else np.arange(len(ds), dtype=np.int64))
    idx = pool[subsample_indices(len(pool), n, seed)]
    rows = ds.select_columns(wanted).select(idx.tolist())

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    # decoded straight into a file (memory-mapped), renamed onto images.npy when complete: memory does
    # not grow with N x S^2 (10,000 images at 518 px are 8 GB); a killed job leaves only the hidden file
    partial = out / ".images.npy.partial"
    images = np.lib.format.open_memmap(partial, mode="w+", dtype=np.uint8, shape=(len(idx), image_size, image_size, 3))
    labels = np.full(len(idx), -1, dtype=np.int64)
    records, sides = [], []
    for i, row in enumerate(tqdm(rows, total=len(idx), desc=f"{repo}:{split}", unit="img")):
        image = row[image_column]
        # shorter side of the original: meta records whether storing at image_size dropped pixels
        sides.append(min(image.shape[:2]) if isinstance(image, np.ndarray) else min(getattr(image, "size", (0, 0))))
        images[i] = square_rgb(image, image_size)
        rec = {"id": i, "source_index": int(idx[i])}
        if label_column is not None:
            labels[i] = int(row[label_column])
        if text_column is not None:
            value = row[text_column]
            if isinstance(value, (list, tuple)):
                rec["text"], rec["texts"] = str(value[0]), [str(v) for v in value]
            else:
                rec["text"] = str(value)
        elif label_column is not None:
            rec["text"] = label_names[labels[i]] if label_names else str(labels[i])
        else:
            rec["text"] = ""
        records.append(rec)

    images.flush()
    del images
    os.replace(partial, out / "images.npy")
    write_jsonl(out / "captions.jsonl", records)
    write_npy(out / "labels.npy", labels)
    meta = {
        "source": "hub",
        "repo": repo,
        "revision": revision,
        "config": config,
        "split": split,
        "count": int(len(idx)),
        "split_size": int(len(pool)),
        "carve": carve,
        "source_split_size": int(len(ds)),
        "data_files": data_files,
        "seed": seed,
        "image_size": image_size,
        # the originals' shorter sides (min, max): extraction warns when a model resizes above
        # image_size although the originals had more pixels (prh.extract)
        "source_min_side": int(min(sides, default=0)),
        "source_max_side": int(max(sides, default=0)),
        "columns": {"image": image_column, "text": text_column, "label": label_column},
        "label_names": label_names,
        "sha256": sha256_file(out / "images.npy"),
    }
    # meta.json last: its presence marks a complete dataset folder.
    write_json(out / "meta.json", meta)
    return meta


def hub_entry_defaults() -> dict:
    """The defaults of a `kind: hub` entry of params.yaml's datasets (workflow/schemas/datasets.schema.yaml): the one
    home of fetch-dataset's defaults too."""
    from prh.config import SCHEMA, load_schema

    dataset = load_schema(SCHEMA.parent / "datasets.schema.yaml")["$defs"]["dataset"]
    hub = next(c["then"]["properties"] for c in dataset["allOf"] if c["if"]["properties"]["kind"].get("const") == "hub")
    return {key: spec["default"] for key, spec in hub.items() if "default" in spec}


def main(argv: list[str] | None = None) -> None:
    d = hub_entry_defaults()
    p = argparse.ArgumentParser(prog="prh fetch-dataset", description=__doc__.splitlines()[0])
    p.add_argument("--repo", required=True, help="hub dataset repo (owner/name) or a local folder")
    p.add_argument("--revision", type=none_or(str), default=None, help="branch, tag or commit SHA")
    p.add_argument("--config", type=none_or(str), default=None, help="dataset config (subset) name")
    p.add_argument("--split", default=d["split"])
    p.add_argument("--image-column", default=d["image_column"])
    p.add_argument("--text-column", type=none_or(str), default=None)
    p.add_argument("--label-column", type=none_or(str), default=None)
    p.add_argument("--n", type=none_or(int), default=None, help="cap on the count (seeded subsample)")
    p.add_argument("--seed", type=int, default=d["seed"])
    p.add_argument("--image-size", type=int, default=d["image_size"])
    p.add_argument("--carve", type=none_or(json_object), default=None,
                   help='carve the split from another: {"from": "test", "parts": {"train": 0.5, "test": 0.5}, "seed": 0}')
    p.add_argument("--data-files", type=none_or(json_object), default=None,
                   help='split -> glob of the repo files to read, e.g. {"test": "test/*.tar"}')
    p.add_argument("--out", required=True, help="output folder, results/data/<name>")
    a = p.parse_args(argv)
    meta = materialize_hub_dataset(
        a.out, repo=a.repo, revision=a.revision, config=a.config, split=a.split,
        image_column=a.image_column, text_column=a.text_column, label_column=a.label_column,
        n=a.n, seed=a.seed, image_size=a.image_size, carve=a.carve, data_files=a.data_files,
    )
    print(f"{a.out}: {meta['count']} items of {meta['split_size']} from {a.repo}@{a.revision}")
