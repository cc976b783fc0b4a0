"""A Snakemake rule param that lets a report caption quote the numbers of a finished run (workflow/rules/figures.smk).

Imported by the rule files only, never by a `prh` command, so editing it changes no command's code hash.
"""
import json


class ReportNumbers:
    """A rule param that lets a report caption quote the numbers of a finished run.

    Captions are rendered by `snakemake --report` after the run, with the job's params:
    ``{{ snakemake.params.numbers.get("results/.../metrics.json", "trend", "spearman_r") }}``
    reads the JSON then. Its repr is constant, so it never triggers a rerun.
    """

    def load(self, path):
        """The whole JSON (an empty dict before the run), for loops in a caption."""
        try:
            with open(path) as f:
                return json.load(f)
        except (OSError, ValueError):
            return {}

    def fmt(self, value, spec=".3g"):
        """A number as the caption shows it; JSON null (an undefined statistic) as NaN."""
        if value is None:
            return "NaN"
        return format(value, spec) if isinstance(value, (int, float)) and not isinstance(value, bool) else str(value)

    def get(self, path, *keys, fmt=".3g"):
        value = self.load(path)
        try:
            for key in keys:
                value = value[key]
        except (KeyError, IndexError, TypeError):
            return "n/a"
        return self.fmt(value, fmt)

    def __repr__(self):
        return "ReportNumbers()"
