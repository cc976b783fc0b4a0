"""The pins agree: requirements.lock (pip), envs/prh.yaml (conda) and .pre-commit-config.yaml (the linters) name the
same versions, and every dependency the package declares is pinned in both of the first two."""

from __future__ import annotations

import re
import tomllib

import yaml
from packaging.utils import canonicalize_name


def _parse_pins(lines):
    pins = {}
    for line in lines:
        line = line.split("#")[0].strip()
        m = re.fullmatch(r"([A-Za-z0-9_.\-]+)==([^\s;]+)", line)
        if m:
            pins[canonicalize_name(m.group(1))] = m.group(2)
    return pins


def lock_pins(root):
    return _parse_pins((root / "requirements.lock").read_text().splitlines())


def conda_pins(root):
    env = yaml.safe_load((root / "envs" / "prh.yaml").read_text())
    pip_section = next(d["pip"] for d in env["dependencies"] if isinstance(d, dict) and "pip" in d)
    return _parse_pins(pip_section)


def declared(root):
    project = tomllib.loads((root / "pyproject.toml").read_text())["project"]
    names = list(project["dependencies"])
    for extra in project["optional-dependencies"].values():
        names += extra
    return {canonicalize_name(re.split(r"[<>=\[ ;]", n)[0]) for n in names}


def test_conda_env_pins_equal_lock(repo_root):
    lock, conda = lock_pins(repo_root), conda_pins(repo_root)
    assert conda, "envs/prh.yaml pins nothing"
    differ = {n: (v, lock.get(n)) for n, v in conda.items() if lock.get(n) != v}
    assert not differ, f"envs/prh.yaml and requirements.lock disagree (conda, lock): {differ}"


def test_every_declared_dependency_is_pinned_in_both(repo_root):
    lock, conda = lock_pins(repo_root), conda_pins(repo_root)
    names = declared(repo_root)
    assert {"torch", "snakemake", "dvc", "timm", "transformers"} <= names
    assert not names - lock.keys(), f"not pinned in requirements.lock: {sorted(names - lock.keys())}"
    assert not names - conda.keys(), f"not pinned in envs/prh.yaml: {sorted(names - conda.keys())}"


def test_installed_versions_match_lock(repo_root):
    """The environment the tests run in is the locked one (catches a stale .venv)."""
    from importlib.metadata import version

    lock = lock_pins(repo_root)
    for name in sorted(declared(repo_root)):
        assert version(name) == lock[name], f"{name}: installed {version(name)}, locked {lock[name]}"


# .pre-commit-config.yaml's hook repositories -> the package whose version their rev is (a tag "v<version>")
PRE_COMMIT_REPOS = {"https://github.com/astral-sh/ruff-pre-commit": "ruff", "https://github.com/snakemake/snakefmt": "snakefmt"}


def test_pre_commit_runs_the_linters_at_the_locked_versions(repo_root):
    """Each hook's rev and additional_dependencies pins equal requirements.lock, so a commit hook and
    tests/test_lint.py judge the code with the same tools; and it runs ruff's check and snakefmt's."""
    lock = lock_pins(repo_root)
    repos = yaml.safe_load((repo_root / ".pre-commit-config.yaml").read_text())["repos"]
    assert {r["repo"] for r in repos} == set(PRE_COMMIT_REPOS), [r["repo"] for r in repos]
    differ = {}
    for repo in repos:
        name = PRE_COMMIT_REPOS[repo["repo"]]
        if repo["rev"] != f"v{lock[name]}":
            differ[name] = (repo["rev"], f"v{lock[name]}")
        for hook in repo["hooks"]:
            for pin, version in _parse_pins(hook.get("additional_dependencies", [])).items():
                if lock.get(pin) != version:
                    differ[pin] = (version, lock.get(pin))
    assert not differ, f".pre-commit-config.yaml and requirements.lock disagree (pre-commit, lock): {differ}"
    hooks = {h["id"]: h for r in repos for h in r["hooks"]}
    assert set(hooks) == {"ruff-check", "snakefmt"} and "--check" in hooks["snakefmt"]["args"]
    assert "black" in _parse_pins(hooks["snakefmt"]["additional_dependencies"])  # snakefmt's output is black's
