"""Memory and the VTAB disk: extraction streams hidden states.

``extract_language_features`` used ``output_hidden_states=True``, which keeps all L + 1
B x T x D hidden states alive until the forward ends (~36 GB extra for a 30B model at batch
32 on 1.4k-token DCI captions). It now pools each one as it is made (hooks on the blocks),
batches shrink to a GPU-memory budget, and features read only by a probe keep the last layer.
"""

from __future__ import annotations

import re
import weakref
from pathlib import Path

import numpy as np
import pytest
import torch
from tiny_models import CORPUS, make_tokenizer, save_encoder, save_language_model, save_vision_zoo

from prh.batching import activation_bytes
from prh.evaluation.probe_splits import load_probe_layers
from prh.features import extract_language_features, extract_vision_features
from prh.io import load_features, write_npy
from prh.models.loaders import load_language_model, load_vision_model

ROOT = Path(__file__).resolve().parents[1]
TEXTS = [CORPUS[0], "a", CORPUS[1], CORPUS[3], "two spheres", CORPUS[2] + " and " + CORPUS[0], "café", CORPUS[1]]


@pytest.fixture(scope="module")
def lm_dirs(tmp_path_factory):
    root = tmp_path_factory.mktemp("lms")
    dirs = {k: save_language_model(k, root / k) for k in ("gpt2", "llama", "bloom")}
    dirs["bert"] = save_encoder(root / "bert")
    return dirs


def all_hidden_states(model, tok, text, pooling):
    """The reference: every hidden state of one unpadded text (output_hidden_states=True), pooled."""
    ids = tok(text, return_tensors="pt")
    with torch.no_grad():
        hs = model(**ids, output_hidden_states=True).hidden_states
    return torch.stack([h[0].mean(0) if pooling == "mean" else h[0, -1] for h in hs])


@pytest.mark.parametrize("kind", ["gpt2", "llama", "bloom", "bert"])
@pytest.mark.parametrize("pooling", ["mean", "last"])
def test_streamed_features_equal_the_all_hidden_states_path(lm_dirs, kind, pooling, recwarn):
    model, tok = load_language_model(lm_dirs[kind])
    feats = extract_language_features(model, tok, TEXTS, batch_size=3, pooling=pooling, progress=False)
    assert not [w for w in recwarn if "falling back" in str(w.message)], "the hooks were not used"
    assert feats.shape == (len(TEXTS), 3, 16)
    for i, text in enumerate(TEXTS):
        torch.testing.assert_close(feats[i], all_hidden_states(model, tok, text, pooling), atol=1e-5, rtol=1e-5)
    last = extract_language_features(model, tok, TEXTS, batch_size=3, pooling=pooling, progress=False, layers="last")
    assert last.shape == (len(TEXTS), 1, 16)
    torch.testing.assert_close(last, feats[:, -1:], atol=1e-6, rtol=1e-6)


def deep_llama(n_layers=6):
    from transformers import LlamaConfig, LlamaForCausalLM

    tok = make_tokenizer("llama")
    torch.manual_seed(0)
    model = LlamaForCausalLM(LlamaConfig(vocab_size=len(tok), hidden_size=16, intermediate_size=32,
                                         num_hidden_layers=n_layers, num_attention_heads=2, num_key_value_heads=1,
                                         max_position_embeddings=128, bos_token_id=2, eos_token_id=3, pad_token_id=0))
    return model.eval(), tok


