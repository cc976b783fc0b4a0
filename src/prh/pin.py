"""``prh pin-revisions``: rewrite every hub revision in params.yaml to its commit SHA.

params.yaml names each hub checkpoint and dataset with the revision it was published
under (a branch such as ``main``, or a tag such as ``wit_1024``). A branch moves; a
commit SHA does not. With network, this command asks the hub which commit each
revision points to now (``HfApi().model_info`` / ``dataset_info``) and writes the SHAs
back, so the same params give the same weights and data next year.

Only the revision values change: the file is edited by exact text substitution on the
lines that hold each entry, so comments, order and layout stay as they are (no YAML
round trip). The result is parsed again and must equal the old config with only the
revisions replaced, or nothing is written.

What is pinned: ``paper.models.*`` of the hub (timm names are looked up as ``timm/<name>``; a plain-URL checkpoint is
pinned by its SHA-256 instead, ``prh pin-checkpoints``),
``datasets.*`` of ``kind: hub`` whose repo is on the hub (local folders are skipped),
``paper.lm_score``, the task data of ``downstream.harness.tasks`` (Fig 4's lm-evaluation-harness), and the hub
language model a ``bridge.<suite>.config`` bridges (``source``
with ``revision``; the packaged ``minilm`` and local folders are skipped). Revisions that already
are 40-hex SHAs are left alone.

    prh pin-revisions params.yaml            # rewrite in place
    prh pin-revisions params.yaml --dry-run  # print what would change

``check_pinned(cfg)`` is the other half: the Snakefile calls it before a real run of the paper
suite, which stops with one error listing every hub item whose revision is not a commit SHA
(unless ``allow_unpinned: true``).
"""

from __future__ import annotations

import argparse
import re
from pathlib import Path

import yaml

from prh.errors import ConfigError, UsageError
from prh.io import atomic_path

__all__ = ["HARNESS_SPLITS", "entry_spec", "entry_splits", "hub_entries", "pin_revisions", "unpinned_entries", "check_pinned"]

# the splits lm-evaluation-harness's task reads (its yaml: few-shot examples, then the scored split)
HARNESS_SPLITS = {"hellaswag": ("train", "validation"), "gsm8k": ("train", "test")}
SHA_RE = re.compile(r"[0-9a-f]{40}")
_REPO_RE = re.compile(r"""\b(?:repo|source):\s*(["']?)([^\s,{}"'#]+)\1""")
_REV_RE = re.compile(r"""(\brevision:\s*)(["']?)([^\s,{}"'#]+)\2""")


def _is_hub_id(repo: str) -> bool:
    return repo.count("/") == 1 and not repo.startswith((".", "/", "~"))


def _is_hub_model(source) -> bool:
    """A bridge ``source`` that names a hub model (``gpt2``, ``org/name``), not ``minilm`` or a folder."""
    return (isinstance(source, str) and source != "minilm" and source.count("/") <= 1
            and not source.startswith((".", "/", "~", "pkg:")))


def hub_entries(cfg: dict, *, include_unset: bool = False) -> list[dict]:
    """Every hub entry of a config: ``{"key", "kind": "model"|"dataset", "repo", "repo_id", "revision"}``.

    ``repo`` is the text in params.yaml, ``repo_id`` the hub id to query (timm names get ``timm/``).
    Hub datasets, ``paper.lm_score``, harness task data and bridged models with ``revision: null`` (the hub's default
    branch) are listed only with ``include_unset`` (there is no value for ``pin_revisions`` to rewrite).
    """
    def has_rev(spec):
        return include_unset or spec.get("revision") is not None

    out = []
    for name, spec in ((cfg.get("paper") or {}).get("models") or {}).items():
        if spec.get("source", "hub") != "hub":  # a url checkpoint is pinned by its SHA-256 (prh.models.url_cache)
            continue
        repo = spec["repo"]
        repo_id = repo if "/" in repo else f"timm/{repo}"
        out.append({"key": f"paper.models.{name}", "kind": "model", "repo": repo, "repo_id": repo_id,
                    "revision": spec.get("revision")})
    for name, spec in (cfg.get("datasets") or {}).items():
        if spec.get("kind") == "hub" and _is_hub_id(spec["repo"]) and has_rev(spec):
            out.append({"key": f"datasets.{name}", "kind": "dataset", "repo": spec["repo"],
                        "repo_id": spec["repo"], "revision": spec.get("revision")})
    lm = (cfg.get("paper") or {}).get("lm_score") or {}
    if lm.get("repo") and has_rev(lm):
        out.append({"key": "paper.lm_score", "kind": "dataset", "repo": lm["repo"], "repo_id": lm["repo"],
                    "revision": lm.get("revision")})
    for task, spec in (((cfg.get("downstream") or {}).get("harness") or {}).get("tasks") or {}).items():
        if has_rev(spec):
            out.append({"key": f"downstream.harness.tasks.{task}", "kind": "dataset", "repo": spec["repo"],
                        "repo_id": spec["repo"], "revision": spec.get("revision")})
    for suite, block in (cfg.get("bridge") or {}).items():
        conf = (block or {}).get("config") or {}
        if _is_hub_model(conf.get("source")) and has_rev(conf):
            out.append({"key": f"bridge.{suite}.config", "kind": "model", "repo": conf["source"],
                        "repo_id": conf["source"], "revision": conf.get("revision")})
    return out


