#!/usr/bin/env python3
"""Writes the seed corpora of the fuzz targets (tests/fuzz/corpus/<target>/)
from the repository's fixtures. Deterministic: re-running rewrites the same
files. corpus/container/ (manifests from `strata convert` of the fixtures,
trimmed) and inputs the campaign found are committed as they are and not
touched here. Usage: tests/fuzz/make_corpus.py"""
import hashlib
import json
import os
import struct

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
OUT = os.path.join(ROOT, "tests", "fuzz", "corpus")
TINY = os.path.join(ROOT, "models", "glm5-strata-tiny")
FX = os.path.join(ROOT, "tests", "fixtures")


def put(target, data, name=None):
    if isinstance(data, str):
        data = data.encode()
    d = os.path.join(OUT, target)
    os.makedirs(d, exist_ok=True)
    name = name or "seed-" + hashlib.sha1(data).hexdigest()[:12]
    with open(os.path.join(d, name), "wb") as f:
        f.write(data)


def read(p, mode="r"):
    with open(p, mode) as f:
        return f.read()


def compact(obj):
    return json.dumps(obj, separators=(",", ":"), ensure_ascii=False)


def safetensors_seeds():
    # Single files (first byte even): a few tensors of each dtype from a
    # fixture's header, with their data zeroed and offsets packed.
    raw = read(os.path.join(FX, "glm5-tiny-bf16", "model.safetensors"), "rb")
    (n,) = struct.unpack("<Q", raw[:8])
    head = json.loads(raw[8:8 + n])
    size = {"BF16": 2, "F32": 4, "F16": 2, "F8_E4M3": 1, "U8": 1, "I64": 8}
    picked, off = {"__metadata__": head.get("__metadata__", {})}, 0
    for name, t in list(head.items())[1:]:
        if len(picked) > 4:
            break
        numel = 1
        for s in t["shape"]:
            numel *= s
        if numel > 512:
            continue
        nb = numel * size[t["dtype"]]
        picked[name] = {"dtype": t["dtype"], "shape": t["shape"], "data_offsets": [off, off + nb]}
        off += nb
    for extra in ({"t": {"dtype": "F8_E4M3", "shape": [2, 3], "data_offsets": [0, 6]}},
                  {"s": {"dtype": "I64", "shape": [], "data_offsets": [0, 8]},
                   "e": {"dtype": "F16", "shape": [0, 4], "data_offsets": [8, 8]}}):
        h = compact(extra).encode()
        end = max(v["data_offsets"][1] for v in extra.values())
        put("safetensors", b"\0" + struct.pack("<Q", len(h)) + h + bytes(end))
    h = compact(picked).encode()
    put("safetensors", b"\0" + struct.pack("<Q", len(h)) + h + bytes(off))
    # Shard indexes (first byte odd) over the harness's shards a/b.safetensors.
    put("safetensors", "\x01" + compact({"metadata": {"total_size": 15},
                                         "weight_map": {"x": "a.safetensors", "y": "a.safetensors",
                                                        "z": "b.safetensors"}}))
    put("safetensors", "\x01" + compact({"weight_map": {"x": "a.safetensors"}}))
    idx = json.loads(read(os.path.join(FX, "glm52-tiny-bf16", "model.safetensors.index.json")))
    wm = dict(list(idx["weight_map"].items())[:6])
    put("safetensors", "\x01" + compact({"metadata": idx["metadata"], "weight_map": wm}))


def config_seeds():
    for d in ("glm5-tiny-bf16", "glm5-tiny-fp8", "glm52-tiny-bf16", "glm5-long-bf16"):
        put("config", compact(json.loads(read(os.path.join(FX, d, "config.json")))))
        put("config", compact(json.loads(read(os.path.join(FX, d, "generation_config.json")))))
    put("config", compact(json.loads(read(os.path.join(TINY, "config.json")))))


