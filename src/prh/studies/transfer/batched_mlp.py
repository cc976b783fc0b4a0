"""Several independent ReLU MLPs trained at once as one batched model (torch.bmm).

Imani, Hu & White average every curve over independent runs (10 for the peaks
task, 5 elsewhere). The networks are tiny, so one at a time they are dominated by
per-call overhead; here run r's layer weights are slice r of an R × d_in × d_out
tensor, the loss is the *sum* over runs of each run's own mean loss, and Adam
(elementwise) therefore updates every slice exactly as if that run were trained
alone, each on its own data, initialisation and batch order. Gradients are written
out by hand (checked against autograd in the tests), which is ~1.5x faster here.

Stopping rule (``patience > 0``): a run's training loss for an epoch is the mean of
its minibatch losses over that epoch. The run has converged when that loss has not
gone below ``(1 - min_improvement)`` times its best value for ``patience``
consecutive epochs, an improvement counting only when it also exceeds ``min_delta``
(Keras' ``EarlyStopping``, with a relative and an absolute tolerance; the absolute
one lets a classification loss that creeps towards zero stop). Its weights are
frozen there (a snapshot); training goes on until every run has
converged or ``max_epochs`` is reached. ``patience = 0`` trains exactly
``max_epochs`` epochs (the paper's "1000 epochs" of Fig 2).

    >>> params = init_mlp(runs=10, sizes=[60, 60, 1], seed=0)
    >>> params, info = train_mlp(params, x=x, y=y, lr=1e-3, batch_size=64, max_epochs=500)
    >>> hidden = hidden_layers(params, x)   # [R × n × 60] per hidden layer
"""

from __future__ import annotations

import numpy as np
import torch
from tqdm.auto import tqdm

from prh.device import resolve_device

__all__ = ["init_mlp", "mlp_forward", "hidden_layers", "train_mlp"]


def init_mlp(*, runs: int, sizes, seed: int) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """Initialise ``runs`` MLPs with layer widths ``sizes`` (input, hidden..., output).

    Weights and biases follow PyTorch's ``nn.Linear`` default,
    U(-1/√fan_in, 1/√fan_in), drawn from a generator seeded with ``seed``.

    Returns
    -------
    list of (W, b): W is runs × d_in × d_out, b is runs × 1 × d_out (float32).
    """
    sizes = [int(s) for s in sizes]
    if runs < 1 or len(sizes) < 2 or min(sizes) < 1:
        raise ValueError(f"need runs >= 1 and at least two positive layer sizes, got runs={runs}, sizes={sizes}")
    gen = torch.Generator().manual_seed(int(seed))
    params = []
    for d_in, d_out in zip(sizes[:-1], sizes[1:]):
        bound = 1.0 / np.sqrt(d_in)
        w = (torch.rand(runs, d_in, d_out, generator=gen) * 2 - 1) * bound
        b = (torch.rand(runs, 1, d_out, generator=gen) * 2 - 1) * bound
        params.append((w, b))
    return params


def mlp_forward(params, x: torch.Tensor) -> tuple[torch.Tensor, list[torch.Tensor]]:
    """Forward pass: ReLU after every layer but the last (linear output).

    Parameters
    ----------
    params : list of (W, b) from :func:`init_mlp`
    x : tensor runs × n × d_in

    Returns
    -------
    output : runs × n × d_out
    hidden : list of runs × n × width, the post-ReLU activation of each hidden layer
    """
    hidden = []
    h = x
    for i, (w, b) in enumerate(params):
        h = torch.baddbmm(b, h, w)
        if i < len(params) - 1:
            h = torch.relu(h)
            hidden.append(h)
    return h, hidden


@torch.no_grad()
def hidden_layers(params, x, *, chunk: int = 4096) -> list[np.ndarray]:
    """Hidden representations of every layer, as float64 arrays runs × n × width.

    ``x`` is runs × n × d (numpy or torch); evaluated in chunks of ``chunk`` rows.
    """
    x = torch.from_numpy(np.ascontiguousarray(x, dtype=np.float32))
    parts = [mlp_forward(params, x[:, i:i + chunk])[1] for i in range(0, x.shape[1], chunk)]
    return [torch.cat([p[k] for p in parts], dim=1).double().numpy() for k in range(len(params) - 1)]