def test_at_most_a_few_full_hidden_states_are_alive_at_once():
    """Weak references to every block's input and output (B x T x D, batches of 4): at each
    block, count those still alive. All hidden states held at once would be 6 here."""
    model, tok = deep_llama(6)
    blocks = model.model.layers
    alive, peak = [], {"n": 0}

    def track(h):
        if h.shape[0] == 4:  # the batches, not the one-text check of the hooks
            alive.append(weakref.ref(h))
            peak["n"] = max(peak["n"], sum(r() is not None for r in alive))

    def start(mod, args, kwargs):
        alive.clear()
        track(args[0] if args else kwargs["hidden_states"])

    handles = [blocks[0].register_forward_pre_hook(start, with_kwargs=True)]
    handles += [b.register_forward_hook(lambda m, a, out: track(out[0] if isinstance(out, tuple) else out))
                for b in blocks]
    feats = extract_language_features(model, tok, TEXTS, batch_size=4, progress=False)
    for h in handles:
        h.remove()
    assert feats.shape == (len(TEXTS), 7, 16)
    assert 1 <= peak["n"] <= 3, f"{peak['n']} full hidden states alive at once (of 7)"


def test_a_gpu_memory_budget_shrinks_batches_and_changes_no_number(lm_dirs):
    model, tok = load_language_model(lm_dirs["llama"])
    shapes = []
    hook = model.get_input_embeddings().register_forward_pre_hook(lambda m, args: shapes.append(tuple(args[0].shape)))
    free = extract_language_features(model, tok, TEXTS, batch_size=8, progress=False)
    free_shapes, shapes[:] = list(shapes), []
    longest = max(len(tok(t)["input_ids"]) for t in TEXTS)
    budget = 2.5 * activation_bytes(model.config, longest, 4) / 1e9  # room for about 2 of the longest
    capped = extract_language_features(model, tok, TEXTS, batch_size=8, progress=False, gpu_memory_budget_gb=budget)
    hook.remove()
    torch.testing.assert_close(capped, free, atol=1e-5, rtol=1e-5)
    assert max(b for b, _ in free_shapes) == 8
    batches = [(b, t) for b, t in shapes if b > 1 or t == longest]
    assert max(b for b, _ in batches) < 8
    assert all(b * activation_bytes(model.config, t, 4) <= budget * 1e9 for b, t in batches if b > 1)
    assert sum(b for b, _ in shapes) >= len(TEXTS)
    with pytest.raises(ValueError, match="memory_budget_gb"):
        extract_language_features(model, tok, TEXTS, progress=False, gpu_memory_budget_gb=-1)


@pytest.mark.parametrize("kind", ["vit", "resnet"])
def test_last_layer_only_features_are_what_the_probe_reads(tmp_path, kind):
    from prh.cli import main

    images = np.random.default_rng(0).integers(0, 256, size=(6, 32, 32, 3), dtype=np.uint8)
    write_npy(tmp_path / "data" / "images.npy", images)
    ckpt = save_vision_zoo(kind, tmp_path / kind)
    outs = {}
    for layers in ("all", "last"):
        outs[layers] = tmp_path / layers / f"{kind}.safetensors"
        main(["extract-vision", "--model", str(ckpt), "--data", str(tmp_path / "data"), "--out", str(outs[layers]),
              "--device", "cpu", "--no-progress", "--layers", layers])
    every, meta_all = load_features(outs["all"], with_meta=True)
    last, meta = load_features(outs["last"], with_meta=True)
    assert last.shape[1] == 1 and every.shape[1] > 1
    assert meta["layers"] == "last" and meta["layer_indices"] == [every.shape[1] - 1]
    assert meta["layer_dims"] == meta_all["layer_dims"][-1:]
    torch.testing.assert_close(last[:, :, :meta["layer_dims"][0]], every[:, -1:, :meta["layer_dims"][0]])
    probe_last, probe_all = load_probe_layers(outs["last"]), load_probe_layers(outs["all"])
    np.testing.assert_allclose(probe_last[0], probe_all[0], atol=1e-6)
    assert probe_last[1] == probe_all[1] == every.shape[1] - 1  # the model's block, not the file's row
    with pytest.raises(ValueError, match="last layer only"):  # "best" cannot choose among one layer
        load_probe_layers(outs["last"], layer="best")
    model, pre = load_vision_model(ckpt)
    kw = {k: pre[k] for k in ("pooling", "mean", "std", "input_size", "interpolation", "crop_pct")}
    direct = extract_vision_features(model, images, progress=False, layers="last", **kw)
    torch.testing.assert_close(direct, last)


