"""prh.features on tiny random checkpoints: pooled features equal a hand computation,
padding and batching change nothing, bits-per-byte equals a direct cross-entropy,
an interrupted extraction resumes to identical features, and the CLI writes the contract."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
import torch
from tiny_models import CORPUS, save_language_model, save_vision_zoo

from prh.batching import MAX_BUDGET_ITEMS, MIN_FILL, length_batches
from prh.device import resolve_dtype
from prh.evaluation.likelihood import bits_per_byte
from prh.features import (
    PRH_PROMPT,
    extract_language_features,
    extract_vision_features,
    preprocess_images,
)
from prh.io import load_features, write_jsonl, write_npy
from prh.models.loaders import load_language_model, load_vision_model

TEXTS = [CORPUS[0], "a", CORPUS[1], CORPUS[3], "two spheres", CORPUS[2] + " and " + CORPUS[0], "café"]
KINDS = ["gpt2", "llama", "bloom"]


@pytest.fixture(scope="module")
def lm_dirs(tmp_path_factory):
    root = tmp_path_factory.mktemp("lms")
    return {k: save_language_model(k, root / k) for k in KINDS}


@pytest.fixture(scope="module")
def images():
    return np.random.default_rng(0).integers(0, 256, size=(5, 32, 32, 3), dtype=np.uint8)


def _normalised(images, pre):
    x = torch.from_numpy(images).permute(0, 3, 1, 2).float() / 255
    return (x - torch.tensor(pre["mean"]).view(1, 3, 1, 1)) / torch.tensor(pre["std"]).view(1, 3, 1, 1)


# ---------------------------------------------------------------- vision


def test_vit_cls_tokens_equal_blocks_run_by_hand(tmp_path, images):
    model, pre = load_vision_model(save_vision_zoo("vit", tmp_path / "vit"))
    feats = extract_vision_features(model, images, batch_size=2, progress=False, **pre)
    with torch.no_grad():
        x = model.norm_pre(model._pos_embed(model.patch_embed(_normalised(images, pre))))
        expected = []
        for blk in model.blocks:
            x = blk(x)
            expected.append(x[:, 0])
    assert feats.shape == (5, 2, 16) and feats.dtype == torch.float32
    torch.testing.assert_close(feats, torch.stack(expected, 1), atol=1e-5, rtol=1e-5)


def test_resnet_stage_means_equal_stages_run_by_hand(tmp_path, images):
    model, pre = load_vision_model(save_vision_zoo("resnet", tmp_path / "resnet"))
    feats = extract_vision_features(model, images, batch_size=3, progress=False, **pre)
    with torch.no_grad():
        x = model.act1(model.bn1(model.conv1(_normalised(images, pre))))
        stages = [x]
        x = model.maxpool(x)
        for layer in (model.layer1, model.layer2, model.layer3, model.layer4):
            x = layer(x)
            stages.append(x)
    assert feats.shape == (5, 5, 512)
    for i, s in enumerate(stages):
        d = s.shape[1]
        torch.testing.assert_close(feats[:, i, :d], s.mean((2, 3)), atol=1e-5, rtol=1e-5)
        assert torch.all(feats[:, i, d:] == 0)  # narrower stages are zero-padded


def test_preprocess_resizes_crops_and_normalises():
    img = np.full((2, 50, 70, 3), 51, dtype=np.uint8)
    x = preprocess_images(img, input_size=[3, 32, 32], mean=[0.1, 0.2, 0.3], std=[0.5, 0.5, 0.25], crop_pct=0.875)
    assert x.shape == (2, 3, 32, 32)
    for c, (m, s) in enumerate([(0.1, 0.5), (0.2, 0.5), (0.3, 0.25)]):
        torch.testing.assert_close(x[:, c], torch.full((2, 32, 32), (0.2 - m) / s), atol=1e-5, rtol=0)
    with pytest.raises(ValueError, match="uint8"):
        preprocess_images(img.astype(np.float32), input_size=[3, 32, 32], mean=[0] * 3, std=[1] * 3)


def test_vision_rejects_cls_pooling_on_a_cnn(tmp_path, images):
    model, pre = load_vision_model(save_vision_zoo("resnet", tmp_path / "resnet"))
    with pytest.raises(ValueError, match="pooling"):
        extract_vision_features(model, images, progress=False, **{**pre, "pooling": "cls"})


# ---------------------------------------------------------------- language


def _by_hand(model, tok, text, pooling):
    """Hidden states of one unpadded text, pooled by hand."""
    ids = tok(text, return_tensors="pt")
    with torch.no_grad():
        hs = model(**ids, output_hidden_states=True).hidden_states
    return torch.stack([h[0].mean(0) if pooling == "mean" else h[0, -1] for h in hs])


@pytest.mark.parametrize("kind", KINDS)
def test_language_features_equal_hidden_states_pooled_by_hand(lm_dirs, kind):
    model, tok = load_language_model(lm_dirs[kind])
    feats = extract_language_features(model, tok, TEXTS, batch_size=3, progress=False)
    assert feats.shape == (len(TEXTS), 3, 16)
    for i, t in enumerate(TEXTS):
        torch.testing.assert_close(feats[i], _by_hand(model, tok, t, "mean"), atol=1e-5, rtol=1e-5)

    last = extract_language_features(model, tok, TEXTS, batch_size=3, pooling="last",
                                        prompt_template=PRH_PROMPT, progress=False)
    prompt = PRH_PROMPT.replace("{caption}", TEXTS[2])
    torch.testing.assert_close(last[2], _by_hand(model, tok, prompt, "last"), atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("kind", KINDS)
def test_padding_side_and_batch_composition_change_nothing(lm_dirs, kind):
    model, tok = load_language_model(lm_dirs[kind])
    runs = []
    for side in ("left", "right"):
        tok.padding_side = side
        for bs, grouped, budget in ((1, True, None), (3, True, None), (4, False, None), (len(TEXTS), True, None),
                                    (len(TEXTS), True, 25)):
            for pooling in ("mean", "last"):
                runs.append((pooling, extract_language_features(
                    model, tok, TEXTS, batch_size=bs, pooling=pooling, group_by_length=grouped,
                    max_batch_tokens=budget, progress=False)))
    for pooling in ("mean", "last"):
        ref = [f for p, f in runs if p == pooling]
        assert len(ref) == 10
        for f in ref[1:]:
            assert (f - ref[0]).abs().max() <= 1e-5


def test_length_batches_cover_every_item_once_within_budget():
    lengths = np.random.default_rng(0).integers(1, 60, size=50)
    for kw in ({}, {"max_tokens": 100}, {"group_by_length": False}):
        batches = length_batches(lengths, 8, **kw)
        assert sorted(np.concatenate(batches).tolist()) == list(range(50))
        assert all(1 <= len(b) <= 8 for b in batches)
    grouped = length_batches(lengths, 8, max_tokens=100)
    assert all(len(b) * lengths[b].max() <= 100 or len(b) == 1 for b in grouped)
    longest = [lengths[b].max() for b in grouped]
    assert longest == sorted(longest, reverse=True)  # longest batch first: memory errors come at once
    assert [b.tolist() for b in length_batches(lengths, 8, group_by_length=False)][0] == list(range(8))


def test_budget_batches_of_wit_like_captions_are_at_least_four_fifths_real_tokens():
    """Under a memory budget up to 4,096 captions formed one batch padded to the longest; on a long-tailed
    caption length profile (log-normal, median 20 tokens, as WIT's alt texts) most processed tokens were padding."""
    lengths = np.clip(np.rint(np.random.default_rng(0).lognormal(np.log(20), 0.9, size=1024)), 3, 512).astype(int)

    def fill(batches):
        return [lengths[b].sum() / (len(b) * lengths[b].max()) for b in batches]

    budget = dict(item_bytes=lambda t: 4096 * t, max_bytes=1e12)  # room for every caption at once
    before = length_batches(lengths, MAX_BUDGET_ITEMS, **budget)
    assert len(before) == 1 and fill(before)[0] < 0.2
    after = length_batches(lengths, MAX_BUDGET_ITEMS, **budget, min_fill=MIN_FILL)
    assert sorted(np.concatenate(after).tolist()) == list(range(1024))
    assert min(fill(after)) >= MIN_FILL == 0.8
    real = sum(lengths[b].sum() for b in after) / sum(len(b) * lengths[b].max() for b in after)
    assert real >= 0.8 and len(after) <= 40  # a few dozen batches, not one per caption
    tight = length_batches(lengths, MAX_BUDGET_ITEMS, item_bytes=lambda t: 4096 * t, max_bytes=4096 * 2000,
                           min_fill=MIN_FILL)  # the byte cap and the fill floor together
    assert all(len(b) * lengths[b].max() <= 2000 or len(b) == 1 for b in tight) and min(fill(tight)) >= 0.8


@pytest.mark.parametrize("kind", KINDS)
def test_bits_per_byte_equals_direct_cross_entropy(lm_dirs, kind):
    model, tok = load_language_model(lm_dirs[kind])
    tok.padding_side = "left"
    bpb = bits_per_byte(model, tok, TEXTS, batch_size=3, progress=False)
    start = tok.bos_token_id if tok.bos_token_id is not None else tok.eos_token_id
    for i, t in enumerate(TEXTS):
        ids = torch.tensor([[start] + tok(t, add_special_tokens=False).input_ids])
        with torch.no_grad():
            logp = torch.log_softmax(model(ids).logits[0, :-1], -1)
        nats = -logp.gather(1, ids[0, 1:, None]).sum()
        assert bpb[i] == pytest.approx(float(nats) / math.log(2) / len(t.encode("utf-8")), rel=1e-5)
    # a random model's bpb is near log2(vocab) per token: a sanity range, not a tautology
    assert np.all((bpb > 0.5) & (bpb < math.log2(len(tok)) * 2))


@pytest.mark.parametrize("appends_eos", [False, True])
def test_one_pass_gives_features_and_bits_per_byte_as_two_do(lm_dirs, appends_eos):
    """The fused pass: features bit-identical, bits per byte equal within float summation order, for a
    tokenizer that adds BOS (tail 0) and one that adds BOS and EOS as the offline zoo's does (tail 1)."""
    from tokenizers import processors

    from prh.batching import encode_texts
    from prh.evaluation.likelihood import bpb_from_nats, fused_bpb_tail

    model, tok = load_language_model(lm_dirs["llama"])
    if appends_eos:
        tok._tokenizer.post_processor = processors.TemplateProcessing(
            single="<s> $A </s>", special_tokens=[("<s>", tok.bos_token_id), ("</s>", tok.eos_token_id)])
    counts = [2, 1, 3, 1]  # items of several captions, as the shapes world's samples
    texts = TEXTS[:7]
    tail = fused_bpb_tail(model, tok, texts, encode_texts(tok, texts))
    assert tail == int(appends_eos)
    feats, nats = extract_language_features(model, tok, texts, batch_size=3, samples_per_item=counts, progress=False,
                                            score_tail=tail)
    assert torch.equal(feats, extract_language_features(model, tok, texts, batch_size=3, samples_per_item=counts,
                                                        progress=False))
    np.testing.assert_allclose(bpb_from_nats(nats, texts, counts),
                               bits_per_byte(model, tok, texts, batch_size=2, samples_per_item=counts, progress=False),
                               rtol=1e-6)


def test_fused_pass_on_the_reference_path_uses_the_models_own_logits(lm_dirs):
    """Where per-block hooks are not trusted (output_hidden_states instead), the fused nats come from the model's
    logits: the same features and bits per byte."""
    from prh.batching import encode_texts
    from prh.evaluation.likelihood import bpb_from_nats, fused_bpb_tail
    from prh.features import _HOOKS_CHECKED

    model, tok = load_language_model(lm_dirs["llama"])
    _HOOKS_CHECKED[model] = False
    tail = fused_bpb_tail(model, tok, TEXTS, encode_texts(tok, TEXTS))
    feats, nats = extract_language_features(model, tok, TEXTS, batch_size=3, progress=False, score_tail=tail)
    assert torch.equal(feats, extract_language_features(model, tok, TEXTS, batch_size=3, progress=False))
    np.testing.assert_allclose(bpb_from_nats(nats, TEXTS), bits_per_byte(model, tok, TEXTS, progress=False), rtol=1e-6)


@pytest.mark.parametrize("scale, fused", [(1.0, True), (8.0, False)])
def test_a_model_whose_logits_are_more_than_its_head_gets_two_passes(scale, fused):
    """Granite divides its logits by logits_scaling: the head on h_L is then not the model's logits."""
    from tiny_models import make_tokenizer
    from tokenizers import processors
    from transformers import GraniteConfig, GraniteForCausalLM

    from prh.batching import encode_texts
    from prh.evaluation.likelihood import fused_bpb_tail

    tok = make_tokenizer("llama")
    tok._tokenizer.post_processor = processors.TemplateProcessing(single="<s> $A </s>", special_tokens=[("<s>", 2), ("</s>", 3)])
    torch.manual_seed(0)
    model = GraniteForCausalLM(GraniteConfig(vocab_size=len(tok), hidden_size=16, intermediate_size=32, num_hidden_layers=2,
                                             num_attention_heads=2, num_key_value_heads=1, max_position_embeddings=128,
                                             bos_token_id=2, eos_token_id=3, pad_token_id=0, logits_scaling=scale)).eval()
    assert (fused_bpb_tail(model, tok, TEXTS, encode_texts(tok, TEXTS)) == 1) is fused


@pytest.mark.parametrize("kind", ["gpt2", "bloom"])
def test_two_passes_where_one_cannot_give_the_same_tokens(lm_dirs, kind):
    """GPT-2's features have no start token (bits per byte prepends one); BLOOM's tokenizer pads on the left."""
    from prh.batching import encode_texts
    from prh.evaluation.likelihood import fused_bpb_tail

    model, tok = load_language_model(lm_dirs[kind])
    assert fused_bpb_tail(model, tok, TEXTS, encode_texts(tok, TEXTS)) is None


def test_resume_after_interruption_gives_identical_features(lm_dirs, tmp_path):
    model, tok = load_language_model(lm_dirs["llama"])
    full = extract_language_features(model, tok, TEXTS, batch_size=2, progress=False)
    calls = {"n": 0}

    def stop_on_third(module, args):
        calls["n"] += 1
        if calls["n"] == 3:
            raise KeyboardInterrupt("simulated kill")

    hook = model.get_input_embeddings().register_forward_pre_hook(stop_on_third)
    ckpt = tmp_path / "out.safetensors.partial"
    with pytest.raises(KeyboardInterrupt):
        extract_language_features(model, tok, TEXTS, batch_size=2, checkpoint_dir=ckpt, progress=False)
    assert len(list(ckpt.glob("language_*.safetensors"))) == 2  # batches 0 and 1 finished
    calls["n"] = -100  # no more interruptions; count the batches the resumed run computes
    resumed = extract_language_features(model, tok, TEXTS, batch_size=2, checkpoint_dir=ckpt, progress=False)
    hook.remove()
    assert calls["n"] == -100 + 2  # 4 batches in all, 2 recomputed
    assert torch.equal(resumed, full)

    # another batch size is another computation: the old batches are discarded, not mixed in
    other = extract_language_features(model, tok, TEXTS, batch_size=3, checkpoint_dir=ckpt, progress=False)
    torch.testing.assert_close(other, full, atol=1e-5, rtol=1e-5)
    assert len(list(ckpt.glob("language_*.safetensors"))) == 3


def test_bad_arguments_raise_clear_errors(lm_dirs):
    model, tok = load_language_model(lm_dirs["gpt2"])
    with pytest.raises(ValueError, match="pooling"):
        extract_language_features(model, tok, TEXTS, pooling="max")
    with pytest.raises(ValueError, match="non-empty"):
        bits_per_byte(model, tok, ["ok", ""])
    with pytest.raises(ValueError, match="caption"):
        extract_language_features(model, tok, TEXTS, prompt_template="no slot")
    with pytest.raises(ValueError, match="dtype"):
        resolve_dtype("float8")
    assert resolve_dtype("auto", "cpu") == torch.float32


# ---------------------------------------------------------------- CLI


def test_cli_writes_features_and_meta_per_contract(lm_dirs, tmp_path, images):
    from prh.cli import main

    data = tmp_path / "data" / "tiny"
    write_npy(data / "images.npy", images)
    write_jsonl(data / "captions.jsonl", [{"id": i, "text": TEXTS[i], "texts": ["x", TEXTS[i]]} for i in range(5)])
    zoo = save_vision_zoo("vit", tmp_path / "models" / "vit_t")

    out_v = tmp_path / "features" / "tiny" / "vit_t.safetensors"
    main(["extract-vision", "--model", str(zoo), "--data", str(data), "--out", str(out_v), "--vision-batch-size", "2",
          "--no-progress"])
    feats, meta = load_features(out_v, with_meta=True)
    assert feats.shape == (5, 2, 16) and meta["model"] == "vit_t" and meta["pooling"] == "cls"
    assert meta["layer_dims"] == [16, 16] and meta["n_params"] > 0 and meta["dtype"] == "float32"
    assert not (tmp_path / "features" / "tiny" / "vit_t.safetensors.partial").exists()

    out_l = tmp_path / "features" / "tiny" / "llama.safetensors"
    main(["extract-language", "--model", str(lm_dirs["llama"]), "--data", str(data), "--out", str(out_l),
          "--name", "llama", "--text-field", "texts", "--text-index", "-1", "--no-progress"])
    feats, meta = load_features(out_l, with_meta=True)
    model, tok = load_language_model(lm_dirs["llama"])
    torch.testing.assert_close(feats, extract_language_features(model, tok, TEXTS[:5], progress=False))
    bpb = bits_per_byte(model, tok, TEXTS[:5], progress=False)
    assert meta["causal_lm"] and meta["bpb"] == pytest.approx(bpb.mean()) and len(meta["bpb_per_item"]) == 5
    assert json.loads(out_l.with_suffix(".json").read_text())["shape"] == [5, 3, 16]
    assert not out_l.with_name("llama.safetensors.partial").exists()


def test_one_job_writes_every_text_index_as_separate_jobs_would(lm_dirs, tmp_path):
    """Fig 9's levels in one job (the model loaded once) give, file by file, exactly the
    features and meta of one job per level."""
    from prh.cli import main

    data = tmp_path / "data" / "tiny"
    write_jsonl(data / "captions.jsonl", [{"id": i, "texts": [TEXTS[i][:9], TEXTS[i], "a b"]} for i in range(5)])
    common = ["--model", str(lm_dirs["llama"]), "--data", str(data), "--name", "llama", "--text-field", "texts",
              "--no-bpb", "--no-progress", "--language-batch-size", "2"]
    together = [tmp_path / "one" / f"density{level}" / "llama.safetensors" for level in range(3)]
    main(["extract-language", *common, "--text-index", "0", "1", "2", "--out", *map(str, together)])
    for level, path in enumerate(together):
        alone = tmp_path / "alone" / f"density{level}" / "llama.safetensors"
        main(["extract-language", *common, "--text-index", str(level), "--out", str(alone)])
        (a, meta_a), (b, meta_b) = load_features(path, with_meta=True), load_features(alone, with_meta=True)
        assert torch.equal(a, b) and meta_a == meta_b and meta_a["text_index"] == level
    with pytest.raises(ValueError, match="one output path per text index"):
        main(["extract-language", *common, "--text-index", "0", "1", "--out", str(tmp_path / "x.safetensors")])
    with pytest.raises(ValueError, match="is not a list"):
        main(["extract-language", *common, "--out", str(tmp_path / "a.safetensors"), str(tmp_path / "b.safetensors")])
