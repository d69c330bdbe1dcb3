"""Every verdict word in the docs, the CLI, the catalog and the workbench is from the one list
(docs/thresholds.md "The verdict"): equivalent, different, within the seed envelope, outside
the seed envelope, not judged, incomplete. A grep over the source tree, against the list the code
itself holds (verdict_words() in experiments/compare/src/distance.cpp) and the table of the docs.

Old words (the verdicts before the one list) must be gone from every file a user or a developer reads: a
verdict that says "not comparable" when tandem did compare, or "numerically different but within the
seed envelope" over a difference it detected, is the bug the list replaced."""
import os
import re

SOURCE = os.environ.get("TANDEM_SOURCE_DIR", os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
OLD_WORDS = ["not comparable", "numerically different but within", "outside the envelope"]
# where the words a user reads come from: docs, the CLI (app/), what it prints (experiments/: the report,
# the catalog note, the run's verdict), the workbench (views/), the SDK and the examples
ROOTS = ["README.md", "docs", "app", "experiments", "views", "sdk", "examples", "scripts"]
SUFFIXES = (".md", ".cpp", ".h", ".py", ".go", ".txt", ".json", ".qml", ".ui", "")


def files():
    for root in ROOTS:
        path = os.path.join(SOURCE, root)
        if os.path.isfile(path):
            yield path
            continue
        for d, dirs, names in os.walk(path):
            dirs[:] = [x for x in dirs if x not in ("__pycache__", "build", ".git", "node_modules")]
            for n in names:
                if n.endswith(SUFFIXES) and not n.endswith((".png", ".pdf", ".svg")):
                    yield os.path.join(d, n)


def read(path):
    try:
        with open(path, encoding="utf-8") as f:
            return f.read()
    except (UnicodeDecodeError, OSError):
        return ""


def code_words():
    text = read(os.path.join(SOURCE, "experiments", "compare", "src", "distance.cpp"))
    m = re.search(r"verdict_words\(\) \{.*?\{(.*?)\};", text, re.S)
    assert m, "verdict_words() not found in distance.cpp"
    return re.findall(r'"([^"]+)"', m.group(1))


def test_the_code_and_the_docs_hold_the_same_list():
    words = code_words()
    assert words == ["equivalent", "different", "within the seed envelope", "outside the seed envelope", "not judged",
                     "incomplete"]
    text = read(os.path.join(SOURCE, "docs", "thresholds.md"))
    section = text[text.index("## 4. The verdict"):].splitlines()
    start = next(i for i, ln in enumerate(section) if ln.startswith("| verdict |"))
    table = []
    for ln in section[start + 2:]:
        if not ln.startswith("|"):
            break
        table.append(ln)
    documented = [re.match(r"\| `([^`:]+?)(?::[^`]*)?`", ln).group(1).rstrip(": …") for ln in table]
    assert documented == words, documented
    # the pair verdicts the code names are exactly the first five (incomplete is the run's)
    names = re.findall(r'case PairVerdict::\w+: return "([^"]+)";', read(os.path.join(SOURCE, "experiments", "compare", "src",
                                                                                     "distance.cpp")))
    assert names == words[:5], names


def test_no_old_verdict_word_is_left():
    found = []
    for path in files():
        for i, line in enumerate(read(path).splitlines(), 1):
            for w in OLD_WORDS:
                if w in line.lower():
                    found.append(f"{os.path.relpath(path, SOURCE)}:{i}: {w!r}: {line.strip()[:120]}")
    assert not found, "old verdict words:\n" + "\n".join(found)


def test_the_cli_and_the_workbench_take_the_words_from_the_code():
    # The CLI's help names the passing verdicts with the list's words.
    for cmd in ("cmd_report.cpp", "cmd_compare.cpp"):
        text = read(os.path.join(SOURCE, "app", "cli", cmd))
        assert "equivalent or within the seed envelope" in text, cmd
    # The workbench decides green/red by experiments' verdict_word, whose class is verdict_line_passes
    # over verdict_words(), never by words of its own.
    views = "".join(read(p) for p in files() if os.sep + "views" + os.sep in p)
    assert "verdict_word(" in views
    overview = read(os.path.join(SOURCE, "experiments", "compare", "src", "run_overview.cpp"))
    body = overview[overview.index("VerdictWord verdict_word("):]
    body = body[: body.index("\n}\n")]
    assert "verdict_line_passes(" in body and "verdict_words()" in body, body
    for w in ("equivalent", "within the seed envelope"):
        assert not re.search(r'rfind\("' + w, views), w
