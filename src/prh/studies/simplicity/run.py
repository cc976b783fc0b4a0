"""Simplicity bias: the effective rank of what a network computes falls with depth.

Huh's thesis, chapter 2 (the PRH paper's section 3.3 cites it as the third
pressure toward convergence). Effective rank (definition 2.3.1, in nats)::

    ρ(A) = − Σ_i σ̄_i log σ̄_i,   σ̄_i = σ_i / Σ_j σ_j          (prh.metrics.effective_rank)

always of the cosine Gram matrix K_ij = φ_iᵀφ_j / (‖φ_i‖‖φ_j‖) of a network's
outputs on held-out inputs ("kernel rank"), or of an end-to-end linear map.
Four experiments, each a JSON file at the path its command is given (the workflow's names below):

1. ``random_nets.json`` (Fig 2.2): linear and ReLU networks, width w, depth
   1…D, normal or uniform weights; ρ of the Gram matrix of random inputs, over
   many parameter samples. Sample s of depth d is the first d layers of one
   D-layer network (so each depth's marginal is exactly a random depth-d
   network; depths of one sample are correlated, which costs D× less).
2. ``products.json`` (Theorem 2.4.1, Fig 7.1): ρ(W_L⋯W_1) for W_i with i.i.d.
   Gaussian entries, n × n, against L. Prefix products again, so the per-sample
   monotone fraction tests the theorem's ρ(W_L⋯W_1) ≤ ρ(W_{L−1}⋯W_1) directly.
3. ``trained.json`` (Figs 2.5 and 2.6): deep linear networks y = W_d⋯W_1 x
   trained on least squares Y = W* X with rank(W*) = task_rank, using fewer
   training samples than input dimensions (n_train < width), so many maps fit
   and the network's bias picks one. Full-batch GD, Nesterov, Adam (best
   learning rate per depth from a grid) and L-BFGS (strong Wolfe line search).
4. ``metrics.json``: Spearman correlation of ρ against depth per setting.

Scale never matters here: ρ is scale-invariant and ReLU nets without biases are
positively homogeneous, so weight variances are set only to keep numbers finite.

    $ prh run-simplicity --part products --products results/experiments/simplicity/products.json --config '{}' --seed 0
"""

from __future__ import annotations

import argparse
import copy
import json
import math
import time

import numpy as np
import torch
from tqdm.auto import tqdm

from prh.config import schema_defaults
from prh.io import write_json
from prh.metrics import effective_rank
from prh.metrics.calibration import cell_seed
from prh.slices import add_slice, block_keys
from prh.stats import depth_trend
from prh.errors import UsageError

__all__ = ["DEFAULTS", "PARTS", "FILES", "random_net_ranks", "gaussian_product_ranks", "make_task", "train_deep_linear", "run_random_nets", "run_products", "run_trained", "simplicity_metrics", "run_simplicity", "main"]

DEFAULTS = schema_defaults("simplicity")  # the `simplicity:` block's (workflow/schemas/simplicity.schema.yaml)
MOMENTUM, BETAS, EPS = 0.9, (0.9, 0.999), 1e-8


def _merge(base: dict, override: dict, where: str = "simplicity") -> dict:
    out = copy.deepcopy(base)
    for key, value in (override or {}).items():
        if key not in base:
            raise ValueError(f"unknown key {where}.{key}; valid keys: {', '.join(base)}")
        both_dicts = isinstance(base[key], dict) and isinstance(value, dict)
        out[key] = _merge(base[key], value, f"{where}.{key}") if both_dicts else value
    return out


def _gen(seed: int, *parts: int) -> torch.Generator:
    return torch.Generator().manual_seed(cell_seed(seed, *parts))


def _weights(shape, *, init: str, gen, dtype=torch.float32) -> torch.Tensor:
    """i.i.d. weights of variance 1/fan_in: N(0, 1/n) or U(−√(3/n), √(3/n))."""
    n = shape[-1]
    if init == "normal":
        return torch.randn(shape, generator=gen, dtype=dtype) / math.sqrt(n)
    if init == "uniform":
        return (torch.rand(shape, generator=gen, dtype=dtype) * 2 - 1) * math.sqrt(3 / n)
    raise ValueError(f"init must be 'normal' or 'uniform', got {init!r}")


