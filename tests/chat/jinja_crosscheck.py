#!/usr/bin/env python3
"""Renders the conversations of tests/unit/chat_template_test.cpp with Jinja2 and a GLM chat
template (default: tools/train/chat_template.jinja, the GLM-4.7 dialect) the way transformers
does (trim_blocks, lstrip_blocks, its tojson), and prints each result as JSON, so the expected
strings hard-coded in the C++ test can be checked against a real template engine:

    python3 tests/chat/jinja_crosscheck.py [TEMPLATE.jinja]

Needs python3-jinja2 (Debian). Not part of the test suite; a developer aid.
"""
import json
import os
import sys

import jinja2
import jinja2.ext
from jinja2.sandbox import ImmutableSandboxedEnvironment

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

WEATHER_TOOL = {"type": "function", "function": {
    "name": "get_weather", "description": "Température actuelle",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}, "days": {"type": "integer"}},
                   "required": ["city"]}}}

CASES = {
    "system_user_think": dict(messages=[{"role": "system", "content": "You are helpful."},
                                        {"role": "user", "content": "Hi"}], add_generation_prompt=True),
    "user_no_think": dict(messages=[{"role": "user", "content": "Hi"}], add_generation_prompt=True,
                          enable_thinking=False),
    "multi_turn_reasoning": dict(messages=[
        {"role": "user", "content": "a"},
        {"role": "assistant", "content": "c1", "reasoning_content": "r1"},
        {"role": "user", "content": "b"},
        {"role": "assistant", "content": " c2 \n", "reasoning_content": "\n r2 "}]),
    "multi_turn_keep_reasoning": dict(messages=[
        {"role": "user", "content": "a"},
        {"role": "assistant", "content": "c1", "reasoning_content": "r1"},
        {"role": "user", "content": "b"}], add_generation_prompt=True, clear_thinking=False),
    "reasoning_in_content": dict(messages=[
        {"role": "user", "content": "a"},
        {"role": "assistant", "content": "<think>\nold\n</think>\n\nold answer"},
        {"role": "user", "content": "b"},
        {"role": "assistant", "content": "<think>\nplan\n</think>\n\nanswer"}]),
    "tools": dict(messages=[
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
}


def main():
    path = sys.argv[1] if len(sys.argv) > 1 else os.path.join(ROOT, "tools/train/chat_template.jinja")
    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
                                        extensions=[jinja2.ext.loopcontrols])

    def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
        return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)

    env.filters["tojson"] = tojson
    tmpl = env.from_string(open(path, encoding="utf-8").read())
    for name, kw in CASES.items():
        print(name, json.dumps(tmpl.render(**kw), ensure_ascii=False))


if __name__ == "__main__":
    main()
