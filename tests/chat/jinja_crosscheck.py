#!/usr/bin/python3
"""strata's native chat templates against Jinja2 rendering the model's own template.

    /usr/bin/python3 tests/chat/jinja_crosscheck.py RENDER_BIN [--model DIR] [--cases N] [--seed S] [--print]

RENDER_BIN is the test helper strata_render_chat (tests/chat/render_chat.cpp): it loads DIR's
template the way `strata run` does and renders conversations with strata's renderer.  This script
renders the same conversations with Jinja2 as transformers' apply_chat_template does (sandboxed,
trim_blocks, lstrip_blocks, loopcontrols, its tojson filter) from DIR's template (chat_template.jinja,
or tokenizer_config.json "chat_template"; default DIR: models/glm5-strata-tiny; the Qwen3, GLM-4.5/4.6/4.7 and
DeepSeek-V3/R1/V3.1 templates are under tests/fixtures/templates/; bos_token and eos_token from tokenizer_config.json, as transformers
passes them), and asserts that every rendering is byte-identical.  The conversations: the ones the C++ unit tests use, then N seeded random
ones (system messages, tools, tool calls with nested arguments, tool results, consecutive ones
included, multi-turn reasoning with reasoning_content or <think> inside the content, thinking on /
off / unset, clear_thinking, tool results sent as user text, a user's /nothink, odd whitespace and
non-ASCII text).  The first mismatch fails with the
conversation and a diff.  Needs python3-jinja2 (Debian).
"""
import argparse
import difflib
import json
import os
import random
import subprocess
import sys

import jinja2
import jinja2.ext
from jinja2.sandbox import ImmutableSandboxedEnvironment

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

WEATHER_TOOL = {"type": "function", "function": {
    "name": "get_weather", "description": "Température actuelle",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}, "days": {"type": "integer"}},
                   "required": ["city"]}}}

# The conversations of tests/unit/chat_template_test.cpp.
FIXED = [
    dict(messages=[{"role": "system", "content": "You are helpful."},
                   {"role": "user", "content": "Hi"}], add_generation_prompt=True),
    dict(messages=[{"role": "user", "content": "Hi"}], add_generation_prompt=True, enable_thinking=False),
    dict(messages=[
        {"role": "user", "content": "a"},
        {"role": "assistant", "content": "c1", "reasoning_content": "r1"},
        {"role": "user", "content": "b"},
        {"role": "assistant", "content": " c2 \n", "reasoning_content": "\n r2 "}]),
    dict(messages=[
        {"role": "user", "content": "a"},
        {"role": "assistant", "content": "c1", "reasoning_content": "r1"},
        {"role": "user", "content": "b"}], add_generation_prompt=True, clear_thinking=False),
    dict(messages=[
        {"role": "user", "content": "a"},
        {"role": "assistant", "content": "<think>\nold\n</think>\n\nold answer"},
        {"role": "user", "content": "b"},
        {"role": "assistant", "content": "<think>\nplan\n</think>\n\nanswer"}]),
    dict(messages=[
        {"role": "user", "content": "Weather in Paris?"},
        {"role": "assistant", "content": "", "reasoning_content": "need the tool",
         "tool_calls": [{"type": "function", "function": {"name": "get_weather",
                                                          "arguments": {"city": "Paris", "days": 2,
                                                                        "opts": {"unit": "c", "x": [1, True, None]}}}}]},
        {"role": "tool", "content": "sunny"},
        {"role": "tool", "content": "20C"},
        {"role": "assistant", "content": "Sunny, 20C."},
        {"role": "user", "content": "Thanks"},
        {"role": "tool", "content": "late"}], tools=[WEATHER_TOOL], add_generation_prompt=True),
]


# ---- random conversations ------------------------------------------------------------------------

WORDS = ["hello", "the", "moon", "Paris", "weather", "why", "answer", "42", "x", "tool", "JSON", "a-b_c",
         "Température", "naïve", "日本語", "Привет", "🙂", "e\u0301", "tab\there", "quote\"d", "back\\slash",
         "{braces}", "[list]", "<b>", "&amp;", "1.5", "null", "true"]
# Ends of strings: what str.strip() removes (ASCII and Unicode whitespace) and what it keeps.
EDGES = ["", "", "", " ", "\n", "\n\n", " \t", "\r\n", "\u00a0", "\u3000", "\u2003", "\x1c", "\x85", "\u200b", "."]
MARKUP = ["<think>", "</think>", "<tool_call>", "<|user|>", "<arg_key>"]