def tokenizer_text_seeds():
    for s in ("Hello, world!", "<|user|>\nWhat is 2+2?<|assistant|><think>",
              "  leading spaces and\ttabs\r\n\r\nnew lines", "héllo ünïcode 漢字 🙂 ok",
              "'s 't 're 've 'm 'll 'd 12345678 x" * 2, "\xff\xfe broken \xc3 utf8",
              "[gMASK]<sop><|system|>sys<|observation|><tool_call>f</tool_call>"):
        put("tokenizer_text", s.encode("utf-8", "surrogateescape") if isinstance(s, str) else s)
    put("tokenizer_text", b"\xff\xfe broken \xc3 utf8 \xe2\x82")


def tokenizer_json_seeds():
    put("tokenizer_json", compact(json.loads(read(os.path.join(ROOT, "tests", "chat", "byte-tokenizer.json")))))
    t = json.loads(read(os.path.join(TINY, "tokenizer.json")))
    # A cut-down copy of the repository's tokenizer: the byte alphabet, the
    # first merges, its pre-tokenizer regex, added tokens and config.
    vocab = t["model"]["vocab"]
    keep = {k: v for k, v in vocab.items() if v < 300}
    merges = []
    for m in t["model"]["merges"]:
        a, b = m if isinstance(m, list) else m.split(" ")
        if a in keep and b in keep and (a + b) in keep:
            merges.append(m)
    small = dict(t)
    small["model"] = dict(t["model"], vocab=keep, merges=merges)
    added = [dict(a, id=300 + i) for i, a in enumerate(t["added_tokens"][:6])]
    small["added_tokens"] = added
    put("tokenizer_json", compact(small))
    small2 = dict(small, normalizer={"type": "NFC"}, pre_tokenizer={"type": "ByteLevel", "add_prefix_space": True,
                                                                    "trim_offsets": True, "use_regex": True})
    put("tokenizer_json", compact(small2))


def chat_bodies():
    tools = [{"type": "function", "function": {"name": "get_weather", "description": "Weather in a city",
                                                "parameters": {"type": "object", "properties": {
                                                    "city": {"type": "string"}, "days": {"type": "integer"}},
                                                    "required": ["city"]}}}]
    msgs = [{"role": "system", "content": "You are terse."},
            {"role": "user", "content": "Weather in Paris?"},
            {"role": "assistant", "content": "", "reasoning_content": "Need a tool.",
             "tool_calls": [{"id": "c1", "type": "function",
                             "function": {"name": "get_weather", "arguments": "{\"city\":\"Paris\",\"days\":2}"}}]},
            {"role": "tool", "tool_call_id": "c1", "content": "sunny"},
            {"role": "assistant", "content": "<think>ok</think>Sunny."},
            {"role": "user", "content": [{"type": "text", "text": "and tomorrow?"}]}]
    yield {"model": "m", "messages": [{"role": "user", "content": "hi"}]}
    yield {"model": "m", "messages": msgs, "tools": tools, "max_tokens": 16}
    yield {"messages": msgs[:2], "tools": tools, "tool_choice": "required", "stream": True,
           "stream_options": {"include_usage": True}}
    yield {"messages": msgs[:2], "tools": tools,
           "tool_choice": {"type": "function", "function": {"name": "get_weather"}}}
    yield {"messages": msgs[:2], "chat_template_kwargs": {"enable_thinking": False, "clear_thinking": False},
           "temperature": 0.7, "top_p": 0.9, "top_k": 40, "min_p": 0.05, "seed": 7, "stop": ["\n\n", "END"],
           "logprobs": True, "top_logprobs": 3, "presence_penalty": 0.5, "frequency_penalty": 0.1}
    yield {"messages": msgs[:2], "response_format": {"type": "json_object"}}
    yield {"messages": msgs[:2], "response_format": {"type": "json_schema", "json_schema": {
        "name": "w", "strict": True, "schema": {"type": "object", "properties": {
            "t": {"type": "number", "minimum": -50, "maximum": 60}}, "required": ["t"]}}}}


def completion_bodies():
    yield {"model": "m", "prompt": "Once upon a time", "max_tokens": 8}
    yield {"prompt": [1, 2, 3, 4076], "echo": False, "logprobs": 2, "stream": True, "ignore_eos": True}
    yield {"prompt": ["a"], "stop": "x", "n": 1, "best_of": 1, "suffix": None}


