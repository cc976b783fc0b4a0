"""The claims ledger: every claim of every study, its verdict, statistic, interval, n and unit.

``STUDIES`` names the studies (every package with a manifest, in their declared order); each package's
``manifest.yaml`` declares what it claims (``prh.manifest.ClaimSpec``); its ``manifest.py`` holds ``results(suite,
alpha, **inputs)`` (what its results say: a dict of claim key -> ``value``, ``interval``, ``p``, ``n``, ``seeds``,
``verdict``; the verdicts come from ``prh.claims``). ``build`` joins the two into one row per claim; ``prh
claims-ledger`` writes ``results/claims.json`` and, with ``--readme``, the README's generated claims table. ``join``
adds the ledgers of the run's replicates (``claims.replicates``): each replicated claim's verdict becomes the
agreement of the independent replicates (``prh.claims.replicated_verdict``), its value their mean and its interval a
t-interval of that mean over the replicates (run-to-run variation).

    prh claims-ledger --suite offline --alpha 0.05 --in results/experiments --out results/claims.json
    prh claims-ledger --suite offline --alpha 0.05 --file ... --replicate results/replicates/seed1000/claims.json ...
    prh claims-ledger --ledger results/claims.json --readme README.md
    prh claims-ledger --ledger docs/claims.json --record convergence.relational=docs/language_relational.json --out ...
"""

from __future__ import annotations

import argparse
import functools
import importlib
import math
from pathlib import Path

import numpy as np

from prh.claims import LABELS, MIN_SEEDS, PROVISIONAL, replicated_verdict, replication, weigh
from prh.errors import CorruptFileError, UsageError
from prh.manifest import Study, load_study, study_names
from prh.studies.ledger_table import replace_block  # noqa: F401  (re-exported)
from prh.studies.ledger_table import table as _table

__all__ = ["STUDIES", "manifest", "declared", "manifests", "study_files", "workflow_files", "build", "join", "weighed",
           "reweigh", "with_record", "read_ledger", "table", "replace_block", "main"]

# every package of prh.studies with a manifest.yaml, in the order the manifests declare (prh.manifest.study_names):
# PRH paper, then the seeds in their numbering, then Huh's thesis, then alignment against N
STUDIES = study_names()


def manifest(name: str):
    """The module of study ``name`` whose ``results`` reads its results for the ledger
    (``prh.studies.<name>.manifest``)."""
    if name not in STUDIES:
        raise UsageError(f"unknown study {name!r}; the studies are {', '.join(STUDIES)}")
    return importlib.import_module(f"prh.studies.{name}.manifest")


@functools.cache
def declared(name: str) -> Study:
    """What study ``name`` declares: ``src/prh/studies/<name>/manifest.yaml``."""
    if name not in STUDIES:
        raise UsageError(f"unknown study {name!r}; the studies are {', '.join(STUDIES)}")
    return load_study(Path(__file__).parent / name / "manifest.yaml")


def manifests() -> dict[str, Study]:
    return {name: declared(name) for name in STUDIES}


def _number(x):
    return None if x is None or (isinstance(x, float) and not math.isfinite(x)) else x


def study_files(in_dir: str | Path, studies=STUDIES) -> dict[str, dict[str, Path]]:
    """Every study's verdict inputs under ``in_dir`` (results/experiments), by the manifests' file names;
    a name ending in "?" is optional (a part the suite may not run) and left out when absent."""
    files = {}
    for name in studies:
        study = declared(name)
        paths = {k: Path(in_dir) / name / f.rstrip("?") for k, f in study.verdict_inputs.items()}
        files[name] = {k: p for k, p in paths.items() if p.exists() or not study.verdict_inputs[k].endswith("?")}
    return files


