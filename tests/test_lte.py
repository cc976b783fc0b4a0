"""LoRA-the-Explorer (prh.studies.lte): layers, merges, exact equivalence, a real 2-rank gloo run,
communication counts, least squares (Fig 8.1) and the rank of the accumulated update."""

from __future__ import annotations

import copy
from pathlib import Path

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from test_workflow import free_port
from torch import nn

from prh.studies.lte.engine import effective_rank, key, train_lte
from prh.studies.lte.least_squares import run_least_squares
from prh.studies.lte.lora import (
    LoRALinear,
    init_a,
    inject_lora,
    lora_layers,
    small_parameters,
)
from prh.studies.lte.orthogonality import grassmann, head_alignment


def _mlp(bias=True, dtype=torch.float32):
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(6, 8, bias=bias), nn.Tanh(), nn.Linear(8, 4, bias=bias)).to(dtype)


def _task(dtype=torch.float32):
    target = torch.randn(4, 6, generator=torch.Generator().manual_seed(1), dtype=dtype)

    def sample(gen, n):
        x = torch.randn(n, 6, generator=gen, dtype=dtype)
        return x, torch.tanh(x @ target.T)

    def loss_fn(model, batch):
        x, y = batch
        return ((model(x) - y) ** 2).mean()

    return sample, loss_fn


def test_head_with_b_zero_equals_base_layer():
    base = nn.Linear(6, 5)
    layer = LoRALinear(base, rank=2, alpha=4.0)
    with torch.no_grad():
        layer.A[0].copy_(init_a(2, 6, gen=torch.Generator().manual_seed(0)))
    x = torch.randn(7, 6)
    assert torch.equal(layer(x), base(x))
    model = _mlp()
    assert torch.equal(inject_lora(copy.deepcopy(model), rank=2, alpha=2.0)(x), model(x))


def test_semi_orthogonal_init_and_bad_arguments():
    a = init_a(3, 8, gen=torch.Generator().manual_seed(0))
    assert torch.allclose(a @ a.T, torch.eye(3), atol=1e-6)
    with pytest.raises(ValueError, match="init"):
        init_a(3, 8, gen=torch.Generator(), init="kaiming")
    with pytest.raises(ValueError, match="merge"):
        train_lte(model=_mlp(), sample=None, loss_fn=None, heads=2, rank=1, alpha=1, steps=1, merge_every=1,
                  lr=0.1, merge="average")


def test_merge_preserves_the_function():
    layer = LoRALinear(nn.Linear(6, 5), rank=2, alpha=3.0)
    with torch.no_grad():
        layer.A[0].normal_()
        layer.B[0].normal_()
    x = torch.randn(7, 6)
    before = layer(x)
    with torch.no_grad():
        layer.weight += layer.delta()  # W <- W + s B A, then B <- 0
        layer.B[0].zero_()
    assert torch.allclose(layer(x), before, atol=1e-5)
    # the engine's merged model computes W + (s / N) sum_n B_n A_n with the heads' factors
    seen = {}
    sample, loss_fn = _task()
    out = train_lte(model=_mlp(), sample=sample, loss_fn=loss_fn, heads=3, rank=2, alpha=2.0, steps=4,
                    merge_every=None, lr=0.05, batch_size=4, track=lambda s, g, m: seen.update(g=g))
    for (b, a), w, w0 in zip(seen["g"], out["weights"], out["w0"]):
        assert torch.allclose(w, w0 + (2.0 / 2) / 3 * sum(b[n] @ a[n] for n in range(3)), atol=1e-6)