def request_seeds():
    for b in chat_bodies():
        put("chat_template", compact(b))
        put("openai_request", compact(b))
    for b in completion_bodies():
        put("openai_request", compact(b))


def schema_seeds():
    walk = bytes(range(0, 256, 7))
    schemas = [
        {"type": "object", "properties": {"name": {"type": "string", "maxLength": 12},
                                          "age": {"type": "integer", "minimum": 0, "maximum": 150},
                                          "tags": {"type": "array", "items": {"type": "string"}, "maxItems": 3}},
         "required": ["name"], "additionalProperties": False},
        {"enum": ["red", "green", "blue", 3, None, True]},
        {"anyOf": [{"type": "null"}, {"type": "number", "exclusiveMinimum": 0.5, "multipleOf": 0.25}]},
        {"type": "array", "minItems": 1, "items": {"type": "object", "additionalProperties": {"type": "boolean"}}},
        {"type": "string", "format": "date-time"},
        {"type": "string", "format": "uuid"},
        {"const": {"a": [1, 2, {"b": "c"}]}},
        {},
        {"type": ["string", "integer"], "minLength": 2},
    ]
    for s in schemas:
        put("json_schema", compact(s).encode() + b"\0" + walk)


def kv_seeds():
    rec = 16 + 7 * 4  # the harness's tiny config
    def records(tokens):
        out = b""
        for t in tokens:
            floats = struct.pack("<7f", *[0.5 * t + i for i in range(7)])
            out += struct.pack("<iIQ", t, 0, 0) + floats
        return out
    for mode in (1, 2):
        for toks in ([5, 6, 7], [1], list(range(20))):
            put("kv_file", bytes([mode]) + struct.pack("<Q", len(toks)) + bytes(32) + records(toks))
    # mode 0: a whole file (the checksums here are zero: loading stops at the first).
    head = b"STRATAKV" + struct.pack("<IIQQ", 2, rec, 0x5eed5eed5eed5eed, 2) + bytes(32)
    put("kv_file", b"\0" + head + records([3, 4]))


def gguf_seeds():
    def s(x):
        x = x.encode()
        return struct.pack("<Q", len(x)) + x
    kvs = [("general.architecture", 8, s("glm-dsa")), ("general.alignment", 4, struct.pack("<I", 32)),
           ("t.u8", 0, b"\x07"), ("t.i8", 1, b"\xff"), ("t.u16", 2, struct.pack("<H", 9)),
           ("t.i16", 3, struct.pack("<h", -9)), ("t.i32", 5, struct.pack("<i", -7)),
           ("t.f32", 6, struct.pack("<f", 0.5)), ("t.bool", 7, b"\x01"), ("t.u64", 10, struct.pack("<Q", 1 << 40)),
           ("t.i64", 11, struct.pack("<q", -5)), ("t.f64", 12, struct.pack("<d", 1.25)),
           ("t.arr", 9, struct.pack("<IQ", 5, 3) + struct.pack("<3i", 1, 2, 3)),
           ("t.strs", 9, struct.pack("<IQ", 8, 2) + s("a") + s("bc"))]
    tensors = [("tok_embd.weight", [4, 2], 0, 0), ("blk.0.attn_norm.weight", [4], 0, 32)]
    def file(kvs, tensors):
        b = b"GGUF" + struct.pack("<IQQ", 3, len(tensors), len(kvs))
        for k, t, v in kvs:
            b += s(k) + struct.pack("<I", t) + v
        for name, dims, typ, off in tensors:
            b += s(name) + struct.pack("<I", len(dims)) + b"".join(struct.pack("<Q", d) for d in dims)
            b += struct.pack("<IQ", typ, off)
        b += bytes((-len(b)) % 32) + bytes(64)
        return b
    put("gguf", file(kvs, tensors))
    put("gguf", file(kvs[:2], tensors[:1]))
    put("gguf", file([], []))


if __name__ == "__main__":
    safetensors_seeds()
    config_seeds()
    tokenizer_text_seeds()
    tokenizer_json_seeds()
    request_seeds()
    schema_seeds()
    kv_seeds()
    gguf_seeds()
