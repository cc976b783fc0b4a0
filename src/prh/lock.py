"""``make pull``'s check before it stamps pulled results as up to date (``prh check-lock``): the params and code
``dvc.lock`` says the results were built with against params.yaml and the code now.

    prh check-lock                      # params.yaml and the code against dvc.lock
    prh check-lock --lock other.lock    # params only (code is compared for the dvc.lock beside a dvc.yaml)

And their check that the DVC remote answers before they pull or push (``prh check-remote``): a missing credential, a
remote that is not configured or a storage plugin that is not installed is one line, not DVC's error and its footer.

    prh check-remote                    # the default remote (dvc remote add -d ...)
    prh check-remote -r NAME
"""

from __future__ import annotations

import argparse
from pathlib import Path

from prh.errors import ConfigError, problems_message

__all__ = ["check_lock", "check_effective", "check_remote", "main", "remote_main"]


def _same(old, new) -> bool:
    """Equal values; a number DVC wrote as YAML 1.2 (``2e-05``) reads back through PyYAML (YAML 1.1) as a string."""
    if isinstance(old, list) and isinstance(new, list):
        return len(old) == len(new) and all(_same(a, b) for a, b in zip(old, new))
    if isinstance(old, str) and isinstance(new, (int, float)) and not isinstance(new, bool):
        try:
            return float(old) == float(new)
        except ValueError:
            return False
    return old == new


def _leaf_diff(old, new, path: str = "", *, where: str = "dvc.lock") -> list[str]:
    """Dotted keys whose values differ between two nested mappings (a key on one side only counts)."""
    if isinstance(old, dict) and isinstance(new, dict):
        return [d for k in sorted(set(old) | set(new), key=str)
                for d in _leaf_diff(old.get(k, "<absent>"), new.get(k, "<absent>"), f"{path}.{k}" if path else str(k),
                                    where=where)]
    return [] if _same(old, new) else [f"{path}: {old!r} in {where}, {new!r} now"]


def _read_lock(lock: str) -> dict:
    """``dvc.lock`` as a mapping; a missing file, merge-conflict markers, broken YAML or another shape are one
    ``ConfigError`` naming the file and what to do."""
    import yaml

    path = Path(lock)
    if not path.exists() or path.is_dir():  # (a pipe, `--lock <(...)`, is read like a file)
        raise ConfigError(f"{lock}: {'a directory' if path.exists() else 'does not exist'}, so there is nothing to "
                          "compare the params with; pull needs the dvc.lock of the results (check out the commit "
                          "that built them, or correct --lock)")
    try:
        text = path.read_text()
    except (OSError, UnicodeDecodeError) as e:
        raise ConfigError(f"{lock}: cannot be read ({type(e).__name__}: {e})") from None
    if any(line.startswith(("<<<<<<< ", ">>>>>>> ", "=======")) for line in text.splitlines()):
        raise ConfigError(f"{lock}: has merge-conflict markers; resolve them (`git checkout --theirs {lock}` or "
                          f"`--ours`, then `dvc commit`), or restore it with `git checkout {lock}`")
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as e:
        raise ConfigError(f"{lock}: not valid YAML ({' '.join(str(e).split())}); restore it with "
                          f"`git checkout {lock}`") from None
    if not isinstance(data, dict) or not isinstance(data.get("stages"), dict) or not data["stages"]:
        raise ConfigError(f"{lock}: not a DVC lock file (a mapping whose `stages` maps each stage to its deps, "
                          f"params and outs); restore it with `git checkout {lock}`")
    return data


def _code_changes(root: Path, params_name: str) -> list[str]:
    """Deps other than params that ``dvc status`` in ``root`` finds changed since ``dvc.lock`` (the workflow's code:
    Snakefile, workflow/, src/prh), as ``stage: path: modified``. [] where DVC is not installed."""
    import json
    import shutil
    import subprocess

    dvc = shutil.which("dvc")
    if dvc is None:
        return []
    proc = subprocess.run([dvc, "status", "--json"], cwd=root, capture_output=True, text=True)
    try:
        status = json.loads(proc.stdout or "{}")
    except ValueError:
        status = None
    if not isinstance(status, dict):
        tail = (proc.stderr.strip().splitlines() or ["no output"])[-1]
        raise ConfigError(f"`dvc status` in {root} failed ({tail}); the code dvc.lock records cannot be compared")
    return [f"{stage}: {path}: {what} since dvc.lock" for stage, changes in status.items()
            for change in (changes if isinstance(changes, list) else []) if isinstance(change, dict)
            for path, what in (change.get("changed deps") or {}).items()
            if isinstance(what, str) and Path(path).name != params_name]


def check_lock(*, params: str = "params.yaml", lock: str = "dvc.lock", code: bool | None = None) -> list[str]:
    """Before ``make pull`` stamps pulled results as up to date: the params each stage of ``lock`` was built with must
    equal ``params`` now, and (``code``; default: when ``lock`` is the dvc.lock beside a dvc.yaml) so must the code
    deps it records (``dvc status``). Raise one ``ConfigError`` listing every differing key (leaf by leaf) and file;
    also when there is nothing to compare (no lock, or no stage with params). Return the stages checked."""
    from prh.config import load

    stages = _read_lock(lock)["stages"]
    now = load(params)
    diffs, compared = [], []
    for stage, spec in stages.items():
        built = ((spec or {}).get("params") or {}).get(Path(params).name) if isinstance(spec, dict) else None
        if isinstance(built, dict) and built:
            compared.append(stage)
            diffs += [f"{stage}: {d}" for d in _leaf_diff(built, {k: now.get(k, "<absent>") for k in built})]
    if not compared:
        raise ConfigError(f"{lock}: no stage records params of {Path(params).name}, so there is nothing to compare; "
                          "pull needs the dvc.lock of the results (`dvc commit` after a run writes it)")
    root = Path(lock).resolve().parent
    if code or (code is None and Path(lock).name == "dvc.lock" and (root / "dvc.yaml").is_file()):
        diffs += _code_changes(root, Path(params).name)
    if diffs:
        raise ConfigError(problems_message(
            f"{params} or the code differs from what {lock} says the results were built with, so stamping pulled "
            f"results as up to date would pair them with settings or code they were not made with; either restore "
            f"them (`git checkout {params}`, or the commit that built the results), pull, then edit again and run "
            f"`make figures`, or rebuild without pulling (`dvc repro`). Differences ({len(diffs)})", diffs))
    return compared


