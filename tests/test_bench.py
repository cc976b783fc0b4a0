"""prh bench-summary: CPU seconds per rule family from Snakemake benchmark files."""

from __future__ import annotations

import json
import re
import logging
from types import SimpleNamespace

import pytest
import yaml

from prh.bench import (COSTS_FILE, TimeLeft, dry_run_duration, expected_duration, family_of, format_expected, main,
                       read_benchmarks, read_costs, start_run, summarise)

HEADER = "s\th:m:s\tmax_rss\tmax_vms\tmax_uss\tmax_pss\tio_in\tio_out\tmean_load\tcpu_time\n"


def bench(root, rel, *rows):
    path = root / rel
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(HEADER + "".join(f"{wall}\t0:00:00\t{rss}\t0\t0\t0\t0\t0\t0\t{cpu}\n" for wall, rss, cpu in rows))


def test_families_are_summed_sorted_and_repeats_averaged(tmp_path):
    bench(tmp_path, "align/shapes/mutual_knn/a__b.tsv", (10, 500, 18.0))
    bench(tmp_path, "align/shapes/cka/a__b.tsv", (5, 700, 8.0), (7, 900, 12.0))  # repeat(2): mean 10 CPU s
    bench(tmp_path, "extract_vision/m1.tsv", (40, 2000, 70.0))
    bench(tmp_path, "plot/fig2.tsv", (0.5, 30, "NA"))
    families = summarise(read_benchmarks(tmp_path))
    assert [f.family for f in families] == ["extract_vision", "align", "plot"]
    align = families[1]
    assert (align.jobs, align.cpu_s, align.wall_s, align.max_rss_mb, align.unmeasured) == (2, 28.0, 16.0, 900.0, 0)
    assert families[2].unmeasured == 1 and families[2].cpu_s == 0.0


def test_cli_prints_and_writes_the_table(tmp_path, capsys):
    bench(tmp_path / "b", "train_language_r0/x.tsv", (100, 1000, 190.0))
    bench(tmp_path / "b", "align/y.tsv", (10, 100, 10.0))
    out = tmp_path / "summary.md"
    main(["--root", str(tmp_path / "b"), "--out", str(out)])
    printed = capsys.readouterr().out
    assert printed == out.read_text()
    lines = printed.splitlines()
    assert lines[2].startswith("| train_language_r0 | 1 | 190 | 95.0% |")
    assert lines[-1].startswith("| **total** | 2 | 200 | 100.0% |")


def test_bad_input_names_the_file_or_folder(tmp_path):
    with pytest.raises(SystemExit, match="no benchmark folder"):
        main(["--root", str(tmp_path / "missing")])
    (tmp_path / "r").mkdir()
    (tmp_path / "r" / "x.tsv").write_text("not\ta benchmark\n")
    with pytest.raises(ValueError, match=r"x\.tsv is not a Snakemake benchmark file"):
        read_benchmarks(tmp_path / "r")


def test_costs_price_a_plan_from_a_measured_run(tmp_path, capsys):
    bench(tmp_path / "b", "train_language/r0.tsv", (100, 1000, 200.0))
    bench(tmp_path / "b", "train_language/r1.tsv", (100, 1000, 100.0))  # family mean 150 CPU s a job
    bench(tmp_path / "b", "plot/a.tsv", (1, 100, 10.0))
    bench(tmp_path / "b", "plot/b.tsv", (1, 100, 30.0))  # family mean 20
    costs_path = tmp_path / "costs.json"
    main(["--root", str(tmp_path / "b"), "--costs-out", str(costs_path), "--wall-s", "300", "--cores", "2", "--run", "test"])
    capsys.readouterr()
    costs = read_costs(costs_path)
    assert costs["families"]["train_language"] == {"jobs": 2, "cpu_s": 300.0, "wall_s": 200.0, "max_rss_mb": 1000.0,
                                                   "unmeasured": 0}
    # the run: 340 CPU s in 300 s on 2 cores -> 340 / 600 of its cores used
    est = expected_duration(["train_language", "plot", "plot", "new_rule", None], costs=costs, cores=2)
    median = (150 + 20) / 2  # a family the run did not measure costs the median family mean; `all` (None) nothing
    assert est["cpu_s"] == pytest.approx(150 + 20 + 20 + median)
    assert est["utilisation"] == pytest.approx(340 / 600)
    assert est["wall_s"] == pytest.approx(est["cpu_s"] / (2 * 340 / 600))
    assert est["unpriced"] == 1 and est["jobs"] == 5
    # one core: twice the wall; one long job bounds the wall from below
    assert expected_duration(["train_language"] * 2, costs=costs, cores=1)["wall_s"] == pytest.approx(300 / (340 / 600))
    assert expected_duration(["train_language"], costs=costs, cores=64)["wall_s"] == pytest.approx(150 / (340 / 600))
    line = format_expected(est)
    assert line.startswith("Expected duration: about ") and "5 jobs" in line and "1 of them priced at the median" in line
    assert COSTS_FILE in line and "test" in line


