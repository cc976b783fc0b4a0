"""Representation alignment and transfer (Imani, Hu & White, TMLR): every number of Figs 2, 7, 10-12.

Runs the peaks experiment with one hidden layer (Figs 10, 11) and with three
(Fig 12, and the regression panel of Fig 7), and the digits experiment (Fig 2 and
the classification panel of Fig 7), writes one JSON per figure and ``metrics.json``
saying which of the paper's claims were reproduced, with the numbers behind each
verdict (AUC = normalised area under the alignment curve, see
:mod:`prh.studies.transfer.align_curves`; all numbers are means over runs).

    prh run-transfer --part peaks_deep --peaks-deep results/experiments/transfer/peaks_deep.json \\
        --config '{"runs": 10}' --seed 0

Writes ``peaks_alignment.json`` (Fig 10), ``peaks_transfer.json`` (Fig 11),
``peaks_deep.json`` (Fig 12), ``emergence_shuffled.json`` (Fig 2), ``digits_layerwise.json``,
``layerwise.json`` (Fig 7) and ``metrics.json``, each at the path its option names (``FILES``).
"""

from __future__ import annotations

import argparse
import time

import numpy as np

from prh.claims import verdict
from prh.config import schema_defaults
from prh.io import write_json
from prh.errors import UsageError

__all__ = ["DEFAULTS", "SLICES", "PARTS", "FILES", "run_transfer", "transfer_claims", "claims", "main"]

# The `transfer:` block's defaults: workflow/schemas/transfer.schema.yaml documents each key.
DEFAULTS = schema_defaults("transfer")


def _timed(fn, **kwargs):
    wall, cpu = time.perf_counter(), time.process_time()
    out = fn(**kwargs)
    return out, {"wall_s": round(time.perf_counter() - wall, 2), "cpu_s": round(time.process_time() - cpu, 2)}


def _m(values) -> float:
    """Mean over runs, ignoring runs that never got there (NaN); NaN if none did."""
    v = np.asarray(values, dtype=np.float64)
    return float(np.nanmean(v)) if np.isfinite(v).any() else float("nan")


def rising(v) -> bool:
    """Strictly rising: every step up. A tie is not a rise (an audit allowed ties and no test failed)."""
    return bool(np.all(np.diff(np.asarray(v, dtype=np.float64)) > 0))


def _per_run(values) -> np.ndarray:
    """One number per run (a list of run values)."""
    return np.asarray(values, dtype=np.float64).reshape(len(values), -1)[:, 0]


