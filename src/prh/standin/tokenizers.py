"""Tiny tokenizers of each kind the paper suite's language models use, trained here, offline.

A stand-in repo must ship the tokenizer KIND of the real repo (same algorithm, same files, same
special tokens and where they sit), since the project's loader treats kinds differently (a
SentencePiece model alone goes through ``_follow_sentencepiece``; a byte-level BPE does not).
Every kind is trained in well under a second on ``CORPUS`` with the ``tokenizers`` or
``sentencepiece`` library, at a vocabulary of a few hundred; ``tokenizer_files(kind)`` returns the
repo files ({file name: bytes}) and the special-token ids the model config must carry. The files are
deterministic: the same kind gives the same bytes in every build.

Kinds (``KINDS``): ``bloom``, ``gpt2``, ``roberta`` (vocab.json + merges.txt + tokenizer.json),
``roberta-vocab`` (vocab.json + merges.txt only), ``gpt-neox`` (OLMo), ``llama3``, ``llama3-instruct``
(byte-level BPE); ``wordpiece`` (BERT, DistilBERT, uncased); ``llama-spm`` (``tokenizer.model``
only: OpenLLaMA), ``llama`` (tokenizer.model + tokenizer.json: LLaMA, Mistral), ``gemma`` (SentencePiece
BPE); ``albert``, ``xlnet`` (SentencePiece unigram, spiece.model + tokenizer.json).
"""

from __future__ import annotations

import functools
import io
import json

__all__ = ["CORPUS", "KINDS", "LLAMA3_CHAT_TEMPLATE", "tokenizer_files"]

_COLOURS = ["red", "green", "blue", "yellow", "purple", "grey", "orange", "white", "black", "brown"]
_SHAPES = ["cube", "sphere", "cone", "cylinder", "ball", "pyramid", "torus"]
_SIZES = ["small", "big", "large", "tiny"]
_RELATIONS = ["to the left of", "to the right of", "above", "below", "next to", "behind", "in front of"]
_CAPTIONS = [
    "A man riding a horse on the beach at sunset.", "Two dogs play with a red frisbee in the park.",
    "A plate of pasta with tomato sauce and basil.", "An old bus parked next to a brick building.",
    "A woman holds an umbrella in the rain, smiling.", "Three children are reading books under a tree!",
    "Is this a cat sleeping on the sofa?", "A kitchen with white cabinets; a stove and a fridge.",
    "The year 2024 had 366 days, and 12 months.", "Numbers 12 and 345 next to 6789 in the corner (approx.)",
    "An image with the caption 'a grey dog'. This is an image of a",
    "ünïcode café naïve — “quotes” and ‘apostrophes’ matter", "line one\nline two\ttabbed",
    "Summarise the caption in 10 words: a boat on a lake.", "digits 0123456789 9876543210 50 61 72 83 94",
    "THE QUICK BROWN FOX JUMPS OVER THE LAZY DOG",
]
# Captions of the shapes world and photos, digits, punctuation, capitals and non-ASCII text: what the
# suite feeds its models. Generated, not sampled, so every build trains on the same text.
CORPUS = [f"a {_SIZES[i % 4]} {_COLOURS[i % 10]} {_SHAPES[i % 7]} {_RELATIONS[i // 7 % 7]} the "
          f"{_COLOURS[(i + 3) % 10]} {_SHAPES[(i + 2) % 7]}" for i in range(280)] + _CAPTIONS * 8

# Meta-Llama-3-8B-Instruct's chat template (the caption summariser applies it).
LLAMA3_CHAT_TEMPLATE = (
    "{% set loop_messages = messages %}{% for message in loop_messages %}{% set content = '<|start_header_id|>' + "
    "message['role'] + '<|end_header_id|>\n\n'+ message['content'] | trim + '<|eot_id|>' %}{% if loop.index0 == 0 %}"
    "{% set content = bos_token + content %}{% endif %}{{ content }}{% endfor %}{% if add_generation_prompt %}"
    "{{ '<|start_header_id|>assistant<|end_header_id|>\n\n' }}{% endif %}")
