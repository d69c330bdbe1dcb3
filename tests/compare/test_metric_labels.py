"""One name per quantity: a trajectory's label is written once, in the metric table (the METRIC entries of
experiments/store/include/tandem/store/row_columns.h and the derived rows of experiments/compare/src/metrics.cpp),
and every message, verdict, report table and workbench control that names the quantity takes it from there
(`series_label`, `metric_info(...).label`). A grep over the C++ sources: a string literal that is exactly a
label, anywhere else, is a second list that can drift from the first (the grad norm was "grad norm" on the
panel and "pre-clip grad norm" in the verdict)."""
import os
import re

SOURCE = os.environ.get("TANDEM_SOURCE_DIR", os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
ROW_COLUMNS = "experiments/store/include/tandem/store/row_columns.h"
METRICS = "experiments/compare/src/metrics.cpp"
# where the words a user reads come from: what experiments/ prints (messages, verdicts, the report), the
# workbench and the CLI
ROOTS = ["experiments", "views", "app"]


def read(rel):
    with open(os.path.join(SOURCE, rel), encoding="utf-8") as f:
        return f.read()


def labels():
    # METRIC(member, initial, Enumerator, label, short_label, ...) and {Metric::X, label, short_label, ...}
    found = re.findall(r'METRIC\(\s*\w+\s*,\s*[^,]+,\s*\w+\s*,\s*"([^"]+)"', read(ROW_COLUMNS))
    found += re.findall(r'\{Metric::\w+\s*,\s*"([^"]+)"', read(METRICS))
    return found


def without_comments(text):
    return "\n".join(line.split("//", 1)[0] for line in text.splitlines())


def test_the_table_has_the_labels_the_user_reads():
    got = labels()
    # the trajectories of docs/workbench.md, the grad norm named as the verdicts name it (pre-clip)
    for label in ("held-out CE", "training loss", "pre-clip grad norm", "learning rate", "throughput"):
        assert label in got, (label, got)
    assert len(set(got)) == len(got), got


def test_no_label_is_written_outside_the_metric_table():
    literal = re.compile("|".join(r'"' + re.escape(label) + r'"' for label in labels()))
    seen = []
    for root in ROOTS:
        for d, dirs, names in os.walk(os.path.join(SOURCE, root)):
            dirs[:] = [x for x in dirs if x not in ("build", ".git", "__pycache__")]
            for n in names:
                if not n.endswith((".cpp", ".h")):
                    continue
                path = os.path.join(d, n)
                rel = os.path.relpath(path, SOURCE).replace(os.sep, "/")
                if rel in (ROW_COLUMNS, METRICS):
                    continue
                with open(path, encoding="utf-8", errors="replace") as f:
                    for number, line in enumerate(without_comments(f.read()).splitlines(), 1):
                        if literal.search(line):
                            seen.append(f"{rel}:{number}: {line.strip()}")
    assert not seen, "labels written outside the metric table (use series_label / metric_info):\n" + "\n".join(seen)