def _kernel_ranks(phi: torch.Tensor) -> np.ndarray:
    """ρ of the cosine Gram matrix of each batch element of phi (B × p × w).

    K = Φ̂Φ̂ᵀ (p × p) and the w × w matrix Φ̂ᵀΦ̂ share their non-zero eigenvalues,
    which are K's singular values (K is PSD); the small one is decomposed.
    """
    phi = phi / phi.norm(dim=-1, keepdim=True).clamp_min(1e-30)
    eig = torch.linalg.eigvalsh(phi.transpose(-1, -2) @ phi).clamp_min(0).double().numpy()
    return np.array([_rank_or_nan(e) for e in eig])


def _rank_or_nan(a) -> float:
    """effective_rank, or NaN for a zero or non-finite matrix (a diverged training run)."""
    a = np.asarray(a, dtype=np.float64)
    return effective_rank(a) if np.all(np.isfinite(a)) and np.any(a != 0) else math.nan


def random_net_ranks(*, width: int, depth: int, n_inputs: int, n_samples: int,
                     activation: str, init: str, seed: int, chunk: int = 512) -> np.ndarray:
    """Kernel effective rank of random networks f(x) = W_d ψ(⋯ψ(W_1 x)), eq. 2.3.

    Parameters
    ----------
    activation : "linear" (ψ = identity) or "relu"; the output layer is linear.
    init : "normal" or "uniform" (see ``_weights``).

    Returns
    -------
    np.ndarray, n_samples × depth: entry [s, d−1] is ρ(K) of the first d layers of sample s.
    """
    if activation not in ("linear", "relu"):
        raise ValueError(f"activation must be 'linear' or 'relu', got {activation!r}")
    if min(width, depth, n_inputs, n_samples) < 1:
        raise ValueError("width, depth, n_inputs and n_samples must all be >= 1")
    x = torch.randn(n_inputs, width, generator=_gen(seed, 0))
    gen = _gen(seed, 1)
    out = np.empty((n_samples, depth))
    for start in range(0, n_samples, chunk):
        b = min(chunk, n_samples - start)
        h = x.expand(b, n_inputs, width)
        for d in range(depth):
            if d > 0 and activation == "relu":
                h = torch.relu(h)
            h = h @ _weights((b, width, width), init=init, gen=gen).transpose(1, 2)
            out[start:start + b, d] = _kernel_ranks(h)
    return out


def gaussian_product_ranks(*, dim: int, max_depth: int, n_samples: int, seed: int):
    """ρ(W_L⋯W_1) for L = 1…max_depth, W_i ∈ R^{dim×dim} with i.i.d. N(0, 1/dim) entries.

    Returns
    -------
    ranks : n_samples × max_depth
    spectra : max_depth × dim, the mean normalised singular values σ_i / Σσ, descending.
    """
    gen = _gen(seed, dim)
    prod = torch.eye(dim, dtype=torch.float64).expand(n_samples, dim, dim)
    ranks, spectra = np.empty((n_samples, max_depth)), np.empty((max_depth, dim))
    for d in range(max_depth):
        prod = _weights((n_samples, dim, dim), init="normal", gen=gen, dtype=torch.float64) @ prod
        prod = prod / prod.norm(dim=(1, 2), keepdim=True)  # ρ is scale-free; this avoids underflow
        sv = torch.linalg.svdvals(prod).numpy()
        ranks[:, d] = [effective_rank(s) for s in sv]
        spectra[d] = (sv / sv.sum(1, keepdims=True)).mean(0)
    return ranks, spectra