# Llama 3's pre-tokenizer split (tiktoken's cl100k-like pattern), as in its tokenizer.json.
_LLAMA3_SPLIT = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*"
                 r"|\s*[\r\n]+|\s+(?!\S)|\s+")
_LLAMA3_SPECIAL = ["<|begin_of_text|>", "<|end_of_text|>", *[f"<|reserved_special_token_{i}|>" for i in range(4)],
                   "<|start_header_id|>", "<|end_header_id|>", "<|reserved_special_token_4|>", "<|eot_id|>"]
_BIG = 1000000000000000019884624838656  # transformers' "no limit" model_max_length, as the real configs write it

_GPT2_MAP = {"bos_token": "<|endoftext|>", "eos_token": "<|endoftext|>", "unk_token": "<|endoftext|>"}
_ROBERTA_MAP = {"bos_token": "<s>", "eos_token": "</s>", "unk_token": "<unk>", "sep_token": "</s>", "pad_token": "<pad>",
                "cls_token": "<s>", "mask_token": "<mask>"}
# kind: (specials trained in, so numbered first; specials appended after training; tokenizer_config.json;
# special_tokens_map.json, None: the tokens tokenizer_config.json names)
_BYTE_BPE = {
    "bloom": (["<unk>", "<s>", "</s>", "<pad>"], [], {
        "add_prefix_space": False, "bos_token": "<s>", "eos_token": "</s>", "unk_token": "<unk>", "pad_token": "<pad>",
        "padding_side": "left", "model_max_length": _BIG, "tokenizer_class": "BloomTokenizerFast"}, None),
    # GPT-2 and RoBERTa name no tokens in their configs: their classes' defaults are the tokens
    "gpt2": ([], ["<|endoftext|>"], {"model_max_length": 1024}, _GPT2_MAP),
    "roberta": (["<s>", "<pad>", "</s>", "<unk>"], ["<mask>"], {"model_max_length": 512}, _ROBERTA_MAP),
    "gpt-neox": (["|||IP_ADDRESS|||", "<|padding|>"], ["<|endoftext|>"], {
        "add_bos_token": False, "add_eos_token": False, "bos_token": None, "eos_token": "<|endoftext|>",
        "pad_token": "<|padding|>", "unk_token": None, "model_max_length": _BIG, "tokenizer_class": "GPTNeoXTokenizer"},
        None),
    "llama3": ([], _LLAMA3_SPECIAL, {
        "bos_token": "<|begin_of_text|>", "eos_token": "<|end_of_text|>", "clean_up_tokenization_spaces": True,
        "model_input_names": ["input_ids", "attention_mask"], "model_max_length": _BIG,
        "tokenizer_class": "PreTrainedTokenizerFast"}, None),
}
_BYTE_BPE["roberta-vocab"] = _BYTE_BPE["roberta"]
_BYTE_BPE["llama3-instruct"] = (*_BYTE_BPE["llama3"][:2], {**_BYTE_BPE["llama3"][2], "eos_token": "<|eot_id|>",
                                                           "chat_template": LLAMA3_CHAT_TEMPLATE}, None)

_LLAMA_CONFIG = {"add_bos_token": True, "add_eos_token": False, "bos_token": "<s>", "eos_token": "</s>",
                 "unk_token": "<unk>", "pad_token": None, "clean_up_tokenization_spaces": False,
                 "model_max_length": _BIG, "sp_model_kwargs": {}, "tokenizer_class": "LlamaTokenizer"}
_SPM_COMMON = {"byte_fallback": True, "split_digits": True, "normalization_rule_name": "identity",
               "remove_extra_whitespaces": False, "allow_whitespace_only_pieces": True}