def entry_spec(cfg: dict, entry: dict) -> dict:
    """The params block of a ``hub_entries`` entry (its ``key`` is the dotted path to it): repo, revision and, for
    datasets, config, split, data_files and columns where the block has them."""
    node = cfg
    for part in entry["key"].split("."):
        node = node[part]
    return node


def entry_splits(cfg: dict, entry: dict) -> list[str]:
    """The splits a dataset entry reads: a harness task's (``HARNESS_SPLITS``: few-shot and scored), else the one
    its block names (``carve.from`` or ``split``, default train)."""
    if entry["key"].startswith("downstream.harness.tasks."):
        return list(HARNESS_SPLITS[entry["key"].rsplit(".", 1)[1]])
    spec = entry_spec(cfg, entry)
    return [(spec.get("carve") or {}).get("from") or spec.get("split", "train")]


def unpinned_entries(cfg: dict) -> list[dict]:
    """The hub entries of ``cfg`` (``hub_entries(cfg, include_unset=True)``) whose revision is not a
    commit SHA: anything but 40 lowercase hex digits (a branch, a tag, or null) can move."""
    return [e for e in hub_entries(cfg, include_unset=True) if not SHA_RE.fullmatch(str(e["revision"]))]


def check_pinned(cfg: dict, *, params: str = "params.yaml") -> dict:
    """Return ``cfg`` when every hub model and dataset it names is pinned to a commit SHA, or when
    ``cfg["allow_unpinned"]`` is true; else raise one ``ConfigError`` listing every unpinned item
    (``unpinned_entries``) and the command that pins them all (``prh pin-revisions <params>``).

    A branch such as ``main`` moves: the same params would load other weights or data next year,
    so a real run of the paper suite refuses them unless told otherwise.
    """
    if cfg.get("allow_unpinned"):
        return cfg
    bad = unpinned_entries(cfg)
    if bad:
        lines = [f"  {e['key']}: {e['kind']} {e['repo_id']} at revision {e['revision']!r}"
                 + (" (null: set a branch or tag, then pin it)" if e["revision"] is None else "") for e in bad]
        raise ConfigError(
            f"the paper suite loads hub checkpoints and datasets at pinned revisions, but {len(bad)} hub items "
            "have a revision that is not a commit SHA (a branch or tag moves: a rerun could load other "
            "weights or data):\n" + "\n".join(lines) + f"\nPin them all, once, on a machine with network: "
            f"`prh pin-revisions {params}` (rewrites each revision to its commit SHA in place; add --dry-run "
            "to see the SHAs first), then commit the file. To run at the branches as they are now, knowing "
            "the results may not be reproducible, set `allow_unpinned: true` in params.yaml "
            "(or `--config allow_unpinned=True`)."
        )
    return cfg


def _unreachable(exc: BaseException) -> bool:
    """The hub cannot be reached at all (offline mode, DNS, refused or timed-out connection)."""
    return isinstance(exc, ConnectionError) or type(exc).__name__ in {"ConnectError", "ConnectTimeout"}


def _indent(line: str) -> int:
    return len(line) - len(line.lstrip(" -"))