def make_task(*, width: int, n_train: int, n_test: int, task_rank: int, n_seeds: int, seed: int,
              dtype=torch.float32) -> dict:
    """Least-squares tasks Y = W* X, one per seed: W* = U_r V_rᵀ (rank r, singular values 1),
    x ~ N(0, I_width). Returns tensors X (S × w × n_train), Y, X_test (S × w × n_test), W_star.

    Training runs in ``dtype``: float32 reaches the 1e-4 tolerance and small batched
    matmuls run ~3× faster on a CPU than in float64."""
    if not 1 <= task_rank <= width:
        raise ValueError(f"task_rank must be in [1, width={width}], got {task_rank}")
    gen = _gen(seed, 2)
    u = torch.linalg.qr(torch.randn(n_seeds, width, width, generator=gen, dtype=torch.float64))[0]
    v = torch.linalg.qr(torch.randn(n_seeds, width, width, generator=gen, dtype=torch.float64))[0]
    w_star = u[..., :task_rank] @ v[..., :task_rank].transpose(1, 2)
    x = torch.randn(n_seeds, width, n_train, generator=gen, dtype=torch.float64)
    x_test = torch.randn(n_seeds, width, n_test, generator=gen, dtype=torch.float64)
    return {k: t.to(dtype) for k, t in {"X": x, "Y": w_star @ x, "X_test": x_test, "W_star": w_star}.items()}


def _end_to_end(w: torch.Tensor) -> torch.Tensor:
    prod = w[:, 0]
    for i in range(1, w.shape[1]):
        prod = w[:, i] @ prod
    return prod


def _loss_and_grad(w, x, y):
    """L = ‖W_d⋯W_1 X − Y‖²_F / (2q) per batch element, and ∂L/∂W_i = (W_d⋯W_{i+1})ᵀ R (W_{i−1}⋯W_1 X)ᵀ / q."""
    hs = [x]
    for i in range(w.shape[1]):
        hs.append(w[:, i] @ hs[-1])
    r = hs[-1] - y
    loss = (r**2).sum((1, 2)) / (2 * x.shape[-1])
    grad, back = torch.empty_like(w), r / x.shape[-1]
    for i in reversed(range(w.shape[1])):
        grad[:, i] = back @ hs[i].transpose(1, 2)
        back = w[:, i].transpose(1, 2) @ back
    return loss, grad


def _first_order(w0, x, y, *, optimizer: str, lrs: torch.Tensor, steps: int):
    """GD, Nesterov (torch.optim.SGD's form) or Adam on every batch element at once, each
    with its own lr. Returns the weights and a mask of diverged elements (their weights are 0)."""
    w, lr, diverged = w0.clone(), lrs.view(-1, 1, 1, 1), torch.zeros(w0.shape[0], dtype=torch.bool)
    buf, m, v = torch.zeros_like(w), torch.zeros_like(w), torch.zeros_like(w)
    for t in range(1, steps + 1):
        _, g = _loss_and_grad(w, x, y)
        if optimizer == "gd":
            w -= lr * g
        elif optimizer == "nesterov":
            buf.mul_(MOMENTUM).add_(g)
            w -= lr * (g + MOMENTUM * buf)
        else:  # adam
            m.mul_(BETAS[0]).add_((1 - BETAS[0]) * g)
            v.mul_(BETAS[1]).add_((1 - BETAS[1]) * g * g)
            w -= lr * (m / (1 - BETAS[0] ** t)) / ((v / (1 - BETAS[1] ** t)).sqrt() + EPS)
        if t % 50 == 0:  # NaN arithmetic is slow and spreads: stop diverged runs early
            bad = ~torch.isfinite(w).all(dim=(1, 2, 3)) | (w.abs().amax(dim=(1, 2, 3)) > 1e6)
            w[bad], buf[bad], m[bad], v[bad] = 0.0, 0.0, 0.0, 0.0
            diverged |= bad
    return w, diverged


