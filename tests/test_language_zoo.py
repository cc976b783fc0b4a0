"""The offline language zoo: tokenizer, GPT-2 / BERT training, checkpoints, held-out bits-per-byte."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from prh.data.shapes import build_dataset
from prh.evaluation.likelihood import bits_per_byte
from prh.evaluation.lm_eval import main as lm_eval_main
from prh.evaluation.lm_eval import unigram_bits_per_byte
from prh.io import read_json
from prh.models.language_zoo import (
    bucketed_batches,
    caption_texts,
    lr_at,
    mask_tokens,
    tokenizer_main,
    train_language_model,
    train_tokenizer,
)
from prh.models.language_zoo import (
    main as train_main,
)

TINY = dict(arch="gpt2", n_layer=1, n_embd=32, n_head=2, batch_size=16, lr=1e-2, warmup=5)


@pytest.fixture(scope="module")
def shapes(tmp_path_factory):
    root = tmp_path_factory.mktemp("shapes")
    return build_dataset(root / "train", n=60, seed=1), build_dataset(root / "eval", n=10, seed=2)


@pytest.fixture(scope="module")
def texts(shapes):
    return caption_texts(shapes[0]), caption_texts(shapes[1])


@pytest.fixture(scope="module")
def tokenizer(texts):
    return train_tokenizer(texts=texts[0], vocab_size=400)


def test_tokenizer_roundtrips_and_frames_with_bos_eos(tokenizer, texts):
    held_out = texts[1][:20] + ["An unseen word: zyxq, 42%!"]
    enc = tokenizer(held_out)
    assert set(enc) == {"input_ids", "attention_mask"}  # no token_type_ids (GPT-2 would embed them)
    for text, ids in zip(held_out, enc["input_ids"]):
        assert ids[0] == tokenizer.bos_token_id and ids[-1] == tokenizer.eos_token_id
        assert tokenizer.unk_token_id not in ids  # byte-level: every byte has a token
        assert tokenizer.decode(ids, skip_special_tokens=True) == text
    assert len(tokenizer) == 400
    assert tokenizer.cls_token_id == tokenizer.bos_token_id and tokenizer.sep_token_id == tokenizer.eos_token_id
    assert tokenizer.mask_token_id is not None and tokenizer.pad_token_id is not None
    # merges learnt from the captions: a caption is far fewer tokens than bytes
    assert np.mean([len(x) for x in enc["input_ids"][:20]]) < 0.5 * np.mean([len(t) for t in held_out[:20]])


def test_tokenizer_is_deterministic_and_checks_vocab_size(texts, tokenizer):
    again = train_tokenizer(texts=texts[0], vocab_size=400)
    assert again.get_vocab() == tokenizer.get_vocab()
    with pytest.raises(ValueError, match="vocab_size"):
        train_tokenizer(texts=texts[0], vocab_size=200)


def test_same_seed_same_weights_other_seed_other_weights(texts, tokenizer):
    runs = [train_language_model(texts=texts[0], tokenizer=tokenizer, steps=6, seed=s, **TINY)[0] for s in (3, 3, 4)]
    a, b, c = (r.state_dict() for r in runs)
    assert all(torch.equal(a[k], b[k]) for k in a)
    assert not all(torch.equal(a[k], c[k]) for k in a)


def test_causal_lm_learns_more_steps_lower_bpb_and_beats_unigram(texts, tokenizer):
    train, held_out = texts
    bpb = {}
    for steps in (0, 20, 120):  # 0: the seeded random initialisation
        model = train_language_model(texts=train, tokenizer=tokenizer, steps=steps, seed=0, **TINY)[0]
        bpb[steps] = bits_per_byte(model, tokenizer, held_out, progress=False).mean()
    unigram = unigram_bits_per_byte(train_texts=train, texts=held_out).mean()
    # measured: untrained 2.8 (about log2(vocab) bits per ~3-byte token), 20 steps 1.9, 120 steps 0.73; unigram 4.4
    assert bpb[0] > 2.0
    assert bpb[120] < bpb[20] - 0.5 < bpb[0] - 0.5
    assert bpb[120] < bpb[0] - 1.5
    assert bpb[120] < unigram - 3.0, (bpb, unigram)


def test_bits_per_byte_matches_summed_token_cross_entropy(texts, tokenizer):
    """Direct computation: sum of -log2 p over the caption's tokens (after BOS), over its UTF-8 bytes."""
    model = train_language_model(texts=texts[0], tokenizer=tokenizer, steps=3, seed=0, **TINY)[0]
    text = texts[1][3]
    ids = torch.tensor([tokenizer(text)["input_ids"][:-1]])  # <s> caption (the EOS is not scored)
    with torch.no_grad():
        logp = torch.log_softmax(model(input_ids=ids).logits[0, :-1], dim=-1)
    bits = -logp[torch.arange(ids.shape[1] - 1), ids[0, 1:]].sum().item() / math.log(2)
    got = bits_per_byte(model, tokenizer, [text], progress=False)[0]
    assert got == pytest.approx(bits / len(text.encode("utf-8")), rel=1e-4)


