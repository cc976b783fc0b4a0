"""The pairwise probe: do small GPT-2s learn the PAIRWISE left/right comparison when the relational answers are a large
share of the training text? Held-out multiple choice, plus a swap test (does the answer follow the positions?).

Design (fixed 2026-11-28 before the first run; not tuned after looking):
- World: the zoo's shapes world with the settings of the CPU probes (WORLD below: 1-4 objects, jitter 7, type_seed 0).
  Training scenes: items 0..3999 of seed 1; held-out scenes: items 0..399 of seed 2
  (the first 400). Scenes only (sample_scene with the stream [seed, i, 0], as make_item),
  no images.
- Names: every colour and shape word is written in its canonical form (SYNONYMS patched to the first form, which
  is the canonical name), in captions and questions alike: the only thing to learn is the comparison.
- Caption variants: A = level 3 (list, background, one region sentence per object; no relation sentences);
  B = level 5 with its relation sentences (level 4's "the X is to the left of and above the Y") REMOVED, i.e.
  list, background, one sentence per object stating its region AND its centre in percent: so no caption states a
  relation and B differs from A only by the numbers.
- Questions: only "left or right". A pair (a, b) is asked iff its answer is well defined from the caption:
  A: a and b in different region columns (then |x_a - x_b| >= 0.19); B: |x_a - x_b| >= THRESH = 0.05
  (B keeps same-column pairs with |dx| in 0.05..0.14, which only the numbers decide; scored separately too).
  Answer " left." iff x_a < x_b.
- Training text, per training scene and per caption sample s in {1, 2} (so 2 texts per scene): the caption
  drawn from default_rng([s, i]), then EVERY valid ordered pair of distinct objects (up to n(n-1) = 12), in an
  order drawn from default_rng([s, i, 5]), each "Q: is the X left or right of the Y? A: left." Scenes with no
  valid pair give no text. Tokenizer: train_tokenizer on these texts + grammar_text() (word level).
- Training: prh train_language_model, arch gpt2, batch 16, lr 3e-3, seed 0, context 512 (truncation must be 0).
  Sizes LxWxH (layers x width x heads): 2x48x2, 4x128x4, 6x256x8. On CPU: 2x48x2 at 3,000 steps for A and B;
  4x128x4 at 3,000 steps only if either learns (held-out accuracy clearly above the best constant, p < 0.01).
- Held-out score: for each held-out scene with >= 1 valid pair, ONE item: caption from default_rng([7, i]),
  one valid ordered pair drawn by default_rng([7, i, 9]); context = caption + " Q: is the X left or right of
  the Y? A:", endings [" left.", " right."] (prh choice_logprobs, summed log-prob). Reported: accuracy, the
  always-"left" base rate, n, one-sided binomial p against the best constant answer's rate max(base, 1 - base).
  Also the same on the first 300 TRAINING scenes with their first training caption (s = 1): a seen-text check.
- Swap test: held-out 2-object scenes (of the 400) with a valid pair: swap the two objects' (x, y) (list order
  kept), caption both with default_rng([7, i]), ask the same ordered pair; "followed" = the answer flips.
  A constant answer follows 0; a coin follows ~n/2 but is right on both only ~n/4 ("both_right" is reported).

GPU use (main): the 6 configurations A/B x 2x48x2, 4x128x4, 6x256x8 at once as separate processes on one card,
each a 20,000-step schedule scored at steps 3k, 10k, 15k, 20k (all but the last mid-schedule: the learning rate has
not decayed there), each writing its scores at every checkpoint to $OUT/logs/<run>.jsonl as soon as measured
(gathered into $OUT/results.jsonl, $OUT/summary.json, $OUT/summary.txt). A worker stops after a checkpoint when
the next one would not fit its deadline (--deadline s from its start); the launcher kills anything still running
at --wall s. CPU results of 2026-11-28 (2x48x2, 3,000 steps, this script with --device cpu):
benchmarks/device/2026-11-28-cpu-pairwise-probe.jsonl.
"""
from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

for _p in [Path.cwd() / "src"] + [d / "src" for d in Path(__file__).resolve().parents]:
    if (_p / "prh").is_dir():  # the repository's own src first (run from the repository root)
        if str(_p) not in sys.path:
            sys.path.insert(0, str(_p))
        break

import numpy as np

WORLD = {"image_size": 64, "supersample": 4, "noise_std": 3.0, "min_objects": 1, "max_objects": 4,
         "radius": [0.09, 0.14, 0.2], "scene_types": 6, "type_concentration": 0.5, "type_seed": 0,
         "position_jitter": 7, "caption_samples": 4}
