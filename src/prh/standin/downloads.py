"""Stand-in manual downloads: DCI and Places-365 validation, laid out as the official downloads.

The paper suite's two local datasets are built by ``prh prepare-dci`` / ``prh prepare-places``
(``prh.data.prepare``) from downloads a user fetches by hand (``datasets.<name>.prepare`` in
params.yaml: ``source``, ``filelist``). ``build_download_standins`` writes tiny synthetic versions
of those downloads, in exactly the layout the prepare functions read, so the prepare rules and
``prh fetch-dataset`` run on a machine without them:

- DCI: ``densely_captioned_images/`` with ``complete/sa_<id>.json`` (``image``, ``short_caption``,
  ``extra_caption``, ``mask_data``, ``mask_keys``), ``splits.json`` (train / valid / test lists of
  annotation file names) and ``photos/sa_<id>.jpg``;
- Places-365: ``val_256.tar`` holding ``val_256/Places365_val_<8 digits>.jpg`` and
  ``places365_val.txt`` (``<file> <class index 0..364>`` per line).

Each stand-in says so: ``STANDIN.txt`` (``STANDIN_NOTE``) in the DCI folder, beside ``val_256.tar``
and inside it (a ``.txt`` member, which ``prepare_places`` skips). The synthetic content (seeded
images, captions, tar members with fixed metadata) is defined here and shared with
``prh.standin.datasets``.
"""

from __future__ import annotations

import hashlib
import io
import json
import tarfile
from pathlib import Path

import numpy as np

from prh.standin.cache import STANDIN_NOTE

__all__ = ["build_download_standins", "seeded_rng", "synthetic_caption", "synthetic_image", "tar_add",
           "write_dci_download", "write_places_download"]

PLACES_CLASSES = 365
NOTE_FILE = "STANDIN.txt"
WORDS = {
    "adj": "red green blue small large old new bright dark striped wooden metal".split(),
    "noun": "cat dog car boat house tree bird chair road flower bridge horse".split(),
    "place": ["on a street", "in a field", "by the sea", "in a room", "under a tree", "at night", "in the snow"],
}


def seeded_rng(seed: int, *names: str) -> np.random.Generator:
    """A generator seeded by ``seed`` and names (repo, split): one stream per stand-in part, so a
    partial build (``only=``) writes the same bytes as a full one."""
    ints = [int(hashlib.sha256(n.encode()).hexdigest()[:8], 16) for n in names]
    return np.random.default_rng([seed, *ints])


def synthetic_image(rng: np.random.Generator, fmt: str = "PNG") -> bytes:
    """A random RGB image of 16 to 40 pixels a side, encoded as ``fmt`` (a PIL format name)."""
    from PIL import Image

    h, w = (int(v) for v in rng.integers(16, 41, size=2))
    buf = io.BytesIO()
    Image.fromarray(rng.integers(0, 256, (h, w, 3), dtype=np.uint8)).save(buf, format=fmt)
    return buf.getvalue()


def synthetic_caption(rng: np.random.Generator) -> str:
    """A short caption such as 'a red cat in a field'."""
    return " ".join(["a", *(str(rng.choice(WORDS[k])) for k in ("adj", "noun", "place"))])


def tar_add(tar: tarfile.TarFile, name: str, data: bytes) -> None:
    """Add a member with fixed metadata (mtime 0, mode 644): the same bytes on every build."""
    info = tarfile.TarInfo(name)
    info.size, info.mtime, info.mode = len(data), 0, 0o644
    tar.addfile(info, io.BytesIO(data))


def _under(root: Path, rel: str, what: str) -> Path:
    """``rel`` (a params path such as ``./downloads/val_256.tar``) resolved under ``root``."""
    if Path(rel).expanduser().is_absolute() or rel.startswith("~"):
        raise ValueError(f"{what}={rel!r} is an absolute path; the stand-in writes only under root={str(root)!r}")
    return (root / rel).resolve()


