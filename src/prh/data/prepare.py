"""Build the paper suite's two local dataset folders from their official downloads.

DCI and Places-365 are not on the Hugging Face hub in the form the paper uses, and their
licences ask for a manual download. These commands turn the downloads into the imagefolder
layout that ``prh fetch-dataset`` reads (``params.yaml``: ``dci`` and ``places365_val``, split
``train``): ``<out>/train/`` holds the image files and ``metadata.jsonl`` (one record per image,
``file_name`` first). The ``train/`` folder names the split: with the files at the root,
``datasets`` would infer the split from the file names, and Places' ``Places365_val_*.jpg``
would become a ``validation`` split.

- **DCI** (Densely Captioned Images, github.com/facebookresearch/DCI): ``dci.tar.gz`` unpacks to
  ``densely_captioned_images/`` with ``complete/`` (or ``annotations/``) ``*.json`` and
  ``splits.json``; the photos come from SA-1B's ``sa_000138.tar``, extracted into
  ``densely_captioned_images/photos/``. Each record's ``text`` is the dense caption built as the
  reference builds it (``dense_caption``).
- **Places-365** validation: ``val_256.tar`` (36,500 images, 256 x 256) from
  places2.csail.mit.edu, optionally with ``places365_val.txt`` (``<file> <class index>`` per line,
  in ``filelist_places365-standard.tar``), which adds a ``label`` column.

Both writes are atomic and resumable: files go to ``.<out>.partial/`` beside ``out`` (a file
already there with the right size is not copied again), ``metadata.jsonl`` and ``prepare.json``
(the source's fingerprint) are written last, then the folder is renamed onto ``out``. Run twice
on the same download, the second run finds ``prepare.json`` and does nothing.

    prh prepare-dci --source downloads/densely_captioned_images --out data/dci
    prh prepare-places --archive downloads/val_256.tar --filelist downloads/places365_val.txt \\
        --out data/places365/val_256
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import tarfile
from pathlib import Path

from prh.io import read_json, write_json, write_jsonl

__all__ = ["dense_caption", "prepare_dci", "prepare_places"]

DCI_HELP = ("download dci.tar.gz (https://dl.fbaipublicfiles.com/densely_captioned_images/dci.tar.gz) and unpack "
            "it, then extract SA-1B's sa_000138.tar into densely_captioned_images/photos/ (github.com/facebookresearch/DCI)")
PLACES_HELP = ("download val_256.tar (and filelist_places365-standard.tar for places365_val.txt) from "
               "http://places2.csail.mit.edu/download.html")
STAMP = "prepare.json"


def dense_caption(entry: dict) -> str:
    """The full dense caption of one DCI annotation, as the reference builds it.

    Follows ``DenseCaptionedImage.get_formatted_complete_description`` in facebookresearch/DCI
    (``dataset/densely_captioned_images/dataset/dense_image.py``, commit 8326c97): the mask
    captions of every mask (``mask_data`` in file order; quality 2 = bad: left out, 1 = low
    quality: its ``label``, 0: ``"<label>: <caption>"``) follow the standard and extra captions::

        "{short_caption}\\n{extra_caption}" [+ "\\nThe following can also be seen in the image:\\n" + "\\n".join(masks)]
    """
    missing = [k for k in ("short_caption", "extra_caption", "mask_data") if k not in entry]
    if missing:
        raise ValueError(f"DCI annotation lacks {missing}; is this a densely_captioned_images/complete/*.json file?")
    base = f"{entry['short_caption']}\n{entry['extra_caption']}"
    captions = []
    for mask in entry["mask_data"].values():
        quality = mask.get("mask_quality", 0)
        if quality == 2:
            continue
        captions.append(mask["label"] if quality == 1 else f"{mask['label']}: {mask['caption']}")
    if not captions:
        return base
    return base + "\nThe following can also be seen in the image:\n" + "\n".join(captions)


def _fingerprint(items: list[tuple[str, int]], extra: str = "") -> str:
    """SHA-256 of (name, size) pairs and a string: what a prepared folder was made from."""
    digest = hashlib.sha256(extra.encode())
    for name, size in items:
        digest.update(f"{name}\0{size}\n".encode())
    return digest.hexdigest()


def _already_done(out: Path, fingerprint: str, overwrite: bool) -> dict | None:
    """The stamp of ``out`` when it was prepared from the same source; an error when ``out``
    holds something else and ``overwrite`` is False; None when it must be (re)built."""
    if not out.exists() or (out.is_dir() and not any(p.is_file() for p in out.rglob("*"))):
        return None  # absent, or empty folders (Snakemake makes an output's parents before the job)
    stamp = out / STAMP
    complete = stamp.is_file() and (out / SPLIT / "metadata.jsonl").is_file()
    if complete and read_json(stamp).get("fingerprint") == fingerprint and not overwrite:
        return read_json(stamp)
    if not overwrite:
        raise ValueError(f"out={str(out)!r} exists and was not prepared from this source; pass overwrite=True "
                         "(--overwrite) to replace it, or choose another folder")
    return None


SPLIT = "train"  # the one split of a prepared folder (its subfolder)


def _staging(out: Path) -> Path:
    staging = out.parent / f".{out.name}.partial"
    (staging / SPLIT).mkdir(parents=True, exist_ok=True)
    return staging


def _finish(staging: Path, out: Path, records: list[dict], stamp: dict) -> dict:
    """Write metadata.jsonl and the stamp into ``staging``, then rename it onto ``out``."""
    write_jsonl(staging / SPLIT / "metadata.jsonl", records)
    write_json(staging / STAMP, stamp)
    if out.exists():
        shutil.rmtree(out)
    os.replace(staging, out)
    return stamp


def _place(src: Path, dst: Path) -> None:
    """Hard-link ``src`` to ``dst`` (no copy on one file system), else copy; skip a complete one."""
    if dst.is_file() and dst.stat().st_size == src.stat().st_size:
        return
    tmp = dst.with_name(dst.name + ".tmp")
    tmp.unlink(missing_ok=True)
    try:
        os.link(src, tmp)
    except OSError:
        shutil.copyfile(src, tmp)
    os.replace(tmp, dst)


def prepare_dci(*, source: str | os.PathLike, out: str | os.PathLike, overwrite: bool = False,
                progress: bool = True) -> dict:
    """Build the DCI imagefolder at ``out`` from the official download at ``source``.

    Parameters
    ----------
    source : the unpacked ``densely_captioned_images`` folder (or its parent): ``photos/``,
        ``complete/`` or ``annotations/`` (``*.json``, one per image), optionally ``splits.json``.
    out : the folder params.yaml's ``dci.repo`` names (``data/dci``).
    overwrite : replace an ``out`` that was prepared from something else.

    Returns
    -------
    The stamp written to ``out/prepare.json``: source, count, fingerprint.
    ``metadata.jsonl`` records: ``file_name``, ``text`` (``dense_caption``), ``short_caption``,
    ``key`` (the annotation file), ``split`` (from splits.json; null when absent).
    """
    from tqdm import tqdm

    root = Path(source).expanduser()
    if (root / "densely_captioned_images").is_dir():
        root = root / "densely_captioned_images"
    if not root.is_dir():
        raise ValueError(f"source={str(source)!r} is not a folder; {DCI_HELP}")
    ann_dir = next((root / d for d in ("complete", "annotations") if (root / d).is_dir()), None)
    if ann_dir is None:
        raise ValueError(f"source={str(source)!r} has no complete/ or annotations/ folder of DCI json files; {DCI_HELP}")
    files = sorted(ann_dir.glob("*.json"))
    if not files:
        raise ValueError(f"source={str(source)!r}: {ann_dir} holds no *.json annotations; {DCI_HELP}")
    photos = root / "photos"
    out = Path(out)
    fingerprint = _fingerprint([(f.name, f.stat().st_size) for f in files], "dci")
    done = _already_done(out, fingerprint, overwrite)
    if done is not None:
        return done
    split_of = {}
    if (root / "splits.json").is_file():
        for split, keys in json.loads((root / "splits.json").read_text()).items():
            split_of.update({str(k): split for k in keys})
    entries = [(f, json.loads(f.read_text())) for f in files]
    missing = [e.get("image", f.name) for f, e in entries if not (photos / str(e.get("image", ""))).is_file()]
    if missing:
        raise ValueError(f"source={str(source)!r}: {len(missing)} of {len(entries)} photos are missing from {photos} "
                         f"(first: {missing[0]!r}); extract SA-1B's sa_000138.tar into that folder "
                         "(github.com/facebookresearch/DCI, README 'Dataset')")
    staging = _staging(out)
    records = []
    for f, entry in tqdm(entries, desc="DCI", unit="img", disable=not progress):
        name = Path(entry["image"]).name
        _place(photos / entry["image"], staging / SPLIT / name)
        records.append({"file_name": name, "text": dense_caption(entry), "short_caption": entry["short_caption"],
                        "key": f.name, "split": split_of.get(f.name)})
    if len({r["file_name"] for r in records}) != len(records):
        raise ValueError(f"source={str(source)!r}: two annotations name the same photo; the download is damaged")
    stamp = {"source": str(root.resolve()), "kind": "dci", "annotations": ann_dir.name, "count": len(records),
             "fingerprint": fingerprint}
    return _finish(staging, out, records, stamp)


def _read_filelist(filelist: Path) -> dict[str, int]:
    """``places365_val.txt`` (or the filelist tar holding it): file name -> class index."""
    if not filelist.is_file():
        raise ValueError(f"filelist={str(filelist)!r} does not exist; {PLACES_HELP}")
    if tarfile.is_tarfile(filelist):
        with tarfile.open(filelist) as tar:
            member = next((m for m in tar if Path(m.name).name == "places365_val.txt"), None)
            if member is None:
                raise ValueError(f"filelist={str(filelist)!r} is a tar without places365_val.txt; {PLACES_HELP}")
            text = tar.extractfile(member).read().decode()
    else:
        text = filelist.read_text()
    labels = {}
    for n, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        parts = line.split()
        if len(parts) != 2 or not parts[1].isdigit():
            raise ValueError(f"filelist={str(filelist)!r} line {n} is {line!r}, not '<file name> <class index>'")
        labels[Path(parts[0]).name] = int(parts[1])
    return labels


def prepare_places(*, archive: str | os.PathLike, out: str | os.PathLike, filelist: str | os.PathLike | None = None,
                   overwrite: bool = False, progress: bool = True) -> dict:
    """Build the Places-365 validation imagefolder at ``out`` from ``val_256.tar``.

    Parameters
    ----------
    archive : ``val_256.tar`` as downloaded, or the folder it unpacks to (``*.jpg``).
    out : the folder params.yaml's ``places365_val.repo`` names (``data/places365/val_256``).
    filelist : ``places365_val.txt`` or ``filelist_places365-standard.tar``; adds ``label`` (0..364)
        and checks that every listed image is in the archive. None: no labels.
    overwrite : replace an ``out`` that was prepared from something else.

    Returns
    -------
    The stamp written to ``out/prepare.json``: source, count, labelled, fingerprint.
    """
    from tqdm import tqdm

    archive = Path(archive).expanduser()
    if not archive.exists():
        raise ValueError(f"archive={str(archive)!r} does not exist; {PLACES_HELP}")
    labels = _read_filelist(Path(filelist).expanduser()) if filelist is not None else None
    if archive.is_dir():
        members = {p.name: p for p in sorted(archive.rglob("*.jpg"))}
        sizes = [(name, p.stat().st_size) for name, p in members.items()]
    elif tarfile.is_tarfile(archive):
        with tarfile.open(archive) as tar:
            members = {Path(m.name).name: m for m in tar.getmembers() if m.isfile() and m.name.endswith(".jpg")}
        sizes = [(name, m.size) for name, m in sorted(members.items())]
    else:
        raise ValueError(f"archive={str(archive)!r} is neither a tar archive nor a folder; {PLACES_HELP}")
    if not members:
        raise ValueError(f"archive={str(archive)!r} holds no .jpg images; {PLACES_HELP}")
    if labels is not None:
        absent = sorted(set(labels) - set(members))
        if absent:
            raise ValueError(f"{len(absent)} images of the filelist are not in archive={str(archive)!r} (first: "
                             f"{absent[0]!r}); the download is incomplete or the filelist is another split's")
    out = Path(out)
    fingerprint = _fingerprint(sizes, f"places:{json.dumps(labels, sort_keys=True) if labels else ''}")
    done = _already_done(out, fingerprint, overwrite)
    if done is not None:
        return done
    staging = _staging(out)
    names = sorted(n for n in members if labels is None or n in labels)
    if archive.is_dir():
        for name in tqdm(names, desc="Places-365 val", unit="img", disable=not progress):
            _place(members[name], staging / SPLIT / name)
    else:
        with tarfile.open(archive) as tar:
            for name in tqdm(names, desc="Places-365 val", unit="img", disable=not progress):
                dst, member = staging / SPLIT / name, members[name]
                if dst.is_file() and dst.stat().st_size == member.size:
                    continue  # resumed: already extracted
                tmp = dst.with_name(name + ".tmp")
                with tar.extractfile(member) as src, open(tmp, "wb") as f:
                    shutil.copyfileobj(src, f)
                os.replace(tmp, dst)
    records = [{"file_name": n, **({"label": labels[n]} if labels is not None else {})} for n in names]
    stamp = {"source": str(archive.resolve()), "kind": "places365_val", "count": len(records),
             "labelled": labels is not None, "fingerprint": fingerprint}
    return _finish(staging, out, records, stamp)


def dci_main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(prog="prh prepare-dci", description="DCI imagefolder (images + metadata.jsonl) "
                                "from the official download")
    p.add_argument("--source", required=True, help="the unpacked densely_captioned_images folder (with photos/)")
    p.add_argument("--out", required=True, help="output folder, params.yaml's dci.repo (data/dci)")
    p.add_argument("--overwrite", action="store_true", help="replace an out folder made from another source")
    p.add_argument("--no-progress", action="store_true")
    a = p.parse_args(argv)
    try:
        stamp = prepare_dci(source=a.source, out=a.out, overwrite=a.overwrite, progress=not a.no_progress)
    except ValueError as e:
        raise SystemExit(f"prh prepare-dci: {e}") from None
    print(f"{a.out}: {stamp['count']} DCI images with dense captions")


def places_main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(prog="prh prepare-places", description="Places-365 validation imagefolder "
                                "from val_256.tar")
    p.add_argument("--archive", required=True, help="val_256.tar, or the folder it unpacks to")
    p.add_argument("--filelist", default=None, help="places365_val.txt or filelist_places365-standard.tar (labels)")
    p.add_argument("--out", required=True, help="output folder, params.yaml's places365_val.repo")
    p.add_argument("--overwrite", action="store_true", help="replace an out folder made from another source")
    p.add_argument("--no-progress", action="store_true")
    a = p.parse_args(argv)
    try:
        stamp = prepare_places(archive=a.archive, filelist=a.filelist, out=a.out, overwrite=a.overwrite,
                               progress=not a.no_progress)
    except ValueError as e:
        raise SystemExit(f"prh prepare-places: {e}") from None
    print(f"{a.out}: {stamp['count']} Places-365 validation images")
