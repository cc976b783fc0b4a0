"""Reading and writing the workflow's artifacts (the files each stage hands the next).

Every writer writes to a temporary file in the destination folder and renames it
into place, so a killed job never leaves a half-written file that looks complete.
Only JSON, JSON lines, ``.npy`` and safetensors are written: no pickles.
"""

from __future__ import annotations

import argparse
import contextlib
import errno
import hashlib
import json
import math
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any, Iterable, Iterator

import numpy as np

from prh.errors import CorruptFileError

__all__ = ["read_alignment", "read_model_config", "check_model_files", "load_model_weights", "MODEL_REMEDY",
           "atomic_path", "check_output", "atomic_dir", "sha256_file", "write_json", "read_json", "write_jsonl",
           "read_jsonl", "write_npy", "save_features", "load_features", "features_meta_path", "read_features_meta",
           "open_features", "features_layout", "read_features_layer", "json_object", "none_or", "add_path_options",
           "named_paths"]
# features are intermediates, not DVC outs (dvc.yaml): `dvc checkout` cannot restore them
FEATURES_REMEDY = ("delete it and rerun `snakemake {path}` (features are not versioned by DVC, so `dvc checkout` "
                   "cannot restore them)")


_UMASK = os.umask(0)
os.umask(_UMASK)


@contextlib.contextmanager
def atomic_path(path: str | os.PathLike) -> Iterator[Path]:
    """Yield a temporary path beside ``path``; rename it onto ``path`` on success.

    On an exception the temporary file is removed and ``path`` is left untouched.
    """
    path = check_output(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    os.close(fd)
    tmp = Path(tmp)
    try:
        yield tmp
        os.chmod(tmp, 0o666 & ~_UMASK)  # mkstemp makes 0600; outputs are shared like any file
        os.replace(tmp, path)
    finally:
        if tmp.exists():
            tmp.unlink()


def check_output(path: str | os.PathLike) -> Path:
    """An output file's path; a directory is refused (``IsADirectoryError``, one line from ``prh``): ``atomic_path``
    checks it, and a command whose work is long checks it up front, before the work."""
    path = Path(path)
    if path.is_dir():  # else os.replace names the temporary file, not the output (`prh align --out <dir>`)
        raise IsADirectoryError(errno.EISDIR, "the output is a directory; give a file path", str(path))
    return path


@contextlib.contextmanager
def atomic_dir(out: str | os.PathLike) -> Iterator[Path]:
    """Yield a temporary directory beside ``out``; on success replace ``out`` with it.

    A killed job leaves a hidden temporary directory, never a half-written checkpoint.
    """
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}.", dir=out.parent))
    os.chmod(tmp, 0o777 & ~_UMASK)  # mkdtemp makes it private; outputs are for everyone to read
    try:
        yield tmp
        if out.exists():
            shutil.rmtree(out)
        os.replace(tmp, out)
    finally:
        if tmp.exists():
            shutil.rmtree(tmp)


def sha256_file(path: str | os.PathLike, *, chunk: int = 1 << 20) -> str:
    """Hex SHA-256 of a file, read in chunks (for meta.json checksums and pinned weights)."""
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        while block := f.read(chunk):
            digest.update(block)
    return digest.hexdigest()


def _to_jsonable(obj: Any) -> Any:
    if isinstance(obj, np.generic):
        return obj.item()
    if isinstance(obj, np.ndarray):
        return obj.tolist()
    if isinstance(obj, Path):
        return str(obj)
    raise TypeError(f"cannot write {type(obj).__name__} to JSON")


