"""``prh hub-manifest``: record what the hub holds for every dataset and model params.yaml names.

For each hub dataset (``datasets.*`` of ``kind: hub`` whose repo is an ``owner/name`` id, and
``paper.lm_score``) and each model of ``paper.models`` (timm names as ``timm/<name>``), the
manifest records the commit SHA the revision points to and, for datasets, the splits, the
features (column -> type) and the rows per split, as ``datasets.load_dataset`` would see them:

- the split of each file comes from the ``datasets`` library's own naming rules
  (``get_data_patterns``; or the ``data_files`` globs params.yaml gives);
- the builder ``load_dataset`` would pick comes from the library too
  (``infer_module_for_data_files_list``): a split whose folder holds one tar shard and an
  ``nshards.txt`` is read as *text*, not as a webdataset;
- parquet: features from the file schema, rows from the footers (no data is read);
- webdataset: features from the member extensions of the first tar shard (read as a stream,
  members only), plus the ``__key__``/``__url__`` the loader adds; rows by counting keys when
  ``count_rows`` (every shard is read: fine for local folders, slow for the hub), else from the
  repo card's ``dataset_info`` when it has one, else null;
- the card's ``dataset_info`` (``HfApi.dataset_info(...).card_data``) fills rows and features
  that the files leave open.

The manifest (``workflow/resources/hub_manifest.yaml``) is committed; ``check_manifest`` reads it
offline and lists every dataset, split or column that params.yaml asks for and the manifest lacks
(``tests/test_hub_manifest.py`` runs it). Where the hub cannot be reached the file is filled by
hand from the hub's pages, each entry naming its ``source``; unknown fields stay null.

    prh hub-manifest --params params.yaml --out workflow/resources/hub_manifest.yaml   # needs network
    prh hub-manifest --params params.yaml --check                                      # offline check
"""

from __future__ import annotations

import argparse
import tarfile
from pathlib import PurePosixPath

import yaml

from prh.io import atomic_path
from prh.pin import entry_spec, entry_splits, hub_entries

__all__ = ["build_manifest", "check_manifest", "describe_files", "hub_targets", "read_manifest", "write_manifest"]

IMAGE_EXTENSIONS = {"jpg", "jpeg", "png", "webp", "bmp", "gif", "tif", "tiff", "ppm"}
BUILDER_EXTENSIONS = {"parquet": (".parquet",), "webdataset": (".tar",), "text": (".txt", ".text")}
WDS_KEYS = {"__key__": "string", "__url__": "string"}  # added to every row by the webdataset loader


def hub_targets(cfg: dict) -> dict:
    """The hub datasets and models a config names.

    Returns ``{"datasets": [{"id", "config", "revision", "data_files", "names"}], "models": [{"id", "revision", "names"}]}``,
    one record per distinct (id, config, revision, data_files) / (id, revision); ``names`` are the params keys using it.
    """
    out: dict[str, dict] = {"datasets": {}, "models": {}}
    for e in hub_entries(cfg):
        spec = entry_spec(cfg, e) if e["kind"] == "dataset" else {}
        if e["kind"] == "model":
            rec = {"id": e["repo_id"], "revision": e["revision"]}
        else:
            rec = {"id": e["repo_id"], "config": spec.get("config"), "revision": e["revision"],
                   "data_files": spec.get("data_files")}
        key = yaml.safe_dump(rec, sort_keys=True)
        group = out["models" if e["kind"] == "model" else "datasets"]
        group.setdefault(key, {**rec, "names": []})["names"].append(e["key"])
    return {k: list(v.values()) for k, v in out.items()}


def _feature_type(feature) -> str:
    """A short type name of a ``datasets`` feature: image, class_label(n), string, int64, list[...]."""
    import datasets

    if isinstance(feature, datasets.Image):
        return "image"
    if isinstance(feature, datasets.ClassLabel):
        return f"class_label({feature.num_classes})"
    if isinstance(feature, datasets.Value):
        return str(feature.dtype)
    if isinstance(feature, (datasets.Sequence, list)) or type(feature).__name__ == "List":
        inner = feature[0] if isinstance(feature, list) else feature.feature
        return f"list[{_feature_type(inner)}]"
    return type(feature).__name__