# kind: (file, SentencePiece trainer options, tokenizer_config.json, special_tokens_map.json)
_SPM = {
    "llama-spm": ("tokenizer.model", dict(model_type="bpe", vocab_size=600, add_dummy_prefix=True, unk_id=0, bos_id=1,
                                          eos_id=2, pad_id=-1, **_SPM_COMMON), _LLAMA_CONFIG,
                  {"bos_token": "<s>", "eos_token": "</s>", "unk_token": "<unk>"}),
    "gemma": ("tokenizer.model", dict(model_type="bpe", vocab_size=700, add_dummy_prefix=False, pad_id=0, eos_id=1,
                                      bos_id=2, unk_id=3, pad_piece="<pad>", eos_piece="<eos>", bos_piece="<bos>",
                                      control_symbols=["<mask>", "<start_of_turn>", "<end_of_turn>"],
                                      **_SPM_COMMON),
              {"add_bos_token": True, "add_eos_token": False, "bos_token": "<bos>", "eos_token": "<eos>",
               "unk_token": "<unk>", "pad_token": "<pad>", "additional_special_tokens": ["<start_of_turn>", "<end_of_turn>"],
               "clean_up_tokenization_spaces": False, "spaces_between_special_tokens": False, "sp_model_kwargs": {},
               "model_max_length": _BIG, "tokenizer_class": "GemmaTokenizer"},
              {"bos_token": "<bos>", "eos_token": "<eos>", "unk_token": "<unk>", "pad_token": "<pad>",
               "additional_special_tokens": ["<start_of_turn>", "<end_of_turn>"]}),
    "albert": ("spiece.model", dict(model_type="unigram", vocab_size=500, hard_vocab_limit=False, pad_id=0, unk_id=1,
                                    bos_id=-1, eos_id=-1, control_symbols=["[CLS]", "[SEP]", "[MASK]"],
                                    normalization_rule_name="nmt_nfkc_cf"),
               {"do_lower_case": True, "keep_accents": False, "remove_space": True, "model_max_length": 512,
                "tokenizer_class": "AlbertTokenizer"},
               {"bos_token": "[CLS]", "eos_token": "[SEP]", "unk_token": "<unk>", "sep_token": "[SEP]",
                "pad_token": "<pad>", "cls_token": "[CLS]", "mask_token": "[MASK]"}),
    "xlnet": ("spiece.model", dict(model_type="unigram", vocab_size=500, hard_vocab_limit=False, unk_id=0, bos_id=1,
                                   eos_id=2, pad_id=-1,
                                   control_symbols=["<cls>", "<sep>", "<pad>", "<mask>", "<eod>", "<eop>"]),
              {"do_lower_case": False, "keep_accents": False, "remove_space": True, "padding_side": "left",
               "model_max_length": _BIG, "tokenizer_class": "XLNetTokenizer"},
              {"bos_token": "<s>", "eos_token": "</s>", "unk_token": "<unk>", "sep_token": "<sep>", "pad_token": "<pad>",
               "cls_token": "<cls>", "mask_token": "<mask>", "additional_special_tokens": ["<eop>", "<eod>"]}),
}
_SPM["llama"] = _SPM["llama-spm"]  # the same files plus tokenizer.json
KINDS = (*_BYTE_BPE, "wordpiece", *_SPM)


def _json(obj) -> bytes:
    return (json.dumps(obj, indent=2, ensure_ascii=False) + "\n").encode()


def _special_ids(token_to_id, config: dict, smap: dict) -> dict:
    """``{bos,eos,pad,unk}_token_id`` (None for a token the kind lacks): what a model config must agree with."""
    ids = {}
    for role in ("bos", "eos", "pad", "unk"):
        token = config.get(f"{role}_token", smap.get(f"{role}_token"))
        ids[f"{role}_token_id"] = None if token is None else token_to_id(token)
    return ids