def text(rng, markup=False, max_words=8):
    words = [rng.choice(WORDS) for _ in range(rng.randint(0, max_words))]
    if markup and rng.random() < 0.2:
        words.insert(rng.randint(0, len(words)), rng.choice(MARKUP))
    seps = [rng.choice([" ", " ", " ", "\n", ", ", "  "]) for _ in words]
    body = "".join(w + s for w, s in zip(words, seps)).rstrip(" ")
    return rng.choice(EDGES) + body + rng.choice(EDGES)


def json_value(rng, depth=0):
    kinds = ["str", "int", "float", "bool", "null"] + (["obj", "list"] if depth < 2 else [])
    k = rng.choice(kinds)
    if k == "str":
        return text(rng, max_words=3)
    if k == "int":
        return rng.choice([0, 1, -7, 2, 10 ** 12, -(2 ** 40), rng.randint(-1000, 1000)])
    if k == "float":
        return rng.choice([0.5, -2.25, 3.0, 1e-7, 1e20, 1e16, 123456.789, 0.1 + 0.2, -0.0, 1.5e300])
    if k == "bool":
        return rng.random() < 0.5
    if k == "null":
        return None
    if k == "obj":
        return {rng.choice(WORDS): json_value(rng, depth + 1) for _ in range(rng.randint(0, 3))}
    return [json_value(rng, depth + 1) for _ in range(rng.randint(0, 3))]


def tool_def(rng, name):
    props = {f"p{i}_{rng.choice(WORDS)}": {"type": rng.choice(["string", "integer", "number", "boolean", "object"]),
                                           "description": text(rng, max_words=4)} for i in range(rng.randint(0, 3))}
    fn = {"name": name, "description": text(rng, max_words=6)}
    if rng.random() < 0.8:
        fn["parameters"] = {"type": "object", "properties": props, "required": list(props)[:1]}
    return {"type": "function", "function": fn} if rng.random() < 0.9 else fn


def tool_call(rng, names):
    args = {f"{rng.choice(WORDS)}{i}": json_value(rng) for i in range(rng.randint(0, 4))}
    fn = {"name": rng.choice(names), "arguments": args}
    return {"id": f"call_{rng.randint(0, 999)}", "type": "function", "function": fn} if rng.random() < 0.8 else fn


def assistant(rng, names):
    m = {"role": "assistant"}
    r = rng.random()
    if r < 0.35:
        m["reasoning_content"] = text(rng, markup=False)
        m["content"] = text(rng)
    elif r < 0.45:
        m["reasoning_content"] = ""
        m["content"] = text(rng)
    elif r < 0.7:  # reasoning inside the content (no reasoning_content): the template splits it
        m["content"] = (rng.choice(["", "<think>", "x<think>", "<think>\n"]) + text(rng) + "</think>" + text(rng) +
                        ("</think>" + text(rng) if rng.random() < 0.2 else ""))
    else:
        m["content"] = text(rng, markup=True)
        if rng.random() < 0.2:
            m["reasoning_content"] = None
    if names and rng.random() < 0.5:
        m["tool_calls"] = [tool_call(rng, names) for _ in range(rng.randint(1, 3))]
    return m


def conversation(rng):
    names = [f"fn_{rng.choice(WORDS)}_{i}" for i in range(rng.randint(0, 3))]
    tools = [tool_def(rng, n) for n in names]
    msgs = [{"role": "system", "content": text(rng)} for _ in range(rng.choice([0, 0, 1, 1, 2]))]
    for _ in range(rng.randint(1, 4)):
        u = text(rng, markup=True)
        r = rng.random()
        if r < 0.1:  # a tool result sent as user text (Qwen3's multi_step_tool skips such turns)
            u = "<tool_response>" + rng.choice(["", "\n"]) + text(rng) + "</tool_response>"
        elif r < 0.15:  # GLM-4.5's /nothink switch typed by the user
            u = text(rng) + "/nothink"
        msgs.append({"role": "user", "content": u})
        if rng.random() < 0.1:
            msgs.append({"role": "system", "content": text(rng)})
        for _ in range(rng.choice([0, 1, 1, 1, 2])):
            a = assistant(rng, names)
            msgs.append(a)
            n_results = len(a.get("tool_calls", [])) if rng.random() < 0.8 else rng.randint(0, 3)
            for _ in range(n_results):
                msgs.append({"role": "tool", "content": text(rng, markup=True), "tool_call_id": "call_1"})
    if rng.random() < 0.3:  # end on an assistant or tool message, as a training sample would
        msgs.append(assistant(rng, names))
    case = {"messages": msgs}
    if tools or rng.random() < 0.2:
        case["tools"] = tools if rng.random() < 0.9 else None
    for k in ("add_generation_prompt", "enable_thinking", "clear_thinking"):
        if rng.random() < 0.7:
            case[k] = rng.random() < (0.7 if k == "add_generation_prompt" else 0.5)
    return case