def _lbfgs(w0, x, y, *, steps: int, lr: float, tol: float) -> torch.Tensor:
    """L-BFGS with strong Wolfe line search on the sum of the batch elements' losses.

    The elements' problems are independent, so the sum's minimisers are exactly each
    element's; one joint run shares the line search and saves the per-run overhead
    (L-BFGS is Python-bound at these sizes). Stops early once every element's relative
    loss is below tol / 100: more iterations would only polish float round-off."""
    w = w0.clone().requires_grad_(True)
    chunk = 50  # iterations per opt.step; its history carries over between calls
    opt = torch.optim.LBFGS([w], lr=lr, max_iter=chunk, history_size=50, tolerance_grad=1e-12,
                            tolerance_change=1e-16, line_search_fn="strong_wolfe")

    def closure():
        with torch.no_grad():
            loss, g = _loss_and_grad(w, x, y)
        w.grad = g
        return loss.sum()

    y_norm = (y**2).sum((1, 2))
    for _ in range(0, steps, chunk):
        opt.step(closure)
        with torch.no_grad():
            rel = 2 * x.shape[-1] * _loss_and_grad(w, x, y)[0] / y_norm
        if not torch.isfinite(rel).all() or rel.max() < tol / 100:
            break
    return w.detach()


def train_deep_linear(*, depth: int, optimizer: str, lrs, task: dict, steps: int, seed: int, tol: float) -> dict:
    """Train y = W_depth⋯W_1 x on ``task`` for every seed and lr; keep the best lr.

    Initialisation: W_i ~ N(0, 1/width), the same for every optimizer (seeded by seed, depth).
    Best lr = lowest worst-seed final relative training loss ‖W_e X − Y‖² / ‖Y‖².

    Returns
    -------
    dict: best_lr, per-seed lists train_loss, test_error (‖(W_e − W*) X_test‖² / ‖W* X_test‖²),
    kernel_rank / map_rank at convergence and *_init at initialisation, converged (train_loss < tol).
    """
    if optimizer not in ("gd", "nesterov", "adam", "lbfgs"):
        raise ValueError(f"optimizer must be one of gd, nesterov, adam, lbfgs, got {optimizer!r}")
    x, y, x_test, w_star = task["X"], task["Y"], task["X_test"], task["W_star"]
    n_seeds, width, n_lr = x.shape[0], x.shape[1], len(lrs)
    w0 = _weights((n_seeds, depth, width, width), init="normal", gen=_gen(seed, 3, depth), dtype=x.dtype)
    rep = lambda t: t.repeat_interleave(n_lr, 0)  # noqa: E731  (batch index = seed * n_lr + lr index)
    lr_t = torch.tensor(lrs, dtype=x.dtype).repeat(n_seeds)
    if optimizer == "lbfgs":
        w = torch.cat([_lbfgs(w0, x, y, steps=steps, lr=lr, tol=tol) for lr in lrs]).view(n_lr, n_seeds, *w0.shape[1:])
        w = w.transpose(0, 1).reshape(-1, *w0.shape[1:])
        diverged = ~torch.isfinite(w).all(dim=(1, 2, 3))
    else:
        w, diverged = _first_order(rep(w0), rep(x), rep(y), optimizer=optimizer, lrs=lr_t, steps=steps)
    w[diverged] = 0.0  # a diverged run has no rank (NaN below) and never wins the lr choice
    w_e = _end_to_end(w)
    rel = ((w_e @ rep(x) - rep(y)) ** 2).sum((1, 2)) / (rep(y) ** 2).sum((1, 2))
    rel = torch.nan_to_num(rel, nan=math.inf).masked_fill(diverged, math.inf).view(n_seeds, n_lr)
    # the worst seed decides, so the chosen lr trains every seed (a median could hide a divergence)
    best = int(torch.argmin(rel.amax(0)))
    w_e = w_e.view(n_seeds, n_lr, width, width)[:, best]
    w0_e = _end_to_end(w0)
    test = ((w_e - w_star) @ x_test).pow(2).sum((1, 2)) / (w_star @ x_test).pow(2).sum((1, 2))
    return {
        "best_lr": lrs[best],
        "train_loss": rel[:, best].tolist(),
        "test_error": test.tolist(),
        "converged": (rel[:, best] < tol).tolist(),
        "kernel_rank": _kernel_ranks((w_e @ x_test).transpose(1, 2)).tolist(),
        "kernel_rank_init": _kernel_ranks((w0_e @ x_test).transpose(1, 2)).tolist(),
        "map_rank": [_rank_or_nan(m) for m in w_e],
        "map_rank_init": [_rank_or_nan(m) for m in w0_e],
    }


