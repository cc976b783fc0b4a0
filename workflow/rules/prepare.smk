# Local dataset folders built from manual downloads: DCI and Places-365 val are
# not on the hub in the paper's form and their licences ask for a manual download. A hub
# dataset with `prepare: {command, source}` in params.yaml gets a rule prepare_<dataset> that
# runs `prh prepare-<command>` on the download (the source path) and writes the folder its
# `repo` names; hub_dataset (paper_data.smk, included after this file) waits for it. Without
# the download the dry run still plans the job, and the job stops with the download's address.
import os

# The metadata.jsonl that `prh prepare-*` writes, per dataset with `prepare` (hub_dataset waits for it)
PREPARED_METADATA = {
    name: os.path.join(os.path.normpath(os.path.expanduser(spec["repo"])), "train", "metadata.jsonl")
    for name, spec in config["datasets"].items()
    if spec.get("prepare")
}
PREPARE_FLAG = {"dci": "prepare-dci --source", "places": "prepare-places --archive"}

for _ds_name, _ds_spec in config["datasets"].items():
    _ds_prep = _ds_spec.get("prepare") if _ds_spec.get("kind") == "hub" else None
    if not _ds_prep:
        continue
    _prep_files = [_ds_prep["source"]] + ([_ds_prep["filelist"]] if _ds_prep.get("filelist") else [])

    rule:
        name:
            f"prepare_{_ds_name}"
        input:
            # ancient: re-downloading (a newer mtime) does not rebuild; missing: the job explains
            [ancient(f) for f in _prep_files if os.path.exists(f)],
        output:
            PREPARED_METADATA[_ds_name],
        log:
            log_path("prepare", _ds_name),
        benchmark:
            bench_path("prepare", _ds_name)
        resources:
            **JOB_SIZES["prepare"],
        params:
            args=f"{PREPARE_FLAG[_ds_prep['command']]} {shlex.quote(_ds_prep['source'])}"
            + (f" --filelist {shlex.quote(_ds_prep['filelist'])}" if _ds_prep.get("filelist") else ""),
            # <out>/train/metadata.jsonl -> <out>, from the output (snakemake --lint: no hard-coded prefix)
            out=lambda w, output: os.path.dirname(os.path.dirname(output[0])),
        shell:
            "prh {params.args} --out {params.out:q} > {log} 2>&1"
