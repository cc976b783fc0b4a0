"""Vision at the reference's resolution and precision.

The reference (minyoungg/platonic-rep, ``extract_features.py``) feeds every timm model the
original image through the model's own eval transform,
``create_transform(**resolve_data_config(model.pretrained_cfg, model=model))``: resize the shorter
side to ``floor(input_size / crop_pct)`` (bicubic), centre-crop ``input_size``, normalise; the
model runs in float32 (``timm.create_model(...).cuda()``, no cast). Here the images are stored once
per dataset (``images.npy``), so the stored side must be at least the largest side any of the
suite's models resizes to, and the vision dtype is a param whose default is float32.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest
import torch
from safetensors.torch import load_file
import yaml
from PIL import Image

from prh.checks import check_config
from prh.config import load, schema_defaults
from prh.data.hub_datasets import materialize_hub_dataset
from prh.io import read_json

ROOT = Path(__file__).resolve().parents[1]
SIDE = 60          # the tiny model's input size
CROP_PCT = 0.9     # its crop_pct: timm resizes to floor(60 / 0.9) = 66 (round() would give 67)
RESIZE = math.floor(SIDE / CROP_PCT)
MEAN, STD = [0.4, 0.5, 0.6], [0.2, 0.25, 0.3]


def _tiny_vit(path: Path) -> Path:
    """A zoo-format timm ViT whose transform wants 60 px (crop_pct 0.9), saved to ``path``."""
    import timm
    from safetensors.torch import save_file

    path.mkdir(parents=True, exist_ok=True)
    torch.manual_seed(0)
    kw = {"img_size": SIDE, "patch_size": 12, "embed_dim": 16, "depth": 2, "num_heads": 2, "num_classes": 3}
    model = timm.create_model("vit_tiny_patch16_224", pretrained=False, **kw)
    cfg = {"timm_name": "vit_tiny_patch16_224", "timm_kwargs": kw, "pooling": "cls", "input_size": [3, SIDE, SIDE],
           "mean": MEAN, "std": STD, "interpolation": "bicubic", "crop_pct": CROP_PCT}
    (path / "config.json").write_text(json.dumps(cfg))
    save_file({k: v.contiguous() for k, v in model.state_dict().items()}, str(path / "model.safetensors"))
    return path


@pytest.fixture(scope="module")
def originals(tmp_path_factory):
    """Three photos 90 px high, 90 / 120 / 150 px wide, in an imagefolder (larger than anything stored below)."""
    root = tmp_path_factory.mktemp("photos")
    rng = np.random.default_rng(0)
    images = []
    for i in range(3):
        # smooth content plus noise, so resampling differences show
        yy, xx = np.mgrid[0:90, 0 : 90 + 30 * i]
        base = np.stack([(xx * (i + 1)) % 256, (yy * 2) % 256, (xx + yy) % 256], -1)
        arr = np.clip(base + rng.integers(-40, 40, base.shape), 0, 255).astype(np.uint8)
        Image.fromarray(arr).save(root / f"img{i}.png")
        images.append(Image.fromarray(arr))
    with open(root / "metadata.jsonl", "w") as f:
        for i in range(3):
            f.write(json.dumps({"file_name": f"img{i}.png", "text": f"photo {i}"}) + "\n")
    return root, images


def _fed_inputs(model_dir, data_dir, out, **kw):
    """Run ``extract_vision_dataset`` and capture the tensors the model's blocks receive."""
    from prh import extract
    from prh.models import loaders

    seen = []
    real = loaders.load_vision_model

    def spy(*a, **k):
        net, pre = real(*a, **k)
        # what the first block sees, whichever forward runs it (ViT blocks are pooled by hooks
        # under forward_features, checked once against forward_intermediates on one image)
        net.patch_embed.register_forward_pre_hook(lambda m, args: seen.append((args[0].detach().float().clone(),
                                                                                args[0].dtype)))
        return net, pre

    mp = pytest.MonkeyPatch()
    mp.setattr(loaders, "load_vision_model", spy)
    try:
        extract.extract_vision_dataset(model=str(model_dir), data=str(data_dir), out=str(out), progress=False, **kw)
    finally:
        mp.undo()
    full = max(x.shape[0] for x, _ in seen)
    return [s for s in seen if s[0].shape[0] == full]  # the batches, not the one-image check


def _reference_inputs(images):
    """The reference's transform (timm create_transform) on the original images."""
    from timm.data import create_transform

    t = create_transform(input_size=(3, SIDE, SIDE), interpolation="bicubic", mean=MEAN, std=STD,
                         crop_pct=CROP_PCT, crop_mode="center")
    return torch.stack([t(im) for im in images])