def test_paper_dry_run_extracts_only_the_last_layer_for_the_probes(paper_dry_run):
    """`snakemake -n -p --config suite=paper` plans (conftest's shared run); VTAB features (read only by the probes)
    are extracted with `--layers last`, every other vision extraction with `--layers all`."""
    log = paper_dry_run["log"]
    assert paper_dry_run["returncode"] == 0, log[-4000:]
    commands = re.findall(r"prh (?:--gpus \d+ )?extract-vision .*?--out results/features/(\S+)/\S+\.safetensors.*?--layers (\w+)", log)
    assert commands
    language = re.findall(r"prh (?:--gpus \d+ )?extract-language .*", log)
    assert language and all("--no-bpb" in c for c in language)  # nothing in the paper suite reads the features' bpb
    vtab = {ds for ds, _ in commands if ds.startswith("vtab_")}
    assert len(vtab) >= 2 * 9, sorted(vtab)  # train and test of every VTAB task the probes read
    for ds, layers in commands:
        assert layers == ("last" if ds.startswith("vtab_") else "all"), (ds, layers)


@pytest.mark.parametrize("pooling", ["cls", "avg"])
def test_vit_blocks_are_pooled_as_they_finish(pooling, recwarn):
    """Every ViT block's output pooled by hooks equals forward_intermediates' (which holds all 6
    of them), and at most two block outputs (a block's input and its output) are alive at once."""
    import timm

    from prh.features import pool_blocks

    torch.manual_seed(0)
    model = timm.create_model("vit_tiny_patch16_224", pretrained=False, img_size=32, patch_size=8, depth=6,
                              embed_dim=16, num_heads=2, num_classes=0).eval()
    x = torch.randn(3, 3, 32, 32)
    with torch.inference_mode():
        got = pool_blocks(model, x, pooling)
        outs = model.forward_intermediates(x, return_prefix_tokens=True, output_fmt="NLC", intermediates_only=True)
    ref = [prefix[:, 0] if pooling == "cls" else spatial.mean(1) for spatial, prefix in outs]
    assert not [w for w in recwarn if "hooks do not reproduce" in str(w.message)]
    assert len(got) == len(ref) == 6
    for a, b in zip(got, ref):
        torch.testing.assert_close(a, b, atol=1e-6, rtol=1e-6)
        # a pooled block owns only its B x D values: a view of the class token would keep the whole
        # B x T x D block output's storage alive (the Python objects die, the memory does not)
        assert a.untyped_storage().nbytes() == a.numel() * a.element_size()
    alive, peak = [], []

    def track(m, a, out):
        if out.shape[0] == 3:
            alive.append(weakref.ref(out))
            peak.append(sum(r() is not None for r in alive))

    handles = [b.register_forward_hook(track) for b in model.blocks]
    with torch.inference_mode():
        pool_blocks(model, x, pooling)
    for h in handles:
        h.remove()
    assert max(peak) <= 2, peak  # forward_intermediates: 6


def test_a_large_budget_grows_batches_beyond_batch_size_and_changes_no_number(lm_dirs):
    """The budget sizes batches in both directions; on an H200 the default batch of 32
    left the card at 6 % of its peak while 256 reached 16 %."""
    model, tok = load_language_model(lm_dirs["llama"])
    shapes = []
    hook = model.get_input_embeddings().register_forward_pre_hook(lambda m, args: shapes.append(tuple(args[0].shape)))
    small = extract_language_features(model, tok, TEXTS, batch_size=2, progress=False)
    shapes[:] = []
    grown = extract_language_features(model, tok, TEXTS, batch_size=2, progress=False, gpu_memory_budget_gb=10)
    hook.remove()
    torch.testing.assert_close(grown, small, atol=1e-5, rtol=1e-5)
    # batches grow past batch_size as far as MIN_FILL lets them: no batch is more than a fifth padding
    assert max(b for b, _ in shapes) > 2
    lengths = sorted((len(tok(t)["input_ids"]) for t in TEXTS), reverse=True)
    start = 0
    for b, t in shapes:
        assert t == lengths[start] and sum(lengths[start:start + b]) >= 0.8 * b * t
        start += b
    assert start == len(TEXTS)


