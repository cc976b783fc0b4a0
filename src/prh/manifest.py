"""What a study declares: its figures, output files, commands and claims.

Each study is one package of ``prh.studies`` whose ``manifest.yaml`` declares it
(:func:`load_study` reads it into a :class:`Study`). Its one name is also its rule file (``workflow/rules/<name>.smk``), schema
(``workflow/schemas/<name>.schema.yaml``), ``params.yaml`` key, results folder
(``results/experiments/<name>/``), figure prefix (``results/figures/<name>_*``), plots module
(``prh.plots.<name>``) and report folder (``workflow/report/<name>/``); ``tests/test_layout.py``
checks all of them. The figure registry (``prh.figures``), the claims ledger
(``prh.studies.ledger``), ``dvc.yaml``'s plots and metrics and the README's tables are built
from the manifests or checked against them.

The manifests are also the one list of studies (:func:`study_names`: every package of ``prh.studies`` with a
``manifest.yaml``, in the order each declares) and of their commands (:func:`study_commands`): the Snakefile
includes each study's rule file and ``prh.cli`` lists each study's commands from here. params.schema.yaml still
names each study's block (Snakemake's ``validate()`` reads that file as written); tests/test_study_registry.py
checks those blocks against :func:`study_names`.

This module holds only plain data: the workflow reads it while Snakemake parses the rules.
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass, field
from pathlib import Path

__all__ = ["Figure", "ClaimSpec", "Study", "EXPERIMENTS", "STUDIES_DIR", "load_study", "output_paths", "study_names",
           "study_commands"]

EXPERIMENTS = "results/experiments"
STUDIES_DIR = Path(__file__).resolve().parent / "studies"  # one package per study, each with its manifest.yaml


@dataclass(frozen=True)
class Figure:
    """One figure: ``draw(*inputs, out, **kwargs)`` writes ``results/figures/<name>.<format>`` for each format
    (a figure: PDF and PNG; a table: CSV)."""

    name: str
    draw: str  # "module:function" in prh.plots
    inputs: dict[str, str]  # argument name -> path (in argument order)
    caption: str  # workflow/report/<caption>.rst
    category: str  # the report's section
    study: str  # the study (or the stage) whose numbers it plots
    kwargs: dict = field(default_factory=dict)
    formats: tuple[str, ...] = ("pdf", "png")  # the files it writes; the first is the one the report shows
    preset: str | None = None  # the preset (presets/<name>.yaml) whose run draws it; None: the default run

    @property
    def rule(self) -> str:
        """The Snakemake rule that draws it: ``plot_<name>``, wildcards dropped, other non-identifier characters ``_``."""
        stem = re.sub(r"_+", "_", re.sub(r"\W", "_", re.sub(r"\{\w+\}", "", self.name))).strip("_")
        return f"plot_{stem}"

    def paths(self, context: dict | None = None) -> dict[str, str]:
        """The input paths with the ``{fields}`` found in ``context`` filled in (the rest stay wildcards)."""
        context = context or {}
        return {k: re.sub(r"\{(\w+)\}", lambda m: str(context.get(m.group(1), m.group(0))), v)
                for k, v in self.inputs.items()}


@dataclass(frozen=True)
class ClaimSpec:
    """A claim of a source document, as the ledger states it.

    ``key`` names it within its study (the ledger's id is ``<study>.<key>``); ``unit`` is the
    independent thing its statistic varies over (a model, a model pair, a training run, a seed),
    ``rule`` the pass rule fixed before the verdict is read (its thresholds live in params.yaml)."""

    key: str
    source: str  # e.g. "seed 000, Fig 1a"
    statement: str
    statistic: str
    unit: str
    rule: str
    # the weighed decision (prh.claims.check_decision): kind, SESOI with its reason, when it was set;
    # None keeps the registered rule alone
    decision: dict | None = None
    # a POST-HOC record of params.yaml behind the registered rule (date, what changed, what had been seen)
    post_hoc: str | None = None
    # a validity gate: the ledger lists it in its own section and does not count it among the claims
    validity_gate: bool = False


@dataclass(frozen=True)
class Study:
    """A study: one name everywhere, and what it declares (module docstring)."""

    name: str
    title: str  # what a reader of the source recognises
    source: str  # the source, by its short name in docs/sources.md
    outputs: dict[str, str]  # key -> its file under results/experiments/<name>/ (may hold {wildcards})
    figures: tuple[Figure, ...]
    commands: tuple[str, ...]  # its `prh` commands
    claims: tuple[ClaimSpec, ...] = ()
    suites: tuple[str, ...] = ("offline", "paper")  # the suites whose run of the study makes its claims
    # what the ledger reads, turned into claim rows by prh.studies.<name>.manifest.results
    verdict_inputs: dict[str, str] = field(default_factory=dict)  # key -> its file under results/experiments/<name>/

    def path(self, file: str) -> str:
        """``results/experiments/<name>/<file>``."""
        return f"{EXPERIMENTS}/{self.name}/{file}"

    @property
    def claim_ids(self) -> list[str]:
        return [f"{self.name}.{c.key}" for c in self.claims]


def _claim(study: str, doc: dict) -> ClaimSpec:
    from prh.claims import check_decision

    if doc.get("decision") is not None:
        check_decision(doc["decision"], f"{study}.{doc.get('key')}")
    return ClaimSpec(**doc)


def _output(study: str, outputs: dict[str, str], key: str, where: str) -> str:
    """The file of output ``key`` (a trailing ``?``, optional, stays on the file name)."""
    if key.rstrip("?") not in outputs:
        raise ValueError(f"study {study}: {where} names output {key.rstrip('?')!r}; "
                         f"its outputs are {', '.join(outputs)}")
    return outputs[key.rstrip("?")] + ("?" if key.endswith("?") else "")


def load_study(path) -> Study:
    """A study's ``manifest.yaml``: ``outputs`` maps a key to its file under the study's results folder (the one place
    a file name is written); figure inputs and verdict inputs name those keys, captions are relative to its report
    folder, ``draw`` names a function of ``prh.plots.<name>``."""
    from pathlib import Path

    from prh.yamlfile import safe_load  # libyaml: 6 ms for the 11 manifests, PyYAML's Python parser 73 (each plan, plot)

    doc = safe_load(Path(path).read_text())
    name, outputs = doc["name"], dict(doc["outputs"])
    figures = tuple(
        Figure(f["name"], f"prh.plots.{name}:{f['draw']}",
               {k: f"{EXPERIMENTS}/{name}/{_output(name, outputs, v, f['name'])}" for k, v in f["inputs"].items()},
               f"{name}/{f['caption']}",
               f["category"], name, f.get("kwargs", {}), tuple(f.get("formats", ("pdf", "png"))), f.get("preset"))
        for f in doc.get("figures") or ())
    verdict_inputs = {k: _output(name, outputs, v, "verdict_inputs")
                      for k, v in (doc.get("verdict_inputs") or {}).items()}
    return Study(name=name, title=doc["title"], source=doc["source"], outputs=outputs,
                 figures=figures, commands=tuple(c["name"] for c in doc["commands"]),
                 claims=tuple(_claim(name, c) for c in doc.get("claims") or ()),
                 suites=tuple(doc.get("suites", ("offline", "paper"))), verdict_inputs=verdict_inputs)


def output_paths(study: str, results: str, keys=()) -> dict[str, str]:
    """``{key: <results>/experiments/<study>/<file>}`` of a study's outputs (those of ``keys``, or all): what its rules
    write, by the names its manifest gives (a ``{wildcard}`` stays for Snakemake)."""
    outputs = _loaded(study).outputs
    missing = [k for k in keys if k not in outputs]
    if missing:
        raise ValueError(f"study {study} declares no output {', '.join(missing)} in its manifest.yaml; "
                         f"its outputs are {', '.join(outputs)}")
    return {k: f"{results}/experiments/{study}/{outputs[k]}" for k in (keys or outputs)}


@functools.cache
def _loaded(study: str) -> Study:
    return load_study(STUDIES_DIR / study / "manifest.yaml")


@functools.cache
def _documents(studies_dir: Path = STUDIES_DIR) -> dict[str, dict]:
    """Every study's manifest.yaml, parsed, by name, in the studies' order (each manifest's ``order``)."""
    from prh.yamlfile import safe_load

    docs = {}
    for path in sorted(studies_dir.glob("*/manifest.yaml")):
        doc = safe_load(path.read_text())
        if doc.get("name") != path.parent.name:
            raise ValueError(f"{path}: name {doc.get('name')!r} is not its package's, {path.parent.name!r}")
        if not isinstance(doc.get("order"), int):
            raise ValueError(f"{path}: `order` (its place among the studies, an integer) is {doc.get('order')!r}")
        docs[doc["name"]] = doc
    orders = {}
    for name, doc in docs.items():
        if doc["order"] in orders:
            raise ValueError(f"studies {orders[doc['order']]} and {name} both declare order {doc['order']}")
        orders[doc["order"]] = name
    return dict(sorted(docs.items(), key=lambda item: item[1]["order"]))


def study_names(studies_dir: Path = STUDIES_DIR) -> tuple[str, ...]:
    """The studies: every package under ``studies_dir`` with a ``manifest.yaml``, in the order their manifests declare
    (PRH paper, then the seeds in their numbering, then Huh's thesis, then alignment against N)."""
    return tuple(_documents(Path(studies_dir)))


def study_commands(studies_dir: Path = STUDIES_DIR) -> list[tuple[str, str, str, str]]:
    """(stage, command, "module:function", one line of help) of every study's ``prh`` commands, in the studies'
    order, then each manifest's; the stage is ``studies`` unless the manifest names another."""
    return [(c.get("stage", "studies"), c["name"], c["run"], c["help"])
            for doc in _documents(Path(studies_dir)).values() for c in doc["commands"]]