TRAIN_SEED, N_TRAIN, EVAL_SEED, N_EVAL, N_TRAINCHECK = 1, 4000, 2, 400, 300
THRESH = 0.05
SIZES = {"2x48x2": (2, 48, 2), "4x128x4": (4, 128, 4), "6x256x8": (6, 256, 8)}


def _canonical_names():
    import prh.data.captions as C
    C.SYNONYMS = {k: [k] if k in v else [v[0]] for k, v in C.SYNONYMS.items()}
    return C


def scenes(seed: int, n: int) -> list[dict]:
    from prh.data.shapes import sample_scene
    return [sample_scene(np.random.default_rng([seed, i, 0]), world=WORLD) for i in range(n)]


def column(o):
    return min(int(o["x"] * 3), 2)


def valid(a, b, variant):
    return column(a) != column(b) if variant == "A" else abs(a["x"] - b["x"]) >= THRESH


def pairs(scene, variant):
    objs = scene["objects"]
    return [(i, j) for i in range(len(objs)) for j in range(len(objs)) if i != j and valid(objs[i], objs[j], variant)]


def caption_text(scene, variant, rng):
    C = _canonical_names()
    if variant == "A":
        return C.caption(scene, level=3, rng=rng)
    text = C.caption(scene, level=5, rng=rng)
    n = len(scene["objects"])
    sents = re.split(r"(?<=\.)\s+", text.strip())
    assert len(sents) == 2 + n + n * (n - 1) // 2, (len(sents), text)
    return " ".join(sents[:2 + n])


def question(scene, i, j):
    from prh.data.captions import object_name
    objs = scene["objects"]
    return f"Q: is the {object_name(objs[i])} left or right of the {object_name(objs[j])}? A:"


def answer(scene, i, j):
    objs = scene["objects"]
    return " left." if objs[i]["x"] < objs[j]["x"] else " right."


def training_texts(train, variant):
    out = []
    for s in (1, 2):
        for i, sc in enumerate(train):
            ps = pairs(sc, variant)
            if not ps:
                continue
            order = np.random.default_rng([s, i, 5]).permutation(len(ps))
            qa = " ".join(question(sc, *ps[k]) + answer(sc, *ps[k]) for k in order)
            out.append(caption_text(sc, variant, np.random.default_rng([s, i])) + " " + qa)
    return out


def items(scs, variant, seed, pick_seed):
    """One item per scene with a valid pair: (context, label 0=left/1=right, scene index, same_column)."""
    out = []
    for i, sc in enumerate(scs):
        ps = pairs(sc, variant)
        if not ps:
            continue
        a, b = ps[int(np.random.default_rng([pick_seed, i, 9]).integers(len(ps)))]
        ctx = caption_text(sc, variant, np.random.default_rng([seed, i])) + " " + question(sc, a, b)
        out.append((ctx, int(answer(sc, a, b) == " right."), i, column(sc["objects"][a]) == column(sc["objects"][b])))
    return out


def swap_items(scs, variant):
    out = []
    for i, sc in enumerate(scs):
        if len(sc["objects"]) != 2:
            continue
        ps = pairs(sc, variant)
        if not ps:
            continue
        a, b = ps[int(np.random.default_rng([7, i, 9]).integers(len(ps)))]
        sw = json.loads(json.dumps(sc))
        o0, o1 = sw["objects"]
        (o0["x"], o0["y"]), (o1["x"], o1["y"]) = (o1["x"], o1["y"]), (o0["x"], o0["y"])
        ctx0 = caption_text(sc, variant, np.random.default_rng([7, i])) + " " + question(sc, a, b)
        ctx1 = caption_text(sw, variant, np.random.default_rng([7, i])) + " " + question(sw, a, b)
        out.append((ctx0, int(answer(sc, a, b) == " right."), ctx1, int(answer(sw, a, b) == " right.")))
    return out


def predict(model, tok, contexts, device):
    from prh.evaluation.likelihood import choice_logprobs
    if not contexts:
        return np.zeros(0, dtype=int)
    lp = choice_logprobs(model, tok, contexts, [[" left.", " right."]] * len(contexts), batch_size=32, device=device)
    return np.argmax(lp, axis=1)


def mc_summary(pred, labels):
    from scipy.stats import binomtest
    labels = np.asarray(labels)
    n = len(labels)
    if n == 0:
        return {"n": 0}
    k = int((pred == labels).sum())
    base = float(np.mean(labels == 0))
    best = max(base, 1 - base)
    return {"acc": k / n, "k": k, "n": n, "base_left": base, "best_constant": best,
            "p_vs_best_constant": float(binomtest(k, n, best, alternative="greater").pvalue),
            "frac_pred_left": float(np.mean(pred == 0))}


