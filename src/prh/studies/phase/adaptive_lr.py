"""``prh run-phase-adaptive-lr``: seed 000 Table 2's one buildable row, η(t) = η₀ · S_NTK(t).

The seed names the rule but not what is trained. Our reading: a vision encoder and a
linear map W are trained (Adam, MSE) so that W φ_v(x) matches the paired caption's fixed,
standardised language features (eq. 1's g ∘ f_v ≈ f_ℓ); every ``every`` steps the
learning rate is set to η₀ · S(t), S(t) = eq. 3 between the vision model's current NTK
and the language model's NTK on the first ``n_items`` NTK items. The baseline keeps η₀.
Both runs start from the same weights, batches and W; the score is top-1 retrieval of the
held-out captions' features from W φ_v (the alignment split of ``prh run-phase-analysis``).

    prh run-phase-adaptive-lr --pairs '[{"vision": {...}, "language": {...}}]' --data results/data/shapes_eval \\
        --config '{"phase": {...}}' --out results/experiments/phase/adaptive_lr.json
"""

from __future__ import annotations

import argparse
import time

import numpy as np
import torch

from prh.io import load_features, write_json
from prh.studies.phase import ntk as nt
from prh.studies.phase.dynamics import model_ntk
from prh.studies.phase.models import load_probe_model
from prh.studies.phase.run import item_split, read_paired

__all__ = ["train_alignment", "run_adaptive_lr", "main"]


def _retrieval(pred: torch.Tensor, target: torch.Tensor) -> float:
    p = torch.nn.functional.normalize(pred, dim=1)
    t = torch.nn.functional.normalize(target, dim=1)
    return float(((p @ t.T).argmax(1) == torch.arange(len(t))).float().mean())


def train_alignment(pm, target: torch.Tensor, theta_l: torch.Tensor, *, ntk_items, train, test, steps: int,
                    lr: float, every: int, batch_size: int, adaptive: bool, readouts, ntk_kw: dict, seed: int) -> dict:
    """Train ``pm`` + a linear map onto ``target`` (N × d_ℓ); η₀ · S(t) when ``adaptive``; retrieval and S(t)."""
    gen = torch.Generator().manual_seed(seed)
    torch.manual_seed(seed)
    head = torch.nn.Linear(pm.dim, target.shape[1])
    opt = torch.optim.Adam([*pm.module.parameters(), *head.parameters()], lr=lr)
    trace = []
    for step in range(steps):
        if step % every == 0:
            theta_v = model_ntk(pm, ntk_items, readouts=readouts, n_check=0, **ntk_kw)["theta"]
            s = nt.ntk_similarity(theta_v, theta_l)
            trace.append({"step": step, "s": s})
            if adaptive:
                for g in opt.param_groups:
                    g["lr"] = lr * s
        idx = train[torch.randint(0, len(train), (batch_size,), generator=gen).numpy()]
        loss = torch.nn.functional.mse_loss(head(pm.batch_features(idx)), target[idx])
        opt.zero_grad()
        loss.backward()
        opt.step()
    with torch.no_grad():
        score = _retrieval(head(pm.batch_features(test)), target[test])
    return {"retrieval": score, "s_trace": trace, "final_loss": float(loss.detach())}


def run_adaptive_lr(*, pairs: list[dict], data: str, config: dict, out: str, seed: int = 0) -> dict:
    """Fixed vs adaptive LR on each pair: ``pairs`` items are {vision: {name, path}, language: {name, ntk, features}}."""
    t0 = time.process_time()
    cfg = config["adaptive_lr"]
    paired = read_paired(data)
    n = len(paired["texts"])
    split = item_split(n, n_ntk=config["n_ntk"], seed=seed)
    ntk_items = split["ntk"][: cfg["n_items"]]
    perm = np.random.default_rng(seed).permutation(n)
    n_test = int(round(n * config["test_fraction"]))
    test, train = np.sort(perm[:n_test]), np.sort(perm[n_test:])
    ntk_kw = dict(exact_max_params=config["exact_max_params"], sketch_dim=config["sketch_dim"],
                  chunk=config["chunk"], agop_k=min(config["agop_k"], cfg["n_items"]), seed=seed)
    results = []
    for pair in pairs:
        v, ell = pair["vision"], pair["language"]
        theta_l = torch.as_tensor(np.load(ell["ntk"].replace(".json", ".npy"), allow_pickle=False))
        theta_l = theta_l[: cfg["n_items"], : cfg["n_items"]]
        feats = load_features(ell["features"])
        y = feats[:, -1].double()
        y = ((y - y[train].mean(0)) / y[train].std(0).clamp_min(1e-8)).float()
        row = {"vision": v["name"], "language": ell["name"]}
        for mode in ("fixed", "adaptive"):  # a fresh load each: both runs start from the same weights
            pm = load_probe_model(name=v["name"], path=v["path"], modality="vision", images=paired["images"])
            readouts = nt.random_readouts(pm.dim, config["n_readouts"], seed=seed)
            row[mode] = train_alignment(pm, y, theta_l, ntk_items=ntk_items, train=train, test=test,
                                        steps=cfg["steps"], lr=cfg["lr"], every=cfg["every"],
                                        batch_size=cfg["batch_size"], adaptive=mode == "adaptive",
                                        readouts=readouts, ntk_kw=ntk_kw, seed=seed)
        results.append(row)
    res = {"pairs": results, "chance": 1.0 / len(test), "config": cfg, "cpu_seconds": time.process_time() - t0}
    write_json(out, res)
    return res


def main(argv: list[str] | None = None) -> None:
    import json

    from prh.slices import add_slice
    from prh.studies.phase.design import SLICES

    p = argparse.ArgumentParser(prog="prh run-phase-adaptive-lr", description=run_adaptive_lr.__doc__.split("\n")[0])
    p.add_argument("--pairs", type=json.loads, required=True, help="JSON list of {vision: {name, path}, language: {name, ntk, features}}")
    p.add_argument("--data", required=True)
    p.add_argument("--out", required=True)
    p.add_argument("--seed", type=int, default=0)
    settings = add_slice(p, {"phase": SLICES["adaptive_lr"]})
    a = p.parse_args(argv)
    res = run_adaptive_lr(pairs=a.pairs, data=a.data, config=settings(a)["phase"], out=a.out, seed=a.seed)
    print(json.dumps([{k: r[k]["retrieval"] for k in ("fixed", "adaptive")} for r in res["pairs"]]))
