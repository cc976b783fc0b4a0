# The PRH reproducibility workflow. `snakemake --cores all` (run from the repository
# root, which holds this Snakefile, params.yaml and results/) renders every figure for
# the suite chosen in params.yaml (default: offline). Rules, schemas and report captions
# live in workflow/; the workflow profile is profiles/default, which Snakemake picks up
# from the working directory without a flag.
from snakemake.utils import min_version, validate

min_version("9.0")


# Before any job, one pass (prh.checks.check_config): the schema (types, ranges, name patterns; every
# default filled, also inside the blocks kept in sibling schema files, which Snakemake's validate()
# checks but does not fill), names that refer to nothing, and limits only the data rules out (k
# against N, batch sizes, bins, checkpoints). Each problem names its key and the layer that set it
# (params.yaml, a --configfile, --config). A user error prints as one line without a traceback
# (PRH_DEBUG=1 shows it); broken YAML in params.yaml names its line (read here first, since
# Snakemake's own message names neither).
import atexit

from snakemake.logging import logger

from prh.bench import COSTS_FILE, dry_run_duration, start_run
from prh.checks import check_config, check_device
from prh.config import config_layers, load
from prh.errors import user_errors

with user_errors():
    load("params.yaml")


configfile: "params.yaml"


with user_errors():
    check_config(
        config,
        layers=config_layers(
            base="params.yaml",
            configfiles=workflow.config_settings.configfiles,
            overrides=workflow.config_settings.config,
        ),
    )
validate(config, schema="workflow/schemas/params.schema.yaml")


# Before the first job of a real paper-suite run (Snakemake calls onstart: only when it is about to
# execute jobs: never for -n in any spelling, --touch (`make pull`), --report, --dag, --rulegraph,
# --summary or --list-rules, nor when nothing is to be done; jobs a cluster executor starts do not
# repeat it): every hub revision pinned, then either every hub item in the cache (hub unreachable:
# one error listing them all) or a token for the gated repos (prh.models.hub_cache.check_before_run).
onstart:
    if workflow.is_main_process and not workflow.touch:
        with user_errors():
            check_device(config, local=workflow.local_exec)
        # every prh command's exact costs to results/benchmarks/commands.jsonl; a local run's expected duration,
        # and the time left on each of its progress lines ("N of M steps (x%) done, K left, about T min to go")
        needrun = list(workflow.dag.needrun_jobs())
        start_run(
            [str(job.benchmark) if job.benchmark else None for job in needrun],
            results=R,
            cores=workflow.cores if workflow.local_exec else None,  # a cluster run has no --cores: it raises
            costs_path=f"{workflow.basedir}/{COSTS_FILE}" if workflow.local_exec else None,
            jobids=[job.jobid for job in needrun],
            handlers=logger.handlers,
        )
    if config["suite"] == "paper" and workflow.is_main_process and not workflow.touch:
        from prh.models.hub_cache import check_before_run

        with user_errors():
            check_before_run(config, manifest_path=f"{workflow.basedir}/workflow/resources/hub_manifest.yaml")


report: "workflow/report/workflow.rst"


include: "workflow/rules/common.smk"
include: "workflow/rules/data.smk"
include: "workflow/rules/prepare.smk"
include: "workflow/rules/paper_data.smk"
include: "workflow/rules/zoo_vision.smk"
include: "workflow/rules/zoo_language.smk"
include: "workflow/rules/features.smk"
include: "workflow/rules/alignment.smk"


# Each study's rules, workflow/rules/<name>.smk, in the studies' order: the studies are the packages' manifests
# (prh.manifest.study_names), not a list here. (An include in a loop is read at once; a rule's shell: is not.)
from prh.manifest import study_names

for _study in study_names():

    include: f"workflow/rules/{_study}.smk"


include: "workflow/rules/claims.smk"
include: "workflow/rules/figures.smk"


# `snakemake -n`: the plan's expected duration at the end, after its job table (once, not for each replicate module)
if workflow.is_main_process and R == "results":
    atexit.register(dry_run_duration, workflow, f"{workflow.basedir}/{COSTS_FILE}")


# Library code: Snakemake's `code` trigger sees a rule's own text, not the library its `prh` command
# runs. Each such rule gets a param, the hash of the library files its commands run (prh.cli.code_hash: the
# command's module and what it imports): editing src/prh/metrics/knn.py reruns the jobs that compute k-NN, and
# only those, before dvc.lock records the new src/prh.
from prh.cli import COMMANDS, code_hash

# The same pass gives every rule that runs a command the one software environment, common.smk's CONDA_ENV:
# written once here, not as a `conda:` line in each rule (a top-level `conda:` would be the environment of
# the Snakefile's own code, not a default for the rules; `snakemake --lint` sees the env on each rule).
for _rule in workflow.rules:
    if _rule.shellcmd and _rule.conda_env is None:
        _rule.conda_env = CONDA_ENV
    _text = " ".join([_rule.shellcmd or ""] + [p for p in _rule.params if isinstance(p, str)])
    _commands = sorted(set(re.findall(r"\bprh(?:\.cli)?(?: --gpus \S+)? ([a-z][a-z0-9-]*)", _text)) & set(COMMANDS))
    if _commands and "prh_code" not in _rule.params.keys():  # (a replicate module runs this file again)
        _rule.set_params(prh_code=code_hash(*_commands))


rule all:
    default_target: True
    input:
        TARGETS,
