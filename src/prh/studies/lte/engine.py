"""The distributed LTE trainer and its DDP baseline (thesis section 4.2.3, appendix 8.2).

Every rank runs the heads n with n % world == rank (round-robin), each on its own
replica of the model (LoRA on every linear layer, W shared by the rank's replicas), its
own optimiser, its own init and its own data stream seeded by (seed, n): a head does
the same arithmetic whatever the number of ranks. Every T local steps (a merge):

    all_gather the factors (B_n, A_n) of every head, then on every rank, in head order,
    W <- W + (s / N) (sum_n B_n A_n - sum_n V_n)            (one matmul per layer)

so W is bit-identical on every rank, and all_reduce the small parameters (biases,
norms, embeddings, task heads) to their mean over heads. Merge modes:

- ``reset_b``: B_n <- 0, A_n and the optimiser states kept (the issue's default, Fig 8.2);
- ``reset_ab``: B_n <- 0, A_n redrawn, optimiser reset (the naive scheme of appendix 8.3);
- ``correct``: B_n, A_n kept and V_n <- B_n A_n, the correction term of appendix 8.2;
  at T = 1 (with SGD at lr / N: head n enters its replica with s, not s / N) this is
  exactly multi-head LoRA (eq. 4.2) trained on the same batches.

Bytes per merge: each head's factors once, N sum_l r (m_l + n_l) * itemsize, plus the
small parameters (one all_reduce), plus the padding all_gather needs when N % world != 0.
"""

from __future__ import annotations

import copy
import math

import numpy as np
import torch
import torch.distributed as dist
from torch import nn

from prh.studies.lte.lora import (
    init_a,
    inject_lora,
    lora_layers,
    small_parameters,
)

__all__ = ["MERGES", "effective_rank", "key", "train_lte", "train_standard", "world"]

MERGES = ("reset_b", "reset_ab", "correct")


def key(*parts: int) -> int:
    """A 63-bit seed from integers, e.g. (seed, purpose, head): independent streams per head."""
    return int(np.random.SeedSequence([int(p) for p in parts]).generate_state(2, np.uint64)[0] >> np.uint64(1))


def world() -> tuple[int, int]:
    """(rank, world size) of the default process group; (0, 1) when none is initialised."""
    if dist.is_available() and dist.is_initialized():
        return dist.get_rank(), dist.get_world_size()
    return 0, 1


def effective_rank(mat: torch.Tensor) -> float:
    """exp(entropy of the normalised singular values) (Roy and Vetterli 2007; appendix 8.8). A wide matrix is
    decomposed as its transpose (the same values): LAPACK took 66 ms for a 384 x 1536 update, 33 ms for 1536 x 384."""
    mat = mat.detach().double()
    s = torch.linalg.svdvals(mat.T if mat.ndim == 2 and mat.shape[0] < mat.shape[1] else mat)
    if float(s.sum()) == 0.0:
        return 0.0
    p = s / s.sum()
    p = p[p > 0]
    return float(torch.exp(-(p * p.log()).sum()))


def _share(history: list[dict]) -> list[dict]:
    """Rank 0's evaluation history, on every rank (so every rank takes the same decisions)."""
    if world()[1] > 1:
        box = [history]
        dist.broadcast_object_list(box, src=0)
        return box[0]
    return history