def _loss_and_grad(out: torch.Tensor, y: torch.Tensor, loss: str) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-run mean loss and its gradient with respect to ``out`` (runs × b × k)."""
    count = out.shape[1] * out.shape[2]
    if loss == "mse":
        diff = out - y
        return (diff**2).sum(dim=(1, 2)) / count, 2.0 * diff / count
    # logistic loss on logits, written to stay finite for large |out|
    per = torch.clamp(out, min=0) - out * y + torch.log1p(torch.exp(-out.abs()))
    return per.sum(dim=(1, 2)) / count, (torch.sigmoid(out) - y) / count


def _backward(params, x, pre, hidden, grad_out) -> list[torch.Tensor]:
    """Gradients [dW_1, db_1, ..., dW_L, db_L] of a ReLU MLP, by the chain rule.

    Written out by hand rather than with autograd: for networks this small the
    autograd bookkeeping costs more than the matrix products (about 1.5x per step).
    """
    grads = []
    g = grad_out
    inputs = [x] + hidden
    for i in range(len(params) - 1, -1, -1):
        grads = [inputs[i].transpose(1, 2) @ g, g.sum(dim=1, keepdim=True)] + grads
        if i > 0:
            g = (g @ params[i][0].transpose(1, 2)) * (pre[i - 1] > 0)
    return grads


def _forward_train(params, x):
    pre, hidden = [], []
    h = x
    for i, (w, b) in enumerate(params):
        h = torch.baddbmm(b, h, w)
        if i < len(params) - 1:
            pre.append(h)
            h = torch.relu(h)
            hidden.append(h)
    return h, pre, hidden


@torch.no_grad()
def _full_loss(params, x, y, loss: str, chunk: int = 4096) -> torch.Tensor:
    total = torch.zeros(x.shape[0])
    for i in range(0, x.shape[1], chunk):
        out, _ = mlp_forward(params, x[:, i:i + chunk])
        total += _loss_and_grad(out, y[:, i:i + chunk], loss)[0] * out.shape[1]
    return total / x.shape[1]


def train_mlp(
    params,
    *,
    x,
    y,
    loss: str = "mse",
    lr: float = 1e-3,
    batch_size: int = 64,
    max_epochs: int = 500,
    patience: int = 20,
    min_improvement: float = 0.01,
    min_delta: float = 0.0,
    seed: int = 0,
    device: str = "cpu",
    desc: str = "train",
):
    """Train every run with Adam on minibatches until the stopping rule (module docstring).

    Parameters
    ----------
    params : list of (W, b) from :func:`init_mlp`; not modified
    x : array runs × n × d_in
    y : array runs × n (or runs × n × 1): regression targets (``loss="mse"``,
        mean of (f(x) - y)²) or 0/1 labels (``loss="bce"``, logistic loss on logits)
    lr, batch_size : Adam step size and minibatch size (the paper: 0.001, 64)
    max_epochs, patience, min_improvement, min_delta : the stopping rule; ``patience=0``
        trains exactly ``max_epochs`` epochs
    seed : seeds the per-run batch order (drawn on the CPU, so any device gives the same order)
    device : "cpu", "cuda" or "auto"; the returned weights are on the CPU

    Returns
    -------
    trained : list of (W, b) detached tensors (each run's weights where it stopped)
    info : dict with ``epochs`` (per run), ``converged`` (per run, bool),
        ``epoch_loss`` (epochs × runs: each epoch's mean minibatch loss) and
        ``final_loss`` (per run, on the whole training set with the returned weights)
    """
    if loss not in ("mse", "bce"):
        raise ValueError(f"loss must be 'mse' or 'bce', got {loss!r}")
    if lr <= 0 or batch_size < 1 or max_epochs < 1 or patience < 0:
        raise ValueError("need lr > 0, batch_size >= 1, max_epochs >= 1 and patience >= 0")
    dev = resolve_device(device)
    x = torch.from_numpy(np.ascontiguousarray(x, dtype=np.float32)).to(dev)
    y = torch.from_numpy(np.ascontiguousarray(y, dtype=np.float32)).to(dev).reshape(x.shape[0], x.shape[1], -1)
    runs, n = x.shape[:2]
    params = [(w.detach().to(dev, copy=True), b.detach().to(dev, copy=True)) for w, b in params]
    flat = [t for pair in params for t in pair]
    opt = torch.optim.Adam(flat, lr=lr)
    gen = torch.Generator().manual_seed(int(seed))

    snapshot = [t.clone() for t in flat]
    best = torch.full((runs,), float("inf"), device=dev)
    since = torch.zeros(runs, dtype=torch.long, device=dev)
    active = torch.ones(runs, dtype=torch.bool, device=dev)
    epochs = torch.full((runs,), max_epochs, dtype=torch.long, device=dev)
    curve = []
    bar = tqdm(range(max_epochs), desc=desc, mininterval=10.0)
    with torch.no_grad():
        for epoch in bar:
            order = torch.argsort(torch.rand(runs, n, generator=gen), dim=1).to(dev)
            xs = torch.gather(x, 1, order[..., None].expand(-1, -1, x.shape[2]))
            ys = torch.gather(y, 1, order[..., None].expand(-1, -1, y.shape[2]))
            running = torch.zeros(runs, device=dev)
            for i in range(0, n, batch_size):
                xb, yb = xs[:, i:i + batch_size], ys[:, i:i + batch_size]
                out, pre, hidden = _forward_train(params, xb)
                value, grad_out = _loss_and_grad(out, yb, loss)
                for t, g in zip(flat, _backward(params, xb, pre, hidden, grad_out)):
                    t.grad = g
                opt.step()
                running += value * xb.shape[1]
            # the epoch's mean minibatch loss: free, unlike a second pass over the data
            epoch_loss = running / n
            curve.append(epoch_loss.tolist())
            bar.set_postfix(loss=f"{epoch_loss.mean():.4g}", active=int(active.sum()), refresh=False)
            if patience == 0:
                continue
            tol = torch.clamp(best * min_improvement, min=min_delta)
            improved = torch.isinf(best) | (best - epoch_loss > tol)
            best = torch.where(improved, epoch_loss, best)
            since = torch.where(improved, torch.zeros_like(since), since + 1)
            stop = active & (since >= patience)
            if stop.any():
                for snap, t in zip(snapshot, flat):
                    snap[stop] = t[stop]
                epochs[stop] = epoch + 1
                active &= ~stop
            if not active.any():
                break
        for snap, t in zip(snapshot, flat):  # runs still training at the end keep their last weights
            snap[active] = t[active]
    trained = [(snapshot[2 * i].cpu(), snapshot[2 * i + 1].cpu()) for i in range(len(params))]
    info = {
        "epochs": epochs.tolist(),
        "converged": (~active).tolist() if patience > 0 else [False] * runs,
        "epoch_loss": curve,
        "final_loss": _full_loss(trained, x.cpu(), y.cpu(), loss).tolist(),
    }
    return trained, info