def test_a_batch_out_of_memory_runs_as_halves(monkeypatch):
    """A budget estimated too high costs a split, not the job: the step fails on more than 2 items."""
    from prh import batching

    calls = []

    def step(batch, dev):
        calls.append(len(batch))
        if len(batch) > 2:
            raise torch.OutOfMemoryError("CUDA out of memory (simulated)")
        return torch.tensor(batch, dtype=torch.float32)[:, None]

    idx = np.arange(7)
    out = batching.step_or_split(step, lambda ids: [float(i) for i in ids], idx, "cpu")
    assert out[:, 0].tolist() == list(map(float, idx))  # every item once, in order
    assert calls == [7, 3, 1, 2, 4, 2, 2]
    with pytest.raises(torch.OutOfMemoryError):
        batching.step_or_split(lambda b, d: (_ for _ in ()).throw(torch.OutOfMemoryError("x")),
                                lambda ids: ids, np.arange(1), "cpu")


def test_pooled_states_leave_the_device_once_per_batch(lm_dirs, monkeypatch):
    """Every layer's pooled state moved to the host as it was made (a sync per layer on a
    GPU); now the stacked batch moves once. Counted here as calls of Tensor.cpu during one batch."""
    model, tok = load_language_model(lm_dirs["llama"])
    extract_language_features(model, tok, TEXTS[:2], batch_size=2, progress=False)  # the hook check, once
    from prh import batching

    calls = []
    real_cpu, real_copy = torch.Tensor.cpu, batching.HostStaging.copy
    monkeypatch.setattr(torch.Tensor, "cpu", lambda self, *a, **k: calls.append(self.shape) or real_cpu(self, *a, **k))
    monkeypatch.setattr(batching.HostStaging, "copy", lambda self, x: calls.append(x.shape) or real_copy(self, x))
    feats = extract_language_features(model, tok, TEXTS[:2], batch_size=2, progress=False)
    # one batch: its stacked B x (L + 1) x D states go to the host once (HostStaging: page-locked on CUDA)
    assert feats.shape[0] == 2 and calls == [(2, feats.shape[1], feats.shape[2])], calls


def test_vision_batches_from_a_budget_and_halved_on_oom():
    """Vision batches are sized from a memory budget (CUDA: one probe batch measures bytes per image;
    the sizing rule is a power of two under the budget), and a batch the card cannot hold runs as halves with the
    same features. On a CPU the budget leaves batch_size as it is."""
    import numpy as np

    from prh.batching import MAX_BUDGET_ITEMS, batch_for_budget, budget_bytes
    from prh.features import extract_vision_features
    from prh.models.vision_zoo import IMAGE_SIZE, MEAN, STD, build_model

    assert batch_for_budget(1e6, 10e6) == 8 and batch_for_budget(1e6, 16e6) == 16
    assert batch_for_budget(1e6, 1e15) == MAX_BUDGET_ITEMS and batch_for_budget(1e9, 1e6) == 1
    assert budget_bytes(2, "cpu") == 2e9 and budget_bytes("auto", "cpu") is None and budget_bytes(None, "cpu") is None
    with pytest.raises(ValueError, match="memory_budget_gb"):
        budget_bytes(-1, "cpu")
    model, _ = build_model(arch="resnet_xs")
    images = np.random.default_rng(0).integers(0, 256, size=(10, IMAGE_SIZE, IMAGE_SIZE, 3), dtype=np.uint8)
    kw = dict(pooling="avg", mean=MEAN, std=STD, input_size=[3, IMAGE_SIZE, IMAGE_SIZE], progress=False)
    want = extract_vision_features(model, images, batch_size=8, **kw)
    inner, sizes = model.forward_intermediates, []

    def small_card(x, *args, **kwargs):  # a card that holds at most 2 images
        sizes.append(x.shape[0])
        if x.shape[0] > 2:
            raise torch.OutOfMemoryError("CUDA out of memory (simulated)")
        return inner(x, *args, **kwargs)

    model.forward_intermediates = small_card
    got = extract_vision_features(model, images, batch_size=8, memory_budget_gb="auto", **kw)
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-6)
    assert sizes[:4] == [8, 4, 2, 2] and max(s for s in sizes if s <= 2) == 2