def workflow_files(targets, suite: str, results: str = "results") -> dict[str, str]:
    """{"study:key": path} of the studies a run builds, for the ledger rule: a study is in when any of its
    figures or verdict inputs is among the run's ``targets``; an optional input ("name?" in its manifest)
    only when that file is itself a target; a study whose manifest leaves the suite out of ``suites`` is out."""
    targets = {str(t) for t in targets}
    files = {}
    for name, study in manifests().items():
        figures = {f"{results}/figures/{fig.name}.{fig.formats[0]}" for fig in study.figures}
        paths = {k: f"{results}/experiments/{name}/{f.rstrip('?')}" for k, f in study.verdict_inputs.items()}
        if not study.claims or suite not in study.suites or not (figures | set(paths.values())) & targets:
            continue
        files.update({f"{name}:{k}": p for k, p in paths.items()
                      if not study.verdict_inputs[k].endswith("?") or p in targets})
    return files


def build(files: dict[str, dict[str, str | Path]], suite: str, alpha: float, seed: int | None = None) -> dict:
    """The ledger of the studies in ``files`` ({study: {input key: path}}, ``study_files``), in the order
    of ``STUDIES``; a study whose required files are missing is listed under ``missing``."""
    from prh.io import read_json

    unknown = sorted(set(files) - set(STUDIES))
    if unknown:
        raise UsageError(f"unknown studies {unknown}; the studies are {', '.join(STUDIES)}")
    rows, missing = [], {}
    for name in [s for s in STUDIES if s in files]:
        mod = manifest(name)
        study = declared(name)
        paths = {k: Path(p) for k, p in files[name].items()}
        required = {k for k, f in study.verdict_inputs.items() if not f.endswith("?")}
        bad = sorted(set(paths) - set(study.verdict_inputs))
        if bad:
            raise UsageError(f"study {name} reads {sorted(study.verdict_inputs)}, not {bad}")
        absent = sorted(str(paths.get(k, k)) for k in required if k not in paths or not paths[k].exists())
        if absent:
            missing[name] = absent
            continue
        inputs = {k: read_json(paths[k]) if k in paths else None for k in study.verdict_inputs}
        found = mod.results(suite, alpha, **inputs)
        extra = sorted(set(found) - {c.key for c in study.claims})
        if extra:
            raise ValueError(f"study {name}: results() gave claims its manifest does not declare: {extra}")
        for spec in study.claims:
            got = found.get(spec.key, {"verdict": "not testable", "note": "the results hold no entry for it"})
            rows.append(_row(name, spec, got, alpha))
    counts = _counts(rows)
    return {"suite": suite, "alpha": alpha, "seed": seed, "claims": rows, "counts": counts, "missing": missing}


def _row(name: str, spec, got: dict, alpha: float) -> dict:
    """One claim's ledger row from what its study's results say of it (``got``), weighed under its decision."""
    if got["verdict"] not in LABELS:
        raise ValueError(f"{name}.{spec.key}: verdict {got['verdict']!r} is not one of {LABELS}")
    interval = got.get("interval")
    row = {
        "id": f"{name}.{spec.key}", "study": name, "source": spec.source, "statement": spec.statement,
        "statistic": spec.statistic, "value": _number(got.get("value")),
        "interval": None if interval is None or None in interval else [float(v) for v in interval],
        "p": _number(got.get("p")), "n": got.get("n"), "unit": spec.unit, "rule": spec.rule,
        "verdict": got["verdict"], **replication(got["verdict"], got.get("seeds")),
        "effect": _number(got.get("effect")), "note": got.get("note"),
        **({"strata": got["strata"]} if got.get("strata") else {})}  # a test pooled over strata is weighed on them
    row["recorded"] = {"value": row["value"], "interval": row["interval"], "p": row["p"], "n": row["n"],
                       **({"effects": got["effects"]} if got.get("effects") is not None else {}),
                       "gate": got.get("gate", True),
                       **{k: got[k] for k in ("runs", "run_p_greater", "run_p_less", "run_r") if k in got}}
    return _with_post_hoc(weighed(row, spec.decision, alpha), spec)


