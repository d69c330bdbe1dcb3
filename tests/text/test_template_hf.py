"""tandem's native Qwen3 chat template (`tandem template render`) against transformers'
apply_chat_template (Python jinja2) on every corpus row and on multi-turn / thinking cases."""
import itertools

import pytest

import text_oracle as oracle

_MISSING = object()


@pytest.fixture(scope="module")
def hf():
    return oracle.hf_auto_tokenizer()


def hf_render(hf, case):
    kwargs = {"tokenize": False, "add_generation_prompt": case.get("add_generation_prompt", False)}
    if "enable_thinking" in case:
        kwargs["enable_thinking"] = case["enable_thinking"]
    return hf.apply_chat_template(case["messages"], **kwargs)


def compare(hf, cases, what):
    outs, _, _ = oracle.run_jsonl(["template", "render", "--tokenizer", str(oracle.tokenizer_dir())], cases)
    bad = []
    for i, (case, out) in enumerate(zip(cases, outs)):
        ref = hf_render(hf, case)
        if out["text"] != ref:
            k = next((j for j, (a, b) in enumerate(zip(out["text"], ref)) if a != b), min(len(out["text"]), len(ref)))
            bad.append(f"{what} #{i} differs at char {k}: tandem {out['text'][max(0, k-40):k+40]!r} "
                       f"hf {ref[max(0, k-40):k+40]!r} case {str(case)[:300]}")
    print(f"{what}: {len(cases)} cases, {len(bad)} differing")
    assert not bad, f"{len(bad)} of {len(cases)} differ:\n" + "\n".join(bad[:10])


def test_every_corpus_row(hf):
    cases = []
    for n, (source, _, row) in enumerate(oracle.corpus_rows()):
        msgs = oracle.row_messages(source, row, with_system=(n % 2 == 0))
        if msgs is None:
            continue
        cases.append({"messages": msgs})  # full text
        cases.append({"messages": msgs[:-1], "add_generation_prompt": True, "enable_thinking": False})  # prompt text
    assert len(cases) > 12000
    compare(hf, cases, "corpus rows")


REASONING = ["", "\n", "Let me think.", "\nstep 1\nstep 2\n\n", "  spaced  "]
ASSISTANT = ["Plain answer.", "\n\nLeading newlines.", "<think>\nr\n</think>\n\nAfter think.",
             "<think>a</think>b</think>\n\nc", "pre<think>\n\nx\n\n</think>", "no open tag</think>\n tail",
             "<think>one</think><think>two</think>three", "", "\n", "text with <think> only", "  spaces \n"]


def multi_turn_cases():
    cases = []
    sys_msg = {"role": "system", "content": "You are helpful."}
    for a1, a2 in itertools.product(ASSISTANT, ASSISTANT[:6]):
        convo = [sys_msg, {"role": "user", "content": "Q1"}, {"role": "assistant", "content": a1},
                 {"role": "user", "content": "Q2"}, {"role": "assistant", "content": a2}]
        cases.append({"messages": convo})
        cases.append({"messages": convo[:-1], "add_generation_prompt": True})
        cases.append({"messages": convo[1:] + [{"role": "user", "content": "Q3"}], "add_generation_prompt": True,
                      "enable_thinking": True})
    for r, a in itertools.product(REASONING, ASSISTANT[:5]):
        for last in (True, False):
            msg = {"role": "assistant", "content": a, "reasoning_content": r}
            convo = [{"role": "user", "content": "Q"}, msg] + ([] if last else [{"role": "user", "content": "Q2"}])
            cases.append({"messages": convo})
            cases.append({"messages": [{"role": "user", "content": "Q0"}, {"role": "assistant", "content": "A0", "reasoning_content": r},
                                       {"role": "assistant", "content": a}]})
    for gen, think in itertools.product([False, True], [_MISSING, None, True, False]):
        case = {"messages": [sys_msg, {"role": "user", "content": "hi"}], "add_generation_prompt": gen}
        if think is not _MISSING:
            case["enable_thinking"] = think
        cases.append(case)
    # system not first, user-only, tool responses, a later system turn (an unknown role: refused, below)
    cases.append({"messages": [{"role": "user", "content": "a"}, {"role": "system", "content": "late system"},
                               {"role": "assistant", "content": "b"}]})
    cases.append({"messages": [{"role": "user", "content": "only user"}]})
    cases.append({"messages": [{"role": "user", "content": "q"},
                               {"role": "assistant", "content": "", "tool_calls": [{"type": "function", "function": {"name": "f", "arguments": {"x": 1, "y": "é\n\"q\"", "z": [1.5, None, True]}}}]},
                               {"role": "tool", "content": "r1"}, {"role": "tool", "content": "r2"},
                               {"role": "assistant", "content": "done"}]})
    cases.append({"messages": [{"role": "user", "content": "q"},
                               {"role": "assistant", "content": "calling", "reasoning_content": "why",
                                "tool_calls": [{"function": {"name": "g", "arguments": "{\"raw\": true}"}},
                                               {"function": {"name": "h", "arguments": {}}}]},
                               {"role": "user", "content": "<tool_response>\nok\n</tool_response>"},
                               {"role": "assistant", "content": "<think>t</think>final"}]})
    cases.append({"messages": [{"role": "system", "content": ""}, {"role": "user", "content": ""},
                               {"role": "assistant", "content": ""}], "add_generation_prompt": True, "enable_thinking": False})
    return cases


