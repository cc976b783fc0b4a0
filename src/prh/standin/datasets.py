"""Stand-in hub datasets: every hub dataset a config names, as tiny synthetic data in its real format.

For each hub dataset of ``prh.pin.hub_entries(cfg, include_unset=True)`` (params' ``datasets.*`` of
``kind: hub`` and ``paper.lm_score``'s corpus), ``build_dataset_standins`` writes two things:

1. the repo's files, into the hub cache as ``hf download`` leaves them (``prh.standin.cache``): the
   format, splits and columns ``workflow/resources/hub_manifest.yaml`` records (parquet with the
   real columns, or webdataset tars with the real member extensions and ``<split>/nshards.txt``),
   ``rows`` rows per split of seeded random images and short synthetic texts, and a README.md card
   that says it is a stand-in (``STANDIN_NOTE``);
2. the *prepared* copy the ``datasets`` library reads offline. With ``HF_HUB_OFFLINE=1``,
   ``datasets.load_dataset("owner/name", ...)`` never opens the hub snapshot: it falls back to
   ``CachedDatasetModuleFactory``, which reads ``<HF_DATASETS_CACHE>/<owner>___<name>/<config id>/
   <version>/<hash>/`` (``dataset_info.json`` and ``<name>-<split>.arrow``), what one online
   ``load_dataset`` leaves. That copy is made here by the library's own packaged builder (the one
   ``load_dataset`` infers from the files: parquet, webdataset, ...) run over the snapshot, and put in
   the folder the offline lookup searches (``offline_config_id``).

Offline, the revision is ignored (the newest prepared copy of the repo wins); ``name=`` selects the
config folder; ``data_files`` selects ``<config or default>-<hash of the data_files argument>``, a
folder name an online run does not write (it hashes the resolved file URLs), so only a stand-in (or
a copy renamed by hand) serves a ``data_files`` load offline. ``streaming=True`` streams the
prepared arrow files. Where the manifest leaves a field null the obvious choice is made and
listed in the record's ``notes``.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import tarfile
import tempfile
from pathlib import Path

import numpy as np
import yaml

from prh.standin.cache import STANDIN_NOTE, standin_commit, write_snapshot
from prh.standin.downloads import build_download_standins, seeded_rng, synthetic_caption, synthetic_image, tar_add

__all__ = ["build_dataset_standins", "build_download_standins", "dataset_targets", "offline_config_id"]

MANIFEST = Path(__file__).resolve().parents[3] / "workflow" / "resources" / "hub_manifest.yaml"
WDS_KEYS = ("__key__", "__url__")  # added to every row by the webdataset loader, not tar members
INT_CLASSES = 10  # label range of an int64 column, whose class count the manifest cannot record
MAX_SHARDS = 4  # shards per split at most (the real count when the manifest has it, up to this)
CODECS = {"jpg": "JPEG", "jpeg": "JPEG", "tif": "TIFF", "tiff": "TIFF"}  # tar extension -> PIL format


def _document(rng: np.random.Generator) -> str:
    """A web-text-like document of 20 to 60 sentences (a text corpus' row)."""
    return " ".join(f"There is {synthetic_caption(rng)}." for _ in range(int(rng.integers(20, 61))))


def offline_config_id(config: str | None, data_files) -> str | None:
    """The config folder offline ``load_dataset(repo, name=config, data_files=data_files)`` reads, as
    ``datasets.packaged_modules.cache`` computes it; None when neither is given (then it takes the
    one folder whose ``dataset_info.json`` config name equals the folder name)."""
    import datasets

    if not config and not data_files:
        return None
    kwargs = {"data_files": data_files} if data_files else {}
    return datasets.BuilderConfig(config or "default").create_config_id(config_kwargs=kwargs)


def _manifest(manifest) -> dict:
    if manifest is None:
        manifest = MANIFEST
    if isinstance(manifest, dict):
        return manifest
    path = Path(manifest)
    if not path.is_file():
        raise ValueError(f"manifest={str(manifest)!r} is not a file; pass workflow/resources/hub_manifest.yaml")
    return yaml.safe_load(path.read_text())


def dataset_targets(cfg: dict, *, manifest=None) -> list[dict]:
    """The stand-ins a config needs: one per distinct (repo, revision, config, data_files) of its hub
    dataset entries, with the splits, format, features and shard counts to write (from the manifest)."""
    from prh.pin import entry_spec, entry_splits, hub_entries

    index = {(d["id"], d.get("config")): d for d in _manifest(manifest).get("datasets") or []}
    groups: dict[str, dict] = {}
    for e in hub_entries(cfg, include_unset=True):
        if e["kind"] != "dataset":
            continue
        spec = entry_spec(cfg, e)
        ident = json.dumps([e["repo_id"], e["revision"], spec.get("config"), spec.get("data_files")])
        t = groups.setdefault(ident, {"repo_id": e["repo_id"], "revision": e["revision"], "config": spec.get("config"),
                                      "data_files": spec.get("data_files"), "keys": [], "asked": [], "columns": {}})
        t["keys"].append(e["key"])
        t["asked"] += [split for split in entry_splits(cfg, e) if split not in t["asked"]]
        for role, kind in (("image_column", "image"), ("text_column", "string"), ("label_column", "int64")):
            if spec.get(role):
                t["columns"][spec[role]] = kind
    return [_resolve(t, index) for t in groups.values()]


def _resolve(t: dict, index: dict) -> dict:
    """Fill a target's splits, format, features and shards from its manifest entry."""
    where = f"{t['repo_id']}{' config ' + t['config'] if t['config'] else ''} ({', '.join(t['keys'])})"
    entry = index.get((t["repo_id"], t["config"]))
    if entry is None:
        raise ValueError(f"hub dataset {where} is not in the manifest; add it (`prh hub-manifest`) first")
    if entry.get("exists") is False:
        raise ValueError(f"hub dataset {where}: the manifest records that the repo does not exist; fix params.yaml")
    notes, splits = [], {k: dict(v or {}) for k, v in (entry.get("splits") or {}).items()}
    for split in t["asked"]:
        if split in splits:
            continue
        if entry.get("splits_complete") is True:
            notes.append(f"params read split {split!r}, which the manifest says the repo lacks: not written")
        else:
            splits[split] = {}
            notes.append(f"split {split!r} is read by params but unverified in the manifest: written")
    formats = {s.get("format") for s in splits.values()} - {None}
    if len(formats) > 1:
        raise ValueError(f"hub dataset {where}: the manifest gives its splits different formats {sorted(formats)}")
    if not formats:
        notes.append("format unknown in the manifest: parquet")
    fmt = formats.pop() if formats else "parquet"
    if fmt not in ("webdataset", "parquet"):
        raise ValueError(f"hub dataset {where}: format {fmt!r} has no stand-in writer (parquet, webdataset)")
    features = entry.get("features")
    if not features:
        features = {**(dict.fromkeys(WDS_KEYS, "string") if fmt == "webdataset" else {}), **t["columns"]}
        notes.append(f"features unknown in the manifest: the columns params read, {features}")
    default_files = 2 if fmt == "webdataset" else 1  # 2 tars outnumber nshards.txt, so the format is inferred
    files = {s: max(1, min(MAX_SHARDS, v.get("files") if isinstance(v.get("files"), int) else default_files))
             for s, v in splits.items()}
    return {**{k: t[k] for k in ("repo_id", "revision", "config", "data_files", "keys")},
            "format": fmt, "splits": files, "features": dict(features), "notes": notes}


def _hf_feature(kind: str):
    """The ``datasets`` feature of a manifest type name (image, string, int64, class_label(n), list[...])."""
    import datasets

    if kind == "image":
        return datasets.Image()
    if kind.startswith("class_label(") and kind.endswith(")"):
        return datasets.ClassLabel(names=[f"class_{i}" for i in range(int(kind[12:-1]))])
    if kind.startswith("list[") and kind.endswith("]"):
        return datasets.List(_hf_feature(kind[5:-1]))
    if kind in ("string", "bool", "binary") or kind.startswith(("int", "uint", "float")):
        return datasets.Value(kind)
    raise ValueError(f"feature type {kind!r} has no parquet stand-in; use image, string, int64, class_label(n), "
                     "list[...]")


def _values(kind: str, rng: np.random.Generator, n: int, *, fmt: str = "PNG", corpus: bool = False) -> list:
    """``n`` synthetic values of one column; labels cover the class range evenly, in random order."""
    if kind == "image":
        return [synthetic_image(rng, fmt) for _ in range(n)]
    if kind == "string":
        return [_document(rng) if corpus else synthetic_caption(rng) for _ in range(n)]
    if kind.startswith("list["):
        return [_values(kind[5:-1], rng, int(rng.integers(1, 4)), fmt=fmt) for _ in range(n)]
    if kind.startswith("class_label(") or kind.startswith(("int", "uint")):
        k = int(kind[12:-1]) if kind.startswith("class_label(") else INT_CLASSES
        return [int(v) for v in rng.permutation(np.arange(n) % k)]
    if kind.startswith("float"):
        return [float(v) for v in rng.random(n)]
    if kind == "json":
        return [{"caption": synthetic_caption(rng)} for _ in range(n)]
    if kind == "binary":
        return [rng.bytes(16) for _ in range(n)]
    if kind == "bool":
        return [bool(v) for v in rng.integers(0, 2, n)]
    raise ValueError(f"feature type {kind!r} has no stand-in")


def _hellaswag_columns(rng: np.random.Generator, n: int) -> dict:
    """What lm-evaluation-harness's hellaswag task parses: four endings and the gold one as a digit string; contexts
    of caption length (not documents), so 10 shots fit a stand-in's context."""
    short = {c: [synthetic_caption(rng) for _ in range(n)] for c in ("activity_label", "ctx_a", "ctx_b", "ctx")}
    return {**short, "endings": [[synthetic_caption(rng) for _ in range(4)] for _ in range(n)],
            "label": [str(int(v)) for v in rng.integers(0, 4, n)]}


def _gsm8k_columns(rng: np.random.Generator, n: int) -> dict:
    """What its gsm8k task parses: a question, and an answer whose last line is ``#### <number>``."""
    x, y = rng.integers(1, 50, n), rng.integers(1, 50, n)
    return {"question": [f"There are {a} squares and {b} circles. How many shapes are there?" for a, b in zip(x, y)],
            "answer": [f"{a} + {b} = {a + b} shapes.\n#### {a + b}" for a, b in zip(x, y)]}


# repos whose task code parses a column (not just reads it): synthetic values in the shape it parses
TASK_COLUMNS = {"Rowan/hellaswag": _hellaswag_columns, "openai/gsm8k": _gsm8k_columns}


def _write_parquet(folder: Path, t: dict, rows: int, seed: int) -> dict:
    """``<config or data>/<split>-0000i-of-0000n.parquet`` and the card's ``configs`` entry, as push_to_hub writes."""
    import datasets

    prefix = t["config"] or "data"
    feats = datasets.Features({c: _hf_feature(k) for c, k in t["features"].items()})
    corpus = not any(k == "image" or k.endswith("[image]") for k in t["features"].values())
    files = []
    for split, n_files in t["splits"].items():
        rng = seeded_rng(seed, t["repo_id"], str(t["config"]), split)
        cols = {c: _values(k, rng, rows, corpus=corpus) for c, k in t["features"].items()}
        cols.update(TASK_COLUMNS[t["repo_id"]](rng, rows) if t["repo_id"] in TASK_COLUMNS else {})
        for c in cols:
            if t["features"][c] == "image":  # the parquet Image encoding: embedded bytes, no path
                cols[c] = [{"bytes": b, "path": None} for b in cols[c]]
        ds = datasets.Dataset.from_dict(cols, features=feats)
        (folder / prefix).mkdir(parents=True, exist_ok=True)
        for i, idx in enumerate(np.array_split(np.arange(rows), n_files)):
            ds.select(idx.tolist()).to_parquet(str(folder / prefix / f"{split}-{i:05d}-of-{n_files:05d}.parquet"))
        files.append({"split": split, "path": f"{prefix}/{split}-*"})
    return {"configs": [{"config_name": t["config"] or "default", "data_files": files}]}


def _write_webdataset(folder: Path, t: dict, rows: int, seed: int) -> dict:
    """``<split>/<i>.tar`` of members ``s0000000.<ext>`` (CLIP_benchmark's webdataset_builder layout) and
    ``<split>/nshards.txt``; every column but ``__key__``/``__url__`` is a member extension."""
    exts = {c: k for c, k in t["features"].items() if c not in WDS_KEYS}
    for split, n_files in t["splits"].items():
        rng = seeded_rng(seed, t["repo_id"], str(t["config"]), split)
        cols = {}
        for ext, kind in exts.items():
            values = _values(kind, rng, rows, fmt=CODECS.get(ext, ext.upper()))
            cols[ext] = [v if isinstance(v, bytes) else (json.dumps(v) if kind == "json" else str(v)).encode()
                         for v in values]
        (folder / split).mkdir(parents=True, exist_ok=True)
        for i, idx in enumerate(np.array_split(np.arange(rows), n_files)):
            with tarfile.open(folder / split / f"{i}.tar", "w", format=tarfile.USTAR_FORMAT) as tar:
                for j in idx:
                    for ext in exts:
                        tar_add(tar, f"s{j:07d}.{ext}", cols[ext][j])
        (folder / split / "nshards.txt").write_text(f"{n_files}\n")
    return {}


def _write_card(folder: Path, t: dict, yaml_extra: dict) -> None:
    header = yaml.safe_dump({"pretty_name": f"STAND-IN of {t['repo_id']}", "tags": ["prh-standin"], **yaml_extra},
                            sort_keys=False)
    splits = ", ".join(f"{s} ({n} file{'s' * (n > 1)})" for s, n in t["splits"].items())
    title = f"# STAND-IN of `{t['repo_id']}` (revision {t['revision'] or 'main'})"
    (folder / "README.md").write_text(f"---\n{header}---\n\n{title}\n\n{STANDIN_NOTE}.\n\n"
                                      f"Format {t['format']}; splits {splits}; columns {t['features']}.\n")


def _prepare(snapshot: Path, t: dict, datasets_cache: Path, commit: str) -> Path:
    """Run the packaged builder ``load_dataset`` would infer over the snapshot; move its output to the
    folder offline ``load_dataset(repo, name=config, data_files=...)`` reads. Returns that folder."""
    from datasets.load import LocalDatasetModuleFactory, get_dataset_builder_class
    from datasets.naming import camelcase_to_snakecase

    owner, name = t["repo_id"].split("/")
    ds_name = camelcase_to_snakecase(name)  # arrow files are <ds_name>-<split>.arrow, as the hub path names them
    module = LocalDatasetModuleFactory(str(snapshot), data_files=t["data_files"]).get_module()
    config_name = t["config"] or module.builder_configs_parameters.default_config_name
    info = module.dataset_infos.get(config_name) if module.dataset_infos and not t["data_files"] else None
    builder_cls = get_dataset_builder_class(module, dataset_name=ds_name)
    datasets_cache.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=datasets_cache, prefix=".standin-") as scratch:  # hidden: no glob sees it
        builder = builder_cls(cache_dir=scratch, dataset_name=ds_name, config_name=config_name, hash=commit,
                              data_files=t["data_files"], info=info, base_path=module.builder_kwargs["base_path"])
        config_id = offline_config_id(t["config"], t["data_files"]) or builder.config_id
        out = datasets_cache / f"{owner}___{ds_name}" / config_id / str(builder.config.version) / commit
        builder.download_and_prepare(output_dir=str(Path(scratch) / "prepared"))
        shutil.rmtree(out, ignore_errors=True)
        out.parent.mkdir(parents=True, exist_ok=True)
        os.replace(Path(scratch) / "prepared", out)
    return out


