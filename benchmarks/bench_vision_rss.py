"""Host memory of a VTAB-size vision extraction: 10,000 images stored at 518 px (8.05 GB, memory-mapped
as the paper suite stores them) through ``extract_vision_features`` with a batch checkpoint (so the images are
fingerprinted, as every ``prh extract-vision`` job does), a tiny timm ViT so the pixels, not the model, dominate.

Prints the peak anonymous RSS (what a job's memory limit is about: the memory map's file pages are the image array
itself, reclaimable page cache) sampled every 0.1 s, for the extraction and, with ``--whole-copy``, for the
fingerprint as it was before (``tobytes()`` of the whole array).

    python benchmarks/bench_vision_rss.py --dir /tmp/vtab [--n 10000] [--whole-copy]
"""

from __future__ import annotations

import argparse
import hashlib
import tempfile
import threading
import time
from pathlib import Path

import numpy as np

from prh.bench import proc_status_kib


def rss_anon_kb() -> int:
    return proc_status_kib("RssAnon") or 0


class PeakAnon:
    def __init__(self):
        self.peak, self._stop = rss_anon_kb(), threading.Event()
        self._t = threading.Thread(target=self._run, daemon=True)

    def _run(self):
        while not self._stop.is_set():
            self.peak = max(self.peak, rss_anon_kb())
            time.sleep(0.1)

    def __enter__(self):
        self.base = rss_anon_kb()
        self._t.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        self._t.join()
        self.peak = max(self.peak, rss_anon_kb())


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--dir", default=None, help="where to write images.npy (default: a temporary folder)")
    p.add_argument("--n", type=int, default=10_000)
    p.add_argument("--whole-copy", action="store_true", help="also measure the old whole-array fingerprint")
    a = p.parse_args()
    import timm
    import torch

    from prh.features import extract_vision_features

    torch.set_num_threads(2)
    folder = Path(a.dir or tempfile.mkdtemp())
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "images.npy"
    shape = (a.n, 518, 518, 3)
    if not path.exists() or np.load(path, mmap_mode="r").shape != shape:
        tile = np.random.default_rng(0).integers(0, 256, size=(100, *shape[1:]), dtype=np.uint8)
        out = np.lib.format.open_memmap(path, mode="w+", dtype=np.uint8, shape=shape)
        for start in range(0, a.n, 100):
            out[start:start + 100] = tile[: min(100, a.n - start)]
        out.flush()
        del out
    images = np.load(path, mmap_mode="r")
    model = timm.create_model("vit_tiny_patch16_224", depth=2, pretrained=False).eval()
    cfg = timm.data.resolve_data_config({}, model=model)
    with PeakAnon() as m, tempfile.TemporaryDirectory() as ckpt:
        t0 = time.perf_counter()
        feats = extract_vision_features(model, images, pooling="cls", mean=cfg["mean"], std=cfg["std"],
                                        input_size=cfg["input_size"], crop_pct=cfg["crop_pct"], batch_size=64,
                                        checkpoint_dir=ckpt, progress=False)
        seconds = time.perf_counter() - t0
    print(f"extraction of {a.n} images ({images.nbytes / 1e9:.2f} GB memory-mapped) -> {tuple(feats.shape)} in "
          f"{seconds:.0f} s: peak anonymous RSS {m.peak / 2**20:.2f} GiB ({(m.peak - m.base) / 2**20:.2f} GiB above "
          "the start)")
    if a.whole_copy:
        with PeakAnon() as m:
            hashlib.sha256(np.asarray(images).tobytes()).hexdigest()
        print(f"the old fingerprint alone (tobytes of the whole array): peak anonymous RSS {m.peak / 2**20:.2f} GiB "
              f"({(m.peak - m.base) / 2**20:.2f} GiB above the start)")


if __name__ == "__main__":
    main()