def _summary(ranks: np.ndarray, depths) -> dict:
    """Per-depth mean, std, quantiles of an n_samples × n_depths array, and its depth trend."""
    q = np.quantile(ranks, [0.05, 0.25, 0.5, 0.75, 0.95], axis=0)
    return {"depths": list(depths), "mean": ranks.mean(0), "std": ranks.std(0),
            "quantiles": dict(zip(["q05", "q25", "median", "q75", "q95"], q)),
            "trend": depth_trend(np.broadcast_to(np.asarray(depths), ranks.shape), ranks)}


PARTS = ("random_nets", "products", "trained")  # one JSON each; metrics.json summarises them
FILES = PARTS + ("metrics",)  # the JSON files, by name


def run_random_nets(out, *, seed: int = 0, width: int, config: dict) -> dict:
    """Fig 2.2: kernel rank of random linear / ReLU networks against depth; writes ``out`` (random_nets.json)."""
    rn = config
    depths, edges = list(range(1, rn["max_depth"] + 1)), np.linspace(0, math.log(width), rn["bins"] + 1)
    settings = {}
    for a, act in enumerate(rn["activations"]):
        for i, init in enumerate(tqdm(rn["inits"], desc=f"random {act} nets")):
            ranks = random_net_ranks(width=width, depth=rn["max_depth"], n_inputs=rn["n_inputs"],
                                     n_samples=rn["n_samples"], activation=act, init=init, seed=cell_seed(seed, 10, a, i))
            hist = [np.histogram(ranks[:, d], bins=edges, density=True)[0] for d in range(len(depths))]
            settings[f"{act}/{init}"] = {"activation": act, "init": init, **_summary(ranks, depths),
                                         "hist": {"edges": edges, "density": hist}}
    result = {"config": {"width": width, **rn}, "seed": seed, "max_rank": math.log(width), "settings": settings}
    write_json(out, result)
    return result


def run_products(out, *, seed: int = 0, config: dict) -> dict:
    """Theorem 2.4.1 / Fig 7.1: rank of products of Gaussian matrices against L; writes ``out`` (products.json)."""
    pr, products = config, {}
    for n in tqdm(pr["dims"], desc="Gaussian products"):
        ranks, spectra = gaussian_product_ranks(dim=n, max_depth=pr["max_depth"], n_samples=pr["n_samples"],
                                                seed=cell_seed(seed, 20))
        products[str(n)] = {"dim": n, "max_rank": math.log(n), **_summary(ranks, range(1, pr["max_depth"] + 1)),
                            "monotone_fraction": float((np.diff(ranks, axis=1) <= 0).all(1).mean()),
                            "spectrum": spectra}
    result = {"config": pr, "seed": seed, "dims": products}
    write_json(out, result)
    return result


def run_trained(out, *, seed: int = 0, width: int, config: dict) -> dict:
    """Figs 2.5 and 2.6: deep linear networks trained by four optimisers; writes ``out`` (trained.json)."""
    tr = config
    task = make_task(width=width, n_train=tr["n_train"], n_test=tr["n_test"], task_rank=tr["task_rank"],
                     n_seeds=tr["n_seeds"], seed=cell_seed(seed, 30))
    reference = {"map_rank": math.log(tr["task_rank"]),
                 "kernel_rank": float(np.median(_kernel_ranks((task["W_star"] @ task["X_test"]).transpose(1, 2))))}
    runs = {}
    for opt in tr["optimizers"]:
        per_depth = [train_deep_linear(depth=d, optimizer=opt, lrs=tr["lr_grid"][opt], task=task, steps=tr["steps"],
                                       seed=cell_seed(seed, 31), tol=tr["tol"])
                     for d in tqdm(tr["depths"], desc=f"train {opt}")]
        runs[opt] = {key: [r[key] for r in per_depth] for key in per_depth[0]}
        runs[opt]["lr_grid"] = tr["lr_grid"][opt]
        pooled = np.repeat(tr["depths"], tr["n_seeds"])
        for target in ("kernel_rank", "map_rank"):
            runs[opt][f"trend_{target}"] = depth_trend(pooled, runs[opt][target])
    result = {"config": {"width": width, **tr}, "seed": seed, "depths": tr["depths"], "reference": reference,
           "optimizers": runs}
    write_json(out, result)
    return result


