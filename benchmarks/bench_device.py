"""The paper suite's three GPU workloads on whatever device is here, and the rates `prh plan-cost` reads.

Runs the project's own default paths on random weights and random data (no hub needed):

1. language extraction: ``prh.features.extract_language_features`` at its defaults (batch 32, the "auto"
   memory budget) on a Llama-shaped model: TinyLlama-1.1B's shape in bf16 on CUDA, 4 x 256 in fp32 on a CPU.
   Utilisation = 2 x matmul parameters (no embedding, no unused LM head) x tokens / seconds / the bf16 peak;
2. vision extraction: ``extract_vision_features`` at ``features.vision_dtype``'s default (tf32: float32 weights,
   TF32 products on CUDA) of timm's ViT-L/16 on CUDA, ViT-Ti/16 on a CPU. Utilisation = 2 x timm's MACs per image x
   images / seconds / the TF32 peak (the fp32 peak where TF32 is off);
3. exact mutual k-NN (``prh.metrics.knn.knn``, the engine's search, ``auto`` precision), N = 10^5 on CUDA,
   10^4 on a CPU, d = 768, k = 10: seconds (the plan cost does not model k-NN jobs, they run on CPUs).

Peaks: the card's datasheet where known (PEAKS), else measured with a large GEMM (a CPU). The JSON has
``device``, ``measured`` (every number above) and ``rates`` (``mfu``, ``vision_mfu``, ``peak_flops``,
``fp32_peak_flops``, ``tf32_peak_flops``), which ``prh plan-cost --rates FILE`` or ``cluster.rates_file`` use instead of the
assumed 40 %. Commit the JSON of each card you measure on in ``benchmarks/device/``.

    python benchmarks/bench_device.py --json benchmarks/device/$(date +%F)-h100.json
    prh plan-cost --rates benchmarks/device/<that file> -- --profile profiles/slurm --config suite=paper
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import numpy as np
import torch

# dense bf16, fp32 (no TF32) and TF32 peaks by card name (NVIDIA datasheets, SXM)
PEAKS = {"H100": (989e12, 67e12, 494e12), "H200": (989e12, 67e12, 494e12), "A100": (312e12, 19.5e12, 156e12)}
GEMM = 4096  # side of the measured GEMM where the card is not in PEAKS
# --toy (the test suite's run: the JSON's format, not a measurement): each workload at a size of milliseconds
TOY = {"gemm": 256, "texts": 16, "shape": dict(hidden_size=64, intermediate_size=172, num_hidden_layers=1,
                                                num_attention_heads=2, num_key_value_heads=2),
       "images": 4, "knn_n": 500}


def sync(dev: str) -> None:
    if dev == "cuda":
        torch.cuda.synchronize()


def peaks(dev: str, toy: bool = False) -> dict:
    """(bf16, fp32) peak FLOP/s: the datasheet of a known card, else the best of 3 measured GEMM^3 products."""
    if dev == "cuda":
        name = torch.cuda.get_device_name()
        for card, (bf16, fp32, tf32) in PEAKS.items():
            if card in name:
                return {"device": name, "bf16": bf16, "fp32": fp32, "tf32": tf32, "from": "datasheet"}
    out = {"device": torch.cuda.get_device_name() if dev == "cuda" else "cpu", "from": "measured GEMM"}
    side = TOY["gemm"] if toy else GEMM
    for key, dtype in (("bf16", torch.bfloat16), ("fp32", torch.float32)):
        a, b = (torch.randn(side, side, device=dev, dtype=dtype) for _ in range(2))
        a @ b
        sync(dev)
        best = float("inf")
        for _ in range(3):  # the best of 3: the peak is what the GEMM can reach
            t0 = time.perf_counter()
            a @ b
            sync(dev)
            best = min(best, time.perf_counter() - t0)
        out[key] = 2 * side**3 / best
    out["tf32"] = out["fp32"]  # not measured: a CPU has no TF32, and on an unknown card this stays a lower bound
    return out


def captions(n: int, seed: int = 0) -> list[str]:
    rng = np.random.default_rng(seed)
    words = ("red green blue small large circle square triangle left right above below near far the a of and with "
             "on in bright dark striped dotted").split()
    return [" ".join(rng.choice(words, size=int(rng.integers(20, 90)))) for _ in range(n)]


def tokenizer_for(texts: list[str]):
    from tokenizers import Tokenizer, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE(unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    tok.train_from_iterator(texts[:2000], trainers.BpeTrainer(vocab_size=500, special_tokens=["<unk>", "<pad>", "<s>"]))
    return PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="<unk>", pad_token="<pad>", bos_token="<s>")


def language(dev: str, peak: float, toy: bool = False) -> dict:
    from transformers import LlamaConfig, LlamaForCausalLM

    from prh.features import extract_language_features

    cuda = dev == "cuda"
    texts = captions(TOY["texts"] if toy else 8192 if cuda else 256)
    tok = tokenizer_for(texts)
    shape = dict(hidden_size=2048, intermediate_size=5632, num_hidden_layers=22, num_attention_heads=32,
                 num_key_value_heads=4) if cuda else dict(hidden_size=256, intermediate_size=688, num_hidden_layers=4,
                                                          num_attention_heads=4, num_key_value_heads=4)
    shape = TOY["shape"] if toy else shape
    cfg = LlamaConfig(vocab_size=32000, max_position_embeddings=2048, **shape)
    dtype = torch.bfloat16 if cuda else torch.float32
    with torch.device(dev):
        model = LlamaForCausalLM(cfg).to(dtype).eval()
    # the matmul parameters: the embedding is a lookup and the LM head never runs (gpu_check.py's 1.03 B for
    # TinyLlama kept the embedding: 6 % more FLOPs than this counts)
    params = sum(p.numel() for n, p in model.named_parameters() if "embed_tokens" not in n and "lm_head" not in n)
    tokens = sum(len(t) for t in tok(texts)["input_ids"])
    extract_language_features(model, tok, texts[:64], device=dev, dtype=dtype, progress=False)  # warm-up
    sync(dev)
    t0 = time.perf_counter()
    extract_language_features(model, tok, texts, device=dev, dtype=dtype, gpu_memory_budget_gb="auto", progress=False)
    sync(dev)
    s = time.perf_counter() - t0
    return {"matmul_params": params, "texts": len(texts), "tokens": tokens, "seconds": round(s, 3),
            "tokens_per_s": round(tokens / s), "mfu": 2 * params * tokens / s / peak}


def vision(dev: str, peaks: dict, toy: bool = False) -> dict:
    """At ``features.vision_dtype``'s default (tf32: float32 with TF32 products on CUDA), against that precision's
    peak."""
    import timm

    from prh.config import schema_defaults
    from prh.device import tf32_matmuls
    from prh.features import extract_vision_features

    cuda = dev == "cuda"
    name, macs, n = ("vit_large_patch16_224", 61.6e9, 2048) if cuda else ("vit_tiny_patch16_224", 1.26e9, 64)
    n = TOY["images"] if toy else n
    with torch.device(dev):
        model = timm.create_model(name, pretrained=False).eval()
    cfg = timm.data.resolve_data_config({}, model=model)
    imgs = np.random.default_rng(0).integers(0, 256, size=(n, 224, 224, 3), dtype=np.uint8)
    kw = dict(pooling="cls", mean=cfg["mean"], std=cfg["std"], input_size=cfg["input_size"], device=dev,
              dtype=torch.float32, progress=False)
    precision = schema_defaults("features")["vision_dtype"]
    with tf32_matmuls(precision == "tf32", dev) as tf32:
        extract_vision_features(model, imgs[:16], **kw)  # warm-up
        sync(dev)
        t0 = time.perf_counter()
        extract_vision_features(model, imgs, **kw)
        sync(dev)
        s = time.perf_counter() - t0
    peak = peaks["tf32"] if tf32 else peaks["fp32"]
    return {"model": name, "images": n, "precision": "tf32" if tf32 else "float32", "seconds": round(s, 3),
            "images_per_s": round(n / s, 1), "mfu": 2 * macs * n / s / peak}


def knn_seconds(dev: str, toy: bool = False) -> dict:
    from prh.metrics.knn import knn, resolve_precision

    n = TOY["knn_n"] if toy else 100_000 if dev == "cuda" else 10_000
    x = torch.nn.functional.normalize(torch.randn(n, 768, device=dev), dim=1)
    knn(x[:min(n, 1000)], 10, precision="auto")  # warm-up
    sync(dev)
    t0 = time.perf_counter()
    knn(x, 10, precision="auto")
    sync(dev)
    return {"n": n, "d": 768, "k": 10, "precision": resolve_precision("auto", dev),
            "seconds": round(time.perf_counter() - t0, 3)}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--json", required=True, help="where to write the measurements and rates")
    p.add_argument("--device", default="auto", choices=["auto", "cuda", "cpu"])
    p.add_argument("--toy", action="store_true", help="every workload at a toy size: checks the JSON, measures nothing")
    a = p.parse_args()
    dev = ("cuda" if torch.cuda.is_available() else "cpu") if a.device == "auto" else a.device
    pk = peaks(dev, a.toy)
    measured = {"peaks": pk, "language": language(dev, pk["bf16"] if dev == "cuda" else pk["fp32"], a.toy),
                "vision": vision(dev, pk, a.toy), "knn": knn_seconds(dev, a.toy), "toy": a.toy}
    rates = {"mfu": min(1.0, measured["language"]["mfu"]), "vision_mfu": min(1.0, measured["vision"]["mfu"]),
             "peak_flops": pk["bf16"], "fp32_peak_flops": pk["fp32"], "tf32_peak_flops": pk["tf32"]}
    out = {"device": pk["device"], "kind": dev, "torch": torch.__version__, "date": time.strftime("%Y-%m-%d"),
           "measured": measured, "rates": rates}
    Path(a.json).parent.mkdir(parents=True, exist_ok=True)
    Path(a.json).write_text(json.dumps(out, indent=1) + "\n")
    vp = measured["vision"]["precision"]
    print(f"{pk['device']}: language {rates['mfu']:.1%} of {pk['bf16'] / 1e12:.0f} TFLOP/s, vision "
          f"{rates['vision_mfu']:.1%} of {pk['tf32' if vp == 'tf32' else 'fp32'] / 1e12:.1f} TFLOP/s {vp}, "
          f"k-NN N={measured['knn']['n']} in "
          f"{measured['knn']['seconds']} s ({measured['knn']['precision']}) -> {a.json}")


if __name__ == "__main__":
    main()