def _extension_type(ext: str) -> str:
    if ext in IMAGE_EXTENSIONS:
        return "image"
    if ext in ("cls", "cls2", "index", "inx", "id"):
        return "int64"
    if ext in ("json", "jsn"):
        return "json"
    return "string" if ext in ("txt", "text", "transcript") else "binary"


def _tar_members(fs, path: str, *, limit: int | None):
    """(member name, ...) of a tar shard read as a stream; ``limit`` members at most (None: all)."""
    with fs.open(path, "rb") as f, tarfile.open(fileobj=f, mode="r|") as tar:
        for i, member in enumerate(tar):
            if limit is not None and i >= limit:
                return
            if member.isfile():
                yield member.name


def _wds_split(fs, files: list[str], *, count_rows: bool) -> tuple[dict, int | None]:
    features, keys = {}, set()
    for j, path in enumerate(files):
        for name in _tar_members(fs, path, limit=None if count_rows else 64):
            base = PurePosixPath(name).name
            key, _, ext = base.partition(".")
            features.setdefault(ext.lower(), _extension_type(ext.lower()))
            keys.add((j, str(PurePosixPath(name).parent), key))
        if not count_rows:
            break
    return {**WDS_KEYS, **dict(sorted(features.items()))}, (len(keys) if count_rows else None)


def describe_files(root: str, *, data_files: dict[str, str] | None = None, count_rows: bool = True) -> dict:
    """Splits, builder, features and rows of a dataset's files, as ``load_dataset`` would read them.

    Parameters
    ----------
    root : a local folder or an fsspec URL (``hf://datasets/<id>@<sha>``).
    data_files : split -> glob relative to ``root`` (params.yaml's ``data_files``); None: the
        ``datasets`` library's split naming rules.
    count_rows : count webdataset rows by reading every tar shard (parquet rows come from the footers).

    Returns
    -------
    ``{"splits": {split: {"format", "num_rows", "files"}}, "features": {column: type} | None}``.
    """
    import fsspec
    import pyarrow.parquet as pq
    from datasets.data_files import EmptyDatasetError, get_data_patterns
    from datasets.load import infer_module_for_data_files_list

    fs, base = fsspec.core.url_to_fs(root)
    try:
        patterns = ({k: [v] for k, v in data_files.items()} if data_files
                    else {str(k): v for k, v in get_data_patterns(root).items()})
    except EmptyDatasetError:  # no data files (a loading-script repo): the card may still list the splits
        patterns = {}
    splits, features = {}, None
    for split, globs in patterns.items():
        files = sorted({p for g in globs for p in fs.glob(f"{base.rstrip('/')}/{g}") if fs.isfile(p)})
        if not files:
            continue
        module, _ = infer_module_for_data_files_list([fs.unstrip_protocol(p) for p in files])
        # the builder reads only its own files (as load_dataset filters data files by the builder's extensions)
        files = [p for p in files if p.lower().endswith(BUILDER_EXTENSIONS.get(module, ("",)))]
        rows, feats = None, None
        if module == "parquet":
            import datasets

            rows = 0
            for p in files:
                with fs.open(p, "rb") as f:
                    meta = pq.ParquetFile(f)
                    rows += meta.metadata.num_rows
                    feats = feats or datasets.Features.from_arrow_schema(meta.schema_arrow)
            feats = {k: _feature_type(v) for k, v in feats.items()}
        elif module == "webdataset":
            feats, rows = _wds_split(fs, files, count_rows=count_rows)
        elif module == "text":
            feats = {"text": "string"}
            if count_rows:
                rows = sum(len(fs.cat_file(p).decode().splitlines()) for p in files)
        splits[split] = {"format": module, "num_rows": rows, "files": len(files)}
        features = features or feats
    return {"splits": splits, "features": features}


