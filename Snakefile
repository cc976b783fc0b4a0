# The PRH reproducibility workflow. `snakemake --cores all` (run from the repository
# root, which holds this Snakefile, params.yaml and results/) renders every figure for
# the suite chosen in params.yaml (default: offline). Rules, schemas and report captions
# live in workflow/; the workflow profile is profiles/default, which Snakemake picks up
# from the working directory without a flag.
import sys

from snakemake.utils import min_version, validate

min_version("9.0")


configfile: "params.yaml"


# Before any job: prh's check names the bad key and the allowed values, and fills
# every default (also inside the blocks kept in sibling schema files, which
# Snakemake's validate() checks but does not fill); then Snakemake's own check of
# the same schema; then names that refer to nothing (datasets, model sets, models).
# The error names the merged configuration (params.yaml + --configfile + --config) and, for each
# bad value, the layer that set it.
from prh.config import check_data_limits, check_references, config_layers, validate_schema

validate_schema(
    config,
    layers=config_layers(
        base="params.yaml",
        configfiles=workflow.config_settings.configfiles,
        overrides=workflow.config_settings.config,
    ),
)
validate(config, schema="workflow/schemas/params.schema.yaml")
check_references(config)
check_data_limits(config)
# The paper suite with the hub offline: one error listing EVERY hub model and dataset missing from
# the cache (otherwise each job fails on its own item, one at a time). Dry runs plan without it;
# jobs a cluster executor starts (which parse this file again) do not repeat it.
# (workflow.dryrun is not known yet while this file is parsed, so the command line decides.)
_DRY_RUN = workflow.dryrun or bool({"-n", "--dry-run", "--dryrun"} & set(sys.argv))
if config["suite"] == "paper" and workflow.is_main_process and not _DRY_RUN:
    # First, every hub revision that is not a commit SHA (unless allow_unpinned: true): pinning needs
    # network and changes the revisions the cache check below names, so it comes before downloads.
    from prh.pin import check_pinned

    check_pinned(config)
    from prh.models.hub_cache import check_hub_cache
    from prh.models.loaders import hub_offline

    if hub_offline():
        check_hub_cache(config)


report: "workflow/report/workflow.rst"


include: "workflow/rules/common.smk"
include: "workflow/rules/data.smk"
include: "workflow/rules/paper_data.smk"
include: "workflow/rules/prepare.smk"
include: "workflow/rules/zoo_vision.smk"
include: "workflow/rules/zoo_language.smk"
include: "workflow/rules/features.smk"
include: "workflow/rules/alignment.smk"
include: "workflow/rules/simplicity.smk"
include: "workflow/rules/transfer.smk"
include: "workflow/rules/color.smk"
include: "workflow/rules/convergence.smk"
include: "workflow/rules/metrics_agreement.smk"
include: "workflow/rules/downstream.smk"
include: "workflow/rules/density.smk"
include: "workflow/rules/bridge.smk"
include: "workflow/rules/lte.smk"
include: "workflow/rules/phase.smk"
include: "workflow/rules/figures.smk"


rule all:
    input:
        all_targets,
    default_target: True
