"""Colour embeddings from co-occurrence (PRH section 4.3, Figure 8, appendix D).

Vision: pixel colours are quantised on an RGB grid (``bins`` levels per
channel); pixel pairs at most ``radius`` pixels apart give a joint table
p(A, B) of normalised counts, from which

    K_PMI(A, B) = log p(A, B) / (p(A) p(B))

and the dissimilarity D(A, B) = max K_PMI - K_PMI(A, B) (zero diagonal).
Any dissimilarity (language: Euclidean distances between term embeddings) is
embedded in 3-D by metric MDS (SMACOF, best stress of ``n_init`` starts), then
aligned to CIELAB by the Kabsch-Umeyama similarity transform (rotation,
translation, scale), once on z and once on -z, keeping the better.

    >>> a, b = sample_pixel_pairs(images, n_pairs=300_000, radius=4, bins=8, seed=0)
    >>> table = pmi_table(a, b, n_codes=8 ** 3, min_count=100)
"""

from __future__ import annotations

import numpy as np
from scipy.spatial.distance import pdist, squareform
from scipy.stats import rankdata
from skimage.color import rgb2lab

__all__ = ["quantize_rgb", "code_rgb", "rgb_to_lab", "sample_pixel_pairs", "pmi_table", "mds_embed",
           "umeyama", "align_to_reference", "distance_agreement"]


def quantize_rgb(pixels: np.ndarray, *, bins: int) -> np.ndarray:
    """Grid code of each uint8 RGB pixel: ``(r * bins + g) * bins + b`` with channel level ``x * bins // 256``."""
    if bins < 2 or bins > 256:
        raise ValueError(f"bins={bins} must be in [2, 256]")
    q = pixels.astype(np.int64) * bins // 256
    return (q[..., 0] * bins + q[..., 1]) * bins + q[..., 2]


