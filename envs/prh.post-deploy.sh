#!/bin/sh
# Installs the prh package itself into the conda environment made from envs/prh.yaml.
# Snakemake (--sdm conda) runs this inside the new environment, from a copy under its conda
# prefix (.snakemake/conda/<hash>_.post-deploy.sh by default), after `conda env create` from a
# copy of envs/prh.yaml there; so no path in either file may be relative. The Snakefile exports
# the absolute project root as PRH_PROJECT_ROOT; run by hand (see README), the script finds
# the root as the folder above envs/. Editable and without dependencies: envs/prh.yaml pins
# those, and the jobs run the checkout's current code, as they do from the .venv.
set -eu
root="${PRH_PROJECT_ROOT:-$(cd "$(dirname "$0")/.." && pwd)}"
if ! grep -q '^name = "prh"' "$root/pyproject.toml" 2>/dev/null; then
    echo "prh.post-deploy.sh: $root/pyproject.toml is not the prh project's; set PRH_PROJECT_ROOT" \
         "to the repository root (the folder holding the Snakefile and pyproject.toml)" >&2
    exit 1
fi
python -m pip install --no-deps --editable "$root"