def test_unigram_bits_per_byte_formula():
    train = ["aab"]  # counts a=2, b=1 of C=3 bytes; add-one over 256 values
    got = unigram_bits_per_byte(train_texts=train, texts=["ab", "c"])
    pa, pb, pc = 3 / 259, 2 / 259, 1 / 259
    assert got[0] == pytest.approx(-(math.log2(pa) + math.log2(pb)) / 2)
    assert got[1] == pytest.approx(-math.log2(pc))
    with pytest.raises(ValueError, match="texts"):
        unigram_bits_per_byte(train_texts=train, texts=[""])


def test_masking_only_touches_caption_tokens(tokenizer, texts):
    ids = torch.tensor([tokenizer(texts[0][i])["input_ids"][:30] for i in range(100) if
                        len(tokenizer(texts[0][i])["input_ids"]) >= 30][:20])
    special = torch.isin(ids, torch.tensor(tokenizer.all_special_ids))
    gen = torch.Generator().manual_seed(0)
    corrupted, labels = mask_tokens(ids, special=special, mask_id=tokenizer.mask_token_id,
                                    vocab_size=len(tokenizer), generator=gen, prob=0.5)
    chosen = labels != -100
    assert not (chosen & special).any()
    assert torch.equal(labels[chosen], ids[chosen])
    assert torch.equal(corrupted[~chosen], ids[~chosen])
    assert 0.35 < chosen.float().mean() / (~special).float().mean() < 0.65
    assert (corrupted[chosen] == tokenizer.mask_token_id).float().mean() > 0.6


def test_bucketed_batches_cover_every_caption_once_and_group_lengths():
    lengths = np.random.default_rng(0).integers(5, 100, size=1000)
    batches = bucketed_batches(lengths, batch_size=10, rng=np.random.default_rng(1))
    assert np.array_equal(np.sort(np.concatenate(batches)), np.arange(1000))
    spread = np.mean([np.ptp(lengths[b]) for b in batches])
    assert spread < 0.25 * np.ptp(lengths)


def test_learning_rate_schedule():
    assert lr_at(0, steps=100, lr=1.0, warmup=10) == pytest.approx(0.1)
    assert lr_at(9, steps=100, lr=1.0, warmup=10) == pytest.approx(1.0)
    assert lr_at(10, steps=100, lr=1.0, warmup=10) == pytest.approx(1.0)
    assert lr_at(100, steps=100, lr=1.0, warmup=10) == pytest.approx(0.1)


def test_cli_trains_saves_loadable_checkpoints_and_evaluates(shapes, tmp_path):
    from transformers import AutoModel, AutoModelForMaskedLM, AutoTokenizer

    from prh.models.loaders import load_language_model

    train, held_out = (str(p) for p in shapes)
    tok_dir, gpt, bert = tmp_path / "_tokenizer", tmp_path / "gpt", tmp_path / "bert"
    tokenizer_main(["--data", train, "--out", str(tok_dir), "--vocab-size", "300"])
    common = ["--data", train, "--tokenizer", str(tok_dir), "--n-layer", "1", "--n-embd", "32", "--n-head", "2",
              "--steps", "4", "--context", "512", "--batch-size", "8", "--warmup", "2"]
    train_main(common + ["--arch", "gpt2", "--out", str(gpt)])
    train_main(common + ["--arch", "bert", "--out", str(bert)])

    for d in (gpt, bert):
        assert {"config.json", "model.safetensors", "tokenizer.json", "training.json"} <= {p.name for p in d.iterdir()}
        assert not list(tmp_path.glob(".*"))  # no temporary directories left behind
        tok = AutoTokenizer.from_pretrained(d)
        assert len(tok) == 300 and tok.pad_token == "<pad>"
        hidden = AutoModel.from_pretrained(d)(**tok(["a red circle"], return_tensors="pt"), output_hidden_states=True)
        assert len(hidden.hidden_states) == 2 and hidden.hidden_states[-1].shape[-1] == 32
    info = read_json(gpt / "training.json")
    assert info["steps"] == 4 and info["arch"] == "gpt2" and info["n_texts"] == 60 * 6
    assert type(load_language_model(gpt)[0]).__name__ == "GPT2LMHeadModel"
    assert type(AutoModelForMaskedLM.from_pretrained(bert)).__name__ == "BertForMaskedLM"

    out = tmp_path / "language.json"
    lm_eval_main(["--data", held_out, "--train-data", train, "--names", "g", "--models", str(gpt),
                  "--out", str(out), "--max-items", "4"])
    result = read_json(out)
    assert result["n_texts"] == 4 * 6 and result["n_levels"] == 6
    g = result["models"]["g"]
    assert len(g["bpb_per_level"]) == 6 and g["steps"] == 4 and math.isfinite(g["bpb"])
    assert g["below_unigram"] == pytest.approx(result["unigram"]["bpb"] - g["bpb"])
    assert 3.0 < result["unigram"]["bpb"] < 6.0  # English-like text: ~4.2 bits per character
    with pytest.raises(ValueError, match="not a causal LM"):
        lm_eval_main(["--data", held_out, "--train-data", train, "--names", "b", "--models", str(bert),
                      "--out", str(out), "--max-items", "2"])
