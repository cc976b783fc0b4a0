# The claims ledger: every claim of every study in this run, its verdict, statistic, interval, n and
# unit, in results/claims.json (prh.studies.ledger; the verdicts come from the one engine, prh.claims),
# and its table in the report (the registry's `claims_ledger` entry). Included after every study's
# rule file: a study is in the ledger when this run builds its results (its files are among TARGETS).
from prh.studies.ledger import workflow_files

# "study:key" -> path of every study this run builds (TARGETS is complete: this file is included last)
LEDGER_FILES = workflow_files(TARGETS, SUITE, R)


rule claims_ledger:
    """Every study's claims and verdicts in one ledger."""
    input:
        **{k.replace(":", "__"): v for k, v in LEDGER_FILES.items()},
    output:
        ledger=f"{R}/claims.json",
    params:
        files=" ".join(f"--file {k}={v}" for k, v in LEDGER_FILES.items()),
        alpha=config["claims"]["alpha"],
        suite=SUITE,
    log:
        log_path("claims_ledger"),
    benchmark:
        bench_path("claims_ledger")
    conda:
        CONDA_ENV
    shell:
        "prh claims-ledger --suite {params.suite} --alpha {params.alpha} {params.files} --out {output.ledger} > {log} 2>&1"


TARGETS += [rules.claims_ledger.output.ledger, *figure_targets("claims_ledger")]