def features(case):
    """Which of the behaviours the cases must cover this conversation exercises."""
    msgs, f = case["messages"], set()
    roles = [m["role"] for m in msgs]
    last_user = max((i for i, r in enumerate(roles) if r == "user"), default=-1)
    if "system" in roles:
        f.add("system")
    if case.get("tools"):
        f.add("tools")
    if "tool" in roles:
        f.add("tool result")
    if any(a == b == "tool" for a, b in zip(roles, roles[1:])):
        f.add("consecutive tool results")
    if any(m.get("tool_calls") for m in msgs):
        f.add("assistant tool calls")
    if case.get("enable_thinking") is False and case.get("add_generation_prompt"):
        f.add("thinking off")
    if case.get("enable_thinking") is not False and case.get("add_generation_prompt"):
        f.add("thinking on")
    reasoned = [i for i, m in enumerate(msgs) if m["role"] == "assistant" and
                (m.get("reasoning_content") or "</think>" in (m.get("content") or ""))]
    if any(i < last_user for i in reasoned) and roles.count("user") > 1:
        f.add("multi-turn with earlier reasoning")
    if any(i > last_user for i in reasoned):
        f.add("reasoning after the last user message")
    if case.get("clear_thinking") is False and any(i < last_user for i in reasoned):
        f.add("clear_thinking false")
    if any(m["role"] == "assistant" and "reasoning_content" not in m and "</think>" in (m["content"] or "")
           for m in msgs):
        f.add("reasoning inside the content")
    if any(m["role"] == "user" and m["content"].startswith("<tool_response>") and
           m["content"].endswith("</tool_response>") for m in msgs):
        f.add("tool result as user text")
    if any(m["role"] == "user" and m["content"].endswith("/nothink") for m in msgs):
        f.add("user /nothink")
    return f


# ---- rendering -----------------------------------------------------------------------------------

def load_template(model_dir):
    p = os.path.join(model_dir, "chat_template.jinja")
    if os.path.exists(p):
        return open(p, encoding="utf-8").read()
    ct = json.load(open(os.path.join(model_dir, "tokenizer_config.json"), encoding="utf-8"))["chat_template"]
    if isinstance(ct, list):
        ct = next((e["template"] for e in ct if e.get("name") == "default"), ct[0]["template"])
    return ct


def special_tokens(model_dir):
    """bos_token / eos_token of tokenizer_config.json, which transformers passes to the template."""
    p = os.path.join(model_dir, "tokenizer_config.json")
    if not os.path.exists(p):
        return {}
    cfg = json.load(open(p, encoding="utf-8"))
    out = {}
    for k in ("bos_token", "eos_token"):
        v = cfg.get(k)
        if isinstance(v, dict):
            v = v.get("content")
        if isinstance(v, str):
            out[k] = v
    return out


def as_openai_calls(case, rng):
    """The conversation as an OpenAI client sends it, for templates that need that form (DeepSeek's): each call
    {"type": "function", "function": {"name", "arguments": JSON text}}, and null content beside tool calls when
    there is no text and in most other messages with calls (the template renders the calls only then)."""
    msgs = []
    for m in case["messages"]:
        m = dict(m)
        if m.get("tool_calls"):
            calls = []
            for tc in m["tool_calls"]:
                f = tc.get("function", tc)
                calls.append({"id": tc.get("id", "call_0"), "type": "function",
                              "function": {"name": f["name"], "arguments": json.dumps(f["arguments"], ensure_ascii=False)}})
            m["tool_calls"] = calls
            if not m.get("content") or rng.random() < 0.7:
                m["content"] = None
        msgs.append(m)
    return dict(case, messages=msgs)


def jinja_renderer(source):
    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, extensions=[jinja2.ext.loopcontrols])

    def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
        return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)

    env.filters["tojson"] = tojson
    tmpl = env.from_string(source)
    return lambda case: tmpl.render(**case)