def write_dci_download(source: str | Path, *, rows: int = 24, seed: int = 0) -> Path:
    """Write a stand-in ``densely_captioned_images`` folder at ``source`` (or inside it, when ``source``
    has another name, as ``prepare_dci`` accepts either); return the folder."""
    folder = Path(source)
    if folder.name != "densely_captioned_images":
        folder = folder / "densely_captioned_images"
    for sub in ("complete", "photos"):
        (folder / sub).mkdir(parents=True, exist_ok=True)
    rng = seeded_rng(seed, "dci")
    names = []
    for i in range(rows):
        key = f"sa_{1000 + i}"
        masks = {}
        for m in range(int(rng.integers(1, 4))):
            quality = int(rng.choice([0, 0, 1, 2]))  # 0 good, 1 low quality (label only), 2 bad (left out)
            label = synthetic_caption(rng).split()[2]
            masks[str(m)] = {"idx": m, "mask_quality": quality, "label": label, "caption": synthetic_caption(rng),
                             "parent": -1, "requirements": [], "bounds": [[0, 0], [8, 8]], "area": 64}
        entry = {"image": f"{key}.jpg", "short_caption": synthetic_caption(rng).capitalize() + ".",
                 "extra_caption": f"There is {synthetic_caption(rng)}.", "mask_data": masks, "mask_keys": list(masks)}
        (folder / "complete" / f"{key}.json").write_text(json.dumps(entry, indent=1))
        (folder / "photos" / f"{key}.jpg").write_bytes(synthetic_image(rng, "JPEG"))
        names.append(f"{key}.json")
    cut = np.array_split(np.array(names), 3)
    splits = {"train": cut[0].tolist(), "valid": cut[1].tolist(), "test": cut[2].tolist()}
    (folder / "splits.json").write_text(json.dumps(splits, indent=1))
    (folder / NOTE_FILE).write_text(f"{STANDIN_NOTE}.\n")
    return folder


def write_places_download(archive: str | Path, filelist: str | Path | None = None, *, rows: int = 24,
                          seed: int = 0) -> Path:
    """Write a stand-in ``val_256.tar`` at ``archive`` (and ``places365_val.txt`` at ``filelist``); return the tar."""
    archive = Path(archive)
    archive.parent.mkdir(parents=True, exist_ok=True)
    rng = seeded_rng(seed, "places365_val")
    names = [f"Places365_val_{i:08d}.jpg" for i in range(1, rows + 1)]
    members = [(NOTE_FILE, f"{STANDIN_NOTE}.\n".encode())] + [(n, synthetic_image(rng, "JPEG")) for n in names]
    labels = rng.integers(0, PLACES_CLASSES, rows)
    with tarfile.open(archive, "w", format=tarfile.USTAR_FORMAT) as tar:
        for name, data in members:
            tar_add(tar, f"val_256/{name}", data)
    lines = [f"{n} {int(label)}" for n, label in zip(names, labels)]
    if filelist is not None:
        Path(filelist).parent.mkdir(parents=True, exist_ok=True)
        Path(filelist).write_text("\n".join(lines) + "\n")
    (archive.parent / NOTE_FILE).write_text(f"{STANDIN_NOTE}.\n")
    return archive


def build_download_standins(cfg: dict, root, *, rows: int = 24, seed: int = 0) -> list[dict]:
    """Write the stand-in download of every ``datasets.<name>.prepare`` of ``cfg`` under ``root``
    (its ``source`` / ``filelist`` paths resolved relative to ``root``).

    Returns
    -------
    One record per dataset: name, command (dci / places), rows, source, filelist (places only).
    """
    if rows < 3:
        raise ValueError(f"rows={rows} must be >= 3 (DCI's splits.json names a train, valid and test part)")
    root = Path(root)
    records = []
    for name, spec in (cfg.get("datasets") or {}).items():
        prep = spec.get("prepare")
        if not prep:
            continue
        source = _under(root, prep["source"], f"datasets.{name}.prepare.source")
        if prep.get("command") == "dci":
            records.append({"name": name, "command": "dci", "rows": rows,
                            "source": str(write_dci_download(source, rows=rows, seed=seed))})
        elif prep.get("command") == "places":
            filelist = (_under(root, prep["filelist"], f"datasets.{name}.prepare.filelist")
                        if prep.get("filelist") else None)
            write_places_download(source, filelist, rows=rows, seed=seed)
            records.append({"name": name, "command": "places", "rows": rows, "source": str(source),
                            "filelist": str(filelist) if filelist else None})
        else:
            raise ValueError(f"datasets.{name}.prepare.command={prep.get('command')!r} has no stand-in; "
                             "use dci or places")
    return records