def test_lte_at_t1_with_correction_equals_multi_head_lora():
    n_heads, rank, alpha, lr, steps, seed = 3, 2, 2.0, 0.05, 20, 0
    sample, loss_fn = _task(torch.float64)
    model = _mlp(bias=False, dtype=torch.float64)
    # LTE: T = 1, B and A kept with the correction term; every head sees the same batches;
    # SGD at lr / N because head n enters its replica with s rather than s / N.
    out = train_lte(model=model, sample=sample, loss_fn=loss_fn, heads=n_heads, rank=rank, alpha=alpha,
                    steps=steps, merge_every=1, lr=lr / n_heads, optimizer="sgd", merge="correct", seed=seed,
                    same_data=True, batch_size=5)
    # multi-head LoRA (eq. 4.2), one model, the same A inits, the same batches
    mh = inject_lora(copy.deepcopy(model), rank=rank, alpha=alpha, heads=n_heads)
    with torch.no_grad():
        for k in range(n_heads):
            gen = torch.Generator().manual_seed(key(seed, 2, k))
            for layer in lora_layers(mh):
                layer.A[k].copy_(init_a(rank, layer.shape[1], gen=gen, dtype=torch.float64))
    opt = torch.optim.SGD(mh.parameters(), lr=lr)
    gen = torch.Generator().manual_seed(key(seed, 1, 0))
    for _ in range(steps):
        loss = loss_fn(mh, sample(gen, 5))
        opt.zero_grad()
        loss.backward()
        opt.step()
    for layer, w in zip(lora_layers(mh), out["weights"]):
        assert (layer.weight + layer.delta() - w).abs().max() < 1e-6
    assert (layer.delta().abs().max()) > 1e-3  # the heads did move


def _run(heads=3, merge_every=4, steps=12):
    sample, loss_fn = _task()
    return train_lte(model=_mlp(), sample=sample, loss_fn=loss_fn, heads=heads, rank=2, alpha=4.0, steps=steps,
                     merge_every=merge_every, lr=1e-2, seed=3, batch_size=4)


def _worker(rank, world, port, path):
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world)
    try:
        out = _run()
        torch.save({"weights": out["weights"], "small": out["small"], "merges": out["merges"],
                    "bytes": out["bytes_per_merge"], "heads": out["heads_on_rank"]}, f"{path}.{rank}")
    finally:
        dist.destroy_process_group()


def test_two_gloo_ranks_agree_with_one(tmp_path):
    path = str(tmp_path / "ranks")
    mp.spawn(_worker, args=(2, free_port(), path), nprocs=2, join=True)
    r0, r1 = (torch.load(f"{path}.{r}") for r in (0, 1))
    assert r0["heads"] == [0, 2] and r1["heads"] == [1]  # round-robin
    assert r0["merges"] == 3
    for a, b in zip(r0["weights"], r1["weights"]):
        assert torch.equal(a, b)  # W is bit-identical on every rank
    one = _run()
    diff = max(float((a - b).abs().max()) for a, b in zip(r0["weights"] + r0["small"], one["weights"] + one["small"]))
    assert diff <= 1e-6
    assert max(float((w - w0).abs().max()) for w, w0 in zip(one["weights"], one["w0"])) > 1e-3
    # bytes per merge: N sum_l r (m_l + n_l) * 4 for the factors, plus the small parameters
    assert r0["bytes"]["lora"] == 3 * (2 * (8 + 6) + 2 * (4 + 8)) * 4
    assert r0["bytes"]["small"] == (8 + 4) * 4
    assert r0["bytes"]["padding"] == 1 * 2 * ((8 + 6) + (4 + 8)) * 4  # 3 heads on 2 ranks: one empty slot


def test_small_parameters_are_outside_lora():
    model = inject_lora(_mlp(), rank=2, alpha=2.0)
    assert [p.shape for p in small_parameters(model)] == [torch.Size([8]), torch.Size([4])]


@pytest.fixture(scope="module")
def least_squares():
    return run_least_squares(target_ranks=[32], heads=[1], merge_every=[None, 1, 5, 20], steps=1000, lr=0.35,
                             eval_every=20, seed=0)


