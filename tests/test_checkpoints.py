"""Fig 2's ResNets: vision checkpoints on no hub (prh.models.checkpoints, prh.models.url_cache).

A plain-URL checkpoint is fetched once into the cache (a temporary file renamed into place), its SHA-256 pinned on
the first fetch in the lock file and checked on every later one (a mismatch is one line naming the URL, both hashes
and what to do); its keys are mapped by the layout its declaration names and loaded strictly. The random ResNet-50
is drawn from a seed. Nothing here reaches the network: the stand-in hub's file at the URL's cache path, ``file://``
URLs and a local HTTP server on 127.0.0.1 serve the files.
"""

from __future__ import annotations

import functools
import hashlib
import http.server
import threading
from pathlib import Path

import numpy as np
import pytest
import torch
import yaml

from prh.config import load, merge
from prh.errors import ConfigError, ModelNotAvailableError
from prh.models.checkpoints import checkpoint_models, map_keys, read_declarations, resolve_checkpoint
from prh.models.loaders import load_vision_model
from prh.models.url_cache import cache_path, fetch_checkpoint, read_lock
from prh.standin.checkpoints import build_checkpoint_standin, build_checkpoint_standins

ROOT = Path(__file__).resolve().parents[1]
PARAMS = load(ROOT / "params.yaml")


@pytest.fixture
def home(tmp_path, monkeypatch):
    """A Hugging Face home of its own (the checkpoint cache is <home>/prh-checkpoints) and a config whose lock is
    a new file there."""
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
    monkeypatch.delenv("PRH_CHECKPOINT_CACHE", raising=False)
    cfg = merge(PARAMS, {"paper": {"checkpoints": {"file": str(ROOT / "workflow/resources/checkpoints.yaml"),
                                                   "lock": str(tmp_path / "checkpoints.lock.yaml")}}})
    return tmp_path / "hf", cfg


def _declared(tmp_path, entries: dict, layouts: dict | None = None) -> dict:
    """A config whose paper.models are ``entries`` (name -> declaration), declared in a file of their own."""
    decl = {"layouts": layouts or {}, "preprocess": read_declarations(ROOT / "workflow/resources/checkpoints.yaml")[
        "preprocess"], "checkpoints": entries}
    (tmp_path / "decl.yaml").write_text(yaml.safe_dump(decl))
    models = {n: {"source": "url" if e.get("url") else "random", "repo": n, "modality": "vision", "n_params": 1}
              for n, e in entries.items()}
    return {"paper": {"checkpoints": {"file": str(tmp_path / "decl.yaml"), "lock": str(tmp_path / "lock.yaml")},
                      "models": models}}


def test_the_paper_config_declares_every_checkpoint_it_plans():
    """26 models on no hub: the seeded random ResNet-50 and 25 plain-URL encoders, each resolving to its
    declaration (architecture, layout, preprocessing), every URL once, nothing pinned by a hand-made hash."""
    names = checkpoint_models(PARAMS)
    assert len(names) == 26 and checkpoint_models(PARAMS, source="random") == ["resnet50-random"]
    specs = [resolve_checkpoint(PARAMS, n) for n in names]
    urls = [s["url"] for s in specs if s["source"] == "url"]
    assert len(urls) == len(set(urls)) == 25 and all(u.startswith(("http://", "https://")) for u in urls)
    assert {s["arch"] for s in specs} == {"resnet50", "smallalexnet"}
    assert all(s["layout"] in ({"state_dict_key": "state_dict", "keep_prefix": "module.encoder_q.",
                                "drop_prefixes": ["fc."]}, {"drop_prefixes": ["blocks.7."]}) for s in specs if "url" in s)
    assert read_lock(ROOT / "workflow/resources/checkpoints.lock.yaml") == {}  # pinned on the first real fetch


