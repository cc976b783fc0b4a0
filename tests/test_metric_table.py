"""The metric table (prh.metrics.names) and the dispatch that reads it (prh.metrics.registry).

The registry once chose each metric's path by its name (if-chains over the k-NN metrics, the CKAs, cknna and svcca);
now it reads one entry per metric. ``Named`` below is that name-chained dispatch, frozen as it stood, on the same
kernel and k-NN functions: the table's dispatch must give the very same bits (states, scores, permuted and joined
states) for every metric, alone and in any set, with and without the dense position table, in both dtypes. The
entries are then checked against what the engine builds (keys, sizes) and against the lists that read them."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from prh.metrics import kernel
from prh.metrics import knn as knn_lib
from prh.metrics import registry
from prh.metrics.names import KNN_METRICS, METRICS, PERMUTATIONS, SOURCES, SUPPORTED_METRICS

PAPER = ["cycle_knn", "mutual_knn", "lcs_knn", "cka", "unbiased_cka", "cknna", "svcca", "edit_distance_knn"]


class Named:
    """The registry's dispatch by metric name before the table (its layer_state_set, stack/cat_states,
    pair_score_set and permute_state, without the input checks), for the eight metrics of PRH appendix B."""

    LISTS = ("mutual_knn", "cycle_knn", "lcs_knn", "edit_distance_knn")
    GRAMS = {"cka": kernel.unit_gram, "unbiased_cka": kernel.ucentered_from_product}

    @classmethod
    def layer_state_set(cls, metrics, h, *, topk, cca_dim, knn_precision="fp32"):
        h = F.normalize(h, dim=1)
        grams = [m for m in metrics if m in cls.GRAMS]
        out = {}
        if any(m in cls.LISTS or m == "cknna" for m in metrics):
            idx, sims = knn_lib.knn(h, topk, precision=knn_precision)
            out.update({m: idx for m in metrics if m in cls.LISTS})
            if "cknna" in metrics:
                out["cknna"] = kernel.cknna_state_from_knn(idx, sims)
        if grams:
            product = kernel.centered_product(h)
            for m in grams:
                out[m] = cls.GRAMS[m](product if m == grams[-1] else product.clone())
        if "svcca" in metrics:
            out["svcca"] = kernel.svcca_state(h, cca_dim)
        return out

    @staticmethod
    def join(metric, states, how):
        if metric == "cknna":
            return {key: how([s[key] for s in states]) for key in states[0]}
        return how(states)

    @classmethod
    def join_models(cls, metrics, states, how):  # files.file_layer_states (stack) and the engine's y models (cat)
        lists = [m for m in metrics if m in cls.LISTS]
        shared = cls.join(lists[0], [s[lists[0]] for s in states], how) if lists else None
        out = {m: shared if m in cls.LISTS else cls.join(m, [s[m] for s in states], how) for m in metrics}
        if shared is not None and "cknna" in out:
            out["cknna"]["idx"] = shared
        return out

    @classmethod
    def pair_score_set(cls, metrics, states_a, states_b):
        out = {}
        lists = [m for m in metrics if m in cls.LISTS]
        if lists or "cknna" in metrics:
            idx_a = states_a[lists[0]] if lists else states_a["cknna"]["idx"]
            idx_b = states_b[lists[0]] if lists else states_b["cknna"]["idx"]
            lb, n, k = idx_b.shape
            rows: dict = {m: [] for m in lists + (["cknna"] if "cknna" in metrics else [])}
            same_a = same_b = False
            if lists and "cknna" in metrics:
                ca, cb = states_a["cknna"]["idx"], states_b["cknna"]["idx"]
                same_a = ca is idx_a or torch.equal(ca, idx_a)
                same_b = same_a and (cb is idx_b or torch.equal(cb, idx_b))
            for layer in range(idx_a.shape[0]):
                table = knn_lib.position_table(idx_a[layer])
                parts: dict = {m: [] for m in rows}
                for sl in knn_lib.b_blocks(lb, n, k, 8 if table is not None or "cycle_knn" not in lists else 2 * k):
                    needs_pos = set(lists) - {"cycle_knn"} or "cknna" in metrics
                    pos = knn_lib.neighbour_positions(idx_a[layer], idx_b[sl], table) if needs_pos else None
                    if lists:
                        for m, row in knn_lib.list_scores(lists, idx_a[layer], idx_b[sl], table=table, pos=pos).items():
                            parts[m].append(row)
                    if "cknna" in metrics:
                        a, b = states_a["cknna"], {key: value[sl] for key, value in states_b["cknna"].items()}
                        parts["cknna"].append(kernel.cknna_scores(a, b, layer=layer, table=table if same_a else False,
                                                                  pos=pos if same_b else None))
                for m, row in rows.items():
                    row.append(torch.cat(parts[m]))
            out.update({m: torch.stack(r) for m, r in rows.items()})
        for metric in metrics:
            if metric in cls.GRAMS:
                out[metric] = kernel.gram_scores(states_a[metric], states_b[metric])
            elif metric == "svcca":
                out[metric] = kernel.svcca_scores(states_a[metric], states_b[metric])
        return {m: out[m] for m in metrics}

    @classmethod
    def permute_state(cls, metric, state, perm):
        inv = torch.empty_like(perm)
        inv[perm] = torch.arange(perm.numel(), device=perm.device)
        if metric in cls.LISTS:
            return inv[state[:, perm]]
        if metric in cls.GRAMS:
            return state[:, perm][:, :, perm]
        if metric == "svcca":
            return state[:, perm]
        return {"idx": inv[state["idx"][:, perm]], "vals": state["vals"][:, perm], "back": state["back"][:, perm],
                "self": state["self"]}


def assert_same_bits(got, want, where: str):
    """The same tensors bit for bit (dtype, shape, bytes; NaN where NaN), dicts key by key in the same order."""
    if isinstance(want, dict):
        assert isinstance(got, dict) and list(got) == list(want), f"{where}: keys {list(got)} != {list(want)}"
        for key in want:
            assert_same_bits(got[key], want[key], f"{where}.{key}")
        return
    kind, wanted = (got.dtype, got.shape), (want.dtype, want.shape)
    assert kind == wanted, f"{where}: {kind} != {wanted}"
    assert got.cpu().numpy().tobytes() == want.cpu().numpy().tobytes(), f"{where}: the bits differ"


def models(dtype, seed=0, n=50):
    g = torch.Generator().manual_seed(seed)
    shared = torch.randn(n, 4, generator=g, dtype=torch.float64)
    a = torch.stack([shared @ torch.randn(4, 6, generator=g, dtype=torch.float64) + 0.5 * (i + 1)
                     * torch.randn(n, 6, generator=g, dtype=torch.float64) for i in range(3)], dim=1)
    b = torch.stack([shared @ torch.randn(4, 5, generator=g, dtype=torch.float64) + 0.5 * (i + 1)
                     * torch.randn(n, 5, generator=g, dtype=torch.float64) for i in range(5)], dim=1)
    return a.to(dtype), b.to(dtype)


# sets of metrics in the orders callers give them: all, reversed, cknna before or without the lists, one family
SETS = [PAPER, PAPER[::-1], ["cknna", "mutual_knn"], ["cknna"], ["cycle_knn"], ["cycle_knn", "cknna"],
        ["unbiased_cka", "cka", "svcca"], ["lcs_knn", "edit_distance_knn", "mutual_knn"], ["svcca", "cka"]]


@pytest.mark.parametrize("dense", [True, False], ids=["position-table", "comparisons"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64], ids=["fp32", "fp64"])
@pytest.mark.parametrize("k", [2, 3, 6])
def test_the_table_dispatch_gives_the_bits_of_the_name_dispatch(monkeypatch, dense, dtype, k):
    """States, stacked and concatenated states (the engine's joins), scores and permuted states of every metric set:
    the same bits as the frozen name-chained dispatch. k = 2, 3 and no position table (N > DENSE_MAX_ITEMS, here
    lowered) take cycle_knn's 2k block path."""
    if not dense:
        monkeypatch.setattr(knn_lib, "DENSE_MAX_ITEMS", 10)
    fa, fb = models(dtype, seed=k)
    perm = torch.randperm(fa.shape[0], generator=torch.Generator().manual_seed(k))
    for metrics in SETS:
        where = f"{metrics} k={k}"
        per_layer = {}
        for side, f in (("a", fa), ("b", fb)):
            got = [registry.layer_state_set(metrics, f[:, i], topk=k, cca_dim=3) for i in range(f.shape[1])]
            want = [Named.layer_state_set(metrics, f[:, i], topk=k, cca_dim=3) for i in range(f.shape[1])]
            for i, (g, w) in enumerate(zip(got, want)):
                assert_same_bits({m: g[m] for m in metrics}, {m: w[m] for m in metrics}, f"{where} state {side}{i}")
            per_layer[side] = got
        sa = registry.join_states(metrics, per_layer["a"], stack=True)
        sb = registry.join_states(metrics, per_layer["b"], stack=True)
        assert_same_bits(sa, Named.join_models(metrics, per_layer["a"], torch.stack), f"{where} stacked")
        both = registry.join_states(metrics, [sa, sb], stack=False)
        assert_same_bits(both, Named.join_models(metrics, [sa, sb], torch.cat), f"{where} concatenated")
        want = Named.pair_score_set(metrics, sa, sb)
        assert_same_bits(registry.pair_score_set(metrics, sa, sb), want, f"{where} scores")
        for m in metrics:
            assert_same_bits(registry.permute_state(m, sb[m], perm), Named.permute_state(m, sb[m], perm),
                             f"{where} permuted {m}")
            assert_same_bits(registry.pair_scores(m, sa[m], sb[m]), Named.pair_score_set([m], sa, sb)[m],
                             f"{where} {m} alone")


def test_states_computed_apart_score_as_one_search_does():
    """The lists of states built metric by metric are equal tensors, not one: the neighbour pass shares its tables
    only after checking, as the name dispatch did, and the numbers are the same."""
    fa, fb = models(torch.float32, seed=9)
    metrics = ["cknna", "mutual_knn", "cycle_knn"]
    sa = {m: registry.layer_states(m, fa, topk=5) for m in metrics}
    sb = {m: registry.layer_states(m, fb, topk=5) for m in metrics}
    assert sa["cknna"]["idx"] is not sa["mutual_knn"]
    assert_same_bits(registry.pair_score_set(metrics, sa, sb), Named.pair_score_set(metrics, sa, sb), "apart")


def test_the_k_nn_metrics_share_one_tensor_of_lists():
    """One neighbour search per layer: every k-NN list state and cknna's lists are one tensor, per layer and joined
    (the engine's memory plan counts them once)."""
    fa, _ = models(torch.float32)
    states = [registry.layer_state_set(PAPER, fa[:, i], topk=4, cca_dim=3) for i in range(3)]
    joined = registry.join_states(PAPER, states, stack=True)
    for s in (states[0], joined):
        lists = [s[m] for m in KNN_METRICS]
        assert all(t is lists[0] for t in lists) and s["cknna"]["idx"] is lists[0]


def test_the_names_and_the_table_agree():
    assert SUPPORTED_METRICS == [m.name for m in METRICS] and len(set(SUPPORTED_METRICS)) == len(METRICS)
    assert [m for m in SUPPORTED_METRICS if m in PAPER] == PAPER  # the paper's eight in the workflow's order
    assert set(KNN_METRICS) <= set(knn_lib.LIST_METRICS), (
        "an entry scored by knn:pass_scores must be a metric knn.list_scores computes (LIST_METRICS in "
        "src/prh/metrics/knn.py)")
    assert set(registry.STATE) == set(registry.SCORE) == set(SUPPORTED_METRICS)  # every entry resolved on import


@pytest.mark.parametrize("entry", METRICS, ids=lambda m: m.name)
def test_an_entry_describes_the_state_its_builder_makes(entry):
    """Its source, permutation kinds (one per key of a dict state), settings and ``nbytes`` (at least the bytes of its
    float32 state per layer and item: what the memory plan reserves) fit what layer_state_set builds."""
    assert entry.source in SOURCES, f"{entry.name}: source {entry.source!r} is none of {SOURCES}"
    assert set(entry.settings) <= {"topk", "cca_dim"}, entry.settings
    n, k, cca_dim = 40, 5, 3
    fa, _ = models(torch.float32, n=n)
    state = registry.layer_states(entry.name, fa, topk=k, cca_dim=cca_dim)
    if isinstance(state, dict):
        kinds = dict(entry.permute)
        assert list(kinds) == list(state), f"{entry.name}: permute names {list(kinds)}, the state holds {list(state)}"
        assert set(kinds.values()) <= set(PERMUTATIONS)
    else:
        assert entry.permute in PERMUTATIONS, f"{entry.name}: permute {entry.permute!r}"
    tensors = state.values() if isinstance(state, dict) else [state]
    per_layer_item = sum(t.nbytes for t in tensors) / (fa.shape[1] * n)
    declared = entry.item_bytes(topk=k, n=n, cca_dim=cca_dim)
    assert per_layer_item <= declared, (f"{entry.name}: its state takes {per_layer_item} bytes per layer and item, its "
                                        f"nbytes in src/prh/metrics/names.py says {declared}")
    assert registry.layer_tensor(state).shape[:2] == (fa.shape[1], n)


def test_a_file_check_names_the_file_and_the_limit(tmp_path):
    """An entry's ``limits`` run on the file's header before it is read (svcca's cca_dim against N and D)."""
    from prh.errors import UsageError
    from prh.io import save_features
    from prh.metrics.files import file_layer_states

    path = tmp_path / "m.safetensors"
    save_features(path, torch.randn(12, 2, 4, generator=torch.Generator().manual_seed(0)), {"model": "m"})
    with pytest.raises(UsageError, match=r"m\.safetensors \(model m\): svcca keeps cca_dim = 5 directions, more than "
                                         r"its 12 items or 4 features give"):
        file_layer_states(["mutual_knn", "svcca"], path, topk=3, cca_dim=5)
    states, n, layers = file_layer_states(["mutual_knn", "svcca"], path, topk=3, cca_dim=4)
    assert (n, layers) == (12, 2) and states["svcca"].shape == (2, 12, 4)
