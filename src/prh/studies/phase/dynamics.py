"""Per-model NTK, AGOP and NTK stability under a few steps of training (seed 000 eq. 2-4, RQ1).

``model_ntk`` computes one model's NTK on the NTK items (count-sketched above
``exact_max_params`` parameters; the sketch's error is measured on the first
``n_check`` items against the exact Jacobian), its AGOP spectrum and summary.
``train_steps`` trains the whole model with fresh linear heads on the shapes world's
tasks (``prh.data.tasks``: mean cross-entropy over tasks, Adam) for a few steps; the
model's stability is then S(Θ_before, Θ_after) (eq. 3) on the same items and readouts,
the quantity seed 000's phases are read from (chaotic < 0.5 ≤ optimal < 0.9 ≤ lazy).
"""

from __future__ import annotations

import numpy as np
import torch

from prh.studies.phase import ntk as nt
from prh.studies.phase.models import ProbeModel

__all__ = ["model_ntk", "train_steps"]

JACOBIAN_FLOATS = 1 << 25  # at most this many Jacobian entries (128 MiB float32) per vmapped chunk


def model_ntk(pm: ProbeModel, items, *, readouts: torch.Tensor, exact_max_params: int, sketch_dim: int,
              chunk: int = 16, n_check: int = 16, agop_k: int = 10, seed: int = 0) -> dict:
    """NTK Θ (N × N), AGOP summary and (when sketched) the sketch's relative error on ``n_check`` items.

    ``n_check`` is capped so the exact Jacobian of the check holds at most 4 · JACOBIAN_FLOATS
    entries (MiniLM, 22.7M parameters: 2 items); ``sketch_check_items`` records how many.
    """
    params = pm.params()
    n_params = sum(v.numel() for v in params.values())
    xs = [pm.items[i] for i in items]
    sketch = nt.CountSketch(n_params, sketch_dim, seed=seed) if n_params > exact_max_params else None
    chunk = max(1, min(chunk, JACOBIAN_FLOATS // (readouts.shape[0] * n_params)))  # bounds vmap's memory
    jac = nt.per_sample_jacobian(pm.feature_fn, params, xs, readouts=readouts, chunk=chunk, sketch=sketch)
    gram = nt.jacobian_gram(jac)
    theta = nt.ntk_from_gram(gram, readouts.shape[0])
    out = {"theta": theta, "sketched": sketch is not None, "n_params_differentiated": int(n_params),
           "sketch_dim": int(sketch_dim) if sketch else None, "sketch_error": None,
           "agop": nt.agop_summary(nt.agop_eigenvalues(gram, len(xs)), k=agop_k)}
    n_check = min(n_check, 4 * JACOBIAN_FLOATS // (readouts.shape[0] * n_params))  # the exact J must fit
    if sketch is not None and n_check > 1:
        exact = nt.per_sample_jacobian(pm.feature_fn, params, xs[:n_check], readouts=readouts, chunk=chunk)
        out["sketch_error"] = nt.sketch_error(exact, sketch.apply(exact))
        out["sketch_check_items"] = int(n_check)
    return out


def train_steps(pm: ProbeModel, labels: dict[str, np.ndarray], train_items, *, steps: int, lr: float,
                batch_size: int, seed: int = 0) -> list[float]:
    """Train ``pm.module`` in place for ``steps`` Adam steps on every task (fresh linear heads); losses."""
    if steps < 0 or batch_size < 1:
        raise ValueError(f"steps={steps} must be >= 0 and batch_size={batch_size} >= 1")
    gen = torch.Generator().manual_seed(seed)
    heads = torch.nn.ModuleDict({t: torch.nn.Linear(pm.dim, int(y.max()) + 1) for t, y in labels.items()})
    targets = {t: torch.as_tensor(y, dtype=torch.long) for t, y in labels.items()}
    opt = torch.optim.Adam([*pm.module.parameters(), *heads.parameters()], lr=lr)
    train_items = np.asarray(train_items)
    losses = []
    for _ in range(steps):
        idx = train_items[torch.randint(0, len(train_items), (batch_size,), generator=gen).numpy()]
        feats = pm.batch_features(idx)
        loss = sum(torch.nn.functional.cross_entropy(heads[t](feats), targets[t][idx]) for t in heads) / len(heads)
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(float(loss.detach()))
    pm.module.eval()
    return losses