def run_effects(*, shallow: dict, deep: dict, fig2: dict, fig7: dict | None = None) -> dict:
    """Each ordering claim's effect in every run of its own part, signed so that positive means the
    ordering holds in that run (what ``prh.stats.sign_flip`` tests, the run as unit): peaks' claims over its
    ``runs`` runs, Fig 2's and Fig 7's on the digits over ``fig2_runs`` (Fig 7: where ``fig7``, the digits
    network's layers, records each run's AUC, ``auc_runs``; older files hold means only). Proposition 1 is a
    numerical check (no runs): not here."""
    al = shallow["alignment"]["auc"]
    a = {rep: {t: _per_run(v) for t, v in tasks.items()}
         for rep, tasks in {"input": al["trained"]["input"], "init": al["init"]["hidden1"],
                            "trained": al["trained"]["hidden1"]}.items()}
    tr = {t: {rep: {k: _per_run(v) for k, v in d["per_run"].items()} for rep, d in shallow["transfer"][t].items()}
          for t in ("T1", "T2")}
    layers = deep["layers"]
    deep_s = np.stack([_per_run(deep["alignment"]["auc"]["trained"][l]["S"]) for l in layers[1:]], axis=1)
    deep_t1 = np.stack([_per_run(deep["alignment"]["auc"]["trained"][l]["T1"]) for l in layers[1:]], axis=1)
    pk = {s: np.stack([_per_run(deep["alignment"]["auc"][s][l]["S"]) for l in layers], axis=1)
          for s in ("init", "trained")}
    p2 = {k: _per_run(v["auc"]) for k, v in fig2["panels"].items()}

    def up(m):  # the smallest step along the layers, per run: > 0 iff that run rises strictly
        return np.diff(m, axis=1).min(axis=1)

    t1, t2 = tr["T1"], tr["T2"]
    out = {
        "fig10_source_alignment_rises": a["trained"]["S"] - np.maximum(a["input"]["S"], a["init"]["S"]),
        "fig10_related_alignment_rises": a["trained"]["T1"] - np.maximum(a["input"]["T1"], a["init"]["T1"]),
        "fig10_unrelated_alignment_below_input": a["input"]["T2"] - a["trained"]["T2"],
        "fig11_related_faster": np.minimum(t1["input"]["train_auc"], t1["init"]["train_auc"]) - t1["trained"]["train_auc"],
        "fig11_related_smaller_weights": np.minimum(t1["input"]["weight_norm_at_50pct"], t1["init"]["weight_norm_at_50pct"])
        - t1["trained"]["weight_norm_at_50pct"],
        "fig11_related_better_test": np.minimum(t1["input"]["best_test_mse"], t1["init"]["best_test_mse"])
        - t1["trained"]["best_test_mse"],
        "fig11_unrelated_slower_than_input": t2["trained"]["train_auc"] - t2["input"]["train_auc"],
        "fig11_unrelated_worse_test": t2["trained"]["best_test_mse"] - np.maximum(t2["input"]["best_test_mse"],
                                                                                   t2["init"]["best_test_mse"]),
        "fig12_source_alignment_rises_with_depth": up(deep_s),
        "fig12_related_alignment_not_rising_with_depth": -up(deep_t1),
        "fig2_input_aligned_with_true_not_shuffled": p2["input_true"] - p2["input_shuffled"],
        "fig2_alignment_emerges_on_shuffled_labels": p2["trained_shuffled"] - np.maximum(p2["init_shuffled"],
                                                                                         p2["input_shuffled"]),
        "fig7_peaks_later_layers_better_after_training": up(pk["trained"]),
        "fig7_peaks_order_reversed_at_init": up(pk["init"][:, ::-1]),
    }
    if fig7 is not None and all("auc_runs" in fig7[s][l] for s in ("init", "trained") for l in fig7["layers"]):
        d7 = {s: np.stack([np.asarray(fig7[s][l]["auc_runs"], dtype=np.float64) for l in fig7["layers"]], axis=1)
              for s in ("init", "trained")}
        tr7 = d7["trained"]  # the registered rule: the hidden layers rise, and the last is above the input
        out["fig7_later_layers_better_after_training"] = np.minimum(up(tr7[:, 1:]), tr7[:, -1] - tr7[:, 0])
        out["fig7_order_reversed_at_init"] = up(d7["init"][:, ::-1])
    return {k: [float(x) for x in v] for k, v in out.items()}