def code_rgb(codes: np.ndarray, *, bins: int) -> np.ndarray:
    """RGB in [0, 1] of the centre of each grid cell (inverse of ``quantize_rgb``), shape (n, 3)."""
    codes = np.asarray(codes, dtype=np.int64)
    levels = np.stack([codes // (bins * bins), (codes // bins) % bins, codes % bins], axis=-1)
    return (levels + 0.5) / bins


def rgb_to_lab(rgb: np.ndarray) -> np.ndarray:
    """CIELAB (D65) of RGB colours in [0, 1], shape (n, 3) -> (n, 3)."""
    return rgb2lab(np.asarray(rgb, dtype=np.float64).reshape(-1, 1, 3)).reshape(-1, 3)


def _offsets(radius: int) -> np.ndarray:
    r = np.arange(-radius, radius + 1)
    dy, dx = np.meshgrid(r, r, indexing="ij")
    keep = (dy ** 2 + dx ** 2 <= radius ** 2) & ((dy != 0) | (dx != 0))
    return np.stack([dy[keep], dx[keep]], axis=1)


def sample_pixel_pairs(images, *, n_pairs: int, radius: int, bins: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Grid codes of ``n_pairs`` random pixel pairs at most ``radius`` px apart (never the same pixel).

    Parameters
    ----------
    images : a list of uint8 H x W x 3 arrays (any sizes) or one N x H x W x 3 array.
    n_pairs : pairs drawn; each picks an image (probability proportional to its pixels),
        an offset uniformly from the disc 0 < |d| <= radius, and a first pixel uniformly
        among those whose partner lies inside the image.
    Returns
    -------
    (a, b) : int64 codes, each of length n_pairs.
    """
    if n_pairs < 1:
        raise ValueError(f"n_pairs={n_pairs} must be >= 1")
    if radius < 1:
        raise ValueError(f"radius={radius} must be >= 1 pixel")
    if isinstance(images, np.ndarray) and images.ndim == 3:
        images = images[None]
    if len(images) == 0 or any(np.asarray(im).ndim != 3 or np.asarray(im).shape[-1] != 3 for im in images[:5]):
        raise ValueError("images must be uint8 RGB arrays of shape H x W x 3 (drop alpha channels first)")
    rng = np.random.default_rng(seed)
    sizes = np.array([im.shape[0] * im.shape[1] for im in images], dtype=np.float64)
    which = rng.choice(len(images), size=n_pairs, p=sizes / sizes.sum())
    off = _offsets(radius)[rng.integers(0, len(_offsets(radius)), size=n_pairs)]
    a = np.empty(n_pairs, dtype=np.int64)
    b = np.empty(n_pairs, dtype=np.int64)
    stacked = isinstance(images, np.ndarray)
    h_all, w_all = (images.shape[1], images.shape[2]) if stacked else (None, None)
    for i in (np.unique(which) if not stacked else [None]):
        sel = np.arange(n_pairs) if stacked else np.flatnonzero(which == i)
        im = images if stacked else np.asarray(images[i])
        h, w = (h_all, w_all) if stacked else im.shape[:2]
        dy, dx = off[sel, 0], off[sel, 1]
        y = np.maximum(0, -dy) + (rng.random(len(sel)) * (h - np.abs(dy))).astype(np.int64)
        x = np.maximum(0, -dx) + (rng.random(len(sel)) * (w - np.abs(dx))).astype(np.int64)
        if stacked:
            n = which[sel]
            a[sel] = quantize_rgb(im[n, y, x], bins=bins)
            b[sel] = quantize_rgb(im[n, y + dy, x + dx], bins=bins)
        else:
            a[sel] = quantize_rgb(im[y, x], bins=bins)
            b[sel] = quantize_rgb(im[y + dy, x + dx], bins=bins)
    return a, b


def pmi_table(a: np.ndarray, b: np.ndarray, *, n_codes: int, min_count: int = 1) -> dict:
    """Empirical PMI of the colours seen at least ``min_count`` times, and its dissimilarity.

    Counts are symmetrised (a pair is unordered); colours with fewer than ``min_count``
    appearances are dropped; pairs never seen get the smallest observed PMI (so the
    dissimilarity stays finite: "never together" reads as "as far apart as seen").

    Returns
    -------
    dict with ``codes`` (kept grid codes), ``count`` (appearances), ``pmi`` (K x K) and
    ``dissimilarity`` = max(PMI) - PMI with zero diagonal.
    """
    joint = np.bincount(a * n_codes + b, minlength=n_codes * n_codes).reshape(n_codes, n_codes).astype(np.float64)
    joint = joint + joint.T
    count = joint.sum(1)
    keep = np.flatnonzero(count >= min_count)
    if len(keep) < 4:
        raise ValueError(f"only {len(keep)} colours appear >= min_count={min_count} times; "
                         "lower min_count or bins, or sample more pairs")
    joint = joint[np.ix_(keep, keep)]
    p = joint / joint.sum()
    marg = p.sum(1)
    with np.errstate(divide="ignore"):
        pmi = np.log(p) - np.log(marg)[:, None] - np.log(marg)[None, :]
    pmi = 0.5 * (pmi + pmi.T)  # exact symmetry; the float sums above differ in the last bit
    seen = np.isfinite(pmi)
    pmi[~seen] = pmi[seen].min()
    dis = pmi.max() - pmi
    np.fill_diagonal(dis, 0.0)
    return {"codes": keep, "count": count[keep], "pmi": pmi, "dissimilarity": dis,
            "unseen_fraction": float(1 - seen.mean())}


def mds_embed(dissimilarity: np.ndarray, *, n_components: int = 3, n_init: int = 4, max_iter: int = 300,
              seed: int = 0) -> tuple[np.ndarray, float]:
    """Metric MDS (SMACOF) of a symmetric dissimilarity, best of ``n_init`` random starts.

    Returns (coordinates n x n_components, Kruskal stress-1 of the best start).
    """
    from sklearn.manifold import MDS

    d = np.asarray(dissimilarity, dtype=np.float64)
    if d.ndim != 2 or d.shape[0] != d.shape[1] or not np.allclose(d, d.T):
        raise ValueError(f"dissimilarity must be a symmetric square matrix, got shape {d.shape}")
    if n_init < 1:
        raise ValueError(f"n_init={n_init} must be >= 1")
    common = dict(n_components=n_components, n_init=n_init, max_iter=max_iter, random_state=seed)
    try:  # scikit-learn >= 1.8 spells "metric MDS on a precomputed matrix" this way
        mds = MDS(**common, metric_mds=True, metric="precomputed", init="random", normalized_stress=False)
    except TypeError:
        mds = MDS(**common, metric=True, dissimilarity="precomputed", normalized_stress=False)
    z = mds.fit_transform(d)
    stress1 = float(np.sqrt(np.sum((squareform(pdist(z)) - d) ** 2) / np.sum(d ** 2)))
    return z, stress1


def umeyama(source: np.ndarray, target: np.ndarray) -> tuple[float, np.ndarray, np.ndarray]:
    """Least-squares similarity transform target ~ s R source + t (Umeyama 1991), det R = +1.

    With Σ = (T - t̄)ᵀ(S - s̄)/n = U D Vᵀ: R = U diag(1, .., det(U Vᵀ)) Vᵀ,
    s = tr(D diag(1, .., det)) / var(S), t = t̄ - s R s̄.
    Returns (s, R, t); apply as ``s * source @ R.T + t``.
    """
    src = np.asarray(source, dtype=np.float64)
    dst = np.asarray(target, dtype=np.float64)
    if src.shape != dst.shape or src.ndim != 2:
        raise ValueError(f"source {src.shape} and target {dst.shape} must be the same n x d shape")
    mu_s, mu_t = src.mean(0), dst.mean(0)
    s0, t0 = src - mu_s, dst - mu_t
    u, d, vt = np.linalg.svd(t0.T @ s0 / len(src))
    sign = np.ones(len(d))
    sign[-1] = np.sign(np.linalg.det(u @ vt)) or 1.0
    rot = u @ np.diag(sign) @ vt
    scale = float((d * sign).sum() / (s0 ** 2).sum(1).mean())
    return scale, rot, mu_t - scale * rot @ mu_s


def align_to_reference(z: np.ndarray, reference: np.ndarray) -> dict:
    """Kabsch-Umeyama on z and on -z (the flip), keeping the lower residual.

    Returns dict with ``aligned`` (n x 3), ``flipped`` and ``procrustes_residual``
    = ||aligned - ref||² / ||ref - mean(ref)||² (0 = identical layout up to similarity, 1 = none).
    """
    best = None
    for flipped in (False, True):
        src = -z if flipped else z
        s, rot, t = umeyama(src, reference)
        aligned = s * src @ rot.T + t
        resid = float(((aligned - reference) ** 2).sum() / ((reference - reference.mean(0)) ** 2).sum())
        if best is None or resid < best["procrustes_residual"]:
            best = {"aligned": aligned, "flipped": flipped, "procrustes_residual": resid, "scale": s}
    return best


def distance_agreement(dist: np.ndarray, reference: np.ndarray, *, permutations: int = 1000, seed: int = 0) -> dict:
    """Spearman correlation of two condensed distance vectors, with a Mantel permutation p-value.

    The null relabels the items of ``dist`` (rows and columns together), which keeps each
    matrix's structure; p = (1 + #{null >= observed}) / (1 + permutations), ``p_less`` the other
    way (from the same draws; the ledger's weighed verdict reads both, the items as the independent units).
    """
    dist, reference = np.asarray(dist, float), np.asarray(reference, float)
    if dist.shape != reference.shape or dist.ndim != 1:
        raise ValueError("dist and reference must be condensed distance vectors of equal length (scipy pdist)")
    m = squareform(rankdata(dist))
    ry = rankdata(reference)
    ry = (ry - ry.mean()) / np.linalg.norm(ry - ry.mean())
    iu = np.triu_indices(m.shape[0], 1)

    def corr(mat):
        x = mat[iu]
        x = x - x.mean()
        return float(x @ ry / np.linalg.norm(x))

    observed = corr(m)
    rng = np.random.default_rng(seed)
    null = np.array([corr(m[np.ix_(p, p)]) for p in (rng.permutation(m.shape[0]) for _ in range(permutations))])
    p_value = float((1 + (null >= observed).sum()) / (1 + permutations)) if permutations else None
    p_less = float((1 + (null <= observed).sum()) / (1 + permutations)) if permutations else None
    return {"spearman": observed, "p_value": p_value, "p_less": p_less, "permutations": permutations,
            "items": int(m.shape[0]), "distance_pairs": int(dist.size)}
