# The claims ledger: every claim of every study in this run, its verdict, statistic, interval, n and
# unit, in results/claims.json (prh.studies.ledger; the verdicts come from the one engine, prh.claims),
# and its table in the report (the registry's `claims_ledger` entry). Included after every study's
# rule file: a study is in the ledger when this run builds its results (its files are among TARGETS).
#
# Replicates: each master seed S of `claims.replicates` is this whole workflow again, as a
# Snakemake module (its rules named seed<S>_*, its config prh.config.replicate_config: the master seed
# S, results under results/replicates/seed<S>), asked only for the ledger of the `claims.replicated`
# (training-based) studies. The run's own ledger then joins them: each replicated claim's verdict is the
# agreement of the independent replicates (prh.claims.replicated_verdict).
import hashlib
from pathlib import Path

from prh.config import replicate_config
from prh.studies.ledger import workflow_files

CLAIMS = config["claims"]
# a replicate (R under results/replicates/) builds the training-based studies only
_studies = CLAIMS["replicated"] if R != "results" else None
# "study:key" -> path of every study this run builds (TARGETS is complete: this file is included last)
LEDGER_FILES = {
    k: v for k, v in workflow_files(TARGETS, SUITE, R).items() if _studies is None or k.split(":")[0] in _studies
}

REPLICATE_LEDGERS = []
for _seed in CLAIMS["replicates"]:
    # what `module seed<S>: snakefile: ..., config: ...` and `use rule * from seed<S> as seed<S>_*` compile to
    # (snakemake --print-compilation, Snakemake 9.27 as pinned in requirements.lock; tests/test_replicate.py
    # plans it); written as calls because the seeds come from the config
    workflow.module(name=f"seed{_seed}", snakefile=workflow.main_snakefile, config=replicate_config(config, _seed))
    workflow.userule(
        rules=["*"], from_module=f"seed{_seed}", exclude_rules=["all"], name_modifier=f"seed{_seed}_*", lineno=0
    )(lambda: None)
    REPLICATE_LEDGERS.append(f"{R}/replicates/seed{_seed}/claims.json")


rule claims_ledger:
    """Every study's claims and verdicts in one ledger."""
    input:
        **{k.replace(":", "__"): v for k, v in LEDGER_FILES.items()},
        replicates=REPLICATE_LEDGERS,
    output:
        ledger=f"{R}/claims.json",
    log:
        log_path("claims_ledger"),
    benchmark:
        bench_path("claims_ledger")
    params:
        files=" ".join(f"--file {k}={v}" for k, v in LEDGER_FILES.items()),
        replicates=" ".join(f"--replicate {p}" for p in REPLICATE_LEDGERS),
        alpha=CLAIMS["alpha"],
        seed=config["seed"],
        suite=SUITE,
    shell:
        "prh claims-ledger --suite {params.suite} --alpha {params.alpha} --seed {params.seed} {params.files}"
        " {params.replicates} --out {output.ledger} > {log} 2>&1"


TARGETS += [rules.claims_ledger.output.ledger, *figure_targets("claims_ledger")]


# The effective config: params.yaml with every preset, --configfile and --config applied and the schema's
# defaults filled, as this run used it; a DVC out. dvc.lock records params.yaml alone, so results built with a preset
# (`make replicate`) or --config were stamped as params.yaml's: `make pull` now compares this file with the config
# it would stamp them with (`prh check-lock --effective results/config.json`). Its param is the config's hash, so any
# change rewrites it.
rule effective_config:
    output:
        f"{R}/config.json",
    log:
        log_path("effective_config", "effective_config"),
    benchmark:
        bench_path("effective_config")
    params:
        # the config's hash, not the config: a dry run prints a changed param's old and new values
        sha256=hashlib.sha256(json.dumps(config, sort_keys=True).encode()).hexdigest(),
    run:
        from prh.io import write_json

        write_json(output[0], config)
        Path(log[0]).write_text(f"wrote {output[0]} (config sha256 {params.sha256})\n")


TARGETS.append(rules.effective_config.output[0])