def with_record(ledger: dict, claim_id: str, record: dict) -> dict:
    """``ledger`` whose row ``claim_id`` is built from ``record``: the output of a run that the ledger's own runs do not
    make (a preset of its own: the relational test of presets/language.yaml), through its study manifest's
    ``row(key, record)``, then weighed as ``build`` weighs it."""
    study, _, key = claim_id.partition(".")
    spec = {c.key: c for c in declared(study).claims}.get(key) if study in STUDIES else None
    build_row = getattr(manifest(study), "row", None) if spec is not None else None
    if build_row is None or not any(r["id"] == claim_id for r in ledger["claims"]):
        raise UsageError(f"--record {claim_id}: not a claim of this ledger whose study builds a row from a record")
    new = _row(study, spec, build_row(key, record), ledger["alpha"])
    rows = [new if r["id"] == claim_id else r for r in ledger["claims"]]
    return {**ledger, "claims": rows, "counts": _counts(rows)}


WEIGHED_FIELDS = ("verdict_registered", "sesoi", "sesoi_reason", "mde", "method", "replicates", "post_hoc")


def _counts(rows: list[dict]) -> dict:
    """Verdicts per label over the claims; validity gates are not claims and are not counted."""
    return {label: sum(r["verdict"] == label for r in rows if not r.get("validity_gate")) for label in LABELS}


def _with_post_hoc(row: dict, spec) -> dict:
    """``row`` whose ``post_hoc`` says every rule behind it that was set after results had been seen: its registered
    rule's record (the manifest's ``post_hoc``, from params.yaml's POST-HOC comments) and the weighed decision, if
    the row was weighed under it; None where neither was. Its source, statement, statistic and rule are the manifest's
    words now (a ledger reweighed after its run keeps its numbers, not the wording of the code it ran)."""
    parts = [None if spec is None else spec.post_hoc, row.get("post_hoc")]  # weighed() sets the latter afresh
    words = {} if spec is None else {"source": spec.source, "statement": spec.statement, "statistic": spec.statistic,
                                     "rule": spec.rule}
    return {**row, **words, "post_hoc": "; ".join(dict.fromkeys(p for p in parts if p)) or None,
            "validity_gate": bool(spec is not None and spec.validity_gate)}


def weighed(row: dict, decision: dict | None, alpha: float, entries: list[dict] | None = None) -> dict:
    """``row`` (its ``verdict`` the registered rule's) with the weighed verdict beside it: ``verdict`` becomes
    ``prh.claims.weigh`` over ``entries`` (the replicates' entries; default: the row's ``strata``, else the row alone), ``verdict_registered``
    keeps the registered one; ``value``, ``interval``, ``p`` and ``n`` become the pooled ones, ``sesoi`` (with its
    reason), ``mde`` (80 % power), ``method``, ``replicates`` and ``post_hoc`` (when the decision was set) are added.
    A claim with no decision keeps its registered verdict, and says so in ``method``."""
    registered = row.get("verdict_registered", row["verdict"])
    if decision is None:
        return {**row, "verdict_registered": registered, "sesoi": None, "sesoi_reason": None, "mde": None,
                "method": "registered rule (no SESOI declared)", "replicates": row.get("replicates"), "post_hoc": None}
    recorded = row.get("recorded") or {k: row.get(k) for k in ("value", "interval", "p", "n")}
    single = entries is None
    # a study run once whose test pools strata of independent units (sizes) records each as an entry
    entries = (row.get("strata") or [recorded]) if single else entries
    got = weigh(decision, entries, alpha=alpha)
    if got["verdict"] is None:  # the records lack what the decision reads: the registered verdict stands, said so
        return {**row, "verdict_registered": registered, "sesoi": None, "sesoi_reason": None, "mde": None,
                "method": f"registered rule ({got['note']})", "replicates": row.get("replicates"), "post_hoc": None}
    registered_note = row["note_registered"] if "note_registered" in row else row.get("note")
    note = "; ".join(filter(None, [got["note"], registered_note])) or None
    label = got["verdict"]
    n = got["n"]
    out = {**row, "verdict": label, "verdict_registered": registered, "value": _number(got["value"]),
           "interval": got["interval"], "p": _number(got["p"]), "n": n[0] if isinstance(n, list) and len(n) == 1 else n,
           "sesoi": got["sesoi"], "sesoi_reason": decision.get("reason"), "mde": _number(got["mde"]),
           "method": got["method"], "replicates": got["replicates"], "post_hoc": decision["set"], "note": note,
           "note_registered": registered_note}
    if not single:  # replicates: provisional counts the replicates that tested it
        out["provisional"] = PROVISIONAL if label in ("reproduced", "not reproduced") and got["replicates"] < MIN_SEEDS \
            else None
    else:
        out.update(replication(label, row.get("seeds")))
    return out


