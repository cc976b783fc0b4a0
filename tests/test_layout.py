"""The package's shape: imports point down the layers, never in a cycle,
and no module reaches into another's private names.

Layers, bottom to top (a module may import its own layer and the ones below):

0. ``io``, ``errors``, ``device``, ``gpus``, ``stats``, ``bench``, ``manifest``, ``claims``: plain helpers with no project
   imports above them; what a study declares; the one verdict engine
1. ``config``, ``slices``, ``metrics``, ``pin``, ``cluster``: the config and the slices of it commands read, the alignment
   metrics, GPU counts and plan costs
2. ``data``: the shapes world, hub datasets, tasks
3. ``models``, ``batching``, ``standin``, ``checks``: loaders and the offline zoo trainers; batched model runs; the
   stand-in hub; the one config check before any job (it reads the world's task list)
4. ``features``, ``extract``, ``evaluation``: features, and did a model learn (probes, LM likelihood)
5. ``studies``: one package per source document
6. ``plots``, ``figures``: figures read numbers, never compute them
7. ``cli``: the entry point
"""

from __future__ import annotations

import ast
import functools
from pathlib import Path

import pytest

from prh.config import SCHEMA, load_schema
from prh.studies.ledger import STUDIES

SRC = Path(__file__).resolve().parents[1] / "src"
LAYERS = [
    {"prh.io", "prh.errors", "prh.yamlfile", "prh.device", "prh.gpus", "prh.stats", "prh.pooling", "prh.bench",
     "prh.manifest", "prh.claims", "prh.report", "prh.forkserver"},
    {"prh.config", "prh.slices", "prh.metrics", "prh.pin", "prh.cluster"},
    {"prh.data"},
    {"prh.models", "prh.batching", "prh.standin", "prh.checks", "prh.lock"},
    {"prh.features", "prh.extract", "prh.evaluation", "prh.preflight"},
    {"prh.studies"},
    {"prh.plots", "prh.figures"},
    {"prh.cli"},
]
MAX_LINES = 400