@pytest.mark.parametrize("kind", ["gpt2", "llama", "bert"])
def test_encodings_are_the_tokenizer_s_lists_stored_flat(kind):
    """encode_texts (prh.batching): the same token lists as the tokenizer, chunk boundaries anywhere, in 4 bytes a
    token and field (a 100,000-item world's 400,000 caption samples took 7.6 GB as the tokenizer's objects); the
    checkpoint fingerprint is that of the plain lists, so a batch checkpoint written before still resumes."""
    from prh.batching import Encodings, encode_texts, fingerprint

    tok = make_tokenizer("llama" if kind == "bert" else kind)
    texts = TEXTS * 5
    ref = tok(texts, add_special_tokens=kind != "bert")
    enc = encode_texts(tok, texts, add_special_tokens=kind != "bert", chunk=3)
    assert isinstance(enc, Encodings) and len(enc) == len(texts)
    keys = [k for k in ("input_ids", "attention_mask", "token_type_ids") if k in ref]
    assert [enc[i] for i in range(len(texts))] == [{k: ref[k][i] for k in keys} for i in range(len(texts))]
    assert enc[-1] == enc[len(texts) - 1] and list(enc)[2] == enc[2]
    with pytest.raises(IndexError):
        enc[len(texts)]
    assert enc.lengths().tolist() == [len(ids) for ids in ref["input_ids"]]
    n_tokens = sum(map(len, ref["input_ids"]))
    assert enc.nbytes == 4 * n_tokens * len(keys) + 8 * (len(texts) + 1)
    assert fingerprint("t", enc, 3) == fingerprint("t", [list(ids) for ids in ref["input_ids"]], 3)
    assert fingerprint(encode_texts(tok, texts[:-1])) != fingerprint(enc)
    assert len(encode_texts(tok, [])) == 0


def test_padded_batches_from_the_flat_token_arrays_equal_pad_batch():
    """A batch is gathered from Encodings' flat arrays in one step; it must equal the per-text lists."""
    from prh.batching import Encodings, pad_batch

    rng = np.random.default_rng(0)
    lengths = rng.integers(1, 30, size=40)
    offsets = np.concatenate([[0], np.cumsum(lengths)])
    fields = {"input_ids": rng.integers(5, 1000, size=offsets[-1]).astype(np.int32),
              "attention_mask": np.ones(offsets[-1], dtype=np.int32),
              "token_type_ids": rng.integers(0, 2, size=offsets[-1]).astype(np.int32)}
    enc = Encodings(fields, offsets)
    for ids in (np.arange(40), np.array([7]), rng.permutation(40)[:13]):
        for side in ("left", "right"):
            for length in (None, 45):
                got = enc.padded(ids, pad_id=3, side=side, length=length)
                want = pad_batch([enc[i] for i in ids], pad_id=3, side=side, length=length)
                assert set(got) == set(want)
                for key in want:
                    assert got[key].dtype == want[key].dtype and torch.equal(got[key], want[key]), (key, side)