def claims(*, shallow: dict, deep: dict, fig2: dict, fig7: dict) -> dict:
    """The paper's claims as booleans, each with the numbers it was decided on."""
    a = {rep: {t: _m(v) for t, v in tasks.items()}
         for rep, tasks in {"input": shallow["alignment"]["auc"]["trained"]["input"],
                            "init": shallow["alignment"]["auc"]["init"]["hidden1"],
                            "trained": shallow["alignment"]["auc"]["trained"]["hidden1"]}.items()}
    tr = {t: {rep: {k: _m(v) for k, v in d["per_run"].items()} for rep, d in shallow["transfer"][t].items()}
          for t in ("T1", "T2")}
    deep_s = [_m(deep["alignment"]["auc"]["trained"][l]["S"]) for l in deep["layers"][1:]]
    deep_t1 = [_m(deep["alignment"]["auc"]["trained"][l]["T1"]) for l in deep["layers"][1:]]
    p2 = {k: _m(v["auc"]) for k, v in fig2["panels"].items()}
    f7 = {s: [fig7[s][l]["auc"]["mean"][0] for l in fig7["layers"]] for s in ("init", "trained")}
    pk7 = {s: [_m(deep["alignment"]["auc"][s][l]["S"]) for l in deep["layers"]] for s in ("init", "trained")}

    def row(ok, **numbers):
        return {"reproduced": bool(ok), "verdict": verdict(bool(ok)), **numbers}

    out = {
        "fig10_source_alignment_rises": row(a["trained"]["S"] > max(a["input"]["S"], a["init"]["S"]),
                                            auc={k: v["S"] for k, v in a.items()}),
        "fig10_related_alignment_rises": row(a["trained"]["T1"] > max(a["input"]["T1"], a["init"]["T1"]),
                                             auc={k: v["T1"] for k, v in a.items()}),
        "fig10_unrelated_alignment_below_input": row(a["trained"]["T2"] < a["input"]["T2"],
                                                     auc={k: v["T2"] for k, v in a.items()}),
        "fig11_related_faster": row(tr["T1"]["trained"]["train_auc"] < min(tr["T1"]["input"]["train_auc"],
                                                                         tr["T1"]["init"]["train_auc"]),
                                    mean_relative_train_mse={k: v["train_auc"] for k, v in tr["T1"].items()}),
        "fig11_related_smaller_weights": row(  # decided at half the training loss removed
            tr["T1"]["trained"]["weight_norm_at_50pct"] < min(tr["T1"]["input"]["weight_norm_at_50pct"],
                                                              tr["T1"]["init"]["weight_norm_at_50pct"]),
            **{f"weight_norm_at_{q}pct_loss_removed": {k: v[f"weight_norm_at_{q}pct"] for k, v in tr["T1"].items()}
               for q in (25, 50, 75)}),
        "fig11_related_better_test": row(tr["T1"]["trained"]["best_test_mse"] < min(
            tr["T1"]["input"]["best_test_mse"], tr["T1"]["init"]["best_test_mse"]),
            best_test_mse={k: v["best_test_mse"] for k, v in tr["T1"].items()}),
        "fig11_unrelated_slower_than_input": row(tr["T2"]["trained"]["train_auc"] > tr["T2"]["input"]["train_auc"],
                                                 mean_relative_train_mse={k: v["train_auc"] for k, v in tr["T2"].items()}),
        "fig11_unrelated_worse_test": row(tr["T2"]["trained"]["best_test_mse"] > max(
            tr["T2"]["input"]["best_test_mse"], tr["T2"]["init"]["best_test_mse"]),
            best_test_mse={k: v["best_test_mse"] for k, v in tr["T2"].items()}),
        "fig12_source_alignment_rises_with_depth": row(rising(deep_s), auc_by_layer=deep_s),
        "fig12_related_alignment_not_rising_with_depth": row(not rising(deep_t1), auc_by_layer=deep_t1),
        "fig2_input_aligned_with_true_not_shuffled": row(p2["input_true"] > p2["input_shuffled"], auc=p2),
        "fig2_alignment_emerges_on_shuffled_labels": row(
            p2["trained_shuffled"] > max(p2["init_shuffled"], p2["input_shuffled"]), auc=p2),
        "fig7_later_layers_better_after_training": row(rising(f7["trained"][1:]) and f7["trained"][-1] > f7["trained"][0],
                                                       auc_by_layer=f7["trained"], dataset="fig2 dataset"),
        "fig7_order_reversed_at_init": row(rising(f7["init"][::-1]), auc_by_layer=f7["init"]),
        "fig7_peaks_later_layers_better_after_training": row(rising(pk7["trained"]), auc_by_layer=pk7["trained"]),
        "fig7_peaks_order_reversed_at_init": row(rising(pk7["init"][::-1]), auc_by_layer=pk7["init"]),
        "prop1_closed_form_matches_gd": row(shallow["prop1_check"]["max_rel_error"] < 1e-8,
                                            max_rel_error=shallow["prop1_check"]["max_rel_error"]),
    }
    return out


_COMMON = ("runs", "n_source", "n_target", "n_test", "lr", "batch_size", "max_epochs", "patience", "min_improvement",
           "num_taus")
# part -> the keys of the `transfer:` block it reads (the rule passes only these: editing one reruns only it)
SLICES = {
    "peaks": _COMMON + ("width", "step_sizes", "max_steps", "num_steps"),
    "peaks_deep": _COMMON + ("width", "deep_layers"),
    "emergence": ("lr", "batch_size", "patience", "min_improvement", "num_taus", "fig2_dataset", "fig2_runs",
                  "fig2_epochs", "fig7_width", "fig7_max_epochs", "fig7_min_delta", "mnist_per_class", "mnist_revision"),
}
PARTS = (*SLICES, "claims")
# part -> the JSON files it writes, by name (claims reads the others'); the command takes one path per file
FILES = {"peaks": ("peaks_alignment", "peaks_transfer"), "peaks_deep": ("peaks_deep",),
         "emergence": ("emergence_shuffled", "digits_layerwise"), "claims": ("layerwise", "metrics")}
