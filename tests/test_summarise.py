"""Caption summarisation for PRH Fig 9 (appendix E): prompt, outputs, resume after a kill, bad input."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

import numpy as np
import pytest
import torch
from tiny_models import CORPUS, make_language_model, make_tokenizer

from prh.io import read_json, read_jsonl, write_jsonl
from prh.studies.density.summarise import (
    SYSTEM_PROMPT,
    build_messages,
    clean_summary,
    default_max_new_tokens,
    main,
    prompt_text,
    run_summarise,
    summarise_captions,
)

CAPTIONS = list(dict.fromkeys(CORPUS)) + ["a small blue ball above two red cubes", "yellow cylinder on grey",
                                          "the big green cone", "three small cubes in a row"]


def sharp_llama():
    """The tiny LLaMA with weights x16: sharp logits, so greedy text differs between prompts."""
    tok = make_tokenizer("llama")
    model = make_language_model("llama", len(tok)).eval()
    model.config.max_position_embeddings = 1024  # RoPE: no learned positions; appendix E's prompt is ~400 tiny tokens
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "norm" not in name:
                p.mul_(16)
    return model, tok


@pytest.fixture(scope="module")
def lm_dir(tmp_path_factory):
    path = tmp_path_factory.mktemp("lm") / "tiny-instruct"
    model, tok = sharp_llama()
    model.save_pretrained(path)
    tok.save_pretrained(path)
    return path


def make_data(path, n):
    path.mkdir(parents=True)
    write_jsonl(path / "captions.jsonl",
                [{"id": 100 + i, "source_index": 7 * i, "text": f"{CAPTIONS[i % len(CAPTIONS)]} number {i}"}
                 for i in range(n)])
    return path


def test_one_summary_per_item_per_density(lm_dir, tmp_path):
    data = make_data(tmp_path / "data", 5)
    out = tmp_path / "data" / "density"
    meta = run_summarise(data=data, model=str(lm_dir), out=out, num_words=[8, 3], batch_size=2, max_new_tokens=10,
                         device="cpu", progress=False)
    recs, src = read_jsonl(out / "captions.jsonl"), read_jsonl(data / "captions.jsonl")
    assert [r["id"] for r in recs] == [100, 101, 102, 103, 104]
    for r, s in zip(recs, src):
        assert r["text"] == s["text"] and r["texts"][-1] == s["text"] and r["source_index"] == s["source_index"]
        assert len(r["texts"]) == 3 and r["num_words"] == [8, 3]
        assert all(isinstance(t, str) and t.strip() for t in r["texts"])
        assert r["n_words"] == [len(t.split()) for t in r["texts"]]
    assert len({t for r in recs for t in r["texts"][:2]}) > 1  # the texts depend on the prompt
    assert meta == read_json(out / "meta.json")
    assert meta["count"] == 5 and meta["num_words"] == [8, 3] and meta["text_index"] == {"8": 0, "3": 1, "original": 2}
    assert meta["system_prompt"] == SYSTEM_PROMPT and len(meta["prompt_sha256"]) == 64
    for i, level in enumerate(["8", "3", "original"]):
        counts = [r["n_words"][i] for r in recs]
        st = meta["word_counts"][level]
        assert st["mean"] == pytest.approx(np.mean(counts)) and st["median"] == np.median(counts)
        assert (st["min"], st["max"]) == (min(counts), max(counts))
    # dense captions: 13, 13, 9, 8, 10 words ("—" counts as one)
    assert meta["word_counts"]["original"] == {"mean": 10.6, "median": 10.0, "min": 8, "max": 13, "n_fallback": 0}
    assert sorted(p.name for p in out.iterdir()) == ["captions.jsonl", "meta.json"]  # no images copied
    assert not (tmp_path / "data" / "density.partial.jsonl").exists()  # checkpoint removed


def test_system_prompt_is_appendix_e():
    assert SYSTEM_PROMPT.startswith("You are given a full-text description of an image. You should summarize it")
    for part in ("into about <num_words> words,", "given the <num_words> word constraint,",
                 "especially information from the start of the original description.",
                 "The new description should apply for the original image.",
                 "Respond with only the summary, in one line."):
        assert part in SYSTEM_PROMPT
    system, user = build_messages("a red cube", 17)
    assert system == {"role": "system", "content": SYSTEM_PROMPT.replace("<num_words>", "17")}
    assert "about 17 words" in system["content"] and "the 17 word constraint" in system["content"]
    assert user == {"role": "user", "content": "a red cube"}
    tok = make_tokenizer("llama")
    assert prompt_text(tok, "a red cube", 17) == system["content"] + "\n\na red cube\n"  # no chat template
    tok.chat_template = ("{% for m in messages %}<{{ m.role }}>{{ m.content }}\n{% endfor %}"
                         "{% if add_generation_prompt %}<assistant>{% endif %}")
    assert prompt_text(tok, "a red cube", 5) == f"<system>{SYSTEM_PROMPT.replace('<num_words>', '5')}\n" \
                                                "<user>a red cube\n<assistant>"


def test_clean_summary_and_token_budget():
    assert clean_summary('  "A red cube."  \nmore text') == "A red cube."
    assert clean_summary("Here is a 5-word summary:\n\n“Red cube beside blue ball”\n") == "Red cube beside blue ball"
    assert clean_summary("\n \n") == ""
    assert clean_summary("only a colon line:") == "only a colon line:"
    assert (default_max_new_tokens(5), default_max_new_tokens(10), default_max_new_tokens(100)) == (29, 41, 266)


def test_empty_generation_falls_back_to_first_words():
    model, tok = sharp_llama()
    with torch.no_grad():
        model.lm_head.weight.zero_()  # every logit 0: greedy emits <pad> (id 0), which decodes to ""
    recs = summarise_captions(model=model, tokenizer=tok, captions=["a red cube to the left of a ball", "two"],
                              num_words=[3], max_new_tokens=2, progress=False)
    assert [(r["text"], r["n_words"], r["fallback"]) for r in recs] == [("a red cube", 3, True), ("two", 1, True)]


def test_left_padded_batches_equal_single_prompts():
    model, tok = sharp_llama()
    kw = dict(model=model, tokenizer=tok, captions=CAPTIONS, num_words=[4, 9], max_new_tokens=8, progress=False)
    single = summarise_captions(**kw, batch_size=1)
    assert summarise_captions(**kw, batch_size=3) == single  # captions of 9..29 tokens: padding is masked
    assert [(r["id"], r["num_words"]) for r in single] == [(i, w) for i in range(len(CAPTIONS)) for w in (4, 9)]


def test_resume_after_kill_equals_uninterrupted_run(lm_dir, tmp_path, capsys):
    data = make_data(tmp_path / "data", 12)
    args = ["--data", str(data), "--model", str(lm_dir), "--num-words", "3", "8", "--batch-size", "1",
            "--max-new-tokens", "12", "--device", "cpu", "--no-progress"]
    out, ckpt = tmp_path / "killed", tmp_path / "killed.partial.jsonl"
    cmd = [sys.executable, "-m", "prh.cli", "summarise-captions", *args, "--out", str(out)]
    env = {**os.environ, "OMP_NUM_THREADS": str(torch.get_num_threads())}  # same float sums as this process
    log = open(tmp_path / "killed.log", "w")
    proc = subprocess.Popen(cmd, env=env, stdout=log, stderr=log)
    deadline = time.monotonic() + 120
    while proc.poll() is None and time.monotonic() < deadline:
        if ckpt.exists() and ckpt.read_text().count("\n") >= 2:  # header + one finished summary
            proc.kill()  # SIGKILL: no clean-up runs
            break
        time.sleep(0.005)
    proc.wait()
    log.close()
    assert proc.returncode == -9, f"not killed mid-way: {(tmp_path / 'killed.log').read_text()[-2000:]}"
    assert not out.exists()
    done = ckpt.read_text().count("\n") - 1
    with open(ckpt, "a") as f:
        f.write('{"id": 105, "num_words": 3, "te')  # a line cut short by the kill
    capsys.readouterr()
    main([*args, "--out", str(out)])  # the re-run, in this process (a second interpreter costs ~8 s of imports)
    err = capsys.readouterr().err
    assert 1 <= done < 24 and f"resuming from {ckpt}: {done} of 24 summaries done" in err
    assert f"generated {24 - done} of 24 summaries" in err  # finished ones were not generated again
    assert not ckpt.exists()

    fresh = tmp_path / "fresh"
    meta = run_summarise(data=data, model=str(lm_dir), out=fresh, num_words=[3, 8], batch_size=1, max_new_tokens=12,
                         device="cpu", progress=False)
    assert read_jsonl(out / "captions.jsonl") == read_jsonl(fresh / "captions.jsonl")
    assert read_json(out / "meta.json") == meta


def test_checkpoint_for_other_settings_is_not_reused(tmp_path, capsys):
    model, tok = sharp_llama()
    kw = dict(model=model, tokenizer=tok, captions=CAPTIONS[:3], max_new_tokens=6, batch_size=2, progress=False)
    ckpt = tmp_path / "c.jsonl"
    first = summarise_captions(**kw, num_words=[4], checkpoint_path=ckpt)
    lines = ckpt.read_text().splitlines()
    bogus = [json.dumps({**json.loads(line), "text": "BOGUS"}) for line in lines[1:]]
    ckpt.write_text("\n".join([lines[0], *bogus]) + "\n")
    capsys.readouterr()
    assert {r["text"] for r in summarise_captions(**kw, num_words=[4], checkpoint_path=ckpt)} == {"BOGUS"}
    assert "generated 0 of 3 summaries" in capsys.readouterr().err  # same settings: reused
    for change, key in (({"num_words": [4], "seed": 1}, "seed"), ({"num_words": [4, 9]}, "num_words")):
        ckpt.write_text("\n".join([lines[0], *bogus]) + "\n")
        again = summarise_captions(**kw, **change, checkpoint_path=ckpt)
        err = capsys.readouterr().err
        assert f"was made with other {key}; starting over" in err and "from the checkpoint" in err
        assert "BOGUS" not in {r["text"] for r in again}
        assert [r for r in again if r["num_words"] == 4] == first


def test_sampling_is_seeded_per_batch(tmp_path):
    model, tok = sharp_llama()
    kw = dict(model=model, tokenizer=tok, captions=CAPTIONS[:4], num_words=[5], max_new_tokens=6, batch_size=1,
              do_sample=True, seed=3, progress=False)
    ckpt = tmp_path / "s.jsonl"
    full = summarise_captions(**kw, checkpoint_path=ckpt)
    lines = ckpt.read_text().splitlines()
    ckpt.write_text("\n".join(lines[:3]) + "\n")  # header + the first two batches
    assert summarise_captions(**kw, checkpoint_path=ckpt) == full  # batch k has its own seed
    assert summarise_captions(**kw) == full


def test_bad_input_names_the_problem(tmp_path):
    data = make_data(tmp_path / "data", 2)
    common = dict(model="unused", out=tmp_path / "out")
    for num_words, match in (([], "num_words is empty"), ([5, 0], "not positive integers"),
                             ([5, 2.5], "not positive integers"), ([5, 5], "repeats")):
        with pytest.raises(ValueError, match=match):
            run_summarise(data=data, num_words=num_words, **common)
    with pytest.raises(ValueError, match="has no captions.jsonl"):
        run_summarise(data=tmp_path / "nowhere", num_words=[5], **common)
    with pytest.raises(ValueError, match="max_items=0"):
        run_summarise(data=data, num_words=[5], max_items=0, **common)
    write_jsonl(data / "captions.jsonl", [{"id": 0, "text": "a cube"}, {"id": 1, "text": " "}])
    with pytest.raises(ValueError, match=r"non-empty 'text'.*ids \[1\]"):
        run_summarise(data=data, num_words=[5], **common)
    model, tok = sharp_llama()
    with pytest.raises(ValueError, match="unique"):
        summarise_captions(model=model, tokenizer=tok, captions=["a", "b"], ids=[1, 1], num_words=[5])


def test_device_map_spreads_the_captioner_and_changes_no_summary(lm_dir, tmp_path):
    """A captioner the GPU formula gives several GPUs is loaded with device_map=auto
    (on this CPU machine accelerate places it on the CPU): the summaries are the same."""
    data = make_data(tmp_path / "data", 3)
    kw = dict(data=data, model=str(lm_dir), num_words=[4], batch_size=2, max_new_tokens=6, device="cpu",
              progress=False)
    run_summarise(out=tmp_path / "plain", **kw)
    main(["--data", str(data), "--model", str(lm_dir), "--num-words", "4", "--batch-size", "2",
          "--max-new-tokens", "6", "--device", "cpu", "--device-map", "auto", "--no-progress",
          "--out", str(tmp_path / "spread")])
    assert read_jsonl(tmp_path / "spread" / "captions.jsonl") == read_jsonl(tmp_path / "plain" / "captions.jsonl")