def test_least_squares_without_merges_stays_above_the_svd_bound(least_squares):
    runs = {r["merge_every"]: r for r in least_squares["runs"]}
    assert runs[None]["min_loss"] >= runs[None]["svd_bound"] - 1e-6
    assert runs[None]["svd_bound"] > 0.1
    for t in (1, 5, 20):
        assert runs[t]["final_loss"] < 1e-2
    steps = [runs[t]["steps_to_threshold"] for t in (1, 5, 20)]
    assert steps == sorted(steps) and steps[0] < steps[-1]


def test_update_rank_lte_above_2r_lora_at_most_r(least_squares):
    runs = {r["merge_every"]: r for r in least_squares["runs"]}
    r = least_squares["config"]["lora_rank"]
    assert runs[None]["update_erank"] <= r
    for t in (1, 5, 20):
        assert runs[t]["update_erank"] > 2 * r
    assert effective_rank(torch.eye(5)) == pytest.approx(5.0)


def test_head_alignment_identical_and_orthogonal_heads():
    u = torch.linalg.qr(torch.randn(10, 4, generator=torch.Generator().manual_seed(0), dtype=torch.float64))[0]
    assert grassmann(u[:, :2], u[:, :2]) == pytest.approx(0.0, abs=1e-6)
    assert grassmann(u[:, :2], u[:, 2:]) == pytest.approx((2 * (torch.pi / 2) ** 2) ** 0.5, abs=1e-5)
    b = torch.stack([u[:, :1], u[:, :1], u[:, 1:2]])  # heads 0 and 1 equal, head 2 orthogonal
    a = torch.ones(3, 1, 3, dtype=torch.float64)
    out = head_alignment([(b, a)], rank=1)
    assert out["abs_cos"] == pytest.approx(1 / 3, abs=1e-6)


def test_vision_experiments_verdicts_and_figures_end_to_end(tmp_path, least_squares):
    from prh.data.shapes import build_dataset
    from prh.figures import FIGURES, draw
    from prh.io import write_json
    from prh.studies.lte.run import run_orthogonality, run_table, run_vision
    from prh.studies.lte.verdicts import verdicts

    data = build_dataset(tmp_path / "shapes", n=60, seed=0)
    tiny = dict(model={"patch": 8, "dim": 16, "depth": 1, "attn_heads": 2, "mlp_ratio": 2}, batch_size=8, samples=64,
                heads=2, rank=2, alpha=4.0, merge_every=2, lr_grid={"standard": [3e-3], "lte": [3e-3, 1e-2]},
                evals=2, table_heads=[2, 4], table_merge_every=[2, 4], orth_heads=2)
    vision = run_vision(data_path=str(data), **tiny)
    assert set(vision["arms"]) == {"standard", "lora", "lora_merge", "lte"}
    assert vision["arms"]["lte"]["history"][-1]["samples"] == 2 * 64
    assert vision["arms"]["lora"]["history"][-1]["update_erank"] <= 2 + 1e-6
    table = run_table(data_path=str(data), lr=3e-3, **tiny)
    assert [(r["heads"], r["merge_every"]) for r in table["rows"]] == [(2, 2), (2, 4), (4, 2), (4, 4)]
    orth = run_orthogonality(data_path=str(data), lr=3e-3, **tiny)
    assert all(s["curve"] and 0 <= s["curve"][-1]["abs_cos"] <= 1 for s in orth["settings"].values())
    m = verdicts(least_squares=least_squares, vision=vision, table=table, orthogonality=orth, max_ratio=1.4,
                 min_gap=0.03)
    assert m["least_squares"]["verdict"] == "reproduced"
    # the label follows the pre-registered rule from the statistics it records (no test that
    # asserts only membership in the label set): ratio <= max_ratio, inconclusive below the min_gap
    s = m["samples_to_match"]
    gap, ratio = s["standard_minus_lora_accuracy"], s["value"]
    expected = ("inconclusive" if gap < s["min_gap"] else
                "reproduced" if ratio is not None and ratio <= s["threshold"] else "not reproduced")
    assert s["verdict"] == expected, s
    assert s["final_accuracy"]["standard"] - s["final_accuracy"]["lora"] == pytest.approx(gap)
    for name, numbers in {"least_squares": least_squares, "vision": vision, "table": table,
                          "orthogonality": orth}.items():
        write_json(tmp_path / "exp" / f"{name}.json", numbers)
    lte_figures = [f for f in FIGURES.values() if f.draw.startswith("prh.plots.lte:")]
    assert len(lte_figures) == 5
    for fig in lte_figures:
        inputs = {k: str(tmp_path / "exp" / Path(v).name) for k, v in fig.inputs.items()}
        paths = draw(fig.name, tmp_path / f"{fig.name}.{fig.formats[0]}", inputs)
        assert paths and all(p.exists() and p.stat().st_size > 100 for p in paths)