def _byte_bpe(kind: str) -> tuple[dict, dict]:
    from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers, processors, trainers

    first, appended, config, smap = _BYTE_BPE[kind]
    tok = Tokenizer(models.BPE())
    if kind.startswith("llama3"):
        tok.pre_tokenizer = pre_tokenizers.Sequence([
            pre_tokenizers.Split(Regex(_LLAMA3_SPLIT), behavior="isolated"),
            pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=True, use_regex=False)])
    else:
        tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=512 + len(first), special_tokens=first, show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(CORPUS, trainer)
    tok.add_special_tokens(appended)
    if kind.startswith("roberta"):
        tok.post_processor = processors.RobertaProcessing(("</s>", tok.token_to_id("</s>")), ("<s>", tok.token_to_id("<s>")))
    elif kind.startswith("llama3"):
        bos = ("<|begin_of_text|>", tok.token_to_id("<|begin_of_text|>"))
        tok.post_processor = processors.Sequence([
            processors.ByteLevel(trim_offsets=False),
            processors.TemplateProcessing(single="<|begin_of_text|> $A:0", special_tokens=[bos],
                                          pair="<|begin_of_text|> $A:0 <|begin_of_text|>:1 $B:1")])
    else:
        tok.post_processor = processors.ByteLevel(trim_offsets=False)
    smap = smap or {k: v for k, v in config.items() if k.endswith("_token") and v is not None}
    files = {"tokenizer_config.json": _json(config), "special_tokens_map.json": _json(smap)}
    if kind in ("gpt2", "roberta", "roberta-vocab"):  # the GPT-2 files; the others ship tokenizer.json alone
        vocab = tok.get_vocab(with_added_tokens=True)
        files["vocab.json"] = _json(dict(sorted(vocab.items(), key=lambda kv: kv[1])))
        merges = json.loads(tok.to_str())["model"]["merges"]
        files["merges.txt"] = ("#version: 0.2\n" + "".join(" ".join(m) + "\n" for m in merges)).encode()
    if kind != "roberta-vocab":
        files["tokenizer.json"] = tok.to_str(pretty=True).encode()
    return files, {**_special_ids(tok.token_to_id, config, smap), "vocab_size": tok.get_vocab_size(True)}


def _wordpiece() -> tuple[dict, dict]:
    from collections import Counter

    from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers, processors

    specials = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
    normalizer = normalizers.BertNormalizer(clean_text=True, handle_chinese_chars=True, lowercase=True)
    pre = pre_tokenizers.BertPreTokenizer()
    words = Counter(w for text in CORPUS for w, _ in pre.pre_tokenize_str(normalizer.normalize_str(text)))
    chars = sorted({c for w in words for c in w})
    # Like BERT's vocabulary: every character, alone and as a "##" continuation, common suffixes, then whole
    # words by frequency (ties by spelling). Chosen here, not by tokenizers' WordPieceTrainer, whose
    # tie-breaking differs from process to process (the files must be the same in every build).
    frequent = [w for w, _ in sorted(words.items(), key=lambda wc: (-wc[1], wc[0])) if len(w) > 1]
    pieces = [*specials, *chars, *("##" + c for c in chars), "##s", "##es", "##ed", "##ing", "##er", "##ly", *frequent]
    tok = Tokenizer(models.WordPiece({t: i for i, t in enumerate(dict.fromkeys(pieces))}, unk_token="[UNK]"))
    tok.normalizer, tok.pre_tokenizer = normalizer, pre
    tok.decoder = decoders.WordPiece(prefix="##")
    tok.post_processor = processors.TemplateProcessing(
        single="[CLS]:0 $A:0 [SEP]:0", pair="[CLS]:0 $A:0 [SEP]:0 $B:1 [SEP]:1",
        special_tokens=[(t, tok.token_to_id(t)) for t in ("[CLS]", "[SEP]")])
    tok.add_special_tokens(specials)
    vocab = sorted(tok.get_vocab().items(), key=lambda kv: kv[1])
    config = {"do_lower_case": True, "model_max_length": 512}
    files = {"tokenizer_config.json": _json(config), "vocab.txt": "".join(t + "\n" for t, _ in vocab).encode(),
             "tokenizer.json": tok.to_str(pretty=True).encode()}
    smap = {"unk_token": "[UNK]", "sep_token": "[SEP]", "pad_token": "[PAD]", "cls_token": "[CLS]", "mask_token": "[MASK]"}
    return files, {**_special_ids(tok.token_to_id, config, smap), "vocab_size": tok.get_vocab_size(True)}