def test_family_of_is_the_folder_under_benchmarks():
    assert family_of("results/benchmarks/plot/fig2.tsv") == "plot"
    assert family_of("results/replicates/seed1000/benchmarks/train_language/gpt2_s_r0.tsv") == "train_language"
    assert family_of("results/benchmarks/claims_ledger.tsv") == "claims_ledger"  # as read_job names it
    assert family_of(None) is None and family_of("results/benchmarks") is None


def test_costs_bad_input(tmp_path):
    bench(tmp_path / "b", "plot/a.tsv", (1, 100, 10.0))
    with pytest.raises(SystemExit):  # argparse: --costs-out without the run's wall time
        main(["--root", str(tmp_path / "b"), "--costs-out", str(tmp_path / "c.json")])
    with pytest.raises(SystemExit, match="--wall-s"):
        main(["--root", str(tmp_path / "b"), "--costs-out", str(tmp_path / "c.json"), "--wall-s", "0", "--cores", "2"])
    (tmp_path / "bad.json").write_text(json.dumps({"families": {}}))
    with pytest.raises(ValueError, match=r"bad\.json is not a costs file"):
        read_costs(tmp_path / "bad.json")


def test_the_committed_costs_file_prices_the_default_plan():
    from pathlib import Path

    costs = read_costs(Path(__file__).resolve().parents[1] / COSTS_FILE)
    assert costs["cores"] >= 1 and costs["wall_s"] > 0 and "train_language" in costs["families"]


def test_every_prh_command_records_its_exact_costs_when_asked(tmp_path):
    import os
    import subprocess
    import sys

    bench(tmp_path / "b", "plot/a.tsv", (1, 100, 10.0))
    log = tmp_path / "rusage.jsonl"
    env = {**os.environ, "PRH_RUSAGE_LOG": str(log)}
    ok = subprocess.run([sys.executable, "-m", "prh.cli", "bench-summary", "--root", str(tmp_path / "b")], env=env)
    bad = subprocess.run([sys.executable, "-m", "prh.cli", "bench-summary", "--root", str(tmp_path / "none")], env=env,
                         capture_output=True)
    assert (ok.returncode, bad.returncode) == (0, 1)
    lines = [json.loads(line) for line in log.read_text().splitlines()]
    assert [(x["command"], x["status"]) for x in lines] == [("bench-summary", 0), ("bench-summary", 1)]
    assert lines[0]["argv"] == ["--root", str(tmp_path / "b")]
    # the interpreter's start-up and imports are in a command's CPU; peak memory is that of a Python process
    assert all(x["cpu_s"] > 0.01 and x["wall_s"] > 0 and 5 < x["max_rss_mb"] < 2000 for x in lines)


def test_rusage_counts_the_children_a_command_waited_for(tmp_path):
    import subprocess
    import sys

    from prh.bench import record_rusage

    subprocess.run([sys.executable, "-c", "import time\nt = time.process_time()\nwhile time.process_time() - t < 0.3: pass"],
                   check=True)
    record_rusage(str(tmp_path / "r.jsonl"), command="x", argv=[], wall_s=1.0, status=0)
    (line,) = (tmp_path / "r.jsonl").read_text().splitlines()
    assert json.loads(line)["children_cpu_s"] >= 0.3


def test_commands_log_counts_a_rerun_job_once_and_names_a_bad_line(tmp_path):
    from prh.bench import format_commands, read_commands

    def rec(command, argv, cpu, kids=0.0, wall=1.0):
        return json.dumps({"command": command, "argv": argv, "status": 0, "wall_s": wall, "cpu_s": cpu,
                           "children_cpu_s": kids, "max_rss_mb": 100})

    log = tmp_path / "commands.jsonl"
    ranks = [json.dumps({**json.loads(rec("run-lte", ["e"], 3.0)), "rank": r}) for r in ("0", "1")]
    log.write_text("\n".join([rec("align", ["a"], 5.0), rec("align", ["a"], 7.0, 1.0),  # rerun: the last counts
                              rec("align", ["b"], 2.0), rec("plot", ["x"], 1.0), *ranks]) + "\n")
    commands = read_commands(log)
    assert commands == {"align": {"runs": 2, "cpu_s": 10.0, "wall_s": 2.0}, "plot": {"runs": 1, "cpu_s": 1.0, "wall_s": 1.0},
                        "run-lte": {"runs": 2, "cpu_s": 6.0, "wall_s": 2.0}}  # torchrun's two ranks: same argv, both count
    text = format_commands(commands, sampled_cpu_s=8.0)
    assert "17 CPU s in 5 runs" in text and "(+9 s unsampled)" in text and "| align | 2 | 10 | 2 |" in text
    log.write_text(rec("plot", ["x"], 1.0) + "\nnot json\n")
    with pytest.raises(ValueError, match=r"commands\.jsonl, line 2"):
        read_commands(log)