def module_name(path: Path) -> str:
    parts = list(path.relative_to(SRC).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join(parts)


MODULES = {module_name(p): p for p in sorted((SRC / "prh").rglob("*.py"))}


def layer(module: str) -> int:
    for i, group in enumerate(LAYERS):
        if any(module == g or module.startswith(g + ".") for g in group):
            return i
    raise AssertionError(f"{module} belongs to no layer: add it to LAYERS in {__file__}")


def resolve(name: str) -> str:
    """The project module an import names (``prh.metrics.engine.x`` -> ``prh.metrics.engine``)."""
    while name not in MODULES and "." in name:
        name = name.rsplit(".", 1)[0]
    return name


def imports(module: str) -> list[tuple[str, list[str]]]:
    """(imported project module, names taken from it) for every import, function-level ones included."""
    tree = ast.parse(MODULES[module].read_text())
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [(resolve(a.name), []) for a in node.names if a.name.startswith("prh")]
        elif isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("prh") and not node.level:
            for a in node.names:
                sub = f"{node.module}.{a.name}"
                target = sub if sub in MODULES else node.module
                found.append((resolve(target), [] if sub in MODULES else [a.name]))
    return [(m, names) for m, names in found if m != "prh" and m != module]


def test_every_module_has_a_layer():
    for module in MODULES:
        if module != "prh":
            layer(module)


@pytest.mark.parametrize("module", [m for m in MODULES if m != "prh"])
def test_imports_point_down(module):
    up = [target for target, _ in imports(module) if layer(target) > layer(module)]
    assert not up, f"{module} (layer {layer(module)}) imports {up} from a higher layer"


@pytest.mark.parametrize("module", [m for m in MODULES if m != "prh"])
def test_no_private_names_across_modules(module):
    private = [(target, n) for target, names in imports(module) for n in names if n.startswith("_")]
    assert not private, f"{module} takes private names {private}"


def test_no_import_cycles():
    graph = {m: {t for t, _ in imports(m)} for m in MODULES}
    state: dict[str, int] = {}

    def visit(m, stack):
        state[m] = 1
        for t in sorted(graph.get(m, ())):
            if state.get(t) == 1:
                raise AssertionError("import cycle: " + " -> ".join(stack[stack.index(t):] + [t]))
            if t not in state:
                visit(t, stack + [t])
        state[m] = 2

    for m in sorted(graph):
        if m not in state:
            visit(m, [m])


def test_no_module_over_the_line_limit():
    long = {m: n for m, p in MODULES.items() if (n := len(p.read_text().splitlines())) > MAX_LINES}
    assert not long, f"split these by responsibility (> {MAX_LINES} lines): {long}"


@pytest.mark.parametrize("module", [m for m in MODULES if m != "prh"])
def test_imported_names_exist(module):
    """Function-level imports run only when their function does: check every name now."""
    import importlib

    missing = [(target, n) for target, names in imports(module) for n in names
               if not hasattr(importlib.import_module(target), n)]
    assert not missing, f"{module} imports names its sources do not define: {missing}"


HEAVY = ("torch", "transformers", "timm", "scipy", "sklearn", "matplotlib")


def test_the_workflow_parses_without_the_heavy_libraries():
    """Every Snakemake start (a no-op rerun, a dry run) runs the Snakefile's and the rules' top-level
    imports; torch alone costs ~2.7 s of it, scipy ~1.4 s. They import only light modules."""
    import subprocess
    import sys

    root = SRC.parent
    files = [root / "Snakefile", *sorted((root / "workflow" / "rules").glob("*.smk"))]
    lines = [line for f in files for line in f.read_text().splitlines() if line.startswith("from prh")]
    assert len(lines) >= 10, lines  # the workflow's imports were found
    check = "\n".join([*lines, "import sys", f"print(sorted(m for m in {HEAVY!r} if m in sys.modules))"])
    proc = subprocess.run([sys.executable, "-c", check], capture_output=True, text=True, check=True)
    assert proc.stdout.strip() == "[]", f"the workflow's imports load {proc.stdout.strip()}:\n" + "\n".join(lines)


def test_prh_metrics_loads_its_submodules_on_first_use():
    import subprocess
    import sys

    code = ("import sys; from prh.metrics import SUPPORTED_METRICS; a = 'torch' in sys.modules; "
            "import prh.metrics as m; k = m.knn; from prh.metrics import measure; print(a, k.__name__, callable(measure))")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert proc.stdout.split() == ["False", "prh.metrics.knn", "True"]


# ---- one name per study: package, rule file, schema, params key, results folder, figure prefix,
# plots module and report folder all use the study's name, which its manifest declares
ROOT = SRC.parent


def _studies():
    from prh.studies.ledger import manifests

    return manifests()


@functools.cache
def _filled_params() -> dict:
    """params.yaml with the schema's defaults filled (prh.config.validate_schema)."""
    from prh.config import load, validate_schema

    return validate_schema(load(ROOT / "params.yaml"))


def _required(name: str) -> list:
    """The keys a study's schema requires at its top level (then params.yaml must give its block)."""
    return load_schema(SCHEMA.parent / f"{name}.schema.yaml").get("required", [])


@pytest.mark.parametrize("name", STUDIES)  # the one list of studies, not a copy of it
def test_one_name_per_study(name):
    import re

    import yaml

    study = _studies()[name]
    assert (SRC / "prh" / "studies" / name / "__init__.py").exists(), "package"
    assert (SRC / "prh" / "studies" / name / "manifest.yaml").exists(), "manifest"
    rules = ROOT / "workflow" / "rules" / f"{name}.smk"
    assert rules.exists(), "rule file"
    assert (ROOT / "workflow" / "schemas" / f"{name}.schema.yaml").exists(), "schema"
    params = yaml.safe_load((ROOT / "params.yaml").read_text())
    assert name in _filled_params(), "params.yaml key (its block, or its schema's defaults)"
    schema = yaml.safe_load((ROOT / "workflow" / "schemas" / "params.schema.yaml").read_text())
    assert schema["properties"][name] == {"$ref": f"{name}.schema.yaml", "default": {}}, "params.schema.yaml block"
    assert name in params or not _required(name), f"{name}: its schema requires keys, so params.yaml needs its block"
    assert f'study_outputs("{name}"' in rules.read_text(), "results folder (its manifest's outputs)"
    assert (SRC / "prh" / "plots" / f"{name}.py").exists(), "plots module"
    assert (ROOT / "workflow" / "report" / name).is_dir(), "report folder"
    for fig in study.figures:
        assert fig.name.startswith(f"{name}_") and fig.draw.startswith(f"prh.plots.{name}:"), fig.name
        assert (ROOT / "workflow" / "report" / f"{fig.caption}.rst").exists(), fig.caption
    for key, out in study.outputs.items():
        assert re.fullmatch(r"\w+", key) and out.endswith((".json", ".csv", ".npy", ".safetensors")), (key, out)


def test_every_study_is_in_the_ledger_and_nothing_else_is_a_study():
    from prh.studies.ledger import STUDIES

    packages = {p.parent.name for p in (SRC / "prh" / "studies").glob("*/__init__.py")}
    assert packages == set(STUDIES)


def test_every_command_of_a_study_is_a_cli_command_and_named_by_one_study():
    from prh.cli import STAGES

    commands = {c for stage in STAGES.values() for c in stage}
    seen = {}
    for name, study in _studies().items():
        for command in study.commands:
            assert command in commands, f"{name}: {command}"
            assert command not in seen, f"{command} is declared by {seen.get(command)} and {name}"
            seen[command] = name
    assert set(STAGES["studies"]) <= set(seen), set(STAGES["studies"]) - set(seen)  # the studies' commands, only


# ---- the workflow's shape: common.smk holds only what the rule files share, each study's
# names live in its rule file, and a rule hands a command one path per file, never a folder to fill
RULES = ROOT / "workflow" / "rules"
# Rules whose command writes a directory artifact, a data contract: a dataset dir, a
# save_pretrained checkpoint dir, a prepared imagefolder. Every other rule names each file it writes.
DIRECTORY_RULES = {"hub_dataset", "lm_sample", "train_vision", "train_tokenizer", "train_language_", "minilm",
                   "prepare_", "summarise_captions"}


def _includes() -> list[str]:
    """The rule files in the Snakefile's include order: its own ``include:`` lines, and where its loop over the studies
    stands, each study's rule file in the studies' order."""
    import re

    from prh.manifest import study_names

    found = re.findall(r'^(?:include: "workflow/rules/(\w+\.smk)"|(for _study in study_names\(\):))',
                       (ROOT / "Snakefile").read_text(), re.M)
    assert sum(bool(loop) for _, loop in found) == 1, "the Snakefile includes the studies' rule files in one loop"
    order = [smk for own, loop in found for smk in ([own] if own else [f"{s}.smk" for s in study_names()])]
    assert len(order) == len(set(order)), f"a rule file is included twice: {order}"
    return order


def _rule_blocks(text: str):
    """(rule name, its text) for each rule of a rule file; a loop's rules by their f-string's prefix."""
    import re

    starts = [m for m in re.finditer(r"^\s*rule(?: (\w+))?:\n(?:\s*name:\n\s*f\"(\w+?)\{)?", text, re.M)]
    for m, end in zip(starts, [s.start() for s in starts[1:]] + [len(text)]):
        yield m.group(1) or m.group(2), text[m.start():end]


def _code(text: str) -> str:
    """A rule file without its comments (a line's `# ...` outside strings)."""
    import re

    return "\n".join(re.sub(r"(^|\s)#.*$", "", line) if not re.search(r"[\"'][^\"']*#", line) else line
                     for line in text.splitlines())


def test_common_smk_holds_only_shared_helpers_in_under_200_lines():
    assert len((RULES / "common.smk").read_text().splitlines()) < 200


def test_no_rule_passes_a_folder_where_the_command_chooses_the_file_names():
    """--out-dir / --in-dir handed a folder in which the library picked the names; rules now pass {output.x}."""
    for smk in sorted(RULES.glob("*.smk")):
        code = _code(smk.read_text())
        for banned in ("--out-dir", "--in-dir", "out_dir", "in_dir"):
            assert banned not in code, f"{smk.name} passes {banned}"
        for name, block in _rule_blocks(code):
            if "dirname(output" in block:
                assert name.startswith(tuple(DIRECTORY_RULES)), f"{smk.name}: rule {name} passes os.path.dirname(output)"


@pytest.mark.parametrize("name", STUDIES)
def test_a_study_s_rules_name_its_files_only_through_its_manifest(name):
    """A file name under results/experiments/<study>/ is written once, in its manifest.yaml's outputs; the rules take
    their paths from study_outputs (a renamed output moves rules, figures and ledger together)."""
    code = _code((RULES / f"{name}.smk").read_text())
    assert "experiments/" not in code and "/experiments" not in code, f"{name}.smk types a results/experiments path"


def test_an_unknown_output_key_names_the_study_and_its_outputs(tmp_path):
    from prh.manifest import load_study, output_paths

    with pytest.raises(ValueError, match=r"study density declares no output sweep .*its outputs are density, metrics"):
        output_paths("density", "results", ("sweep",))
    assert output_paths("lte", "r", ("paper",)) == {"paper": "r/experiments/lte/paper/{dataset}__{model}.json"}
    text = (SRC / "prh" / "studies" / "density" / "manifest.yaml").read_text()
    (tmp_path / "manifest.yaml").write_text(text.replace("    density: density\n", "    density: densities\n"))
    with pytest.raises(ValueError, match=r"density_fig09_caption_density names output 'densities'; its outputs are"):
        load_study(tmp_path / "manifest.yaml")


@pytest.mark.parametrize("smk", [p.name for p in sorted(RULES.glob("*.smk")) if p.name != "common.smk"])
def test_a_rule_file_defines_no_functions(smk):
    """snakemake --lint wants rules and functions apart: functions live in common.smk, a rule file's own
    helpers are dicts, path templates and lambdas."""
    import re

    assert not re.search(r"^\s*def \w+", (RULES / smk).read_text(), re.M)


def test_no_rule_file_reads_a_name_a_later_include_defines():
    """A rule file runs top to bottom when the Snakefile includes it: a name defined by a later file is either
    unknown yet or read only by luck inside a lambda (as common.smk's lte_slice read lte.smk's LTE_CFG)."""
    import re

    order = _includes()
    assert order[0] == "common.smk" and set(order) == {p.name for p in RULES.glob("*.smk")}
    codes = [_code((RULES / smk).read_text()) for smk in order]
    defined = {}
    for i, code in enumerate(codes):
        for name in re.findall(r"^(?:def |class )?([A-Za-z_]\w*)(?= *=[^=]| *\()", code, re.M):
            defined.setdefault(name, i)
        for names in re.findall(r"^([A-Za-z_]\w*(?:, *[A-Za-z_]\w*)+) *=[^=]", code, re.M):
            for name in re.split(r", *", names):
                defined.setdefault(name, i)
    early = sorted((order[i], name, order[defined[name]]) for i, code in enumerate(codes)
                   for name in set(re.findall(r"\b[A-Za-z_]\w*\b", code)) if defined.get(name, -1) > i)
    assert not early, f"(file, name, defined later in): {early}"


def test_one_host_memory_formula():
    """A job that loads a model asks common.smk's host_mem_mb (there were two formulas for the same memory),
    through common.smk's MODEL_JOB resources."""
    texts = {smk.name: smk.read_text() for smk in RULES.glob("*.smk")}
    assert sum(text.count("8000 +") for text in texts.values()) == 1 and "def host_mem_mb(" in texts["common.smk"]
    assert "mem_mb=lambda w: host_mem_mb(w.model)" in texts["common.smk"]
    for smk in ("features.smk", "paper_data.smk", "downstream.smk", "density.smk"):
        assert "**MODEL_JOB," in texts[smk], smk


def test_every_job_size_is_read_by_one_rule():
    """prh.cluster.sizes.JOB_SIZES holds the resources of the fixed-size rules, one entry each: a rule reads its own
    (a name the table lacks fails the parse), and no entry outlives its rule or serves two."""
    import re

    from prh.cluster.sizes import JOB_SIZES

    read = [key for smk in RULES.glob("*.smk") for key in re.findall(r'\*\*JOB_SIZES\["(\w+)"\]', smk.read_text())]
    assert sorted(read) == sorted(JOB_SIZES)
    assert all(set(size) == {"mem_mb", "runtime"} for size in JOB_SIZES.values())


def _schema_default_blocks() -> list[dict]:
    """Every dict of defaults the schemas give (each block and each nested block)."""
    import yaml

    from prh.config import schema_defaults

    root = yaml.safe_load((ROOT / "workflow" / "schemas" / "params.schema.yaml").read_text())
    found = []

    def walk(d):
        if isinstance(d, dict):
            found.append(d)
            for v in d.values():
                walk(v)
    for block in root["properties"]:
        walk(schema_defaults(block))
    return found


def test_no_hand_copy_of_a_schema_default():
    """The schemas are the one home of every default. A module-level dict literal in src/prh
    whose entries repeat three or more of one schema block's defaults is a copy; so is a rule's
    ``.get("key", literal)`` where the schema fills ``key``."""
    import re

    blocks = _schema_default_blocks()
    for module, path in MODULES.items():
        for node in ast.parse(path.read_text()).body:
            if isinstance(node, ast.Assign) and isinstance(node.value, (ast.Dict, ast.Call)):
                try:
                    value = ast.literal_eval(node.value) if isinstance(node.value, ast.Dict) else (
                        {k.arg: ast.literal_eval(k.value) for k in node.value.keywords}
                        if getattr(node.value.func, "id", None) == "dict" else None)
                except ValueError:
                    continue
                if not isinstance(value, dict):
                    continue
                for block in blocks:
                    same = [k for k in value if k in block and block[k] == value[k]]
                    assert len(same) < 3, f"{module}: {ast.unparse(node.targets[0])} copies schema defaults {same}"
    defaults = {}
    for block in blocks:
        for k, v in block.items():
            defaults.setdefault(k, []).append(v)
    for smk in sorted(RULES.glob("*.smk")):
        for key, literal in re.findall(r'\.get\("(\w+)", ("[^"]*"|[-+0-9.e]+)\)', smk.read_text()):
            assert ast.literal_eval(literal) not in defaults.get(key, []), \
                f"{smk.name}: .get({key!r}, {literal}) copies a schema default"