def _t_interval(values: list[float], ci: float = 0.95) -> list[float] | None:
    """Student-t interval of the mean over independent replicates, mean +- t_{(1+ci)/2, n-1} s / sqrt(n)
    (None with fewer than 2): run-to-run variation. With 3 replicates t is 4.30, so it is wide, as it should be."""
    if len(values) < 2:
        return None
    from scipy.stats import t

    x = np.asarray(values, dtype=float)
    half = float(t.ppf((1 + ci) / 2, len(x) - 1) * x.std(ddof=1) / np.sqrt(len(x)))
    return [float(x.mean()) - half, float(x.mean()) + half]


def join(ledger: dict, replicates: list[dict]) -> dict:
    """``ledger`` (the run's own seed) with its ``replicates``' ledgers (the same suite, other master seeds):
    every claim of a replicated study (one that any replicate's ledger holds) gets one entry per replicate
    (``per_seed``: verdict, value, p, n, seeds, effect, note) and the replicated verdict
    (``prh.claims.replicated_verdict``), value (their mean), interval (a t-interval of that mean over the
    replicates: run-to-run variation) and ``seeds`` (the independent runs behind it: each testing
    replicate's runs, summed; None where no replicate states runs, e.g. fixed public checkpoints). A claim
    of a replicated study that some replicate lacks keeps its one-run entry and a note naming the seeds
    that lack it; claims of studies no replicate runs keep theirs unchanged. The replicates' own
    ``missing`` studies are listed under ``replicates_missing``."""
    if not replicates:
        return ledger
    seeds = [ledger.get("seed"), *(r.get("seed") for r in replicates)]
    if None in seeds or len(set(seeds)) != len(seeds):
        raise UsageError(f"replicate ledgers need distinct master seeds; got {seeds}")
    if any(r["suite"] != ledger["suite"] for r in replicates):
        raise UsageError("a replicate ledger is of another suite than the run's")
    by_id = [{row["id"]: row for row in r["claims"]} for r in replicates]
    studies = {row["study"] for r in replicates for row in r["claims"]} | {s for r in replicates for s in r.get("missing", {})}
    rows = []
    for row in ledger["claims"]:
        others = [b.get(row["id"]) for b in by_id]
        if any(o is None for o in others):
            lacking = [s for s, o in zip(seeds[1:], others) if o is None]
            note = None if row["study"] not in studies else f"not judged by replicate seed(s) {lacking}: one-run verdict"
            rows.append({**row, "note": "; ".join(filter(None, [row.get("note"), note])) or None})
            continue
        per = [row, *others]
        keys = ("verdict", "verdict_registered", "value", "interval", "p", "n", "seeds", "effect", "note", "recorded")
        entries = [{"seed": s, **{k: r.get(k) for k in keys}} for s, r in zip(seeds, per)]
        for e in entries:  # a ledger from before the weighed verdicts of 2026-11-27: its verdict is the registered one, its numbers the recorded
            e["verdict_registered"] = e["verdict_registered"] or e["verdict"]
            e["recorded"] = e["recorded"] or {k: e[k] for k in ("value", "interval", "p", "n")}
        label = replicated_verdict([e["verdict_registered"] for e in entries], [r.get("effect") for r in per])
        tested = [e for e in entries if e["verdict_registered"] != "not testable"]
        values = [e["value"] for e in tested if isinstance(e["value"], (int, float)) and math.isfinite(e["value"])]
        stated = [e["seeds"] for e in tested if e["seeds"] is not None]
        runs = sum(stated) if stated else None
        joined = "replicated: " + ", ".join(f"seed {e['seed']} {e['verdict_registered']}" for e in entries)
        # the replicated verdict's unit is the independent run (where runs stand behind it; fixed checkpoints: none),
        # the study's own unit what each run counts; a study whose unit is already the run keeps it
        unit = row["unit"] if runs is None or row["unit"].startswith("training run") \
            else f"independent run (within one: {row['unit']})"
        spec = {c.key: c for c in declared(row["study"]).claims}.get(row["id"].split(".", 1)[1])
        first = {**row, "unit": unit, "value": float(np.mean(values)) if values else None,
                 "interval": _t_interval(values), "p": None, "verdict": label, "verdict_registered": label,
                 **replication(label, runs), "effect": None, "per_seed": entries,
                 "note": "; ".join(filter(None, [joined, row.get("note") and f"seed {seeds[0]}: {row['note']}"]))}
        first.pop("recorded", None)
        rows.append(_with_post_hoc(weighed(first, None if spec is None else spec.decision, ledger["alpha"],
                                           [{"gate": True, **e["recorded"]} for e in entries]), spec))
    counts = _counts(rows)
    missing = {f"seed{r['seed']}": r["missing"] for r in replicates if r.get("missing")}
    return {**ledger, "claims": rows, "counts": counts, "replicate_seeds": seeds, "replicates_missing": missing}