def _rewrite(text: str, shas: dict[tuple[str, str], str]) -> str:
    """Replace the revision of every entry whose (repo, revision) is in ``shas``.

    Flow style (``{repo: x, revision: main}``): the revision on the repo's line.
    Block style: the ``revision:`` line among the repo line's siblings (same indentation).
    """
    lines = text.splitlines(keepends=True)
    for i, line in enumerate(lines):
        code = line.split("#", 1)[0]
        m = _REPO_RE.search(code)
        if not m:
            continue
        repo = m.group(2)
        if _REV_RE.search(code):
            candidates = [i]
        else:
            ind, candidates = _indent(line), []
            for step in (-1, 1):
                j = i + step
                while 0 <= j < len(lines):
                    if lines[j].strip() and not lines[j].lstrip().startswith("#"):
                        if _indent(lines[j]) < ind:
                            break
                        if _indent(lines[j]) == ind and _REV_RE.search(lines[j].split("#", 1)[0]):
                            candidates.append(j)
                            break
                    j += step
        for j in candidates[:1]:
            code_j, sep, comment = lines[j].partition("#")
            rev = _REV_RE.search(code_j)
            sha = shas.get((repo, rev.group(3)))
            if sha is not None:
                code_j = code_j[: rev.start(3)] + sha + code_j[rev.end(3):]
                lines[j] = code_j + sep + comment
    return "".join(lines)


def _expected(cfg: dict, entries: list[dict], shas: dict[tuple[str, str], str]) -> dict:
    import copy

    new = copy.deepcopy(cfg)
    for e in entries:
        sha = shas.get((e["repo"], e["revision"]))
        if sha is None:
            continue
        parts = e["key"].split(".")
        node = new
        for p in parts:
            node = node[p]
        node["revision"] = sha
    return new


def pin_revisions(params_path: str | Path, *, api=None, dry_run: bool = False) -> list[dict]:
    """Resolve every hub revision in ``params_path`` to a commit SHA and write it back.

    Parameters
    ----------
    params_path : the params.yaml to rewrite in place.
    api : an object with ``model_info(repo_id, revision=...)`` and ``dataset_info(...)``
        returning objects with a ``.sha`` (default: ``huggingface_hub.HfApi()``).
    dry_run : resolve and report, but do not write.

    Returns
    -------
    One record per hub entry: key, repo_id, old revision, sha (unchanged entries included).
    """
    path = Path(params_path)
    from prh.config import load

    cfg = load(path)  # a missing, binary or broken file: one ConfigError naming it
    text = path.read_text()
    entries = hub_entries(cfg)
    if api is None:
        from huggingface_hub import HfApi

        api = HfApi()

    shas: dict[tuple[str, str], str] = {}
    failures = []
    cache: dict[tuple[str, str, str], str] = {}
    for e in entries:
        rev = str(e["revision"])
        if SHA_RE.fullmatch(rev):
            e["sha"] = rev
            continue
        look = (e["kind"], e["repo_id"], rev)
        if look not in cache:
            info = api.model_info if e["kind"] == "model" else api.dataset_info
            try:
                cache[look] = str(info(e["repo_id"], revision=rev).sha)
            except Exception as exc:  # one report for every entry that failed, then stop
                failures.append(f"  {e['key']}: {e['kind']} {e['repo_id']!r} revision {rev!r}: "
                                f"{type(exc).__name__}: {exc}")
                if _unreachable(exc):  # every other query would wait for the same timeout
                    failures.append(f"  (the hub is unreachable: the other {len(entries) - 1} entries were not tried)")
                    break
                continue
        e["sha"] = cache[look]
        shas[(e["repo"], rev)] = e["sha"]
    if failures:
        raise UsageError(
            "could not resolve these revisions on the Hugging Face hub (this command needs network; "
            "gated repos need `hf auth login` and an accepted licence); nothing was written:\n"
            + "\n".join(failures)
        )

    new_text = _rewrite(text, shas)
    if yaml.safe_load(new_text) != _expected(cfg, entries, shas):
        raise UsageError(
            f"{path}: rewriting the revisions would change more than the revisions (an entry's repo "
            "and revision are laid out in a way this command does not recognise); nothing was written. "
            "Keep each entry's repo and revision on one line, or as sibling keys."
        )
    if not dry_run and new_text != text:
        with atomic_path(path) as tmp:
            tmp.write_text(new_text)
    return entries


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(prog="prh pin-revisions", description=__doc__.splitlines()[0])
    p.add_argument("params", nargs="?", default="params.yaml")
    p.add_argument("--dry-run", action="store_true", help="print the SHAs, do not write")
    a = p.parse_args(argv)
    entries = pin_revisions(a.params, dry_run=a.dry_run)
    for e in entries:
        mark = "=" if str(e["revision"]) == e["sha"] else "->"
        print(f"{e['key']}: {e['repo_id']} {e['revision']} {mark} {e['sha']}")
    print(f"{a.params}: {len(entries)} hub entries {'checked (dry run)' if a.dry_run else 'pinned'}")