PAPER = "Imani, Hu & White, Representation Alignment in Neural Networks (TMLR)"


def _part_config(config: dict | None, part: str) -> dict:
    unknown = set(config or {}) - set(DEFAULTS)
    if unknown:
        raise ValueError(f"config has unknown keys {sorted(unknown)}; allowed: {sorted(DEFAULTS)}")
    c = {**DEFAULTS, **(config or {})}
    return {k: c[k] for k in SLICES[part]}


def _peaks(part: str, c: dict, seed: int) -> tuple[dict, dict]:
    from prh.studies.transfer.peaks import run_peaks

    common = {k: c[k] for k in _COMMON}
    if part == "peaks":
        return _timed(run_peaks, hidden=[c["width"]], transfer=True, step_sizes=c["step_sizes"],
                      max_steps=c["max_steps"], num_steps=c["num_steps"], seed=seed, **common)
    return _timed(run_peaks, hidden=[c["width"]] * c["deep_layers"], transfer=False, seed=seed, **common)


def run_transfer(*, paths: dict, config: dict | None = None, seed: int = 0, device: str = "cpu",
                 parts=PARTS) -> dict:
    """Run ``parts`` of this family and write their JSON files to ``paths`` (name -> path, :data:`FILES`).

    Parts: ``peaks`` (one hidden layer: peaks_alignment.json, Fig 10; peaks_transfer.json, Fig 11),
    ``peaks_deep`` (three hidden layers: peaks_deep.json, Fig 12), ``emergence`` (digits:
    emergence_shuffled.json, Fig 2; digits_layerwise.json), ``claims`` (layerwise.json, Fig 7,
    and metrics.json, from the other parts' JSON files). Each JSON records the slice of the
    config its part used.

    Parameters
    ----------
    paths : the path of each file the parts write or (claims) read, by name (:data:`FILES`); folders are created
    config : keys of :data:`DEFAULTS` to override (the params.yaml ``transfer:`` block, or a part's slice)
    seed : master seed; runs derive theirs from it
    device : where the Fig 2 / Fig 7 networks train ("auto" picks CUDA when present); the
        peaks networks are small and always train on the CPU

    Returns
    -------
    dict: the content of ``metrics.json`` when ``claims`` ran, else of the last JSON written
    """
    from prh.studies.transfer.emergence import load_binary_digits, run_emergence

    bad = sorted(set(parts) - set(PARTS))
    if bad:
        raise ValueError(f"parts {bad} unknown; choose from {list(PARTS)}")
    if missing := [f for part, files in FILES.items() for f in files  # claims reads every part's files
                   if (part in parts or "claims" in parts) and not paths.get(f)]:
        raise UsageError(f"no path for {missing} (prh run-transfer --{missing[0].replace('_', '-')} PATH)")
    out = None
    for part in parts:
        if part == "claims":
            out = transfer_claims(paths)
            continue
        c = _part_config(config, part)
        meta = {"paper": PAPER, "config": c, "seed": seed, "device": device}
        if part == "peaks":
            shallow, t_shallow = _peaks(part, c, seed)
            align = {k: shallow[k] for k in ("taus", "layers", "tasks", "alignment", "training")}
            write_json(paths["peaks_alignment"], {**meta, "figure": 10, **align, "time": t_shallow})
            out = {**meta, "figure": 11, **{k: shallow[k] for k in ("steps", "reduction_grid", "transfer", "prop1_check")}}
            write_json(paths["peaks_transfer"], out)
        elif part == "peaks_deep":
            deep, t_deep = _peaks(part, c, seed)
            out = {**meta, "figure": 12, **deep, "time": t_deep}
            write_json(paths["peaks_deep"], out)
        else:
            x, y = load_binary_digits(dataset=c["fig2_dataset"], per_class=c["mnist_per_class"],
                                      revision=c["mnist_revision"], seed=seed)
            (fig2, fig7), t_emerge = _timed(
                run_emergence, x=x, y=y, runs=c["fig2_runs"], fig2_epochs=c["fig2_epochs"], fig7_width=c["fig7_width"],
                lr=c["lr"], batch_size=c["batch_size"], max_epochs=c["fig7_max_epochs"], patience=c["patience"],
                min_improvement=c["min_improvement"], min_delta=c["fig7_min_delta"], num_taus=c["num_taus"], seed=seed,
                device=device)
            write_json(paths["emergence_shuffled"],
                       {**meta, "figure": 2, "dataset": c["fig2_dataset"], **fig2, "time": t_emerge})
            out = {**meta, "dataset": c["fig2_dataset"], "classification": fig7}
            write_json(paths["digits_layerwise"], out)
    return out