class Stop(Exception):
    pass


def worker(args):
    import torch
    torch.set_num_threads(args.threads)
    from prh.models.language_zoo import grammar_text, train_language_model, train_tokenizer
    t0 = time.time()
    variant = args.variant
    L, W, H = SIZES[args.size]
    train, held = scenes(TRAIN_SEED, N_TRAIN), scenes(EVAL_SEED, N_EVAL)
    texts = training_texts(train, variant)
    tok = train_tokenizer(texts=texts + [grammar_text()])
    lens = [len(x) for x in tok(texts)["input_ids"]]
    ans_tokens = sum(t.count(" A: left.") + t.count(" A: right.") for t in texts)
    ev = items(held, variant, 7, 7)
    tr = items(train[:N_TRAINCHECK], variant, 1, 1)
    sw = swap_items(held, variant)
    checks = {"n_texts": len(texts), "tokens_median_p95_max": [float(np.median(lens)), float(np.percentile(lens, 95)), max(lens)],
              "truncated_before_training": int(sum(x > 512 for x in lens)),
              "answer_token_share": ans_tokens / sum(lens), "answers_per_text": ans_tokens / len(texts),
              "tokens_left": tok.tokenize(" left."), "tokens_right": tok.tokenize(" right."),
              "example_text": texts[0], "example_item": ev[0][0], "data_seconds": time.time() - t0,
              "n_eval": len(ev), "n_traincheck": len(tr), "n_swap": len(sw)}
    print(json.dumps(checks), flush=True)
    assert checks["tokens_left"] == ["left", "."] and checks["tokens_right"] == ["right", "."], checks
    cps = sorted(int(c) for c in args.checkpoints.split(","))
    t_train = time.time()

    def on_checkpoint(model, info):
        dev = info["device"]
        pe = predict(model, tok, [c for c, *_ in ev], dev)
        pt = predict(model, tok, [c for c, *_ in tr], dev)
        p0 = predict(model, tok, [c for c, _, _, _ in sw], dev)
        p1 = predict(model, tok, [c for _, _, c, _ in sw], dev)
        y0, y1 = np.array([y for _, y, _, _ in sw]), np.array([y for _, _, _, y in sw])
        same = np.array([s for *_, s in ev], dtype=bool)
        ye = np.array([y for _, y, _, _ in ev])
        rec = {"variant": variant, "size": args.size, "n_params": info["n_params"], "step": info["steps"],
               "schedule_steps": info["schedule_steps"], "device": dev, "train_cpu_seconds": info["train_cpu_seconds"],
               "train_seconds": info["train_seconds"], "loss": info["final_loss"], "epochs": info["epochs"],
               "truncated_texts": info["truncated_texts"], "heldout": mc_summary(pe, ye),
               "heldout_same_column": mc_summary(pe[same], ye[same]) if variant == "B" else None,
               "heldout_diff_column": mc_summary(pe[~same], ye[~same]) if variant == "B" else None,
               "train_scenes": mc_summary(pt, np.array([y for _, y, _, _ in tr])),
               "swap": {"n": len(sw), "followed": int((p0 != p1).sum()), "both_right": int(((p0 == y0) & (p1 == y1)).sum()),
                        "constant_follows": 0, "coin_both_right_expected": len(sw) / 4},
               "checks": {k: v for k, v in checks.items() if k not in ("example_text", "example_item")},
               "wall_since_start": time.time() - t0}
        with open(args.results, "a") as f:
            f.write(json.dumps(rec) + "\n")
        h = rec["heldout"]
        print(f"[{variant} {args.size} step {info['steps']}] heldout {h['acc']:.3f} (best const {h['best_constant']:.3f}, "
              f"n {h['n']}, p {h['p_vs_best_constant']:.3g}) train-scenes {rec['train_scenes']['acc']:.3f} swap "
              f"{rec['swap']['followed']}/{len(sw)} loss {info['final_loss']:.3f} cpu {info['train_cpu_seconds']:.0f}s", flush=True)
        nxt = [c for c in cps if c > info["steps"]]
        if nxt and args.deadline:
            per_step = (time.time() - t_train) / max(info["steps"], 1)
            if time.time() - t0 + per_step * (nxt[0] - info["steps"]) * 1.05 > args.deadline:
                print(f"[{variant} {args.size}] stopping at step {info['steps']}: next checkpoint {nxt[0]} would pass the deadline", flush=True)
                raise Stop

    try:
        train_language_model(texts=texts, tokenizer=tok, arch="gpt2", n_layer=L, n_embd=W, n_head=H, steps=args.steps,
                             batch_size=16, lr=3e-3, seed=0, checkpoints=cps, on_checkpoint=on_checkpoint, device=args.device)
    except Stop:
        pass


