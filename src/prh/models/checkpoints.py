"""Vision checkpoints that are on no hub: plain-URL weights and seeded random initialisations (PRH Fig 2's ResNets).

``paper.models.<name>`` with ``source: url`` or ``source: random`` names (``repo``) an entry of the declarations file
``paper.checkpoints.file`` (default ``workflow/resources/checkpoints.yaml``), which says, per checkpoint:

- ``arch`` (+ ``arch_args``): a timm architecture (``resnet50``: the torchvision layout, same keys) or
  ``smallalexnet`` (``prh.models.smallalexnet``), built without a classifier head;
- ``url`` and ``layout``: where the weights are and how the file's keys map onto the architecture (a layout named
  under ``layouts:`` or written inline); or ``seed``: no download, weights drawn from that seed (deterministic);
- ``preprocess``: the input transform the training authors evaluate with (named under ``preprocess:`` or inline);
- optionally ``sha256``; else the SHA-256 is pinned on first fetch in the lock file (``prh.models.url_cache``).

A layout: ``state_dict_key`` (the dict inside the file, e.g. ``state_dict``; null: the file is the state dict),
``keep_prefix`` (only keys under it, with it stripped: ``module.encoder_q.`` of MoCo), ``strip_prefixes`` (removed
where present: ``module.``, ``encoder.``, ``backbone.``) and ``drop_prefixes`` (keys left out after that: projection
heads such as ``fc.``). What remains must match the architecture exactly: loading is strict, and a mismatch is one
error listing the missing and unexpected keys.

The workflow resolves a model's entry once (``resolve_checkpoint``, torch-free: rules call it while Snakemake parses)
and hands it to ``prh extract-vision --checkpoint JSON``; ``load_checkpoint_model`` builds the model from it.
"""

from __future__ import annotations

import copy
import functools
import os
from pathlib import Path

import yaml

from prh.config import ROOT
from prh.errors import ConfigError

__all__ = ["SOURCES", "DEFAULT_FILE", "DEFAULT_LOCK", "STANDIN_KEY", "read_declarations", "checkpoint_models",
           "resolve_checkpoint", "map_keys", "build_architecture", "load_checkpoint_model", "pin_main"]

SOURCES = ("url", "random")  # paper.models sources this module loads (hub models: prh.models.loaders)
DEFAULT_FILE = "workflow/resources/checkpoints.yaml"
DEFAULT_LOCK = "workflow/resources/checkpoints.lock.yaml"
# a stand-in file (prh.standin.checkpoints) says so under this key, with the arch_args that shrink it
STANDIN_KEY = "prh_standin"
LAYOUT_KEYS = {"state_dict_key", "keep_prefix", "strip_prefixes", "drop_prefixes"}
PREPROCESS_KEYS = {"input_size", "mean", "std", "interpolation", "crop_pct"}


@functools.lru_cache(maxsize=8)
def _parsed(path: str, mtime_ns: int) -> dict:
    return yaml.safe_load(Path(path).read_text()) or {}


def read_declarations(path: str | os.PathLike = DEFAULT_FILE) -> dict:
    """The declarations file: ``{"layouts", "preprocess", "checkpoints"}`` (parsed once per process and change)."""
    path = Path(path)
    if not path.is_file() and not path.is_absolute() and (ROOT / path).is_file():
        path = ROOT / path  # a relative path read outside the workflow's folder: this checkout's file
    if not path.is_file():
        raise ConfigError(f"{path}: the checkpoint declarations file (paper.checkpoints.file) does not exist")
    data = copy.deepcopy(_parsed(str(path.resolve()), path.stat().st_mtime_ns))
    if not isinstance(data.get("checkpoints"), dict):
        raise ConfigError(f"{path}: needs a `checkpoints:` mapping of name -> {{arch, url | seed, layout, preprocess}}")
    return {"layouts": data.get("layouts") or {}, "preprocess": data.get("preprocess") or {},
            "checkpoints": data["checkpoints"]}


def checkpoint_models(cfg: dict, *, source: str | None = None) -> list[str]:
    """The ``paper.models`` names this module loads (``source`` url or random; one of them with ``source``)."""
    models = (cfg.get("paper") or {}).get("models") or {}
    return [m for m, s in models.items() if s.get("source") in ((source,) if source else SOURCES)]


def _named(value, table: dict, what: str, where: str) -> dict:
    if isinstance(value, str):
        if value not in table:
            raise ConfigError(f"{where}: {what} {value!r} is not declared under `{what}:` ({', '.join(table)})")
        return dict(table[value])
    return dict(value or {})