def test_multi_turn_reasoning_and_thinking_switches(hf):
    cases = multi_turn_cases()
    assert len(cases) >= 200
    compare(hf, cases, "multi-turn cases")


def test_chatml_is_the_generic_layout():
    msgs = [{"role": "system", "content": "S"}, {"role": "user", "content": "U"}, {"role": "assistant", "content": "A"}]
    outs, _, _ = oracle.run_jsonl(["template", "render", "--template", "chatml", "--tokenizer", str(oracle.tokenizer_dir())],
                                  [{"messages": msgs, "add_generation_prompt": True}])
    expected = "".join(f"<|im_start|>{m['role']}\n{m['content']}<|im_end|>\n" for m in msgs) + "<|im_start|>assistant\n"
    assert outs[0]["text"] == expected


def test_malformed_lines_name_line_and_field():
    args = ["template", "render", "--tokenizer", str(oracle.tokenizer_dir()), "--keep-going"]
    recs = [{"messages": [{"role": "user", "content": "x"}]}, {"messages": "nope"},
            {"messages": [{"content": "no role"}]}, {"messages": [{"role": "user", "content": "x"}], "enable_thinking": "yes"}]
    outs, err, rc = oracle.run_jsonl(args, recs, check=False)
    assert rc == 1 and len(outs) == 4
    assert "line 2: field 'messages'" in err and "line 3: field 'messages[0].role'" in err and "line 4: field 'enable_thinking'" in err, err


def test_a_role_the_template_cannot_render_is_refused(hf):
    """Qwen3's template emits nothing for a role other than system, user, assistant, tool (HF's own
    rendering, the oracle, drops the message): `template render` refuses it, naming the field,
    instead of printing a text without it. chatml renders any role."""
    msgs = [{"role": "user", "content": "q"}, {"role": "narrator", "content": "skipped"}, {"role": "assistant", "content": "a"}]
    dropped = hf.apply_chat_template(msgs, tokenize=False)
    assert "skipped" not in dropped and "narrator" not in dropped  # the template really drops it
    outs, err, rc = oracle.run_jsonl(["template", "render", "--tokenizer", str(oracle.tokenizer_dir()), "--keep-going"],
                                     [{"messages": msgs}], check=False)
    assert rc == 1 and "field 'messages[1].role': 'narrator' is not a role the qwen3 template renders" in err, err
    outs, _, _ = oracle.run_jsonl(["template", "render", "--template", "chatml", "--tokenizer", str(oracle.tokenizer_dir())],
                                  [{"messages": msgs}])
    assert "<|im_start|>narrator\nskipped<|im_end|>" in outs[0]["text"]