def summary_table(results_path):
    rows = [json.loads(l) for l in open(results_path)] if os.path.exists(results_path) else []
    lines = ["variant size     step   dev  train_s  cpu_s  loss   heldout best_c  n    p        B same/diff col  train_sc swap fol/both/n"]
    for r in sorted(rows, key=lambda r: (r["variant"], r["n_params"], r["step"])):
        h = r["heldout"]
        sd = (f"{r['heldout_same_column'].get('acc', float('nan')):.2f}/{r['heldout_diff_column'].get('acc', float('nan')):.2f}"
              if r["variant"] == "B" else "-")
        lines.append(f"{r['variant']:7} {r['size']:8} {r['step']:6} {r['device'][:4]:4} {r['train_seconds']:7.0f} {r['train_cpu_seconds']:6.0f} "
                     f"{r['loss']:.3f}  {h['acc']:.3f}   {h['best_constant']:.3f} {h['n']:4} {h['p_vs_best_constant']:.2g}  {sd:16} "
                     f"{r['train_scenes']['acc']:.3f}    {r['swap']['followed']}/{r['swap']['both_right']}/{r['swap']['n']}")
    return "\n".join(lines), rows


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--variants", default="A,B")
    ap.add_argument("--sizes", default="2x48x2,4x128x4,6x256x8")
    ap.add_argument("--steps", type=int, default=20000)
    ap.add_argument("--checkpoints", default="3000,10000,15000,20000")
    ap.add_argument("--deadline", type=float, default=360.0, help="per worker: seconds from its start; stop at the last checkpoint that fits (0: none)")
    ap.add_argument("--wall", type=float, default=400.0, help="launcher: kill workers still running after this many seconds")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--out", default=os.environ.get("OUT", "probe_out"))
    ap.add_argument("--worker", action="store_true")
    ap.add_argument("--variant")
    ap.add_argument("--size")
    ap.add_argument("--results")
    args = ap.parse_args()
    if args.worker:
        return worker(args)
    out = Path(args.out)
    (out / "logs").mkdir(parents=True, exist_ok=True)
    results = out / "results.jsonl"
    t0 = time.time()
    env_info = {"argv": sys.argv, "world": WORLD, "train_seed": TRAIN_SEED, "n_train": N_TRAIN, "eval_seed": EVAL_SEED,
                "n_eval_scenes": N_EVAL, "thresh": THRESH, "sizes": SIZES, "start": time.strftime("%Y-%m-%d %H:%M:%S")}
    try:
        import torch
        env_info["torch"] = torch.__version__
        env_info["cuda"] = torch.cuda.get_device_name(0) if torch.cuda.is_available() else None
    except Exception as e:  # noqa: BLE001
        env_info["torch_error"] = repr(e)
    procs = {}
    for v in args.variants.split(","):
        for s in args.sizes.split(","):
            name = f"{v}_{s}"
            cmd = [sys.executable, os.path.abspath(__file__), "--worker", "--variant", v, "--size", s, "--steps", str(args.steps),
                   "--checkpoints", args.checkpoints, "--deadline", str(args.deadline), "--threads", str(args.threads),
                   "--device", args.device, "--results", str(out / "logs" / f"{name}.jsonl")]
            procs[name] = subprocess.Popen(cmd, stdout=open(out / "logs" / f"{name}.log", "w"), stderr=subprocess.STDOUT)
    while any(p.poll() is None for p in procs.values()) and time.time() - t0 < args.wall:
        time.sleep(2)
    killed = [n for n, p in procs.items() if p.poll() is None]
    for n in killed:
        procs[n].kill()
    env_info.update({"wall_seconds": time.time() - t0, "killed_at_wall": killed,
                     "returncodes": {n: p.wait() for n, p in procs.items()}})
    with open(results, "w") as f:  # each worker appends to its own file; gather them
        for n in procs:
            p = out / "logs" / f"{n}.jsonl"
            if p.exists():
                f.write(p.read_text())
    table, rows = summary_table(results)
    (out / "summary.json").write_text(json.dumps({"run": env_info, "results": rows}, indent=1))
    (out / "summary.txt").write_text(table + "\n")
    print(json.dumps(env_info))
    print(table)
    for n, rc in env_info["returncodes"].items():
        if rc != 0:
            print(f"--- {n} exited {rc}; log tail:\n" + (out / "logs" / f"{n}.log").read_text()[-1500:])


if __name__ == "__main__":
    main()