def resolve_checkpoint(cfg: dict, name: str, declarations: dict | None = None) -> dict:
    """The full spec of ``paper.models.<name>`` (a url or random model): the declaration with its layout and
    preprocessing looked up, plus ``name``, ``source`` and ``lock``. Torch-free: the rules call it while parsing."""
    spec = ((cfg.get("paper") or {}).get("models") or {}).get(name)
    if not spec or spec.get("source") not in SOURCES:
        raise ConfigError(f"paper.models.{name} is not a checkpoint of source {' or '.join(SOURCES)}")
    files = {"file": DEFAULT_FILE, "lock": DEFAULT_LOCK, **((cfg.get("paper") or {}).get("checkpoints") or {})}
    decl = declarations or read_declarations(files["file"])
    entry = decl["checkpoints"].get(spec["repo"])
    where = f"{files['file']}, checkpoints.{spec['repo']}"
    if entry is None:
        raise ConfigError(f"paper.models.{name}: repo {spec['repo']!r} is not declared in {files['file']} "
                          f"(checkpoints: {', '.join(decl['checkpoints'])})")
    if not entry.get("arch"):
        raise ConfigError(f"{where}: no `arch` (a timm architecture such as resnet50, or smallalexnet)")
    kind = "url" if entry.get("url") else "random" if entry.get("seed") is not None else None
    if kind != spec["source"]:
        raise ConfigError(f"paper.models.{name} has source {spec['source']!r} but {where} declares "
                          f"{'a url' if kind == 'url' else 'a seed' if kind else 'neither a url nor a seed'}")
    out = {"name": name, "source": kind, "arch": entry["arch"], "arch_args": dict(entry.get("arch_args") or {}),
           "preprocess": _named(entry.get("preprocess"), decl["preprocess"], "preprocess", where)}
    if set(out["preprocess"]) != PREPROCESS_KEYS:
        raise ConfigError(f"{where}: preprocess needs exactly {sorted(PREPROCESS_KEYS)}")
    if kind == "random":
        return {**out, "seed": int(entry["seed"])}
    layout = _named(entry.get("layout"), decl["layouts"], "layouts", where)
    if set(layout) - LAYOUT_KEYS:
        raise ConfigError(f"{where}: unknown layout keys {sorted(set(layout) - LAYOUT_KEYS)}; allowed: "
                          f"{sorted(LAYOUT_KEYS)}")
    return {**out, "url": entry["url"], "layout": layout, "lock": files["lock"],
            **({"sha256": entry["sha256"], "sha256_in": where} if entry.get("sha256") else {})}


def map_keys(state: dict, layout: dict) -> dict:
    """The state dict the architecture loads: ``layout`` applied to a loaded checkpoint (module docstring)."""
    key = layout.get("state_dict_key")
    if key:
        if not isinstance(state, dict) or key not in state:
            found = sorted(state)[:8] if isinstance(state, dict) else type(state).__name__
            raise ConfigError(f"the checkpoint has no {key!r} entry (state_dict_key); it holds {found}")
        state = state[key]
    if not isinstance(state, dict):
        raise ConfigError(f"the checkpoint's state dict is a {type(state).__name__}, not a mapping of tensors")
    keep = layout.get("keep_prefix")
    if keep:
        state = {k[len(keep):]: v for k, v in state.items() if k.startswith(keep)}
    out = {}
    for k, v in state.items():
        for prefix in layout.get("strip_prefixes") or ():
            k = k[len(prefix):] if k.startswith(prefix) else k
        if not k.startswith(tuple(layout.get("drop_prefixes") or ())):
            out[k] = v
    return out


def build_architecture(arch: str, arch_args: dict | None = None):
    """The module of ``arch`` with no classifier head: a timm name (``num_classes=0``) or ``smallalexnet``."""
    args = dict(arch_args or {})
    if arch == "smallalexnet":
        from prh.models.smallalexnet import SmallAlexNet

        return SmallAlexNet(**args)
    import timm

    if arch not in timm.list_models():
        raise ConfigError(f"arch {arch!r} is neither smallalexnet nor a timm architecture (timm.list_models())")
    return timm.create_model(arch, pretrained=False, num_classes=0, **args)


def _load_file(path: Path):
    """``torch.load`` with weights only (no code runs), allowing the plain objects training scripts store beside the
    weights (argparse.Namespace, NumPy scalars)."""
    import argparse

    import numpy as np
    import torch

    multiarray = getattr(getattr(np, "_core", None), "multiarray", None)  # NumPy 2 (1.x: np.core)
    multiarray = multiarray if hasattr(multiarray, "scalar") else np.core.multiarray
    safe = [argparse.Namespace, np.dtype, multiarray.scalar,
            *(type(np.dtype(t)) for t in (np.float64, np.float32, np.int64))]
    try:
        with torch.serialization.safe_globals(safe):
            return torch.load(path, map_location="cpu", weights_only=True)
    except Exception as e:  # noqa: BLE001 - its hash is the pinned one: the file is as published, not truncated
        raise ConfigError(f"{path} (its SHA-256 is the pinned one) cannot be read by torch.load(weights_only=True): "
                          f"{type(e).__name__}: {' '.join(str(e).split())[:300]}. If it pickles objects beyond "
                          "tensors, check what they are and allow their types in prh.models.checkpoints "
                          "(_load_file); weights_only stays on, so no code in the file runs") from None