def test_model_gets_its_own_size_as_the_reference_transform(originals, tmp_path):
    """Stored at the model's resize side, the model sees exactly what timm's transform gives
    on the original (also for non-square originals: resize, then centre crop, as torchvision)."""
    root, images = originals
    materialize_hub_dataset(tmp_path / "data", repo=str(root), text_column="text", image_size=RESIZE)
    model = _tiny_vit(tmp_path / "vit")
    seen = _fed_inputs(model, tmp_path / "data", tmp_path / "f.safetensors", batch_size=8)
    x = seen[0][0]
    assert tuple(x.shape) == (3, 3, SIDE, SIDE)
    ref = _reference_inputs(images)
    assert torch.allclose(x, ref, atol=1e-5), float((x - ref).abs().max())
    assert not list((tmp_path / "data").glob(".*"))  # the memory-mapped partial file was renamed into place
    meta = read_json(tmp_path / "f.json")
    assert meta["stored_image_size"] == RESIZE and meta["resize_size"] == RESIZE and meta["upsampled"] is False


def test_storage_below_the_model_size_is_flagged(originals, tmp_path):
    """Originals of 90 px stored at 32 px and upsampled to 66: a warning and upsampled=True in the meta."""
    root, _ = originals
    meta = materialize_hub_dataset(tmp_path / "data", repo=str(root), text_column="text", image_size=32)
    assert meta["source_min_side"] == 90
    model = _tiny_vit(tmp_path / "vit")
    with pytest.warns(UserWarning, match="image_size"):
        _fed_inputs(model, tmp_path / "data", tmp_path / "f.safetensors")
    assert read_json(tmp_path / "f.json")["upsampled"] is True


def test_vision_runs_in_the_configured_dtype(originals, tmp_path):
    root, _ = originals
    materialize_hub_dataset(tmp_path / "data", repo=str(root), text_column="text", image_size=RESIZE)
    model = _tiny_vit(tmp_path / "vit")
    seen = _fed_inputs(model, tmp_path / "data", tmp_path / "f.safetensors", dtype="bfloat16")
    assert seen[0][1] == torch.bfloat16
    assert read_json(tmp_path / "f.json")["dtype"] == "bfloat16"


def test_vision_dtype_defaults_to_tf32_which_is_float32_on_a_cpu(originals, tmp_path, monkeypatch):
    """`params.yaml`, the schema and `prh extract-vision` default to tf32 (float32 weights and sums, TF32
    products on CUDA only: the precision study's bf16, 8x coarser, moved vision mutual k-NN by at most 0.0054); the
    rule passes it, and on a CPU it gives float32's numbers bit for bit, recorded as such in the meta."""
    from prh import extract
    from prh.config import EXTRACT_CONFIG

    assert schema_defaults("features")["vision_dtype"] == "tf32"
    assert check_config(load(ROOT / "params.yaml"))["features"]["vision_dtype"] == "tf32"  # (the schema's, filled)
    rule = (ROOT / "workflow" / "rules" / "features.smk").read_text().split("rule extract_language")[0]
    assert "--config {params.config}" in rule and "vision_dtype" in EXTRACT_CONFIG["vision"]["features"]
    root, _ = originals
    materialize_hub_dataset(tmp_path / "data", repo=str(root), text_column="text", image_size=RESIZE)
    model = _tiny_vit(tmp_path / "vit")
    feats = {}
    for dtype in ("tf32", "float32"):
        extract.vision_main(["--model", str(model), "--data", str(tmp_path / "data"), "--vision-dtype", dtype,
                             "--out", str(tmp_path / f"{dtype}.safetensors"), "--no-progress", "--device", "cpu"])
        feats[dtype] = load_file(str(tmp_path / f"{dtype}.safetensors"))["feats"]
        meta = read_json(tmp_path / f"{dtype}.json")
        assert meta["dtype"] == "float32" and meta["matmul_precision"] == "ieee"
    assert torch.equal(feats["tf32"], feats["float32"])
    got = {}
    monkeypatch.setattr(extract, "extract_vision_dataset", lambda **kw: got.update(kw))
    extract.vision_main(["--model", "m", "--data", "d", "--out", "o.safetensors"])
    assert got["dtype"] == "tf32"


def test_paper_datasets_are_stored_at_the_largest_model_size():
    """Every dataset the paper's vision models read is stored at >= the largest side their
    transforms resize to (DINOv2: 518 px), so no model sees images upsampled from 224."""
    import timm

    cfg = yaml.safe_load((ROOT / "params.yaml").read_text())
    need = {}
    for name in cfg["model_sets"]["prh_val_vision"]:
        pc = timm.models.get_pretrained_cfg(cfg["paper"]["models"][name]["repo"])
        need[name] = math.floor(pc.input_size[-1] / pc.crop_pct)
    assert max(need.values()) == 518
    suite = cfg["suites"]["paper"]
    read = {suite["paired_dataset"], suite["vision_dataset"], suite["density_dataset"]}
    read |= {d for d in cfg["datasets"] if d.startswith("vtab_")}
    small = {d: cfg["datasets"][d]["image_size"] for d in sorted(read) if cfg["datasets"][d]["image_size"] < 518}
    assert not small, f"stored below 518 px: {small}"