def test_a_stand_in_loads_through_the_real_loader_which_pins_its_sha256_and_maps_its_keys(home):
    """The stand-in hub's file for one URL model sits at the URL's cache path in MoCo's layout; the loader finds
    it, records its SHA-256 in the (empty) lock, maps module.encoder_q.* onto the ResNet (dropping the fc head and
    the queue) and loads it strictly; a second load checks the pin."""
    hf, cfg = home
    spec = resolve_checkpoint(cfg, "resnet50-moco-in1k")
    path, digest = build_checkpoint_standin(spec, hf / "prh-checkpoints")
    assert path == cache_path(spec["url"]) and read_lock(spec["lock"]) == {}
    raw = torch.load(path, weights_only=True)
    keys = set(raw["state_dict"])
    assert {"module.encoder_q.conv1.weight", "module.encoder_q.fc.0.weight", "queue"} <= keys
    with pytest.warns(UserWarning, match="STAND-IN"):
        model, pre = load_vision_model("resnet50-moco-in1k", checkpoint=spec)
    assert read_lock(spec["lock"]) == {spec["url"]: digest} and pre["sha256"] == digest
    assert digest == hashlib.sha256(path.read_bytes()).hexdigest()
    mapped = map_keys(raw, spec["layout"])
    assert "fc.0.weight" not in mapped and "queue" not in mapped
    for k, v in model.state_dict().items():
        assert torch.equal(v, mapped[k]), k
    assert pre["input_size"] == [3, 224, 224] and pre["pooling"] == "avg" and pre["crop_pct"] == 0.875
    with pytest.warns(UserWarning, match="STAND-IN"):
        load_vision_model("resnet50-moco-in1k", checkpoint=spec)  # checked against the pin: no error
    assert read_lock(spec["lock"]) == {spec["url"]: digest}


def test_a_mismatched_sha256_is_refused_with_one_line(home):
    hf, cfg = home
    spec = resolve_checkpoint(cfg, "resnet50-moco-in1k")
    path, digest = build_checkpoint_standin(spec, hf / "prh-checkpoints")
    wrong = "0" * 64
    Path(spec["lock"]).write_text(yaml.safe_dump({spec["url"]: wrong}))
    with pytest.raises(ConfigError) as err:
        load_vision_model("resnet50-moco-in1k", checkpoint=spec)
    msg = str(err.value)
    assert "\n" not in msg
    for part in (spec["url"], f"SHA-256 {digest}", f"pins {wrong}", str(path), "Delete", "prh pin-checkpoints"):
        assert part in msg, part
    assert path.exists() and read_lock(spec["lock"]) == {spec["url"]: wrong}  # nothing re-pinned


def test_a_fresh_download_that_mismatches_never_reaches_the_cache_path(tmp_path, monkeypatch):
    monkeypatch.setenv("PRH_CHECKPOINT_CACHE", str(tmp_path / "cache"))
    src = tmp_path / "served.pth"
    torch.save({"w": torch.ones(2)}, src)
    cfg = _declared(tmp_path, {"m": {"url": src.as_uri(), "arch": "resnet18", "preprocess": "imagenet_torchvision",
                                     "sha256": "f" * 64}})
    with pytest.raises(ConfigError, match=f"has SHA-256 {hashlib.sha256(src.read_bytes()).hexdigest()}"):
        fetch_checkpoint(resolve_checkpoint(cfg, "m"))
    dest = cache_path(src.as_uri())
    assert not dest.exists() and list(dest.parent.iterdir()) == []  # the temporary file was removed too


def _serve(folder: Path):
    handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=str(folder))
    handler.log_message = lambda *a: None
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