def reweigh(ledger: dict) -> dict:
    """``ledger`` (a joined or one-run ledger, e.g. docs/claims.json) with every verdict recomputed under the claims'
    current decisions from what it records: each replicate's entry (``per_seed``: value, interval, p, n)
    or the row's own numbers; no result is read again. The registered verdict stays as ``verdict_registered`` (a
    ledger from before the weighed verdicts of 2026-11-27: its ``verdict``). A claim whose unit is the training run counts each replicate's
    runs (its ``n``) as its independent runs, not its seed labels."""
    rows, dropped = [], []
    for row in ledger["claims"]:
        spec = {c.key: c for c in declared(row["study"]).claims}.get(row["id"].split(".", 1)[1])
        if spec is None:  # no longer a claim of its study (e.g. phase.T1_chaotic, C2c's number counted twice)
            dropped.append(row["id"])
            continue
        decision = spec.decision
        registered = row.get("verdict_registered") or row["verdict"]
        per = row.get("per_seed")
        if not per:  # a one-run row: its claim's unit and rule as its manifest now states them
            fixed = {} if spec is None else {"unit": spec.unit, "rule": spec.rule}
            if spec is not None and spec.unit.startswith("numerical check"):  # a tolerance check counts no runs
                fixed.update(n=None, seeds=None, provisional=None)
            rows.append(_with_post_hoc(weighed({**row, **fixed, "verdict": registered}, decision, ledger["alpha"]), spec))
            continue
        runs_are_units = row["unit"].startswith("training run")
        entries = []
        for e in per:
            e = {**e, "verdict_registered": e.get("verdict_registered") or e["verdict"],
                 "recorded": e.get("recorded") or {k: e.get(k) for k in ("value", "interval", "p", "n")}}
            if runs_are_units and isinstance(e["recorded"].get("n"), int):
                e["seeds"] = e["recorded"]["n"]
            entries.append(e)
        stated = [e["seeds"] for e in entries if e["verdict_registered"] != "not testable" and e["seeds"] is not None]
        base = {**row, "verdict": registered, "per_seed": entries,
                **replication(registered, sum(stated) if stated else row.get("seeds"))}
        rows.append(_with_post_hoc(weighed(base, decision, ledger["alpha"], [{"gate": True, **e["recorded"]} for e in entries]),
                                   spec))
    counts = _counts(rows)
    out = {**ledger, "claims": rows, "counts": counts}
    if dropped or ledger.get("dropped"):
        out["dropped"] = sorted(set(ledger.get("dropped") or []) | set(dropped))  # rows of claims no longer declared
    return out


def read_ledger(path) -> dict:
    """A ledger ``prh claims-ledger --out`` wrote (``build``, ``join``, ``reweigh``); a file of another shape raises
    ``CorruptFileError`` naming it and the keys expected."""
    from prh.io import read_json

    return read_json(path, keys=("suite", "alpha", "claims", "counts"), what="claims ledger")