def _lte_inputs(*, lte_samples=130, lora_acc=0.6, merged_loss=0.001, orth_best="diff init, diff data", table_fall=True):
    h = lambda acc, samples, erank: {"accuracy": acc, "samples": samples, "loss": 1 - acc, "update_erank": erank}  # noqa: E731
    vision = {"config": {"rank": 2},
              "arms": {"standard": {"history": [h(0.8, 100, 9.0)], "bytes_per_sync": 10, "steps": 5},
                       "lora": {"history": [h(lora_acc, 100, 2.0)]}, "lora_merge": {"history": [h(0.7, 100, 5.0)]},
                       "lte": {"history": [h(0.7, 50, 6.0), h(0.8, lte_samples, 6.0)], "bytes_per_merge": 1, "merges": 3}}}
    run = lambda heads, t, loss, steps, erank: {"target_rank": 8, "heads": heads, "merge_every": t, "svd_bound": 0.5,  # noqa: E731
                                                "min_loss": loss, "final_loss": loss, "steps_to_threshold": steps,
                                                "update_erank": erank}
    least_squares = {"config": {"lora_rank": 1, "threshold": 0.01},
                     "runs": [run(1, None, 0.6, None, 1.0), run(8, 1, merged_loss, 10, 5.0), run(8, 5, 0.002, 30, 5.0)]}
    accs = [0.8, 0.7] if table_fall else [0.7, 0.8]
    table = {"rows": [{"heads": 2, "merge_every": 2, "test_accuracy": accs[0]},
                      {"heads": 2, "merge_every": 4, "test_accuracy": accs[1]}]}
    other = "same init, same data" if orth_best == "diff init, diff data" else "diff init, diff data"
    orthogonality = {"settings": {orth_best: {"curve": [{"abs_cos": 0.1, "grassmann": 1.0}], "test_accuracy": 0.9},
                                  other: {"curve": [{"abs_cos": 0.5, "grassmann": 0.5}], "test_accuracy": 0.8}}}
    return dict(least_squares=least_squares, vision=vision, table=table, orthogonality=orthogonality)


@pytest.mark.parametrize("change, claim, label", [
    ({}, "samples_to_match", "reproduced"),  # 130 / 100 = 1.3 <= 1.4
    ({"lte_samples": 140}, "samples_to_match", "reproduced"),  # exactly at max_ratio
    ({"lte_samples": 150}, "samples_to_match", "not reproduced"),
    ({"lora_acc": 0.78}, "samples_to_match", "inconclusive"),  # standard beats LoRA by 0.02 < min_gap
    ({}, "least_squares", "reproduced"),
    ({"merged_loss": 0.02}, "least_squares", "not reproduced"),  # a merged run misses the threshold
    ({}, "update_rank", "reproduced"),
    ({}, "head_orthogonality", "reproduced"),
    ({"orth_best": "same init, same data"}, "head_orthogonality", "not reproduced"),
    ({}, "merge_interval", "reproduced"),
    ({"table_fall": False}, "merge_interval", "not reproduced"),
])
def test_lte_verdicts_on_constructed_results(change, claim, label):
    from prh.studies.lte.verdicts import verdicts

    assert verdicts(**_lte_inputs(**change), max_ratio=1.4, min_gap=0.03)[claim]["verdict"] == label