def test_an_http_checkpoint_is_fetched_once_pinned_and_equals_the_torchvision_network(tmp_path, monkeypatch):
    """A MoCo-layout torchvision ResNet-18 served over HTTP on 127.0.0.1: fetched into the cache once (a second
    load does not ask the server), pinned, and the timm network it loads into computes what torchvision's does."""
    import torchvision

    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.setenv("PRH_CHECKPOINT_CACHE", str(tmp_path / "cache"))
    torch.manual_seed(0)
    tv = torchvision.models.resnet18(num_classes=128).eval()
    for m in tv.modules():  # non-trivial batch-norm statistics, so a key mapped wrongly shows
        if isinstance(m, torch.nn.BatchNorm2d):
            m.running_mean.uniform_(-0.5, 0.5), m.running_var.uniform_(0.5, 2)
    state = {f"module.encoder_q.{k}": v for k, v in tv.state_dict().items()}
    state["module.encoder_k.conv1.weight"] = tv.conv1.weight.clone()
    (tmp_path / "www").mkdir()
    torch.save({"state_dict": state, "epoch": 200, "arch": "resnet18"}, tmp_path / "www" / "checkpoint_0199.pth.tar")
    server = _serve(tmp_path / "www")
    try:
        url = f"http://127.0.0.1:{server.server_address[1]}/checkpoint_0199.pth.tar"
        cfg = _declared(tmp_path, {"moco18": {"url": url, "arch": "resnet18", "layout": "moco_query",
                                              "preprocess": "imagenet_torchvision"}},
                        layouts={"moco_query": {"state_dict_key": "state_dict", "keep_prefix": "module.encoder_q.",
                                                "drop_prefixes": ["fc."]}})
        spec = resolve_checkpoint(cfg, "moco18")
        model, pre = load_vision_model("moco18", checkpoint=spec)
        served = (tmp_path / "www" / "checkpoint_0199.pth.tar").read_bytes()
        assert cache_path(url).read_bytes() == served
        assert read_lock(spec["lock"]) == {url: hashlib.sha256(served).hexdigest()} == {url: pre["sha256"]}
        assert [p.name for p in cache_path(url).parent.iterdir()] == [cache_path(url).name]  # no temporary left
    finally:
        server.shutdown()
    load_vision_model("moco18", checkpoint=spec)  # the server is gone: the cached, pinned copy loads
    x = torch.randn(2, 3, 64, 64)
    with torch.no_grad():
        ours = model.forward_intermediates(x, intermediates_only=True)[-1]
        theirs = tv.layer4(tv.layer3(tv.layer2(tv.layer1(tv.maxpool(tv.relu(tv.bn1(tv.conv1(x))))))))
    torch.testing.assert_close(ours, theirs)


def test_a_layout_that_does_not_fit_lists_the_missing_and_unexpected_keys(tmp_path, monkeypatch):
    monkeypatch.setenv("PRH_CHECKPOINT_CACHE", str(tmp_path / "cache"))
    import timm

    state = {f"module.{k}": v for k, v in timm.create_model("resnet18", num_classes=10).state_dict().items()}
    del state["module.conv1.weight"]
    torch.save({"state_dict": state}, tmp_path / "ck.pth")
    cfg = _declared(tmp_path, {"r18": {"url": (tmp_path / "ck.pth").as_uri(), "arch": "resnet18",
                                       "layout": {"state_dict_key": "state_dict", "strip_prefixes": ["module."]},
                                       "preprocess": "imagenet_torchvision"}})
    with pytest.raises(ConfigError) as err:
        load_vision_model("r18", checkpoint=resolve_checkpoint(cfg, "r18"))
    msg = str(err.value)
    assert "missing keys 1 (conv1.weight)" in msg and "unexpected keys 2 (fc.bias, fc.weight)" in msg
    assert "drop_prefixes" in msg


