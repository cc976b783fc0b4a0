"""Which relational sub-skills do the default zoo's models have? Multiple choice on 300 held-out scenes, coordinates
captions: pairwise left/right (the default question-answer text's kind, binary), the region of a named object (also
the default text's), and the left-most of 2 objects. Prints accuracy per model; compare each with its base rate
(answering "left" always is right on 0.688 of these pairs: the scene lists objects roughly left to right).

    PYTHONPATH=src python benchmarks/zoo_subskills.py RESULTS_DIR gpt2_s_r0_3000 gpt2_l_r0_3000 ...
"""
import sys

import numpy as np
from prh.data.shapes import load_dataset
from prh.data.captions import caption, object_name, left_of, region
from prh.data.relational import extreme, extreme_question
from prh.evaluation.likelihood import choice_logprobs
from prh.models.loaders import load_language_model
scenes = load_dataset(f"{sys.argv[1]}/data/shapes_eval").scenes[:300]
rng = np.random.default_rng(0)
pair, reg, ext2 = [], [], []
REGIONS = sorted({region(o) for s in scenes for o in s["objects"]})
for i, s in enumerate(scenes):
    ctx = caption(s, level=5, rng=np.random.default_rng([0, i]))
    objs = s["objects"]
    if len(objs) >= 2:
        a, b = objs[0], objs[1]
        pair.append((f"{ctx} Q: is the {object_name(a)} left or right of the {object_name(b)}? A:", [" left.", " right."], 0 if left_of(a, b) else 1))
    o = objs[0]
    reg.append((f"{ctx} Q: where is the {object_name(o)}? A:", [f" {r}." for r in REGIONS], REGIONS.index(region(o))))
    if len(objs) == 2 and extreme(s, "left") is not None:
        names = [object_name(x) for x in objs]
        ext2.append((f"{ctx} Q: {extreme_question('left', 2)} A:", [f" {n}." for n in names], names.index(object_name(extreme(s, 'left')))))
for m in sys.argv[2:]:
    net, tok = load_language_model(f"{sys.argv[1]}/models/{m}")
    out = []
    for name, items in (("pair_left_right", pair), ("region", reg), ("extreme_2obj", ext2)):
        # group by number of endings
        acc = []
        for n in sorted({len(e) for _, e, _ in items}):
            sub = [x for x in items if len(x[1]) == n]
            lp = choice_logprobs(net, tok, [c for c, _, _ in sub], [e for _, e, _ in sub], batch_size=32)
            acc += [int(np.argmax(r) == y) for r, (_, _, y) in zip(lp, sub)]
        out.append(f"{name} {np.mean(acc):.3f} (n {len(acc)})")
    print(m, " | ".join(out), flush=True)
