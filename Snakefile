# The PRH reproducibility workflow. `snakemake --cores all` renders every figure
# and the HTML report for the suite chosen in params.yaml (default: offline).
from snakemake.utils import min_version, validate

min_version("9.0")


configfile: "params.yaml"


validate(config, schema="workflow/schemas/params.schema.yaml")


include: "workflow/rules/common.smk"
include: "workflow/rules/data.smk"
include: "workflow/rules/models.smk"
include: "workflow/rules/features.smk"
include: "workflow/rules/alignment.smk"
include: "workflow/rules/figures.smk"
include: "workflow/rules/paper.smk"


rule all:
    input:
        all_targets,
    default_target: True