def _strict_load(model, state: dict, spec: dict) -> None:
    mine = model.state_dict()
    missing = sorted(set(mine) - set(state))
    unexpected = sorted(set(state) - set(mine))
    shapes = sorted(k for k in set(mine) & set(state) if tuple(mine[k].shape) != tuple(state[k].shape))
    if missing or unexpected or shapes:
        def show(keys):
            return f"{len(keys)} ({', '.join(keys[:6])}{', ...' if len(keys) > 6 else ''})"
        raise ConfigError(
            f"checkpoint {spec['name']} ({spec.get('url')}) does not fit {spec['arch']} under its layout "
            f"{spec.get('layout')}: missing keys {show(missing)}, unexpected keys {show(unexpected)}, shapes differ "
            f"{show(shapes)}; fix its layout (keep_prefix, strip_prefixes, drop_prefixes) or arch in {DEFAULT_FILE}")
    model.load_state_dict(state, strict=True)


def load_checkpoint_model(spec: dict):
    """(model in eval mode, preprocess) of a resolved checkpoint spec: seeded random weights, or the URL's file
    (fetched and SHA-256 checked by ``prh.models.url_cache.fetch_checkpoint``) loaded strictly. ``preprocess`` is
    ``load_vision_model``'s, plus ``sha256``: the file's (None for a random model)."""
    import torch

    arch_args = dict(spec.get("arch_args") or {})
    state, sha256 = None, None
    if spec["source"] == "url":
        import warnings

        from prh.models.url_cache import fetch_checkpoint

        path, sha256 = fetch_checkpoint(spec)
        raw = _load_file(path)
        standin = raw.pop(STANDIN_KEY, None) if isinstance(raw, dict) else None
        if standin:  # a stand-in hub's tiny copy (prh.standin.checkpoints): its widths, never a real file's
            warnings.warn(f"{spec['name']}: {standin.get('note', 'a stand-in')}", UserWarning, stacklevel=2)
            arch_args.update(standin.get("arch_args") or {})
        state = map_keys(raw, spec["layout"])
    with torch.random.fork_rng(devices=[]):
        if spec["source"] == "random":
            torch.manual_seed(int(spec["seed"]))
        model = build_architecture(spec["arch"], arch_args)
    if state is not None:
        _strict_load(model, state, spec)
    pre = spec["preprocess"]
    return model.eval(), {"input_size": list(pre["input_size"]), "mean": list(pre["mean"]), "std": list(pre["std"]),
                          "pooling": "avg", "interpolation": pre["interpolation"], "crop_pct": float(pre["crop_pct"]),
                          "sha256": sha256}


def pin_main(argv: list[str] | None = None) -> None:
    """``prh pin-checkpoints``: fetch every plain-URL checkpoint of a config into the cache and pin its SHA-256.

        prh pin-checkpoints                      # params.yaml's; the hashes go into its lock: commit it
        prh pin-checkpoints --configfile X.yaml  # the config as Snakemake layers it
        prh pin-checkpoints --dry-run            # what is pinned, cached or missing; fetches nothing
    """
    import argparse

    from prh.config import load, merge
    from prh.models.url_cache import cache_path, cache_root, expected_sha256, fetch_checkpoint

    p = argparse.ArgumentParser(prog="prh pin-checkpoints", description="fetch every plain-URL checkpoint of a "
                                "config into the cache and pin its SHA-256 in the config's lock (needs network)")
    p.add_argument("--params", default="params.yaml", help="the base config (default: params.yaml)")
    p.add_argument("--configfile", action="append", default=[], help="a config layered on --params (repeatable)")
    p.add_argument("--dry-run", action="store_true", help="report what is pinned and cached; fetch nothing")
    a = p.parse_args(argv)
    cfg = load(a.params)
    for path in a.configfile:
        cfg = merge(cfg, load(path))
    count, lock = 0, None
    for name in checkpoint_models(cfg, source="url"):
        spec = resolve_checkpoint(cfg, name)
        expected, lock = expected_sha256(spec)[0], spec["lock"]
        if a.dry_run:
            state = "cached" if cache_path(spec["url"]).is_file() else "not cached"
            print(f"{name}: {spec['url']} {state}, sha256 {expected or 'not pinned yet'}")
            continue
        fetch_checkpoint(spec)
        count += 1
        print(f"{name}: {spec['url']} sha256 {expected_sha256(spec)[0]} ({'checked' if expected else 'pinned'})")
    if not a.dry_run:
        print(f"{count} URL checkpoints fetched into {cache_root()} and pinned in {lock}: commit it")