def _card_info(card_data, config: str | None) -> dict:
    """Rows per split and features from a repo card's ``dataset_info`` (a dict, or a list per config)."""
    info = (card_data or {}).get("dataset_info") if hasattr(card_data, "get") else None
    if isinstance(info, list):
        info = next((i for i in info if i.get("config_name") in (config, None, "default")), None)
    if not isinstance(info, dict):
        return {}
    rows = {s["name"]: s.get("num_examples") for s in info.get("splits") or []}
    feats = {}
    for f in info.get("features") or []:
        dtype = f.get("dtype")
        if isinstance(dtype, dict) and "class_label" in dtype:  # dtype: {class_label: {names: {0: a, ...}}}
            dtype = f"class_label({len(dtype['class_label'].get('names') or {})})"
        elif not isinstance(dtype, str):
            dtype = "list" if ("sequence" in f or "list" in f) else "unknown"
        feats[f["name"]] = dtype
    return {"rows": rows, "features": feats or None}


def build_manifest(cfg: dict, *, api=None, root_of=None, count_rows: bool = False, source: str = "hub") -> dict:
    """Query the hub for every dataset and model of ``cfg`` (see the module docstring).

    Parameters
    ----------
    cfg : the parsed params.yaml.
    api : an object with ``dataset_info``/``model_info(repo_id, revision=...)`` returning objects with
        ``.sha``, ``.card_data``, ``.siblings`` (default: ``huggingface_hub.HfApi()``).
    root_of : ``(repo_id, sha) -> root`` for ``describe_files`` (default ``hf://datasets/<id>@<sha>``).
    count_rows : count webdataset rows by reading every shard.
    source : the ``source`` recorded on each entry.
    """
    from huggingface_hub.errors import RepositoryNotFoundError, RevisionNotFoundError

    if api is None:
        from huggingface_hub import HfApi

        api = HfApi()
    root_of = root_of or (lambda repo_id, sha: f"hf://datasets/{repo_id}@{sha}")
    targets = hub_targets(cfg)
    out = {"datasets": [], "models": []}
    for t in targets["datasets"]:
        rec = {"id": t["id"], "config": t["config"], "revision": None, "exists": False, "data_files": t["data_files"],
               "splits": {}, "features": None, "source": source, "asked_revision": t["revision"]}
        try:
            info = api.dataset_info(t["id"], revision=t["revision"])
        except (RepositoryNotFoundError, RevisionNotFoundError) as e:
            rec["source"] = f"{source}: {type(e).__name__}"
            out["datasets"].append(rec)
            continue
        rec.update(revision=str(info.sha), exists=True, splits_complete=True)
        files = describe_files(root_of(t["id"], info.sha), data_files=t["data_files"], count_rows=count_rows)
        card = _card_info(getattr(info, "card_data", None), t["config"])
        rec["splits"] = files["splits"] or {s: {"format": None, "num_rows": None, "files": None} for s in card.get("rows", {})}
        for split, n in (card.get("rows") or {}).items():
            if split in rec["splits"] and rec["splits"][split]["num_rows"] is None:
                rec["splits"][split]["num_rows"] = n
        rec["features"] = files["features"] or card.get("features")
        out["datasets"].append(rec)
    for t in targets["models"]:
        rec = {"id": t["id"], "revision": None, "exists": False, "files": None, "source": source,
               "asked_revision": t["revision"]}
        try:
            info = api.model_info(t["id"], revision=t["revision"])
            rec.update(revision=str(info.sha), exists=True,
                       files=sorted(s.rfilename for s in (info.siblings or []) if "/" not in s.rfilename))
            if getattr(info, "gated", False):  # "auto" or "manual": a licence to accept and a token to send
                rec["gated"] = True
        except (RepositoryNotFoundError, RevisionNotFoundError) as e:
            rec["source"] = f"{source}: {type(e).__name__}"
        out["models"].append(rec)
    return out


class _PlainDumper(yaml.SafeDumper):
    def ignore_aliases(self, data):  # every entry spelled out, no &anchors
        return True


def write_manifest(path, manifest: dict, *, header: str = "") -> None:
    """Write the manifest as YAML, atomically (temporary file + rename)."""
    text = yaml.dump(manifest, Dumper=_PlainDumper, sort_keys=False, width=120, allow_unicode=True)
    with atomic_path(path) as tmp:
        tmp.write_text(header + text)