def _optimizer(params, *, name: str, lr: float, weight_decay: float, steps: int, schedule: str):
    if name == "adam":
        # foreach: one fused call per step, not one per tensor (40% of a small head's step on a CPU)
        opt = torch.optim.AdamW(params, lr=lr, weight_decay=weight_decay, foreach=True)
    elif name == "sgd":
        opt = torch.optim.SGD(params, lr=lr, weight_decay=weight_decay, foreach=True)
    else:
        raise ValueError(f"optimizer={name!r} is unknown; choose 'adam' or 'sgd'")
    if schedule == "constant":
        return opt, None
    if schedule != "cosine":
        raise ValueError(f"schedule={schedule!r} is unknown; choose 'constant' or 'cosine'")
    warm = max(1, steps // 20)
    return opt, torch.optim.lr_scheduler.LambdaLR(
        opt, lambda t: min(1.0, (t + 1) / warm) * 0.5 * (1 + math.cos(math.pi * min(t, steps) / steps)))


class _Head:
    def __init__(self, n, replica, *, seed, same_init, same_data, init, opt_kwargs):
        self.n, self.model, self.init, self.opt_kwargs, self.layers = n, replica, init, opt_kwargs, lora_layers(replica)
        self.data_gen = torch.Generator().manual_seed(key(seed, 1, 0 if same_data else n))
        self.init_gen = torch.Generator().manual_seed(key(seed, 2, 0 if same_init else n))
        self.draw_a()
        self.reset_optimizer()

    def draw_a(self):
        with torch.no_grad():
            for layer in self.layers:
                layer.A[0].copy_(init_a(layer.rank, layer.shape[1], gen=self.init_gen, init=self.init,
                                        dtype=layer.weight.dtype))

    def reset_optimizer(self):
        self.opt, self.sched = _optimizer(list(self.model.parameters()), **self.opt_kwargs)

    def vector(self) -> torch.Tensor:
        return torch.cat([t.detach().reshape(-1) for layer in self.layers for t in (layer.B[0], layer.A[0])])


def train_lte(*, model: nn.Module, sample, loss_fn, heads: int, rank: int, alpha: float, steps: int,
              merge_every: int | None, lr: float, optimizer: str = "adam", weight_decay: float = 0.0,
              schedule: str = "constant", merge: str = "reset_b", init: str = "orthogonal", seed: int = 0,
              same_init: bool = False, same_data: bool = False, eval_every: int | None = None, evaluate=None,
              batch_size: int = 1, skip: tuple[str, ...] = (), track=None, rank_every_eval: bool = False) -> dict:
    """Train ``model`` with LTE across the ranks of the default process group.

    Parameters
    ----------
    model : the base model (W_0), built identically on every rank.
    sample : ``sample(gen, n)`` -> a batch of n items drawn from torch generator ``gen``.
    loss_fn : ``loss_fn(model, batch)`` -> scalar loss.
    heads, rank, alpha : N, r and s = alpha / r.
    steps : local optimisation steps per head; ``merge_every`` T (None: never merge, plain LoRA).
    batch_size : items per head per step (samples per step = N * batch_size).
    evaluate : ``evaluate(model)`` -> dict of numbers, run on rank 0 on the merged model
        every ``eval_every`` steps (a virtual merge between merges) and at the end.
    rank_every_eval : record the mean effective rank of W - W_0 at every evaluation (else at the end).
    track : ``track(step, gathered, model)`` called on every rank at every (virtual) merge,
        gathered = per layer (B [N, m, r], A [N, r, n]) of all heads.

    Returns
    -------
    dict with ``history`` (rank 0's, on every rank: step, samples, syncs and evaluate's numbers), ``merges``,
    ``bytes_per_merge`` (lora, small, padding), ``weights`` (final merged W per layer),
    ``small`` (final averaged small parameters), ``model`` (the merged model).
    """
    if merge not in MERGES:
        raise ValueError(f"merge={merge!r} is unknown; choose one of: {', '.join(MERGES)}")
    if merge_every is not None and merge_every < 1:
        raise ValueError(f"merge_every={merge_every} must be >= 1, or None for no merges")
    if heads < 1 or steps < 1 or batch_size < 1:
        raise ValueError(f"heads={heads}, steps={steps} and batch_size={batch_size} must all be >= 1")
    me, size = world()
    base = inject_lora(copy.deepcopy(model), rank=rank, alpha=alpha, heads=1, skip=skip)
    shared = [layer.weight for layer in lora_layers(base)]
    opt_kwargs = dict(name=optimizer, lr=lr, weight_decay=weight_decay, steps=steps, schedule=schedule)
    local = []
    for n in range(me, heads, size):
        replica = copy.deepcopy(base)
        for layer, w in zip(lora_layers(replica), shared):
            layer.weight = w  # one W per rank, shared by its heads
        local.append(_Head(n, replica, seed=seed, same_init=same_init, same_data=same_data, init=init,
                           opt_kwargs=opt_kwargs))
    w0 = [w.clone() for w in shared]
    shapes = [layer.shape for layer in lora_layers(base)]
    prev = [torch.zeros_like(w) for w in shared]
    slots = math.ceil(heads / size)
    item, per_head = shared[0].element_size(), sum(rank * (m + n) for m, n in shapes)
    bytes_ = {"lora": heads * per_head * item, "small": sum(p.numel() for p in small_parameters(base)) * item,
              "padding": (slots * size - heads) * per_head * item}
    history, merges = [], 0

    def gather():
        mine = torch.zeros(slots, per_head, dtype=shared[0].dtype, device=shared[0].device)
        for i, h in enumerate(local):
            mine[i] = h.vector()
        parts = [mine]
        if size > 1:
            parts = [torch.empty_like(mine) for _ in range(size)]
            dist.all_gather(parts, mine)
        flat = torch.stack([parts[n % size][n // size] for n in range(heads)])
        out, at = [], 0
        for m, n in shapes:
            b = flat[:, at:at + m * rank].reshape(heads, m, rank)
            a = flat[:, at + m * rank:at + rank * (m + n)].reshape(heads, rank, n)
            out.append((b, a))
            at += rank * (m + n)
        return out

    def merged(gathered):
        """(weights, small) of the merged model, the same on every rank."""
        s = lora_layers(base)[0].scale
        weights = []
        for (b, a), w, p in zip(gathered, shared, prev):
            m, n = w.shape
            prod = b.permute(1, 0, 2).reshape(m, heads * rank) @ a.reshape(heads * rank, n)
            weights.append((w + (s / heads) * (prod - p), prod))
        total = [torch.zeros_like(p) for p in small_parameters(base)]
        for h in local:  # head order within the rank
            for t, p in zip(total, small_parameters(h.model)):
                t += p.detach()
        if size > 1 and total:
            flat = torch.cat([t.reshape(-1) for t in total])
            dist.all_reduce(flat)
            total = list(torch.split(flat, [t.numel() for t in total]))
        return weights, [t.reshape(p.shape) / heads for t, p in zip(total, small_parameters(base))]

    def load(target, weights, small):
        with torch.no_grad():
            for layer, (w, _) in zip(lora_layers(target), weights):
                layer.weight.copy_(w)
            for p, v in zip(small_parameters(target), small):
                p.copy_(v)

    eval_model = copy.deepcopy(base)

    def checkpoint(step, weights, small, gathered):
        if track is not None:
            track(step, gathered, eval_model)
        load(eval_model, weights, small)
        if me == 0 and evaluate is not None:
            rec = {"step": step, "samples": step * heads * batch_size, "syncs": merges}
            with torch.no_grad():
                rec.update(evaluate(eval_model.eval()))
            if rank_every_eval or step == steps:
                rec["update_erank"] = float(np.mean([effective_rank(w - w_0) for (w, _), w_0 in zip(weights, w0)]))
            history.append(rec)

    for step in range(1, steps + 1):
        for h in local:
            h.model.train()
            loss = loss_fn(h.model, sample(h.data_gen, batch_size))
            h.opt.zero_grad(set_to_none=True)
            loss.backward()
            h.opt.step()
            if h.sched is not None:
                h.sched.step()
        is_merge = merge_every is not None and step % merge_every == 0
        is_eval = (eval_every and step % eval_every == 0) or step == steps
        if not (is_merge or is_eval):
            continue
        gathered = gather()
        weights, small = merged(gathered)
        if is_merge:
            merges += 1
            with torch.no_grad():
                for w, (new, prod) in zip(shared, weights):
                    w.copy_(new)
                for i, p in enumerate(prev):
                    p.copy_(weights[i][1] if merge == "correct" else torch.zeros_like(p))
                for h in local:
                    for p, v in zip(small_parameters(h.model), small):
                        p.copy_(v)
                    for layer in h.layers:
                        if merge == "correct":
                            layer.V = (layer.B[0] @ layer.A[0]).detach().clone()
                        else:
                            layer.B[0].zero_()
                    if merge == "reset_ab":
                        h.draw_a()
                        h.reset_optimizer()
        if is_eval:
            checkpoint(step, weights, small, gathered)
    load(eval_model, weights, small)
    return {"history": _share(history), "merges": merges, "bytes_per_merge": bytes_,
            "weights": [w for w, _ in weights], "w0": w0, "small": small, "model": eval_model,
            "heads_on_rank": [h.n for h in local]}


def train_standard(*, model: nn.Module, sample, loss_fn, steps: int, batch_size: int, lr: float,
                   optimizer: str = "adam", weight_decay: float = 0.0, schedule: str = "constant",
                   seed: int = 0, eval_every: int | None = None, evaluate=None, skip: tuple[str, ...] = ()) -> dict:
    """Data-parallel (DDP) training: every rank draws the global batch from stream (seed, 0), takes
    its slice rank::world, and gradients are all-reduced (summed, each slice weighted by its share).

    Returns ``history`` (rank 0), ``model`` and ``bytes_per_step`` (the all-reduced gradient).
    """
    me, size = world()
    model = copy.deepcopy(model)
    params = [p for p in model.parameters() if p.requires_grad]
    opt, sched = _optimizer(params, name=optimizer, lr=lr, weight_decay=weight_decay, steps=steps,
                            schedule=schedule)
    gen = torch.Generator().manual_seed(key(seed, 1, 0))  # head 0's stream
    linears = [m for name, m in model.named_modules()
               if isinstance(m, nn.Linear) and not any(s in name for s in skip)]  # the layers LTE would adapt
    w0 = [layer.weight.detach().clone() for layer in linears]
    history = []
    for step in range(1, steps + 1):
        batch = sample(gen, batch_size)
        idx = torch.arange(me, batch_size, size)
        model.train()
        loss = loss_fn(model, tuple(t[idx] for t in batch)) * (len(idx) / batch_size)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        if size > 1:
            flat = torch.cat([p.grad.reshape(-1) for p in params])
            dist.all_reduce(flat)
            for p, g in zip(params, torch.split(flat, [p.numel() for p in params])):
                p.grad.copy_(g.reshape(p.shape))
        opt.step()
        if sched is not None:
            sched.step()
        if me == 0 and evaluate is not None and ((eval_every and step % eval_every == 0) or step == steps):
            rec = {"step": step, "samples": step * batch_size, "syncs": step}
            with torch.no_grad():
                rec.update(evaluate(model.eval()))
            rec["update_erank"] = float(np.mean([effective_rank(m.weight - w_0) for m, w_0 in zip(linears, w0)]))
            history.append(rec)
    return {"history": _share(history), "model": model, "bytes_per_step": sum(p.numel() for p in params) * 4}
