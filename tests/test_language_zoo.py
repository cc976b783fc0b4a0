"""The offline language zoo: tokenizer, GPT-2 / BERT training, checkpoints, held-out bits-per-byte."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from prh.data.shapes import build_dataset
from prh.data.vocabulary import CANONICAL
from prh.evaluation.likelihood import bits_per_byte
from prh.evaluation.lm_eval import main as lm_eval_main
from prh.evaluation.lm_eval import unigram_bits
from prh.io import read_json
from prh.models.language_zoo import (
    bucketed_batches,
    caption_texts,
    grammar_text,
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
    return train_tokenizer(texts=texts[0] + [grammar_text()])


def test_word_level_tokenizer_one_token_per_word_and_frames_with_bos_eos(tokenizer, texts):
    held_out = texts[1][:20]
    enc = tokenizer(held_out)
    assert set(enc) == {"input_ids", "attention_mask"}  # no token_type_ids (GPT-2 would embed them)
    for text, ids in zip(held_out, enc["input_ids"]):
        assert ids[0] == tokenizer.bos_token_id and ids[-1] == tokenizer.eos_token_id
        assert tokenizer.unk_token_id not in ids  # a closed grammar: no unknown word in held-out captions
        words = text.replace("(", " ( ").replace(",", " , ").replace("-", " - ").split()
        assert len(ids) - 2 <= len(words) + 2 * text.count(".")  # one token per word or punctuation run
    # a whole percent is one token, not two digits
    assert "57" in tokenizer.get_vocab() and "%" not in tokenizer.get_vocab()
    assert tokenizer(["zyxq"], add_special_tokens=False)["input_ids"] == [[tokenizer.unk_token_id]]
    assert tokenizer.cls_token_id == tokenizer.bos_token_id and tokenizer.sep_token_id == tokenizer.eos_token_id
    assert tokenizer.mask_token_id is not None and tokenizer.pad_token_id is not None
    assert len(tokenizer) < 400  # the world's closed vocabulary
    # every synonym is one token of the vocabulary, even those the training captions never drew
    assert set(CANONICAL) <= set(tokenizer.get_vocab())
    assert set(CANONICAL) <= set(train_tokenizer(texts=[grammar_text()]).get_vocab())


def test_tokenizer_is_deterministic(texts, tokenizer):
    assert train_tokenizer(texts=texts[0] + [grammar_text()]).get_vocab() == tokenizer.get_vocab()
    with pytest.raises(ValueError, match="texts"):
        train_tokenizer(texts=[])


def test_training_text_appends_question_answer_pairs_about_the_scene(shapes):
    from prh.data.qa import qa_pairs
    from prh.data.shapes import load_dataset

    plain, qa = caption_texts(shapes[0]), caption_texts(shapes[0], qa_pairs=3, seed=5)
    assert len(plain) == len(qa) == 60 * 6
    scenes = load_dataset(shapes[0]).scenes
    for k in (0, 7, 100):
        assert qa[k].startswith(plain[k] + " Q: ")
        asked = qa[k][len(plain[k]) + 1:].split(" Q: ")
        assert len(asked) == 3
        allowed = {f"{q} A: {a}." for q, a in qa_pairs(scenes[k // 6])}
        assert {x.removeprefix("Q: ") for x in asked} <= allowed
    assert caption_texts(shapes[0], qa_pairs=3, seed=5) == qa != caption_texts(shapes[0], qa_pairs=3, seed=6)


def test_same_seed_same_weights_other_seed_other_weights(texts, tokenizer):
    runs = [train_language_model(texts=texts[0], tokenizer=tokenizer, steps=6, seed=s, **TINY)[0] for s in (3, 3, 4)]
    a, b, c = (r.state_dict() for r in runs)
    assert all(torch.equal(a[k], b[k]) for k in a)
    assert not all(torch.equal(a[k], c[k]) for k in a)


def test_device_cpu_is_the_default_path_and_is_recorded(texts, tokenizer):
    """``device`` moves only the model and each batch: on the CPU the weights are bit for bit the default run's, and
    the info says where it trained (a GPU run draws the same batches on the CPU)."""
    (a, info), (b, info_b) = (train_language_model(texts=texts[0], tokenizer=tokenizer, steps=4, seed=3, **TINY, **kw)
                              for kw in ({}, {"device": "cpu"}))
    assert all(torch.equal(a.state_dict()[k], b.state_dict()[k]) for k in a.state_dict())
    assert info["device"] == info_b["device"] == "cpu" and next(b.parameters()).device.type == "cpu"
    with pytest.raises(Exception, match="(?i)cuda|device"):
        train_language_model(texts=texts[0], tokenizer=tokenizer, steps=1, seed=3, device="tpu", **TINY)


def test_causal_lm_learns_more_steps_lower_bpb_and_beats_unigram(texts, tokenizer):
    train, held_out = texts
    bpb = {}
    for steps in (0, 20, 120):  # 0: the seeded random initialisation
        model = train_language_model(texts=train, tokenizer=tokenizer, steps=steps, seed=0, **TINY)[0]
        bpb[steps] = bits_per_byte(model, tokenizer, held_out, progress=False).mean()
    nbytes = np.array([len(t.encode()) for t in held_out])
    unigram = (unigram_bits(tokenizer=tokenizer, train_texts=train, texts=held_out) / nbytes).mean()
    # measured: untrained 1.79 (about log2(vocab) bits per ~4-byte word), 20 steps 1.27, 120 steps 0.52; unigram 1.36
    assert bpb[0] > 1.5
    assert bpb[120] < bpb[20] - 0.4 < bpb[0] - 0.8
    assert bpb[120] < unigram - 0.6, (bpb, unigram)


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


def test_unigram_bits_formula():
    tok = train_tokenizer(texts=["a a b", "c"])  # vocabulary: 5 specials + a, b, c = 8 tokens
    got = unigram_bits(tokenizer=tok, train_texts=["a a b"], texts=["a b", "c"])
    pa, pb, pc = 3 / 11, 2 / 11, 1 / 11  # counts a=2, b=1 of C=3; add-one over V=8
    assert got[0] == pytest.approx(-(math.log2(pa) + math.log2(pb)))
    assert got[1] == pytest.approx(-math.log2(pc))
    with pytest.raises(ValueError, match="train_texts"):
        unigram_bits(tokenizer=tok, train_texts=[], texts=["a"])


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


def test_causal_training_without_padding_mask_is_exact_under_right_padding(tokenizer, texts):
    """Training drops GPT-2's attention mask: under right padding real tokens' logits, loss and gradients stay."""
    from prh.models.language_zoo import build_model, collate

    torch.manual_seed(0)
    model = build_model(arch="gpt2", vocab_size=len(tokenizer), context=256, n_layer=2, n_embd=32, n_head=2,
                        pad_id=tokenizer.pad_token_id, bos_id=tokenizer.bos_token_id, eos_id=tokenizer.eos_token_id)
    assert model.config.activation_function == "gelu_pytorch_tanh"
    rows = [tokenizer(t)["input_ids"] for t in texts[0][:8]]
    assert len({len(r) for r in rows}) > 1  # the batch is padded
    input_ids, attention = collate(rows, pad_id=tokenizer.pad_token_id)
    labels = input_ids.masked_fill(attention == 0, -100)
    grads, losses, logits = [], [], []
    for mask in (attention, None):
        model.zero_grad()
        out = model(input_ids=input_ids, attention_mask=mask, labels=labels)
        out.loss.backward()
        losses.append(out.loss.item())
        logits.append(out.logits[attention.bool()])
        grads.append(torch.cat([p.grad.flatten() for p in model.parameters()]))
    assert losses[0] == pytest.approx(losses[1], rel=1e-5)
    torch.testing.assert_close(logits[0], logits[1], rtol=1e-4, atol=1e-5)
    torch.testing.assert_close(grads[0], grads[1], rtol=1e-3, atol=1e-6)
    # left padding would break it: the mask is then needed, which is why collate pads on the right
    left = torch.stack([torch.cat([r[r != tokenizer.pad_token_id].new_full(((r == tokenizer.pad_token_id).sum(),),
                                                                          tokenizer.pad_token_id), r[r != tokenizer.pad_token_id]])
                        for r in input_ids])
    assert not torch.allclose(model(input_ids=left).logits[:, -1], out.logits[torch.arange(8), attention.sum(1) - 1],
                              atol=1e-3)


def test_bucketed_batches_cover_every_caption_once_and_group_lengths():
    lengths = np.random.default_rng(0).integers(5, 100, size=1000)
    batches = bucketed_batches(lengths, batch_size=10, rng=np.random.default_rng(1))
    assert np.array_equal(np.sort(np.concatenate(batches)), np.arange(1000))
    spread = np.mean([np.ptp(lengths[b]) for b in batches])
    assert spread < 0.25 * np.ptp(lengths)


def padded_fraction(lengths, batches) -> float:
    return sum(lengths[b].max() * len(b) for b in batches) / lengths[np.concatenate(batches)].sum() - 1


def test_wider_length_windows_pad_less_and_keep_the_epoch():
    lengths = np.random.default_rng(0).integers(40, 220, size=4000)
    narrow = bucketed_batches(lengths, batch_size=16, rng=np.random.default_rng(1), window=16)
    wide = bucketed_batches(lengths, batch_size=16, rng=np.random.default_rng(1), window=128)
    assert np.array_equal(np.sort(np.concatenate(wide)), np.arange(4000))
    assert padded_fraction(lengths, wide) < 0.2 * padded_fraction(lengths, narrow)
    assert padded_fraction(lengths, wide) < 0.02
    with pytest.raises(ValueError, match="window"):
        bucketed_batches(lengths, batch_size=16, rng=np.random.default_rng(1), window=0)


def test_learning_rate_schedule():
    assert lr_at(0, steps=100, lr=1.0, warmup=10) == pytest.approx(0.1)
    assert lr_at(9, steps=100, lr=1.0, warmup=10) == pytest.approx(1.0)
    assert lr_at(10, steps=100, lr=1.0, warmup=10) == pytest.approx(1.0)
    assert lr_at(100, steps=100, lr=1.0, warmup=10) == pytest.approx(0.1)


def test_checkpoints_of_one_run_equal_separate_runs_of_that_length_only_at_the_end(texts, tokenizer):
    saved = {}
    model, info = train_language_model(texts=texts[0], tokenizer=tokenizer, steps=6, seed=0, checkpoints=[0, 3, 6],
                                       on_checkpoint=lambda m, i: saved.update({i["steps"]: (
                                           {k: v.clone() for k, v in m.state_dict().items()}, i)}), **TINY)
    assert sorted(saved) == [0, 3, 6] and info["steps"] == 6
    init = train_language_model(texts=texts[0], tokenizer=tokenizer, steps=0, seed=0, **TINY)[0].state_dict()
    assert all(torch.equal(saved[0][0][k], init[k]) for k in init)  # step 0 is the seeded initialisation
    assert all(torch.equal(saved[6][0][k], v) for k, v in model.state_dict().items())
    assert not all(torch.equal(saved[3][0][k], v) for k, v in model.state_dict().items())
    assert saved[3][1]["schedule_steps"] == 6 and saved[3][1]["loss_curve"][-1]["step"] == 3
    with pytest.raises(ValueError, match="checkpoints"):
        train_language_model(texts=texts[0], tokenizer=tokenizer, steps=6, checkpoints=[7], **TINY)


def test_cli_trains_saves_loadable_checkpoints_and_evaluates(shapes, tmp_path):
    from transformers import AutoModel, AutoModelForMaskedLM, AutoTokenizer

    from prh.models.loaders import load_language_model

    train, held_out = (str(p) for p in shapes)
    tok_dir, bert = tmp_path / "_tokenizer", tmp_path / "bert"
    tokenizer_main(["--data", train, "--out", str(tok_dir)])
    common = ["--data", train, "--tokenizer", str(tok_dir), "--n-layer", "1", "--n-embd", "32", "--n-head", "2",
              "--steps", "4", "--context", "512", "--batch-size", "8", "--warmup", "2", "--qa-pairs", "2"]
    train_main(common + ["--arch", "gpt2", "--out", str(tmp_path / "gpt_{steps}"), "--checkpoints", "0", "2", "4"])
    train_main(common + ["--arch", "bert", "--out", str(bert)])
    gpt = tmp_path / "gpt_4"
    for d in (tmp_path / "gpt_0", tmp_path / "gpt_2", gpt, bert):
        assert {"config.json", "model.safetensors", "tokenizer.json", "training.json"} <= {p.name for p in d.iterdir()}
        assert not list(tmp_path.glob(".*"))  # no temporary directories left behind
        tok = AutoTokenizer.from_pretrained(d)
        assert tok.pad_token == "<pad>" and tok.unk_token_id not in tok(["Q: where is the red circle? A: centre."])["input_ids"][0]
        hidden = AutoModel.from_pretrained(d)(**tok(["a red circle"], return_tensors="pt"), output_hidden_states=True)
        assert len(hidden.hidden_states) == 2 and hidden.hidden_states[-1].shape[-1] == 32
    info = read_json(gpt / "training.json")
    assert info["steps"] == 4 and info["arch"] == "gpt2" and info["n_texts"] == 60 * 6 and info["qa_pairs"] == 2
    assert read_json(tmp_path / "gpt_2" / "training.json")["steps"] == 2
    assert type(load_language_model(gpt)[0]).__name__ == "GPT2LMHeadModel"
    assert type(AutoModelForMaskedLM.from_pretrained(bert)).__name__ == "BertForMaskedLM"
    with pytest.raises(ValueError, match="steps"):
        train_main(common + ["--arch", "gpt2", "--out", str(tmp_path / "x"), "--checkpoints", "2"])

    out = tmp_path / "language.json"
    lm_eval_main(["--data", held_out, "--train-data", train, "--names", "g0", "g4", "--models",
                  str(tmp_path / "gpt_0"), str(gpt), "--out", str(out), "--max-items", "4"])
    result = read_json(out)
    assert result["n_texts"] == 4
    uni, floor = result["unigram"]["bpb"], result["floor"]["bpb"]
    assert 0 < floor < uni  # the generator knows more than any unigram
    for name, steps in (("g0", 0), ("g4", 4)):
        g = result["models"][name]
        assert g["steps"] == steps and math.isfinite(g["bpb"]) and g["bpb"] > floor
        assert g["reducible_fraction"] == pytest.approx((uni - g["bpb"]) / (uni - floor))
    assert result["models"]["g0"]["reducible_fraction"] < 0  # an untrained model is worse than a unigram
    with pytest.raises(ValueError, match="not a causal LM"):
        lm_eval_main(["--data", held_out, "--train-data", train, "--names", "b", "--models", str(bert),
                      "--out", str(out), "--max-items", "2"])
