"""The README's generated claims table (``prh claims-ledger --readme README.md``): ``table`` renders a ledger (or,
without one, what every study claims) and ``replace_block`` puts it between the README's markers. Split from
``prh.studies.ledger``, which builds and joins the ledger."""

from __future__ import annotations

from prh.errors import UsageError

__all__ = ["table", "replace_block"]


def _fmt(x) -> str:
    if x is None:
        return ""
    if isinstance(x, list):
        return " / ".join(_fmt(v) for v in x)
    if isinstance(x, bool):
        return str(x)
    if isinstance(x, int):
        return str(x)
    return f"{x:.3g}"


def table(ledger: dict | None = None, *, studies: dict | None = None) -> str:
    """The README's generated claims table: with a ledger, its verdicts and numbers; without one, what
    every study claims (``studies``: name -> its manifest), the verdict columns left to a run."""
    if ledger is None:
        lines = ["| claim | source | statement | unit | rule |", "| --- | --- | --- | --- | --- |"]
        for name, study in (studies or {}).items():
            lines += [f"| `{name}.{c.key}` | {c.source} | {c.statement} | {c.unit} | {c.rule} |" for c in study.claims]
        return "\n".join(lines)
    seeds = ledger.get("replicate_seeds")
    lines = [f"Suite `{ledger['suite']}`" + (f", master seeds {', '.join(map(str, seeds))}" if seeds else "") + ": "
             + ", ".join(f"{v} {k}" for k, v in ledger["counts"].items()) + ". "
             "Verdicts weigh the evidence (`prh.claims.DECISION_RULE`): value, interval and p are the "
             "replicates' pooled ones; SESOI is the smallest effect of interest, MDE the smallest effect the test "
             "detects with 80 % power (Fisher-z or normal approximation); *registered* is the verdict under the rule "
             "first registered; a rule marked **post hoc** was set after results had been seen (`post_hoc` in the "
             "ledger).", "",
             "| claim | source | verdict | registered | statistic | value | interval | p | n | SESOI | MDE | rule set "
             "| unit | runs |",
             "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    gates = [r for r in ledger["claims"] if r.get("validity_gate")]
    if gates:  # not claims: said beside the counts, not counted, not in the claims' table
        lines[0] += " Validity gates, not counted: " + "; ".join(
            f"`{r['id']}` {r['verdict']} ({r['statistic']}: {_fmt(r['value'])}, n {_fmt(r['n'])}; {r['note'] or ''})"
            .replace(" ()", "").replace("; )", ")") for r in gates) + "."
    for r in [r for r in ledger["claims"] if not r.get("validity_gate")]:
        verdict = r["verdict"] + (f" ({r['provisional']})" if r["provisional"] else "")
        interval = "" if r["interval"] is None else f"[{_fmt(r['interval'][0])}, {_fmt(r['interval'][1])}]"
        per_seed = r.get("per_seed")
        runs = _fmt(r.get("seeds")) + (" (" + " / ".join(e.get("verdict_registered") or e["verdict"]
                                                         for e in per_seed) + ")" if per_seed else "")
        registered = r.get("verdict_registered") or r["verdict"]
        post_hoc = r.get("post_hoc")
        rule_set = "" if post_hoc is None else "**post hoc**" if "POST-HOC" in post_hoc else "registered"
        lines.append(f"| `{r['id']}` | {r['source']} | {verdict} | {registered} | {r['statistic']} | {_fmt(r['value'])} | "
                     f"{interval} | {_fmt(r['p'])} | {_fmt(r['n'])} | {_fmt(r.get('sesoi'))} | {_fmt(r.get('mde'))} | "
                     f"{rule_set} | {r['unit']} | {runs} |")
    return "\n".join(lines)


def replace_block(text: str, name: str, content: str) -> str:
    """``text`` with the lines between ``<!-- generated:name -->`` and ``<!-- /generated:name -->`` replaced."""
    start, end = f"<!-- generated:{name} -->", f"<!-- /generated:{name} -->"
    if text.count(start) != 1 or text.count(end) != 1 or text.index(start) > text.index(end):
        raise UsageError(f"the file needs one '{start}' line followed by one '{end}' line")
    head, rest = text.split(start, 1)
    _, tail = rest.split(end, 1)
    return f"{head}{start}\n{content}\n{end}{tail}"
