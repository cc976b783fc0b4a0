# The two commands of the README:
#   make figures   install into .venv, then run the workflow (default suite) and its HTML report
#   make test      install into .venv, then run the test suite
# Installing is idempotent: a second call finds .venv/.installed newer than the
# pins and does nothing.

PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed
# Rules call `prh`, and `dvc repro` calls `snakemake`: both must be found on PATH.
export PATH := $(abspath $(BIN)):$(PATH)

.PHONY: install figures test plan repro pull push replicate clean-results

install: $(STAMP)

# uv (pinned in requirements.lock) installs the locked set: about 1 min on a fresh 2-core machine where pip took
# 2 min 45 s to 3 min 13 s, most of it unpacking and byte-compiling torch on one core (benchmarks/README.md).
# --compile-bytecode (on every core) writes each module's bytecode now: without it, where PYTHONDONTWRITEBYTECODE
# is set (as in this machine's shells) or .venv is read-only, every process compiled torch again (13 CPU-s, not 5).
$(STAMP): pyproject.toml requirements.lock
	@echo "make: installing the pinned environment into $(VENV) (about 7 GB, mostly torch; about 1 min on a fresh machine)"
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --disable-pip-version-check --quiet -c requirements.lock uv
	$(BIN)/uv pip install --compile-bytecode --python $(BIN)/python -c requirements.lock -e '.[workflow,test]'
	touch $@

figures: $(STAMP)
	$(BIN)/snakemake --cores all
	$(BIN)/snakemake --report results/report.html
	$(BIN)/prh bench-summary --out results/benchmarks/summary.md

test: $(STAMP)
	$(BIN)/python -m pytest

# What `make figures` would run, without running it: the job table, why each rule runs, the expected duration
# (priced with benchmarks/default_costs.json). Not each job's block: `snakemake -n` prints those.
plan: $(STAMP)
	$(BIN)/snakemake --dry-run --cores all --quiet rules host

# The replicate preset (docs/replication.md): the training-based studies at two more master
# seeds, and the claims ledger's verdicts from their agreement.
replicate: $(STAMP)
	$(BIN)/snakemake --cores all --configfile presets/replicate.yaml

# After editing params.yaml: rerun what the change touches and record it in dvc.lock.
repro: $(STAMP)
	$(BIN)/dvc repro

# After `dvc pull`, files carry the pull's timestamps, not the order they were
# built in; --touch marks them up to date so Snakemake plans no job for them, and
# --forceall makes it record every job's parameters too (plain --touch skips the jobs
# it would not run, so a later parameter change of a job without inputs went unnoticed).
# prh check-lock first: stamping results built with other params would hide the difference; after the
# pull, the effective config the results record (presets and --config included) against params.yaml's.
# prh check-remote (also before a push): a missing credential is one line naming what the remote reads.
pull: $(STAMP)
	$(BIN)/prh check-lock
	$(BIN)/prh check-remote
	$(BIN)/dvc pull
	$(BIN)/prh check-lock --effective results/config.json
	$(BIN)/snakemake --touch --forceall --cores 1 --quiet

# Upload results/ to the DVC remote. `dvc push` sends what dvc.lock records, and after a first `make figures` there
# is no dvc.lock yet ("Everything is up to date", nothing sent): `dvc repro` writes it first, running Snakemake,
# which plans nothing for up-to-date results (and rebuilds any that params or code have made stale), so the lock
# never certifies results it did not check.
push: $(STAMP)
	$(BIN)/prh check-remote
	$(BIN)/dvc repro
	$(BIN)/dvc push

clean-results:
	rm -rf results .snakemake