def _study_file(text: str) -> tuple[str, str, str]:
    study, _, rest = text.partition(":")
    key, _, path = rest.partition("=")
    if not (study and key and path):
        raise argparse.ArgumentTypeError(f"--file takes STUDY:KEY=PATH (e.g. phase:metrics=results/...), got {text!r}")
    return study, key, path


def main(argv: list[str] | None = None) -> None:
    from prh.io import atomic_path, read_json, write_json

    p = argparse.ArgumentParser(prog="prh claims-ledger", description=__doc__.splitlines()[0])
    p.add_argument("--suite", help="the suite whose results these are (offline or paper)")
    p.add_argument("--alpha", type=float, help="the level of the correlation rules (params.yaml claims.alpha)")
    p.add_argument("--file", type=_study_file, action="append", default=[], metavar="STUDY:KEY=PATH",
                   help="a study's verdict input (repeatable; the rule passes each one)")
    p.add_argument("--in", dest="in_dir", help="or: results/experiments, read by the manifests' file names")
    p.add_argument("--seed", type=int, help="the run's master seed (params.yaml seed), recorded in the ledger")
    p.add_argument("--replicate", action="append", default=[], metavar="LEDGER",
                   help="a replicate's ledger to join (repeatable; results/replicates/seed<S>/claims.json)")
    p.add_argument("--ledger", help="or: an existing ledger JSON to render")
    p.add_argument("--reweigh", action="store_true",
                   help="with --ledger: recompute its verdicts under the claims' decisions from what it records")
    p.add_argument("--record", action="append", default=[], metavar="CLAIM=PATH",
                   help="with --ledger: a claim's row from the record of a run of its own (repeatable; e.g. "
                        "convergence.relational=docs/language_relational.json)")
    p.add_argument("--out", help="the ledger JSON to write (results/claims.json)")
    p.add_argument("--readme", help="a Markdown file whose '<!-- generated:claims -->' block gets the table")
    a = p.parse_args(argv)
    sources = [bool(a.file), bool(a.in_dir), bool(a.ledger)]
    if (a.reweigh or a.record) and not a.ledger:
        raise UsageError("--reweigh and --record change an existing ledger: give it --ledger")
    if a.readme and not any(sources):
        ledger = None  # the manifests' table
    elif sum(sources) != 1:
        raise UsageError("give one of --file (repeated), --in and --ledger")
    elif a.ledger:
        ledger = read_ledger(a.ledger)
        if a.reweigh:
            ledger = reweigh(ledger)
        for claim_id, _, path in (r.partition("=") for r in a.record):
            if not path:
                raise UsageError(f"--record takes CLAIM=PATH (e.g. convergence.relational=<relational.json>), got {claim_id!r}")
            ledger = with_record(ledger, claim_id, read_json(path))
    elif a.suite is None or a.alpha is None:
        raise UsageError("building a ledger needs --suite and --alpha (params.yaml suite and claims.alpha)")
    else:
        files = study_files(a.in_dir) if a.in_dir else {}
        for study, key, path in a.file:
            files.setdefault(study, {})[key] = path
        ledger = join(build(files, a.suite, a.alpha, a.seed), [read_ledger(r) for r in a.replicate])
    if a.out and ledger is not None:
        write_json(a.out, ledger)
    if a.readme:
        try:
            readme = Path(a.readme).read_text(encoding="utf-8")
        except UnicodeDecodeError as err:
            raise CorruptFileError(a.readme, "Markdown file", err, remedy="give a UTF-8 Markdown file") from err
        text = replace_block(readme, "claims", table(ledger))
        with atomic_path(a.readme) as tmp:
            tmp.write_text(text)
    if ledger is not None:
        print(", ".join(f"{v} {k}" for k, v in ledger["counts"].items()))


def table(ledger: dict | None = None) -> str:
    """The README's claims table (``prh.studies.ledger_table.table``) of ``ledger``, or of every study's manifest."""
    return _table(ledger, studies=manifests() if ledger is None else None)