def _spm_bpe_json(sp, kind: str) -> str:
    """tokenizer.json of a SentencePiece BPE model, as transformers 4's converters wrote it for the real repo
    (LLaMA/Mistral: the legacy "▁"-prepending normaliser; Gemma: no dummy prefix)."""
    from tokenizers import AddedToken, Tokenizer, decoders, models, normalizers, pre_tokenizers, processors

    vocab = {sp.id_to_piece(i): i for i in range(sp.get_piece_size())}
    # A piece's merges are its splits into two pieces, the merged piece's id giving the order (SentencePiece
    # numbers BPE pieces by merge order), as transformers' SentencePieceExtractor does.
    merges = sorted(((piece[:k], piece[k:]) for piece in vocab for k in range(1, len(piece))
                     if piece[:k] in vocab and piece[k:] in vocab),
                    key=lambda lr: (vocab[lr[0] + lr[1]], vocab[lr[0]], vocab[lr[1]]))
    tok = Tokenizer(models.BPE(vocab, merges, unk_token=sp.id_to_piece(sp.unk_id()), fuse_unk=True, byte_fallback=True))
    tok.add_special_tokens([AddedToken(sp.id_to_piece(i), normalized=False, special=True)
                            for i in range(sp.get_piece_size()) if sp.is_control(i) or sp.is_unknown(i)])
    steps = [decoders.Replace("▁", " "), decoders.ByteFallback(), decoders.Fuse()]
    bos = sp.id_to_piece(sp.bos_id())
    if kind == "gemma":
        tok.normalizer = normalizers.Replace(" ", "▁")
        tok.pre_tokenizer = pre_tokenizers.Split(" ", "merged_with_previous")
    else:
        tok.normalizer = normalizers.Sequence([normalizers.Prepend("▁"), normalizers.Replace(" ", "▁")])
        steps.append(decoders.Strip(content=" ", left=1))
    tok.decoder = decoders.Sequence(steps)
    tok.post_processor = processors.TemplateProcessing(single=f"{bos}:0 $A:0", pair=f"{bos}:0 $A:0 {bos}:1 $B:1",
                                                       special_tokens=[(bos, sp.bos_id())])
    return tok.to_str(pretty=True)


def _sentencepiece(kind: str) -> tuple[dict, dict]:
    import sentencepiece as spm

    file, options, config, smap = _SPM[kind]
    model = io.BytesIO()
    spm.SentencePieceTrainer.train(sentence_iterator=iter(CORPUS), model_writer=model, character_coverage=1.0,
                                   num_threads=1, minloglevel=2, **options)
    sp = spm.SentencePieceProcessor(model_proto=model.getvalue())
    files = {file: model.getvalue(), "tokenizer_config.json": _json(config), "special_tokens_map.json": _json(smap)}
    if kind in ("llama", "gemma"):
        files["tokenizer.json"] = _spm_bpe_json(sp, kind).encode()
    elif kind in ("albert", "xlnet"):
        files["tokenizer.json"] = _spm_unigram_json(file, model.getvalue(), config)
    return files, {**_special_ids(sp.piece_to_id, config, smap), "vocab_size": sp.get_piece_size()}


def _spm_unigram_json(file: str, model: bytes, config: dict) -> bytes:
    """tokenizer.json of ALBERT/XLNet: transformers' own conversion of the SentencePiece model."""
    import tempfile
    from pathlib import Path

    from transformers import AutoTokenizer

    with tempfile.TemporaryDirectory() as tmp:
        (Path(tmp) / file).write_bytes(model)
        (Path(tmp) / "tokenizer_config.json").write_bytes(_json(config))
        return AutoTokenizer.from_pretrained(tmp).backend_tokenizer.to_str(pretty=True).encode()


@functools.lru_cache(maxsize=None)
def _cached(kind: str) -> tuple[tuple, tuple]:
    if kind in _BYTE_BPE:
        files, ids = _byte_bpe(kind)
    elif kind == "wordpiece":
        files, ids = _wordpiece()
    else:
        files, ids = _sentencepiece(kind)
    return tuple(sorted(files.items())), tuple(ids.items())


def tokenizer_files(kind: str) -> tuple[dict[str, bytes], dict]:
    """The tokenizer files of ``kind`` ({name: bytes}) and the ids a model config needs:
    ``bos_token_id``, ``eos_token_id``, ``pad_token_id``, ``unk_token_id`` (None where the kind has no
    such token) and ``vocab_size``. Trained once per process, then served from memory."""
    if kind not in KINDS:
        raise ValueError(f"tokenizer kind {kind!r} is unknown; known kinds: {', '.join(KINDS)}")
    files, ids = _cached(kind)
    return dict(files), dict(ids)