def transfer_claims(paths: dict) -> dict:
    """layerwise.json (Fig 7: the digits network's layers and the deep peaks network's) and metrics.json
    (every claim's verdict), at ``paths["layerwise"]`` and ``paths["metrics"]``, from the JSON files the other
    parts wrote (``paths`` by name, :data:`FILES`)."""
    from prh.io import read_json

    shallow = {**read_json(paths["peaks_alignment"]), **read_json(paths["peaks_transfer"])}
    deep, fig2 = read_json(paths["peaks_deep"]), read_json(paths["emergence_shuffled"])
    digits = read_json(paths["digits_layerwise"])
    fig7 = digits["classification"]
    peaks7 = {"layers": deep["layers"], "taus": deep["taus"],
              **{s: {l: deep["alignment"]["curves"][s][l]["S"] for l in deep["layers"]} for s in ("init", "trained")}}
    write_json(paths["layerwise"], {
        "paper": PAPER, "config": {**deep["config"], **digits["config"]}, "seed": deep["seed"], "device": digits["device"],
        "figure": 7, "dataset": digits["dataset"], "classification": fig7, "peaks_regression": peaks7})
    verdicts = claims(shallow=shallow, deep=deep, fig2=fig2, fig7=fig7)
    for key, effects in run_effects(shallow=shallow, deep=deep, fig2=fig2, fig7=fig7).items():
        verdicts[key]["run_effects"] = effects  # the run as unit (prh.stats.sign_flip in the ledger)
    metrics = {
        "claims_reproduced": sum(v["reproduced"] for v in verdicts.values()),
        "claims_total": len(verdicts),
        "claims": verdicts,
        "time": {"peaks_one_hidden_layer": shallow["time"], "peaks_three_hidden_layers": deep["time"],
                 "fig2_fig7": fig2["time"]},
        "peaks_epochs": {"one_hidden_layer": shallow["training"]["epochs"], "three_hidden_layers": deep["training"]["epochs"]},
    }
    write_json(paths["metrics"], metrics)
    return metrics


def main(argv: list[str] | None = None) -> None:
    from prh.slices import add_slice, block_keys

    parser = argparse.ArgumentParser(prog="prh run-transfer", description=__doc__.split("\n\n")[0])
    for name in (f for files in FILES.values() for f in files):  # one path per file (claims reads the parts')
        parser.add_argument(f"--{name.replace('_', '-')}", dest=name, help=f"{name}.json")
    parser.add_argument("--seed", type=int, default=0, help="master seed")
    parser.add_argument("--device", default="cpu", help="cpu | cuda | auto (Fig 2 / Fig 7 networks)")
    parser.add_argument("--part", nargs="+", default=list(PARTS), choices=list(PARTS),
                        help="which parts to run (claims reads the others' JSON files)")
    # the transfer block (a part's rule hands over only its part's keys, SLICES; the rest keep their defaults)
    settings = add_slice(parser, {"transfer": block_keys("transfer")})
    args = parser.parse_args(argv)
    out = run_transfer(paths=vars(args), config=settings(args)["transfer"], seed=args.seed, device=args.device,
                       parts=tuple(args.part))
    if args.part[-1] == "claims":
        print(f"transfer: {out['claims_reproduced']}/{out['claims_total']} claims reproduced; wrote {args.metrics}")