# ---- what a run prints ----


COSTS = {"run": "toy", "wall_s": 100.0, "cores": 1,
         "families": {"train": {"jobs": 2, "cpu_s": 600.0, "wall_s": 600.0, "max_rss_mb": 1, "unmeasured": 0},
                      "plot": {"jobs": 1, "cpu_s": 10.0, "wall_s": 10.0, "max_rss_mb": 1, "unmeasured": 0}}}


def snakemake_record(event=None, msg=None, **extra):
    """A log record as Snakemake's scheduler makes one (``logger.info(msg, extra=dict(event=LogEvent..., ...))``)."""
    from snakemake_interface_logger_plugins.common import LogEvent

    record = logging.LogRecord("snakemake.logging", logging.INFO, __file__, 0, msg, None, None)
    record.__dict__.update({"event": LogEvent[event.upper()], **extra} if event else extra)
    return record


def test_the_progress_line_says_the_steps_and_the_time_left():
    from snakemake.logging import DefaultFormatter

    fmt = TimeLeft(DefaultFormatter(), {1: "train", 2: "train", 3: "plot", 0: None}, costs=COSTS, cores=1)
    # a train job costs 300 CPU s, at full use of the one core (the toy run's 610 CPU s in 100 s is capped at 100%)
    lines = []
    for jobid in (1, 2, 3, 0):
        assert fmt.format(snakemake_record("job_finished", f"Finished jobid: {jobid} (Rule: x)", job_id=jobid)) \
            .endswith(f"Finished jobid: {jobid} (Rule: x)")
        lines.append(fmt.format(snakemake_record("progress", done=len(lines) + 1, total=4)))
    assert lines == ["1 of 4 steps (25%) done, 3 left, about 5 min to go", "2 of 4 steps (50%) done, 2 left",
                     "3 of 4 steps (75%) done, 1 left", "4 of 4 steps (100%) done, 0 left"]
    assert fmt.format(snakemake_record(None, "Select jobs to execute...")) == "Select jobs to execute..."