def simplicity_metrics(*, random_nets, products, trained, out) -> dict:
    """``out`` (metrics.json) from the three experiments' JSONs: each trend (Spearman of ρ against depth)."""
    from prh.io import read_json

    metrics = {}
    for name, s in read_json(random_nets)["settings"].items():
        metrics[f"random_net/{name}"] = s["trend"]
    for n, d in read_json(products)["dims"].items():
        metrics[f"products/n{n}"] = {**d["trend"], "monotone_fraction": d["monotone_fraction"]}
    for opt, run in read_json(trained)["optimizers"].items():
        for target in ("kernel_rank", "map_rank"):
            metrics[f"trained/{opt}/{target}"] = run[f"trend_{target}"]
        metrics[f"trained/{opt}/converged_fraction"] = float(np.mean(run["converged"]))
    write_json(out, metrics)
    return metrics


def run_simplicity(paths: dict, *, seed: int = 0, config: dict | None = None, parts=FILES) -> dict:
    """Run ``parts`` with ``config`` (the `simplicity:` block; missing keys: the schema's defaults); ``paths``: each
    file of :data:`FILES` the parts touch, by name (an experiment writes its own; metrics reads the three and writes
    its). Returns the last part's result."""
    c = _merge(DEFAULTS, config or {})
    if unknown := sorted(set(parts) - set(FILES)):
        raise ValueError(f"parts {unknown} unknown; choose from {list(FILES)}")
    if missing := [name for name in FILES if (name in parts or "metrics" in parts) and not paths.get(name)]:
        raise UsageError(f"no path for {missing} (prh run-simplicity --{missing[0].replace('_', '-')} PATH)")
    run = {"random_nets": lambda: run_random_nets(paths["random_nets"], seed=seed, width=c["width"], config=c["random_nets"]),
           "products": lambda: run_products(paths["products"], seed=seed, config=c["products"]),
           "trained": lambda: run_trained(paths["trained"], seed=seed, width=c["width"], config=c["trained"]),
           "metrics": lambda: simplicity_metrics(random_nets=paths["random_nets"], products=paths["products"],
                                                 trained=paths["trained"], out=paths["metrics"])}
    for part in parts:
        t0, out = time.perf_counter(), run[part]()
        print(f"{part}: {time.perf_counter() - t0:.1f} s", flush=True)
    return out


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(prog="prh run-simplicity", description=__doc__.splitlines()[0])
    for name in FILES:  # one path per file: a part writes its own; metrics reads the other three
        p.add_argument(f"--{name.replace('_', '-')}", dest=name, help=f"{name}.json (--part {name} writes it)")
    p.add_argument("--seed", type=int, default=0, help="master seed")
    p.add_argument("--part", nargs="+", default=list(FILES), choices=list(FILES),
                   help="which experiments to run (each writes its JSON); metrics summarises their JSONs")
    settings = add_slice(p, {"simplicity": block_keys("simplicity")}, config_only=PARTS)  # --random-nets: a path
    args = p.parse_args(argv)
    out = run_simplicity(vars(args), seed=args.seed, config=settings(args)["simplicity"], parts=tuple(args.part))
    if args.part[-1] == "metrics":
        print(json.dumps(out, indent=1))
