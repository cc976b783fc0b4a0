# The claims ledger: every claim of every study in this run, its verdict, statistic, interval, n and
# unit, in results/claims.json (prh.studies.ledger; the verdicts come from the one engine, prh.claims),
# and its table in the report (the registry's `claims_ledger` entry). Included after every study's
# rule file: a study is in the ledger when this run builds its results (its files are among TARGETS).
from prh.studies.ledger import manifests


def ledger_files():
    """{"study:key": path} of the studies this run builds: a study is in when any of its figures or results
    is a target; an optional input ("name?" in its manifest) only when that file is a target."""
    files = {}
    for name, study in manifests().items():
        figures = {f"{R}/figures/{fig.name}.{fig.formats[0]}" for fig in study.figures}
        paths = {k: study.path(f.rstrip("?")) for k, f in study.verdict_inputs.items()}
        if not study.claims or not (figures | set(paths.values())) & set(TARGETS):
            continue
        if name == "lte" and SUITE == "paper":
            continue  # the paper suite runs LTE's paper grid only, which makes no claim of its own
        files.update({f"{name}:{k}": p for k, p in paths.items()
                      if not study.verdict_inputs[k].endswith("?") or p in TARGETS})
    return files


LEDGER_FILES = ledger_files()


rule claims_ledger:
    """Every study's claims and verdicts in one ledger."""
    input:
        **{k.replace(":", "__"): v for k, v in LEDGER_FILES.items()},
    output:
        ledger=f"{R}/claims.json",
    params:
        files=" ".join(f"--file {k}={v}" for k, v in LEDGER_FILES.items()),
        alpha=config["claims"]["alpha"],
    log:
        log_path("claims_ledger"),
    benchmark:
        bench_path("claims_ledger")
    conda:
        CONDA_ENV
    shell:
        "prh claims-ledger --suite {SUITE} --alpha {params.alpha} {params.files} --out {output.ledger} > {log} 2>&1"


TARGETS += [rules.claims_ledger.output.ledger, *figure_targets("claims_ledger")]