def check_effective(recorded: str, *, params: str = "params.yaml", configfiles=()) -> bool:
    """After a pull: the effective config the results record (``results/config.json``: presets and --config applied,
    defaults filled) must equal the one ``params`` (and ``configfiles``) give now, or stamping them would pair them with
    settings they were not made with (dvc.lock records params.yaml alone). One ``ConfigError`` lists every differing
    key. False when ``recorded`` does not exist (results from before it was recorded: nothing to compare)."""
    from prh.checks import check_config
    from prh.config import config_layers, merge
    from prh.io import read_json

    if not Path(recorded).exists():
        return False
    layers = config_layers(base=params, configfiles=configfiles)
    cfg: dict = {}
    for _, values in layers:
        cfg = merge(cfg, values)
    now = check_config(cfg, layers=layers)
    diffs = _leaf_diff(read_json(recorded), now, where=Path(recorded).name)
    if diffs:
        layered = " ".join(f"--configfile {f}" for f in configfiles)
        raise ConfigError(problems_message(
            f"{recorded} says the results were built with a config that differs from {params}{' ' + layered if layered else ''} "
            f"(a preset, --configfile or --config), so stamping them as up to date would pair them with settings they "
            f"were not made with; pull with those layers (`prh check-lock --effective {recorded} --configfile FILE`, "
            f"then `snakemake --touch --forceall --configfile FILE`) or rebuild (`make figures`). Differences "
            f"({len(diffs)})", diffs))
    return True


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(prog="prh check-lock", description="refuse to stamp pulled results when params.yaml "
                                "differs from the params dvc.lock records (make pull runs it first)")
    p.add_argument("--params", default="params.yaml")
    p.add_argument("--lock", default="dvc.lock")
    p.add_argument("--effective", metavar="CONFIG_JSON", help="instead: compare the effective config the results "
                   "record (results/config.json, after a pull) with params.yaml and any --configfile")
    p.add_argument("--configfile", action="append", default=[], help="a file layered on params.yaml (with --effective)")
    a = p.parse_args(argv)
    if a.effective:
        done = check_effective(a.effective, params=a.params, configfiles=a.configfile)
        print(f"{a.effective}: the config of {a.params} " + ("(" + ", ".join(a.configfile) + ") " if a.configfile else "")
              + "as the results record it" if done else f"{a.effective}: absent (results from before it was "
              "recorded); only the params dvc.lock records were compared")
        return
    stages = check_lock(params=a.params, lock=a.lock)
    print(f"{a.params}: as {a.lock} records it ({len(stages)} stage{'s' * (len(stages) != 1)})")


S3_CREDENTIALS = ("an S3 remote reads AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY (or AWS_PROFILE, or "
                  "~/.aws/credentials), or `dvc remote modify --local {name} access_key_id ...` and `secret_access_key`; "
                  "docs/dvc.md#an-s3-remote")


def _first_line(err: BaseException) -> str:
    return (str(err).strip().splitlines() or [type(err).__name__])[0]


def check_remote(name: str | None = None, *, root: str = ".") -> str:
    """Before ``make pull`` or ``make push`` touch the DVC remote: open it as DVC does (its config, its credentials,
    its storage plugin) and look up its root. Any failure is one ``ConfigError`` naming the remote, its URL and, for
    S3, the credentials it reads. Return ``name (url)``."""
    try:
        from dvc.repo import Repo

        repo = Repo(root)
        if name is None and not repo.config["core"].get("remote"):
            raise ConfigError("no default DVC remote: add one with `dvc remote add -d NAME URL` (docs/dvc.md), or "
                              "name one with `-r NAME`")
        remote = repo.cloud.get_remote(name)
        url = repo.config["remote"][remote.name].get("url", remote.path)
    except ConfigError:
        raise
    except Exception as e:  # no DVC repo, no such remote, a scheme whose plugin (dvc-s3) is missing
        raise ConfigError(f"the DVC remote {repr(name) if name else '(the default)'} cannot be opened: {_first_line(e)}") from None
    try:
        remote.fs.exists(remote.path)
    except Exception as e:  # no credentials, refused ones, an endpoint that does not answer
        hint = S3_CREDENTIALS.format(name=remote.name) if str(url).startswith("s3://") else \
            f"`dvc remote modify --local {remote.name} ...` sets what it reads (docs/dvc.md)"
        raise ConfigError(f"cannot reach the DVC remote '{remote.name}' ({url}): {type(e).__name__}: "
                          f"{_first_line(e)}; {hint}") from None
    return f"{remote.name} ({url})"


def remote_main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(prog="prh check-remote", description="the DVC remote answers, with the credentials it "
                                "reads (make pull and make push run it before DVC touches the remote)")
    p.add_argument("-r", "--remote", help="a remote's name (default: the default remote)")
    a = p.parse_args(argv)
    print(f"DVC remote {check_remote(a.remote)}: reachable")