def read_manifest(path) -> dict:
    with open(path) as f:
        return yaml.safe_load(f)


def check_manifest(cfg: dict, manifest: dict) -> dict[str, list[str]]:
    """Compare the hub datasets and models of ``cfg`` with the manifest.

    Returns ``{"missing": [...], "unverified": [...]}``, one line per dataset entry of params.yaml:

    - missing: the manifest has no entry for the repo, records that it does not exist, or lists the
      repo's splits (``splits_complete``) or columns and the split (or ``carve.from``) or a column
      params.yaml asks for is not among them;
    - missing, too: a model whose repo id the manifest does not hold (a mistyped id) or records as absent;
    - unverified: the manifest does not know (no page of the repo was found, the split list is
      partial, the columns are unknown). ``prh hub-manifest`` on a machine with network settles these.
    """
    index = {(d["id"], d.get("config")): d for d in manifest.get("datasets") or []}
    missing, unverified = [], []
    for e in sorted((e for e in hub_entries(cfg) if e["kind"] == "dataset"), key=lambda e: e["key"]):
        spec = entry_spec(cfg, e)
        repo, config = spec["repo"], spec.get("config")
        entry = index.get((repo, config))
        where = f"{e['key']} ({repo}{f' config {config}' if config else ''})"
        if entry is None:
            missing.append(f"{where}: not in the manifest; run `prh hub-manifest` or add it by hand with its source")
            continue
        if entry.get("exists") is not True:
            (missing if entry.get("exists") is False else unverified).append(
                f"{where}: the manifest does not show the repo exists (source: {entry.get('source')})")
            continue
        splits = entry.get("splits") or {}
        for split in entry_splits(cfg, e):
            if split not in splits:
                complete = entry.get("splits_complete", True)
                (missing if complete else unverified).append(
                    f"{where}: split {split!r} is not among the {'' if complete else 'known '}splits {sorted(splits)}"
                    + ("; carve it from one that is (`carve:` in params.yaml)" if complete else ""))
        columns = [spec.get(k) for k in ("image_column", "text_column", "label_column") if spec.get(k)]
        have = entry.get("features")
        if have is None:
            unverified.append(f"{where}: the manifest does not know its columns; {columns} are unchecked")
        elif absent := [c for c in columns if c not in have]:
            missing.append(f"{where}: columns {absent} are not among {sorted(have)}")
    # models: a repo id the manifest does not hold (a typo), or one it records as absent, is missing
    models = {m["id"]: m for m in manifest.get("models") or []}
    for t in hub_targets(cfg)["models"]:
        entry = models.get(t["id"])
        if entry is None or entry.get("exists") is False:
            missing.append(f"{', '.join(t['names'])} (model {t['id']}): "
                           + ("not in the manifest; check the repo id, then run `prh hub-manifest` or add it by hand "
                              "with its source" if entry is None else f"the hub does not have it ({entry.get('source')})"))
    return {"missing": missing, "unverified": unverified}


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(prog="prh hub-manifest", description=__doc__.splitlines()[0])
    p.add_argument("--params", default="params.yaml")
    p.add_argument("--out", default="workflow/resources/hub_manifest.yaml")
    p.add_argument("--check", action="store_true", help="offline: compare params.yaml with the manifest at --out")
    p.add_argument("--count-rows", action="store_true", help="count webdataset rows by reading every shard")
    a = p.parse_args(argv)
    from prh.config import load

    cfg = load(a.params)
    if a.check:
        found = check_manifest(cfg, read_manifest(a.out))
        for level in ("missing", "unverified"):
            print("".join(f"{level}: {line}\n" for line in found[level]), end="")
        if not found["missing"]:
            print(f"{a.params}: no hub model, dataset, split or column is missing from {a.out}"
                  f" ({len(found['unverified'])} unverified)")
        raise SystemExit(1 if found["missing"] else 0)
    manifest = build_manifest(cfg, count_rows=a.count_rows)
    write_manifest(a.out, manifest, header=f"# written by `prh hub-manifest --params {a.params}`\n")
    print(f"{a.out}: {len(manifest['datasets'])} datasets, {len(manifest['models'])} models")
