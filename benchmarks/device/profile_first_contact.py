"""Where the language extraction's time goes on a GPU: bench_device's TinyLlama-shaped model and captions,
extract_language_features at budget auto under torch.profiler: top ops by device time and by CPU time, plus
wall time of tokenization alone. Also k-NN variants at N = 1e6 (margin, bf16 output). Usage: OUT.json [--tiny]"""

import json
import sys
import time

sys.path.insert(0, "benchmarks")
import torch
from bench_device import captions, tokenizer_for
from prh.features import extract_language_features
from prh.batching import encode_texts

OUT = sys.argv[1]
TINY = "--tiny" in sys.argv
dev = "cpu" if TINY else "cuda"
RES = {}


def save():
    json.dump(RES, open(OUT, "w"), indent=1, default=str)


def sync():
    if dev == "cuda":
        torch.cuda.synchronize()


from transformers import LlamaConfig, LlamaForCausalLM

texts = captions(256 if TINY else 8192)
tok = tokenizer_for(texts)
shape = (
    dict(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=4)
    if TINY
    else dict(
        hidden_size=2048, intermediate_size=5632, num_hidden_layers=22, num_attention_heads=32, num_key_value_heads=4
    )
)
cfg = LlamaConfig(vocab_size=32000, max_position_embeddings=2048, **shape)
dtype = torch.float32 if TINY else torch.bfloat16
with torch.device(dev):
    model = LlamaForCausalLM(cfg).to(dtype).eval()
RES["attn_implementation"] = getattr(model.config, "_attn_implementation", None)
t0 = time.perf_counter()
enc = encode_texts(tok, texts)
RES["tokenize_s"] = round(time.perf_counter() - t0, 3)
extract_language_features(model, tok, texts[:64], device=dev, dtype=dtype, progress=False)
sync()
t0 = time.perf_counter()
extract_language_features(model, tok, texts, device=dev, dtype=dtype, gpu_memory_budget_gb="auto", progress=False)
sync()
RES["extract_s"] = round(time.perf_counter() - t0, 3)
acts = [torch.profiler.ProfilerActivity.CPU] + ([torch.profiler.ProfilerActivity.CUDA] if dev == "cuda" else [])
with torch.profiler.profile(activities=acts) as prof:
    extract_language_features(model, tok, texts, device=dev, dtype=dtype, gpu_memory_budget_gb="auto", progress=False)
    sync()
ka = prof.key_averages()
key = "self_device_time_total" if dev == "cuda" else "self_cpu_time_total"
RES["top_device"] = [
    {
        "op": e.key,
        "count": e.count,
        "self_device_ms": round(getattr(e, "self_device_time_total", 0) / 1e3, 1),
        "self_cpu_ms": round(e.self_cpu_time_total / 1e3, 1),
    }
    for e in sorted(ka, key=lambda e: -getattr(e, key, 0))[:25]
]
RES["top_cpu"] = [
    {"op": e.key, "count": e.count, "self_cpu_ms": round(e.self_cpu_time_total / 1e3, 1)}
    for e in sorted(ka, key=lambda e: -e.self_cpu_time_total)[:25]
]
save()
print(json.dumps(RES, indent=1)[:6000], flush=True)
del model
if dev == "cuda":
    torch.cuda.empty_cache()
from prh.metrics.knn_fast import knn_fast

n = 2000 if TINY else 1_000_000
g = torch.Generator(device=dev).manual_seed(0)
lat = torch.randn(n, 64, device=dev, generator=g)
x = torch.nn.functional.normalize(
    lat @ torch.randn(64, 768, device=dev, generator=g) + 0.5 * torch.randn(n, 768, device=dev, generator=g), dim=1
)
rows = []
for kw in ({}, {"margin": 22}, {"bf16_output": True}, {"margin": 22, "bf16_output": True}):
    sync()
    t0 = time.perf_counter()
    i, s, st = knn_fast(x, 10, precision="bf16", **kw)
    sync()
    rows.append(
        {
            **kw,
            "seconds": round(time.perf_counter() - t0, 2),
            "retried": st.retried,
            "fallback": st.fallback,
            "candidates": st.candidates,
            "block_rows": st.block_rows,
        }
    )
    if not rows[1:]:
        ref = i
    else:
        rows[-1]["same_lists_as_default"] = bool((i == ref).all())
    print(rows[-1], flush=True)
    RES["knn_1e6"] = rows
    save()