def _strict(obj: Any) -> Any:
    """NaN and infinities become ``null``: they are not JSON, and strict readers (DVC, browsers) refuse them."""
    if isinstance(obj, float):
        return obj if math.isfinite(obj) else None
    if isinstance(obj, (np.ndarray, np.generic)):
        return _strict(obj.tolist())
    if isinstance(obj, dict):
        return {k: _strict(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_strict(v) for v in obj]
    return obj


def write_json(path: str | os.PathLike, obj: Any) -> None:
    """Write ``obj`` as indented strict JSON, atomically.

    NumPy scalars and arrays are converted; NaN and infinities are written as
    ``null`` (a value that is undefined or was never reached).
    """
    with atomic_path(path) as tmp:
        tmp.write_text(json.dumps(_strict(obj), indent=2, default=_to_jsonable, allow_nan=False) + "\n")


def _shape_problem(value: Any, keys, *, found: str | None = None) -> str | None:
    """What keeps ``value`` (or what was ``found`` instead) from being a JSON object holding each of ``keys``."""
    want = f"a JSON object with {', '.join(keys)}" if keys else "a JSON object"
    if found or not isinstance(value, dict):
        return f"it is {found or json.dumps(value)[:40]}, not {want}"
    missing = [k for k in keys if k not in value]
    return f"it has no {', '.join(missing)} ({want})" if missing else None


def read_json(path: str | os.PathLike, *, keys=None, what: str = "JSON file", remedy: str | None = None) -> Any:
    """Parse a JSON file; a truncated or garbled one raises ``CorruptFileError`` naming it (``what`` it is, and
    ``remedy``). With ``keys`` (``()``: any), a file that is not a JSON object holding each of them raises it too,
    saying what was expected, instead of a ``KeyError`` or ``AttributeError`` deep in the command."""
    try:
        value = json.loads(Path(path).read_text())
        if keys is not None and (problem := _shape_problem(value, keys)):
            raise ValueError(problem)
    except ValueError as err:  # JSONDecodeError and UnicodeDecodeError among them
        raise CorruptFileError(path, what, err, remedy=remedy) from err
    return value


def read_alignment(path: str | os.PathLike) -> dict:
    """An alignment table (``prh align``: ``x_names``, ``y_names``, ``scores`` of len(x) rows of len(y)); a file of
    another shape raises ``CorruptFileError`` naming what is missing, instead of a ``KeyError`` deep in a study."""
    table = read_json(path)
    problem = None
    if not isinstance(table, dict) or any(k not in table for k in ("x_names", "y_names", "scores")):
        have = sorted(table) if isinstance(table, dict) else type(table).__name__
        problem = f"it has {have}, not x_names, y_names and scores"
    elif len(table["scores"]) != len(table["x_names"]) or any(
            not isinstance(row, list) or len(row) != len(table["y_names"]) for row in table["scores"]):
        problem = f"scores is not {len(table['x_names'])} rows of {len(table['y_names'])} (x_names by y_names)"
    if problem:
        raise CorruptFileError(path, "alignment table", ValueError(problem),
                               remedy=f"delete it and rerun `snakemake {path}` (`prh align` writes it), or restore it "
                                      f"with `dvc checkout {path}` (or `make pull`)")
    return table


MODEL_REMEDY = ("delete {dir} and rerun snakemake (the rule that wrote it builds it again), or restore it with "
                "`dvc checkout results/models` (or `make pull`)")


def read_model_config(path: str | os.PathLike) -> dict:
    """A checkpoint's ``config.json``; truncated or not a mapping: ``CorruptFileError`` with the models' remedy."""
    return read_json(path, keys=(), what="checkpoint config", remedy=MODEL_REMEDY.format(dir=Path(path).parent))


def check_model_files(model_dir: str | os.PathLike) -> Path:
    """A checkpoint folder whose ``config.json`` parses and whose ``model.safetensors`` header (when there is one)
    reads: loaders that parse them inside a library (transformers) otherwise fail with a bare parse error."""
    from safetensors import SafetensorError, safe_open

    model_dir = Path(model_dir)
    read_model_config(model_dir / "config.json")
    weights = model_dir / "model.safetensors"
    if weights.is_file():
        try:
            with safe_open(str(weights), framework="pt"):
                pass
        except (SafetensorError, OSError) as err:
            raise CorruptFileError(weights, "checkpoint weights file", err, remedy=MODEL_REMEDY.format(dir=model_dir)) from err
    return model_dir


def load_model_weights(path: str | os.PathLike) -> dict:
    """A checkpoint's ``model.safetensors`` as a state dict; truncated: ``CorruptFileError`` with the models' remedy."""
    from safetensors import SafetensorError
    from safetensors.torch import load_file

    path = Path(path)
    try:
        return load_file(str(path))
    except (SafetensorError, OSError, ValueError) as err:
        raise CorruptFileError(path, "checkpoint weights file", err, remedy=MODEL_REMEDY.format(dir=path.parent)) from err


def write_jsonl(path: str | os.PathLike, records: Iterable[dict]) -> None:
    """Write one JSON object per line, atomically."""
    with atomic_path(path) as tmp, open(tmp, "w") as f:
        for rec in records:
            f.write(json.dumps(rec, default=_to_jsonable) + "\n")


def read_jsonl(path: str | os.PathLike, *, keys=None, what: str = "JSON-lines file") -> list[dict]:
    """Parse a JSON-lines file; a truncated or garbled one raises ``CorruptFileError`` naming it. With ``keys``
    (``()``: any): at least one record, each a JSON object holding them (as ``read_json``)."""
    try:
        with open(path) as f:
            records = [json.loads(line) for line in f if line.strip()]
        if keys is not None:
            problems = [f"record {i}: {p}" for i, r in enumerate(records, 1) if (p := _shape_problem(r, keys))]
            if problems or not records:
                raise ValueError(problems[0] if records else f"{_shape_problem(None, keys, found='empty')} on each line")
    except ValueError as err:  # JSONDecodeError and UnicodeDecodeError among them
        raise CorruptFileError(path, what, err) from err
    return records


def write_npy(path: str | os.PathLike, array: np.ndarray) -> None:
    """Save one array as ``.npy`` (no pickle), atomically."""
    with atomic_path(path) as tmp, open(tmp, "wb") as f:
        np.save(f, np.asarray(array), allow_pickle=False)


@contextlib.contextmanager
def open_features(path: str | os.PathLike):
    """``safetensors.safe_open`` of a features file, to read its header or some layers; a missing file
    says how to make it, a truncated one raises ``CorruptFileError`` naming it."""
    from safetensors import safe_open

    path = _existing_features(path)
    try:
        handle = safe_open(str(path), framework="pt")
    except Exception as err:
        raise CorruptFileError(path, "safetensors features file", err, remedy=FEATURES_REMEDY.format(path=path)) from err
    with handle as f:
        yield f


def _existing_features(path: str | os.PathLike) -> Path:
    """``path``, a features file that exists; a missing one says how to make it."""
    if not (path := Path(path)).exists():
        raise FileNotFoundError(f"features file {path} does not exist: run the workflow (snakemake {path}) "
                                "(features are not versioned by DVC: `make pull` fetches the alignment tables computed from them)")
    return path


def features_meta_path(path: str | os.PathLike) -> Path:
    """``results/features/<dataset>/<model>.safetensors`` -> ``.../<model>.json``."""
    return Path(path).with_suffix(".json")


def read_features_meta(path: str | os.PathLike) -> dict:
    """The meta JSON beside features file ``path`` (``features_meta_path``), {} when there is none; one that is not a
    JSON object raises ``CorruptFileError`` naming it, with the features' remedy."""
    meta_path = features_meta_path(path)
    return read_json(meta_path, keys=(), what="features meta JSON", remedy=FEATURES_REMEDY.format(path=path)) \
        if meta_path.exists() else {}


def save_features(path: str | os.PathLike, feats: Any, meta: dict) -> None:
    """Save an N x L x D feature tensor as safetensors (key ``feats``) plus its meta JSON.

    ``meta`` should name the model, revision, pooling, dtype and parameter count.
    The meta file is written first, so a complete ``.safetensors``
    always has its meta beside it.
    """
    import torch
    from safetensors.torch import save_file

    t = torch.as_tensor(feats)
    if t.ndim != 3:
        raise ValueError(f"features must be N x L x D, got shape {tuple(t.shape)}")
    meta = {**meta, "shape": list(t.shape), "stored_dtype": str(t.dtype).removeprefix("torch.")}
    write_json(features_meta_path(path), meta)
    with atomic_path(path) as tmp:
        save_file({"feats": t.contiguous().cpu()}, str(tmp))


def load_features(path: str | os.PathLike, *, with_meta: bool = False):
    """Load ``feats`` (a float torch tensor, N x L x D) and optionally its meta dict."""
    from safetensors.torch import load_file

    path = _existing_features(path)
    try:
        feats = load_file(str(path))["feats"]
    except Exception as err:  # safetensors raises its own SafetensorError (and OSError, KeyError) on bad files
        raise CorruptFileError(path, "safetensors features file", err, remedy=FEATURES_REMEDY.format(path=path)) from err
    if not with_meta:
        return feats
    return feats, read_features_meta(path)


# safetensors dtype -> (torch dtype name, bytes per element)
_SAFETENSORS_DTYPES = {"F64": ("float64", 8), "F32": ("float32", 4), "F16": ("float16", 2), "BF16": ("bfloat16", 2)}


def features_layout(path: str | os.PathLike) -> dict:
    """Where the ``feats`` tensor of a features file lies, from its safetensors header alone.

    Returns ``{"shape": [N, L, D], "dtype": torch dtype name ("float32"), "offset": byte offset of item 0's
    layer 0, "itemsize": bytes per element}``; element (i, l, j) is at
    ``offset + ((i * L + l) * D + j) * itemsize`` (safetensors: C order, little endian).
    A missing file says how to make it; an unreadable header raises ``CorruptFileError``.
    Torch-free: Snakemake calls it while it plans (``prh.metrics.memory.align_memory_mb``).
    """
    import struct

    path = _existing_features(path)
    if path.is_dir():
        raise IsADirectoryError(errno.EISDIR, "a directory, not a features file (.safetensors)", str(path))
    size = path.stat().st_size
    try:
        with open(path, "rb") as f:
            (n_header,) = struct.unpack("<Q", f.read(8))
            if n_header > size - 8:
                raise ValueError(f"header of {n_header} bytes in a file of {size}")
            entry = json.loads(f.read(n_header))["feats"]
        begin, end = entry["data_offsets"]
        dtype, itemsize = _SAFETENSORS_DTYPES[entry["dtype"]]
        shape = [int(s) for s in entry["shape"]]
        if len(shape) != 3 or end - begin != math.prod(shape) * itemsize or 8 + n_header + end > size:
            raise ValueError(f"feats of shape {shape} ({entry['dtype']}) does not fit bytes {begin}..{end} "
                             f"of a {size}-byte file")
    except (ValueError, KeyError, struct.error, UnicodeDecodeError) as err:
        raise CorruptFileError(path, "safetensors features file", err, remedy=FEATURES_REMEDY.format(path=path)) from err
    return {"shape": shape, "dtype": dtype, "offset": 8 + n_header + begin, "itemsize": itemsize}


def read_features_layer(path: str | os.PathLike, layer: int, *, n_items: int | None = None, layout=None):
    """One layer of an N x L x D features file, ``feats[:n_items, layer, :]``, as an n x D tensor
    in the stored dtype, read with plain file reads (no memory map): memory is one layer,
    whatever L. ``layout``: ``features_layout(path)`` when the caller already has it.
    """
    import torch

    layout = layout or features_layout(path)
    n, n_layers, width = layout["shape"]
    if not 0 <= layer < n_layers:
        raise ValueError(f"layer={layer} must be in 0..{n_layers - 1} ({path} has {n_layers} layers)")
    n = n if n_items is None else n_items
    if not 1 <= n <= layout["shape"][0]:
        raise ValueError(f"n_items={n_items} must be between 1 and the {layout['shape'][0]} items of {path}")
    out = torch.empty(n, width, dtype=getattr(torch, layout["dtype"]))
    row = width * layout["itemsize"]
    buf = memoryview(out.view(torch.uint8).numpy()).cast("B")
    with open(path, "rb", buffering=0) as f:
        for i in range(n):
            f.seek(layout["offset"] + (i * n_layers + layer) * row)
            if f.readinto(buf[i * row:(i + 1) * row]) != row:
                raise CorruptFileError(path, "safetensors features file", EOFError(f"item {i} layer {layer} cut short"),
                                       remedy=FEATURES_REMEDY.format(path=path))
    return out


# ---- argparse types for the `prh` commands


def json_object(text: str) -> dict:
    """argparse ``type=``: a JSON object, e.g. a params.yaml block that a rule passes on."""
    try:
        value = json.loads(text)
    except json.JSONDecodeError as err:
        raise argparse.ArgumentTypeError(f"not valid JSON ({err}): {text[:80]!r}") from None
    if not isinstance(value, dict):
        raise argparse.ArgumentTypeError(f"must be a JSON object {{...}}, got {type(value).__name__}")
    return value


def none_or(kind):
    """argparse ``type=``: ``kind(text)``, or None for "", "none" or "null"."""
    return lambda s: None if s.lower() in ("", "none", "null") else kind(s)


def add_path_options(parser: argparse.ArgumentParser, names, *, required: bool = True, help: str = "{name}.json") -> None:
    """One ``--<name> PATH`` option per file a command writes or reads (``_`` -> ``-``): the rule names every
    path, so no folder is handed over in which the command would choose the file names."""
    for name in names:
        parser.add_argument(f"--{name.replace('_', '-')}", dest=name, required=required, help=help.format(name=name))


def named_paths(paths, names, *, command: str) -> dict[str, Any]:
    """``{name: path}`` for each of ``names`` from a mapping (or an argparse namespace); ValueError names the
    ones without a path and the option that gives it."""
    paths = vars(paths) if isinstance(paths, argparse.Namespace) else dict(paths)
    if missing := [name for name in names if not paths.get(name)]:
        raise ValueError(f"{command}: no path for {missing} (--{missing[0].replace('_', '-')} PATH)")
    return {name: paths[name] for name in names}