def first_mismatch_report(i, case, want, got):
    k = next((j for j in range(min(len(want), len(got))) if want[j] != got[j]), min(len(want), len(got)))
    lines = [f"case {i}: strata's rendering differs from Jinja2's at character {k} "
             f"(lengths {len(got)} vs {len(want)})",
             f"  Jinja2: ...{want[max(0, k - 60):k + 60]!r}",
             f"  strata: ...{got[max(0, k - 60):k + 60]!r}",
             "diff (- Jinja2, + strata; split at each '<'):"]
    split = lambda s: s.replace("<", "\n<").splitlines(keepends=True)  # noqa: E731
    lines += ["  " + d.rstrip("\n") for d in difflib.unified_diff(split(want), split(got), "jinja2", "strata", n=2)]
    lines.append("conversation: " + json.dumps(case, ensure_ascii=False))
    return "\n".join(lines)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("render_bin", help="the strata_render_chat test helper")
    ap.add_argument("--model", default=os.path.join(ROOT, "models/glm5-strata-tiny"))
    ap.add_argument("--cases", type=int, default=400, help="random conversations (besides the fixed ones)")
    ap.add_argument("--seed", type=int, default=19)
    ap.add_argument("--print", action="store_true", help="print every Jinja2 rendering as JSON")
    args = ap.parse_args()

    rng = random.Random(args.seed)
    cases = FIXED + [conversation(rng) for _ in range(args.cases)]
    source = load_template(args.model)
    deepseek = "<｜tool▁sep｜>" in source
    if deepseek:  # arguments are concatenated as text, so they must be strings
        cases = [as_openai_calls(c, rng) for c in cases]
    render = jinja_renderer(source)
    tokens = special_tokens(args.model)
    # DeepSeek-V3.1 names its switch `thinking` (default off); strata's enable_thinking (default on) drives it.
    switch = "thinking" if "{% if not thinking is defined %}" in source else None
    want = [render(dict(tokens, **c, **({switch: c.get("enable_thinking", True)} if switch else {}))) for c in cases]
    if args.print:
        for i, w in enumerate(want):
            print(i, json.dumps(w, ensure_ascii=False))

    p = subprocess.run([args.render_bin, args.model], input=json.dumps(cases), capture_output=True, text=True)
    if p.returncode != 0:
        sys.exit(f"FAIL: {args.render_bin} exited with status {p.returncode}: {p.stderr.strip()}")
    got = json.loads(p.stdout)
    if len(got) != len(cases):
        sys.exit(f"FAIL: {len(got)} renderings for {len(cases)} conversations")

    covered = {}
    for c in cases:
        for f in features(c):
            covered[f] = covered.get(f, 0) + 1
    needed = ["system", "tools", "tool result", "consecutive tool results", "assistant tool calls", "thinking on",
              "thinking off", "multi-turn with earlier reasoning", "reasoning after the last user message",
              "clear_thinking false", "reasoning inside the content", "tool result as user text", "user /nothink"]
    print(f"{len(cases)} conversations ({len(FIXED)} fixed, {args.cases} random, seed {args.seed}); covered: " +
          ", ".join(f"{f} {covered.get(f, 0)}" for f in needed))
    if deepseek:  # the template's own paths: a call block opened, a later call closing one, tool outputs
        marks = [m for m in ("<｜tool▁calls▁begin｜>", "<｜tool▁calls▁end｜>", "<｜tool▁outputs▁begin｜>",
                             "<｜tool▁output▁begin｜>", "</think>'}}") if m in source]
        marks = [m.replace("'}}", "") for m in marks]  # V3.1 and R1: an answer or call after </think> / a cut one
        for mark in marks:
            covered[mark] = sum(mark in w for w in want)
            needed.append(mark)
        print("DeepSeek renderings with " + ", ".join(f"{m} {covered[m]}" for m in marks))
    thin = [f for f in needed if covered.get(f, 0) < min(5, max(1, args.cases // 50))]
    if thin:
        sys.exit(f"FAIL: the random conversations cover too little of: {thin}")

    for i, (c, w, g) in enumerate(zip(cases, want, got)):
        if isinstance(g, dict):
            sys.exit(f"FAIL: case {i}: strata refused a conversation Jinja2 renders: {g.get('error')}\n"
                     f"conversation: {json.dumps(c, ensure_ascii=False)}")
        if g != w:
            print(first_mismatch_report(i, c, w, g))
            sys.exit(1)
    print(f"PASS: {len(cases)} renderings byte-identical ({sum(len(w) for w in want)} characters)")


if __name__ == "__main__":
    main()