def test_start_run_puts_the_time_left_on_snakemake_s_terminal_handler_only(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("PRH_RUSAGE_LOG", "unset")  # recorded, so that teardown removes what start_run sets
    monkeypatch.delenv("PRH_RUSAGE_LOG")
    (tmp_path / "costs.json").write_text(json.dumps(COSTS))
    terminal, logfile = logging.StreamHandler(), logging.FileHandler(tmp_path / "log")
    terminal.name = "DefaultStreamHandler"
    start_run(["results/benchmarks/train/a.tsv", None], results=str(tmp_path), cores=1,
              costs_path=tmp_path / "costs.json", jobids=[1, 0], handlers=[logfile, terminal])
    assert "Expected duration: about 5 min on 1 core for 2 jobs" in capsys.readouterr().err
    assert isinstance(terminal.formatter, TimeLeft) and not isinstance(logfile.formatter, TimeLeft)
    assert terminal.formatter.left == {1: "train", 0: None}


def test_a_dry_run_ends_with_its_expected_duration(tmp_path, capsys):
    (tmp_path / "costs.json").write_text(json.dumps(COSTS))
    jobs = [SimpleNamespace(benchmark="results/benchmarks/train/a.tsv"), SimpleNamespace(benchmark=None)]

    class Dag(list):
        def needrun_jobs(self, exclude_finished=True):
            return list(self)

    for dryrun, expected in ((True, "Expected duration: about 5 min on 1 core for 2 jobs"), (False, "")):
        dry_run_duration(SimpleNamespace(dryrun=dryrun, dag=Dag(jobs), cores=1), tmp_path / "costs.json")
        assert capsys.readouterr().err.startswith(expected) if expected else not capsys.readouterr().err
    dry_run_duration(SimpleNamespace(dryrun=True, dag=Dag(), cores=1), tmp_path / "costs.json")  # nothing to do
    assert not capsys.readouterr().err


def test_the_default_profile_prints_progress_not_shell_commands(repo_root):
    profile = yaml.safe_load((repo_root / "profiles" / "default" / "config.yaml").read_text())
    assert profile.get("printshellcmds", False) is False  # some commands are JSON of thousands of characters
    quiet = set(profile.get("quiet") or [])
    # not the progress lines, nor the rule blocks: `quiet: rules` would hide a failed job's error and log too
    assert "host" in quiet and not quiet & {"progress", "rules", "all"}, quiet
    assert profile["show-failed-logs"] is True


def test_on_a_terminal_the_progress_line_is_rewritten_in_place_below_the_messages(tmp_path, monkeypatch):
    import io

    from snakemake.logging import ColorizingTextHandler, DefaultFormatter

    class Terminal(io.StringIO):
        def isatty(self):
            return True

    monkeypatch.setenv("PRH_RUSAGE_LOG", "unset")
    monkeypatch.delenv("PRH_PROGRESS", raising=False)
    (tmp_path / "costs.json").write_text(json.dumps(COSTS))

    def run(stream):
        terminal = ColorizingTextHandler(nocolor=True, stream=stream)
        terminal.setFormatter(DefaultFormatter())
        terminal.name = "DefaultStreamHandler"
        start_run(["results/benchmarks/plot/a.tsv", "results/benchmarks/plot/b.tsv"], results=str(tmp_path), cores=1,
                  costs_path=tmp_path / "costs.json", jobids=[1, 2], handlers=[terminal])
        for record in (snakemake_record(None, "Select jobs to execute..."),
                       snakemake_record("job_finished", "Finished jobid: 1 (Rule: a)", job_id=1),
                       snakemake_record("progress", done=1, total=2),
                       snakemake_record(None, "Select jobs to execute..."),
                       snakemake_record("job_finished", "Finished jobid: 2 (Rule: b)", job_id=2),
                       snakemake_record("progress", done=2, total=2),
                       snakemake_record(None, "Complete log: x")):
            terminal.handle(record)
        return re.sub(r"\[\w{3} \w{3} +\d+ [\d:]+ \d{4}\]\n", "", stream.getvalue())  # the timestamps of job ends

    clear = TimeLeft.CLEAR
    out = run(Terminal())
    assert out == ("Select jobs to execute...\nFinished jobid: 1 (Rule: a)\n" + clear + "1 of 2 steps (50%) done, 1 left"
                   + clear + "Select jobs to execute...\n1 of 2 steps (50%) done, 1 left"
                   + clear + "Finished jobid: 2 (Rule: b)\n1 of 2 steps (50%) done, 1 left"
                   + clear + "2 of 2 steps (100%) done, 0 left\nComplete log: x\n")
    # what a screen shows: each message once, above the one progress line, which ends with the run
    screen = [line.rsplit("\r\x1b[2K", 1)[-1] for line in out.split("\n")]
    assert screen == ["Select jobs to execute...", "Finished jobid: 1 (Rule: a)", "Select jobs to execute...",
                      "Finished jobid: 2 (Rule: b)", "2 of 2 steps (100%) done, 0 left", "Complete log: x", ""]
    # not a terminal (a CI log, a file), or PRH_PROGRESS=lines: one line per message, as before
    assert "\r" not in run(io.StringIO())
    monkeypatch.setenv("PRH_PROGRESS", "lines")
    assert "\r" not in run(Terminal())


def test_a_command_records_its_own_peak_memory_not_its_parents(tmp_path):
    """ru_maxrss of a process started by (v)fork and exec keeps its parent's RSS at the fork: a command run from a
    pytest worker of 2 GB had recorded 2 GB. A parent holding 600 MB runs `prh bench-summary`: the record is the
    command's own peak (VmHWM), tens of MB."""
    import os
    import subprocess
    import sys

    bench(tmp_path / "b", "plot/a.tsv", (1, 100, 10.0))
    log = tmp_path / "rusage.jsonl"
    parent = ("import subprocess, sys\n"
              "held = bytearray(600 * 2**20)\n"
              "held[::4096] = b'x' * len(held[::4096])\n"  # touched: resident
              f"subprocess.run([sys.executable, '-m', 'prh.cli', 'bench-summary', '--root', {str(tmp_path / 'b')!r}],"
              " check=True, capture_output=True)\n")
    subprocess.run([sys.executable, "-c", parent], env={**os.environ, "PRH_RUSAGE_LOG": str(log)}, check=True)
    (line,) = [json.loads(x) for x in log.read_text().splitlines()]
    assert 5 < line["max_rss_mb"] < 300, line