def test_offline_an_uncached_url_checkpoint_names_the_fetch_command(tmp_path, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("PRH_CHECKPOINT_CACHE", str(tmp_path / "cache"))
    cfg = merge(PARAMS, {"paper": {"checkpoints": {"lock": str(tmp_path / "lock.yaml")}}})
    spec = resolve_checkpoint(cfg, "alexnet-au-stat-wmm")
    with pytest.raises(ModelNotAvailableError, match="prh pin-checkpoints") as err:
        load_vision_model("alexnet-au-stat-wmm", checkpoint=spec)
    assert spec["url"] in str(err.value) and "HF_HUB_OFFLINE" in str(err.value)
    from prh.models.hub_cache import missing_hub_items

    only = {"paper": {"checkpoints": cfg["paper"]["checkpoints"],
                      "models": {"alexnet-au-stat-wmm": cfg["paper"]["models"]["alexnet-au-stat-wmm"]}}}
    lines = missing_hub_items(only, cache_dir=tmp_path / "hub", datasets_cache_dir=tmp_path / "ds")
    assert len(lines) == 1 and "checkpoint alexnet-au-stat-wmm" in lines[0] and "prh pin-checkpoints" in lines[0]


def test_the_random_resnet50_is_drawn_from_its_seed():
    spec = resolve_checkpoint(PARAMS, "resnet50-random")
    assert "url" not in spec and spec["seed"] == 0
    a, pre = load_vision_model("resnet50-random", checkpoint=spec)
    b, _ = load_vision_model("resnet50-random", checkpoint=spec)
    c, _ = load_vision_model("resnet50-random", checkpoint={**spec, "seed": 1})
    assert pre["sha256"] is None and sum(p.numel() for p in a.parameters()) == 23508032
    assert all(torch.equal(v, b.state_dict()[k]) for k, v in a.state_dict().items())
    assert not torch.equal(a.conv1.weight, c.conv1.weight)
    # torchvision's initialisation: a block's last batch norm starts at 1, not timm's zero
    assert torch.all(a.layer1[0].bn3.weight == 1)


def test_stand_ins_of_both_architectures_extract_features_and_the_hub_pins_them(home, tmp_path):
    """`prh standin-hub`'s URL stand-ins: every one built and pinned in the config's lock; the ResNet-50 and the
    SmallAlexNet ones go through `extract_vision_dataset` as the workflow's job does (--checkpoint)."""
    from prh.extract import extract_vision_dataset
    from prh.io import load_features

    hf, cfg = home
    built = build_checkpoint_standins(cfg, hf)
    assert len(built) == 25 and read_lock(cfg["paper"]["checkpoints"]["lock"]) == {b["url"]: b["sha256"] for b in built}
    data = tmp_path / "data"
    data.mkdir()
    np.save(data / "images.npy", np.random.default_rng(0).integers(0, 256, (5, 96, 96, 3), dtype=np.uint8))
    for name, layers in (("resnet50-moco-in1k", 5), ("alexnet-au-stat-wmm", 7)):
        spec = resolve_checkpoint(cfg, name)
        out = tmp_path / f"{name}.safetensors"
        with pytest.warns(UserWarning, match="STAND-IN"):
            extract_vision_dataset(model=name, data=data, out=out, name=name, batch_size=2, device="cpu",
                                   progress=False, checkpoint=spec)
        feats, meta = load_features(out, with_meta=True)
        assert feats.shape[:2] == (5, layers) and torch.isfinite(feats).all()
        assert meta["checkpoint"]["url"] == spec["url"] and meta["checkpoint"]["sha256"] == read_lock(spec["lock"])[spec["url"]]


def test_the_stand_in_hub_refuses_the_committed_lock(home):
    hf, cfg = home
    committed = merge(cfg, {"paper": {"checkpoints": {"lock": str(ROOT / "workflow/resources/checkpoints.lock.yaml")}}})
    with pytest.raises(SystemExit, match="committed lock"):
        build_checkpoint_standins(committed, hf)


def test_pin_checkpoints_fetches_and_pins_every_url_of_the_config(tmp_path, monkeypatch, capsys):
    from prh.models.checkpoints import pin_main as main

    monkeypatch.setenv("PRH_CHECKPOINT_CACHE", str(tmp_path / "cache"))
    files = {}
    for name in ("a", "b"):
        files[name] = tmp_path / f"{name}.pth"
        torch.save({"w": torch.full((3,), float(ord(name)))}, files[name])
    cfg = _declared(tmp_path, {n: {"url": p.as_uri(), "arch": "resnet18", "preprocess": "imagenet_torchvision"}
                               for n, p in files.items()})
    (tmp_path / "params.yaml").write_text(yaml.safe_dump(cfg))
    main(["--params", str(tmp_path / "params.yaml"), "--dry-run"])
    assert "not pinned yet" in capsys.readouterr().out and not (tmp_path / "lock.yaml").exists()
    main(["--params", str(tmp_path / "params.yaml")])
    assert read_lock(tmp_path / "lock.yaml") == {p.as_uri(): hashlib.sha256(p.read_bytes()).hexdigest()
                                                 for p in files.values()}
    assert "2 URL checkpoints fetched" in capsys.readouterr().out
    assert (tmp_path / "lock.yaml").read_text().startswith("# SHA-256 of every plain-URL checkpoint")


def test_a_declaration_that_does_not_fit_its_model_is_a_config_error(tmp_path):
    from prh.checks import check_references

    cfg = _declared(tmp_path, {"r": {"seed": 0, "arch": "resnet50", "preprocess": "imagenet_torchvision"}})
    cfg["paper"]["models"]["r"]["source"] = "url"
    cfg["paper"]["models"]["ghost"] = {"source": "random", "repo": "nowhere", "modality": "vision", "n_params": 1}
    with pytest.raises(ConfigError) as err:
        check_references({**cfg, "model_sets": {}, "datasets": {}})
    assert "declares a seed" in str(err.value) and "'nowhere' is not declared" in str(err.value)