@contextlib.contextmanager
def _quiet():
    """No progress bars or info logs from ``datasets`` while building (restored afterwards)."""
    import datasets
    from datasets.utils import logging as dlog

    bars_off, verbosity = datasets.are_progress_bars_disabled(), dlog.get_verbosity()
    datasets.disable_progress_bars()
    dlog.set_verbosity_error()
    try:
        yield
    finally:
        if not bars_off:
            datasets.enable_progress_bars()
        dlog.set_verbosity(verbosity)


def build_dataset_standins(cfg: dict, hub_cache, datasets_cache, *, manifest=None, rows: int = 24, seed: int = 0,
                           only=None) -> list[dict]:
    """Write the stand-in of every hub dataset of ``cfg`` into ``hub_cache`` (snapshot) and
    ``datasets_cache`` (prepared copy); see the module docstring.

    Parameters
    ----------
    cfg : the parsed params.yaml.
    hub_cache, datasets_cache : the folders ``HF_HUB_CACHE`` and ``HF_DATASETS_CACHE`` will name.
    manifest : the hub manifest (a dict or a path; None: workflow/resources/hub_manifest.yaml).
    rows : rows per split (>= 2: a carved split takes part of them).
    seed : seed of all synthetic content.
    only : repo ids or params keys (``cifar10_224``, ``datasets.cifar10_224``, ``paper.lm_score``) to
        build; None: all.

    Returns
    -------
    One record per stand-in: repo_id, revision, commit, config, data_files, keys, format, splits
    (split -> rows, files), features, snapshot, prepared, notes.
    """
    if rows < 2:
        raise ValueError(f"rows={rows} must be >= 2 (carved splits take a part of a split's rows)")
    targets = dataset_targets(cfg, manifest=manifest)
    if only is not None:
        only = {only} if isinstance(only, str) else set(only)

        def names(t):
            return {t["repo_id"], *t["keys"], *(k.split(".", 1)[1] for k in t["keys"])}

        unknown = only - set().union(*(names(t) for t in targets))
        if unknown:
            raise ValueError(f"only={sorted(unknown)} names no hub dataset of the config; use repo ids or "
                             "params keys")
        targets = [t for t in targets if names(t) & only]
    hub_cache, datasets_cache = Path(hub_cache).resolve(), Path(datasets_cache).resolve()
    records = []
    with _quiet():
        for t in targets:
            commit = standin_commit(t["repo_id"], t["revision"])
            with tempfile.TemporaryDirectory(prefix="prh-standin-") as src:
                writer = _write_webdataset if t["format"] == "webdataset" else _write_parquet
                _write_card(Path(src), t, writer(Path(src), t, rows, seed))
                snapshot = write_snapshot(hub_cache, t["repo_id"], t["revision"], src, repo_type="dataset")
            prepared = _prepare(snapshot, t, datasets_cache, commit)
            splits = {s: {"rows": rows, "files": n} for s, n in t["splits"].items()}
            records.append({**t, "commit": commit, "splits": splits, "snapshot": str(snapshot),
                            "prepared": str(prepared)})
    return records

