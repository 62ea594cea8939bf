#!/usr/bin/env python3
"""End-to-end tests of `<model> serve` on the CPU backend (random weights, loopback), through the
`openai` Python client where a client would use it, and raw HTTP for the error cases.

    test_server.py --binary build/bin/tiny-smollm2 --slow-binary build/bin/smollm2-135m CASE

Exit 0: passed; 1: failed; 77: skipped (the openai / prometheus_client packages are missing).
"""
import argparse
import concurrent.futures
import json
import os
import re
import signal
import socket
import struct
import subprocess
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from server_harness import TOKENIZER, Server  # noqa: E402

try:
    import openai
    import prometheus_client  # noqa: F401
except ImportError as e:
    print(f"skipped: {e} (tools/install-deps installs the test's Python packages)")
    sys.exit(77)

ARGS = None
PROMPTS = ["Hello there", "Once upon a time", "What is the capital of France?", "Tell me a story about the sea",
           "The quick brown fox", "Why is the sky blue?", "Write a poem about cats", "one two three four"]


def client(server, **kw):
    return openai.OpenAI(base_url=server.url + "/v1", api_key=server.api_key or "none", max_retries=0, **kw)


def check(cond, what):
    if not cond:
        raise AssertionError(what)


def cli_json(*args):
    """The batch CLI's JSON output for the same model, weights and tokenizer."""
    out = subprocess.run([ARGS.binary, "--backend", "ref", "--random-weights", "1", "--tokenizer", TOKENIZER,
                          "--output-format", "json", "-q", *args], capture_output=True, text=True, check=True).stdout
    return json.loads(out[out.index("{"):])


def stream_completion(c, **kw):
    pieces, finish, usage = [], None, None
    for chunk in c.completions.create(stream=True, **kw):
        if chunk.choices:
            pieces.append(chunk.choices[0].text)
            finish = chunk.choices[0].finish_reason or finish
        if chunk.usage:
            usage = chunk.usage
    return pieces, finish, usage


def stream_chat(c, **kw):
    pieces, finish, usage = [], None, None
    for chunk in c.chat.completions.create(stream=True, **kw):
        if chunk.choices:
            if chunk.choices[0].delta.content:
                pieces.append(chunk.choices[0].delta.content)
            finish = chunk.choices[0].finish_reason or finish
        if chunk.usage:
            usage = chunk.usage
    return pieces, finish, usage


# ---- cases ----

def case_streamed_equals_whole_equals_cli():
    with Server(ARGS.binary) as s:
        c = client(s)
        for prompt in PROMPTS[:4]:
            whole = c.completions.create(model="tiny-smollm2", prompt=prompt, max_tokens=24, temperature=0)
            pieces, finish, usage = stream_completion(c, model="tiny-smollm2", prompt=prompt, max_tokens=24, temperature=0,
                                                      stream_options={"include_usage": True})
            check("".join(pieces) == whole.choices[0].text, f"completions {prompt!r}: stream {pieces!r} != {whole.choices[0].text!r}")
            check(finish == whole.choices[0].finish_reason, "completions: finish reasons differ")
            check(usage.completion_tokens == whole.usage.completion_tokens, "completions: usage differs")
            cli = cli_json("-p", prompt, "-n", "24", "--temp", "0")["requests"][0]
            check(cli["text"] == whole.choices[0].text, f"completions {prompt!r}: CLI {cli['text']!r} != server {whole.choices[0].text!r}")

            messages = [{"role": "user", "content": prompt}]
            whole = c.chat.completions.create(model="tiny-smollm2", messages=messages, max_tokens=24, temperature=0)
            pieces, finish, usage = stream_chat(c, model="tiny-smollm2", messages=messages, max_tokens=24, temperature=0,
                                                stream_options={"include_usage": True})
            check("".join(pieces) == whole.choices[0].message.content, f"chat {prompt!r}: stream != whole")
            check(usage.completion_tokens == whole.usage.completion_tokens, "chat: usage differs")
            cli = cli_json("--chat", prompt, "-n", "24", "--temp", "0")["requests"][0]
            check(cli["text"] == whole.choices[0].message.content, f"chat {prompt!r}: CLI {cli['text']!r} != server")


def case_concurrent_equals_alone():
    with Server(ARGS.binary, "--max-waiting", "128") as s:
        c = client(s)
        jobs = [dict(prompt=PROMPTS[i % len(PROMPTS)] + " " * (i // len(PROMPTS)), seed=1000 + i, temperature=0.8,
                     max_tokens=20 + i % 7, logprobs=0) for i in range(64)]

        def run(job):
            pieces, finish, _ = stream_completion(c, model="tiny-smollm2", **job)
            return "".join(pieces), finish

        alone = [run(j) for j in jobs]
        with concurrent.futures.ThreadPoolExecutor(64) as pool:
            together = list(pool.map(run, jobs))
        for i, (a, t) in enumerate(zip(alone, together)):
            check(a == t, f"request {i}: alone {a!r} != concurrent {t!r}")
        m = s.metrics()
        check(m["kiln:kv_cache_pages_in_use"] == 0, "pages left in use")


def case_stop_strings():
    with Server(ARGS.binary) as s:
        c = client(s)
        hits = 0
        for i, prompt in enumerate(PROMPTS * 3):
            messages = [{"role": "user", "content": prompt}]
            # Random weights rarely write "\n\n": a bias on the "\n" byte token (id 10) makes it common.
            kw = dict(model="tiny-smollm2", messages=messages, max_tokens=40, temperature=1.0, seed=i,
                      logit_bias={"10": 3}, extra_body={"ignore_eos": True})
            free = c.chat.completions.create(**kw).choices[0].message.content
            stopped = c.chat.completions.create(stop=["\n\n"], **kw)
            pieces, finish, _ = stream_chat(c, stop=["\n\n"], **kw)
            text = stopped.choices[0].message.content
            check("\n\n" not in text, f"stop string in the text: {text!r}")
            for p in pieces:
                check("\n\n" not in p, f"stop string in a stream piece: {p!r}")
            check("".join(pieces) == text, "streamed text differs with a stop string")
            if "\n\n" in free:
                hits += 1
                check(text == free.split("\n\n")[0], f"stopped text {text!r} is not the text before the stop in {free!r}")
                check(stopped.choices[0].finish_reason == "stop", "finish_reason is not stop")
                check(finish == "stop", "streamed finish_reason is not stop")
                with_stop = c.chat.completions.create(stop=["\n\n"], extra_body={"ignore_eos": True, "include_stop_str_in_output": True},
                                                      **{k: v for k, v in kw.items() if k != "extra_body"})
                check(with_stop.choices[0].message.content == free.split("\n\n")[0] + "\n\n", "include_stop_str_in_output")
            else:
                check(text == free, "a stop string that never matched changed the text")
        print(f"{hits} of {len(PROMPTS) * 3} outputs held the stop string")
        check(hits >= 3, f"only {hits} outputs held the stop string: the case tests too little")


def read_safetensors(path):
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        header = json.loads(f.read(n))
        meta = header["logits"]
        f.seek(8 + n + meta["data_offsets"][0])
        rows, vocab = meta["shape"]
        data = struct.unpack(f"<{rows * vocab}f", f.read(4 * rows * vocab))
        return [data[r * vocab:(r + 1) * vocab] for r in range(rows)]


def case_logprobs_match_dump_logits():
    import math
    import tempfile
    with Server(ARGS.binary) as s, tempfile.TemporaryDirectory() as tmp:
        c = client(s)
        for prompt in PROMPTS[:3]:
            r = c.completions.create(model="tiny-smollm2", prompt=prompt, max_tokens=1, temperature=0, logprobs=5)
            lp = r.choices[0].logprobs
            check(len(lp.token_logprobs) == 1, "one token, one logprob")
            top = lp.top_logprobs[0]
            # This form is a dict keyed by token text: tokens of one text (special tokens all read "") share an entry.
            check(len(top) == 5 or (0 < len(top) < 5 and "" in top), f"five alternatives expected, got {top}")
            path = os.path.join(tmp, "logits.safetensors")
            cli_json("-p", prompt, "-n", "1", "--temp", "0", "--dump-logits", path)
            last = read_safetensors(path)[-1]
            m = max(last)
            log_sum = math.log(sum(math.exp(x - m) for x in last))
            ref = sorted(((x - m) - log_sum for x in last), reverse=True)
            check(abs(lp.token_logprobs[0] - ref[0]) < 1e-4, f"chosen logprob {lp.token_logprobs[0]} != {ref[0]}")
            got = sorted(top.values(), reverse=True)
            for g in got:
                check(any(abs(g - e) < 1e-4 for e in ref[:5]), f"top-5 logprobs {got} are not among {ref[:5]}")
            if len(got) == 5:
                for g, e in zip(got, ref[:5]):
                    check(abs(g - e) < 1e-4, f"top-5 logprobs {got} != {ref[:5]}")
        # The chat form: logprobs + top_logprobs.
        r = c.chat.completions.create(model="tiny-smollm2", messages=[{"role": "user", "content": "hi"}], max_tokens=3,
                                      temperature=0, logprobs=True, top_logprobs=5)
        content = r.choices[0].logprobs.content
        check(len(content) == r.usage.completion_tokens, "one logprob entry per token")
        for entry in content:
            check(len(entry.top_logprobs) == 5, "five alternatives per token")
            check(abs(entry.top_logprobs[0].logprob - entry.logprob) < 1e-6, "greedy: the chosen token is the top one")


def case_prompt_logprobs():
    import math
    import tempfile
    with Server(ARGS.binary) as s, tempfile.TemporaryDirectory() as tmp:
        prompt = "Tell me a story about the sea, the sky and the mountains, and the little model that wanted to talk."
        _, tokens, _ = s.post("/tokenize", {"prompt": prompt})
        ids = tokens["tokens"]
        path = os.path.join(tmp, "logits.safetensors")
        cli_json("-p", prompt, "-n", "1", "--temp", "0", "--dump-logits", path)
        rows = read_safetensors(path)
        # Twice: the second time the prompt's pages are in the prefix cache, which such a request skips.
        for attempt in range(2):
            st, body, _ = s.post("/v1/completions", {"prompt": prompt, "max_tokens": 1, "temperature": 0, "prompt_logprobs": 2})
            check(st == 200, f"status {st}: {body}")
            p = body["choices"][0]["prompt_logprobs"]
            check(len(p) == len(ids) and p[0] is None, f"one entry per prompt token, the first null: {len(p)} vs {len(ids)}")
            for i in range(1, len(ids)):
                entry = p[i]
                row = rows[i - 1]
                m = max(row)
                log_sum = math.log(sum(math.exp(x - m) for x in row))
                expected = (row[ids[i]] - m) - log_sum
                check(str(ids[i]) in entry, f"position {i}: the prompt token is in the entry")
                check(abs(entry[str(ids[i])]["logprob"] - expected) < 1e-4, f"position {i}: {entry} vs {expected}")
                ranked = [v for v in entry.values() if v["rank"] is not None]
                check(len(ranked) == 2, f"position {i}: two alternatives")
            if attempt == 0:
                first = p
        # n = 3: the first choice computes them, the other two get the same (a whole answer).
        st, body, _ = s.post("/v1/completions", {"prompt": prompt, "max_tokens": 2, "temperature": 0.8, "n": 3,
                                                 "prompt_logprobs": 2})
        check(st == 200 and len(body["choices"]) == 3, f"status {st}: {body}")
        for c in body["choices"]:
            check(c["prompt_logprobs"] == first, f"choice {c['index']}: the prompt's logprobs as with n = 1")
        status, body, _ = s.post("/v1/completions", {"prompt": prompt, "max_tokens": 1, "prompt_logprobs": 21})
        check(status == 400 and body["error"]["param"] == "prompt_logprobs", "prompt_logprobs out of range")


def case_penalties_and_logit_bias():
    with Server(ARGS.binary) as s:
        c = client(s)
        base = dict(model="tiny-smollm2", prompt="Hello there", max_tokens=12, temperature=0, logprobs=0)
        plain = c.completions.create(**base)
        # A large bias on one token makes greedy pick it every time.
        status, body, _ = s.post("/tokenize", {"prompt": " mountains", "add_special_tokens": False})
        target = body["tokens"][0]
        biased = c.completions.create(logit_bias={str(target): 100}, **base)
        _, detok, _ = s.post("/detokenize", {"tokens": [target] * 12})
        check(biased.choices[0].text == detok["prompt"], f"logit_bias: {biased.choices[0].text!r}")
        # Repetition / frequency / presence penalties change a repetitive greedy output.
        repeated = c.completions.create(**{**base, "max_tokens": 24})
        penalized = c.completions.create(frequency_penalty=2.0, presence_penalty=2.0, extra_body={"repetition_penalty": 2.0},
                                         **{**base, "max_tokens": 24})
        toks = penalized.choices[0].logprobs.tokens
        check(penalized.choices[0].text != repeated.choices[0].text, "penalties changed nothing")
        check(len(set(toks)) > len(set(repeated.choices[0].logprobs.tokens)), "penalties did not diversify the tokens")
        # min_tokens: EOS banned until then (the tiny model's EOS is <|im_end|>).
        r = c.completions.create(extra_body={"min_tokens": 8, "stop_token_ids": [target]}, **{**base, "logit_bias": {str(target): 100}})
        check(r.usage.completion_tokens >= 8, f"min_tokens: {r.usage.completion_tokens} tokens")
        check(plain.usage.completion_tokens >= 1, "plain output")
        # allowed_token_ids: every token among them (named by id: return_tokens_as_token_ids).
        allowed = [target, 300, 301, 302]
        r = c.completions.create(extra_body={"allowed_token_ids": allowed, "return_tokens_as_token_ids": True},
                                 **{**base, "temperature": 1.0, "seed": 3, "max_tokens": 16})
        ids = [int(t.split(":")[1]) for t in r.choices[0].logprobs.tokens]
        check(len(ids) == 16 and set(ids) <= set(allowed), f"allowed_token_ids: {ids}")
        # bad_words: a word that is one token alone and one after a space, which logit_bias makes greedy
        # pick every time, never comes (the ban wins over the bias).
        def ids_of(text):
            return s.post("/tokenize", {"prompt": text, "add_special_tokens": False})[1]["tokens"]
        words = [w for w in ("mountains", "capital", "Paris", "the", "sky", "blue", "a")
                 if len(ids_of(w)) == 1 and len(ids_of(" " + w)) == 1 and ids_of(w) != ids_of(" " + w)]
        check(len(words) > 0, "a word of one token alone and after a space in the tiny vocabulary")
        spaced = ids_of(" " + words[0])[0]
        banned = {ids_of(words[0])[0], spaced}
        r = c.completions.create(logit_bias={str(spaced): 100}, extra_body={"return_tokens_as_token_ids": True}, **base)
        check(f"token_id:{spaced}" in r.choices[0].logprobs.tokens, "the bias alone picks the word")
        r = c.completions.create(logit_bias={str(spaced): 100},
                                 extra_body={"bad_words": [words[0]], "return_tokens_as_token_ids": True}, **base)
        ids = [int(t.split(":")[1]) for t in r.choices[0].logprobs.tokens]
        check(not banned & set(ids), f"bad_words {words[0]!r}: {ids} holds {banned}")


def case_n_and_seed():
    with Server(ARGS.binary) as s:
        c = client(s)
        r = c.completions.create(model="tiny-smollm2", prompt="Hello", max_tokens=10, temperature=1.0, n=3, seed=7)
        check(len(r.choices) == 3, "n=3 gives three choices")
        again = c.completions.create(model="tiny-smollm2", prompt="Hello", max_tokens=10, temperature=1.0, n=3, seed=7)
        check([x.text for x in r.choices] == [x.text for x in again.choices], "a seed makes n choices reproducible")
        check(len({x.text for x in r.choices}) > 1, "the n choices differ (seed, seed+1, ...)")
        check(r.usage.completion_tokens == 30, f"usage counts all three choices: {r.usage}")
        pieces = {}
        for chunk in c.completions.create(model="tiny-smollm2", prompt="Hello", max_tokens=10, temperature=1.0, n=3, seed=7, stream=True):
            for ch in chunk.choices:
                pieces[ch.index] = pieces.get(ch.index, "") + ch.text
        check([pieces[i] for i in range(3)] == [x.text for x in r.choices], "streamed n choices equal the whole ones")


def json_holds(v, schema):
    """The few schema keywords the structured-output case uses, checked by hand (no jsonschema here)."""
    t = schema.get("type")
    if "enum" in schema:
        return v in schema["enum"]
    if t == "object":
        props = schema.get("properties", {})
        return (isinstance(v, dict) and all(k in v for k in schema.get("required", [])) and
                (schema.get("additionalProperties", True) is not False or set(v) <= set(props)) and
                all(json_holds(v[k], props[k]) for k in v if k in props))
    if t == "array":
        return (isinstance(v, list) and schema.get("minItems", 0) <= len(v) <= schema.get("maxItems", 1 << 30) and
                all(json_holds(x, schema["items"]) for x in v))
    if t == "string":
        return (isinstance(v, str) and schema.get("minLength", 0) <= len(v) <= schema.get("maxLength", 1 << 30) and
                (("pattern" not in schema) or re.search(schema["pattern"], v) is not None) and
                (schema.get("format") != "date" or re.fullmatch(r"\d{4}-\d{2}-\d{2}", v) is not None))
    if t == "integer":
        return isinstance(v, int) and not isinstance(v, bool) and schema.get("minimum", -1 << 62) <= v <= schema.get("maximum", 1 << 62)
    if t == "boolean":
        return isinstance(v, bool)
    return True


def case_structured_output():
    schema = {"type": "object", "additionalProperties": False, "required": ["answer", "ok", "n", "tags"],
              "properties": {"answer": {"type": "string", "maxLength": 12}, "ok": {"type": "boolean"},
                             "n": {"type": "integer", "minimum": -20, "maximum": 300}, "kind": {"enum": ["cat", "dog", None]},
                             "day": {"type": "string", "format": "date"}, "code": {"type": "string", "pattern": "^[a-f]{2}[0-9]$"},
                             "tags": {"type": "array", "items": {"type": "string", "maxLength": 4}, "minItems": 1, "maxItems": 3}}}
    fmt = {"type": "json_schema", "json_schema": {"name": "reply", "schema": schema, "strict": True}}
    with Server(ARGS.binary) as s:
        c = client(s)
        # Random weights pick any token the schema lets through: every answer must still hold it,
        # end where the JSON ends (EOS and the end of turn held back until then), keep the
        # schema's key order, and stream the same text.
        for seed in range(6):
            r = c.chat.completions.create(model="tiny-smollm2", messages=[{"role": "user", "content": f"Answer {seed}"}],
                                          max_tokens=400, temperature=1.0, seed=seed, response_format=fmt)
            text = r.choices[0].message.content
            check(r.choices[0].finish_reason == "stop", f"seed {seed}: ends at the end of the JSON: {r.choices[0].finish_reason} {text!r}")
            v = json.loads(text)
            check(json_holds(v, schema), f"seed {seed}: {text!r} holds the schema")
            order = [k for k in schema["properties"] if k in v]
            check(list(v) == order, f"seed {seed}: keys in the schema's order: {list(v)}")
        pieces, finish, _ = stream_chat(c, model="tiny-smollm2", messages=[{"role": "user", "content": "Answer 0"}],
                                        max_tokens=400, temperature=1.0, seed=0, response_format=fmt)
        whole = c.chat.completions.create(model="tiny-smollm2", messages=[{"role": "user", "content": "Answer 0"}],
                                          max_tokens=400, temperature=1.0, seed=0, response_format=fmt)
        check("".join(pieces) == whole.choices[0].message.content and finish == "stop", "streamed structured output equals whole")

        # vLLM's structured_outputs, compact: no whitespace at all in an answer without strings.
        numbers = {"type": "object", "properties": {"x": {"type": "array", "items": {"type": "integer"}, "maxItems": 4}},
                   "required": ["x"]}
        r = c.completions.create(model="tiny-smollm2", prompt="Nums", max_tokens=120, temperature=1.0, seed=2,
                                 extra_body={"structured_outputs": {"json": numbers, "disable_any_whitespace": True}})
        t = r.choices[0].text
        check(r.choices[0].finish_reason == "stop" and not any(ch.isspace() for ch in t) and
              json_holds(json.loads(t), numbers), f"compact JSON: {t!r}")

        # vLLM's guided_choice over n choices, and a GBNF grammar.
        r = c.completions.create(model="tiny-smollm2", prompt="Pick", max_tokens=20, temperature=1.0, n=8, seed=3,
                                 extra_body={"guided_choice": ["red", "green", "blue sky"]})
        check(all(x.text in ("red", "green", "blue sky") and x.finish_reason == "stop" for x in r.choices),
              f"every choice is one of the list: {[x.text for x in r.choices]}")
        r = c.completions.create(model="tiny-smollm2", prompt="Code", max_tokens=20, temperature=1.0, seed=4,
                                 extra_body={"guided_grammar": 'root ::= "id-" [0-9]{3} ("!" | "?")'})
        t = r.choices[0].text
        check(len(t) == 7 and t.startswith("id-") and t[3:6].isdigit() and t[6] in "!?", f"grammar: {t!r}")
        r = c.completions.create(model="tiny-smollm2", prompt="Plate", max_tokens=20, temperature=1.0, seed=6, n=4,
                                 extra_body={"guided_regex": "[A-Z]{2,3}-[0-9]{2}"})
        check(all(re.fullmatch("[A-Z]{2,3}-[0-9]{2}", x.text) and x.finish_reason == "stop" for x in r.choices),
              f"guided_regex: {[x.text for x in r.choices]}")
        # Any JSON object (its strings may run past max_tokens: what it wrote is still a prefix).
        r = c.completions.create(model="tiny-smollm2", prompt="JSON", max_tokens=300, temperature=1.0, seed=5,
                                 extra_body={"response_format": {"type": "json_object"}})
        t = r.choices[0].text
        check(t.lstrip().startswith("{"), f"json_object starts an object: {t!r}")
        if r.choices[0].finish_reason == "stop":
            check(isinstance(json.loads(t), dict), f"json_object: {t!r}")


def case_forced_tool_calls():
    weather = {"type": "object", "properties": {"city": {"type": "string", "maxLength": 10}, "unit": {"enum": ["c", "f"]}},
               "required": ["city", "unit"]}
    clock = {"type": "object", "properties": {"zone": {"type": "integer"}}, "required": ["zone"]}
    tools = [{"type": "function", "function": {"name": "get_weather", "description": "Weather in a city", "parameters": weather}},
             {"type": "function", "function": {"name": "get_time", "parameters": clock}}]
    schemas = {"get_weather": weather, "get_time": clock}
    messages = [{"role": "user", "content": "What is the weather in Paris?"}]
    with Server(ARGS.binary) as s:
        c = client(s)
        for seed in range(3):
            # A named function: its arguments, as one tool call (OpenAI's finish_reason "stop").
            r = c.chat.completions.create(model="tiny-smollm2", messages=messages, tools=tools, max_tokens=300, seed=seed,
                                          temperature=1.0, tool_choice={"type": "function", "function": {"name": "get_weather"}})
            m = r.choices[0].message
            check(r.choices[0].finish_reason == "stop" and m.content is None and len(m.tool_calls) == 1,
                  f"named: {r.choices[0]}")
            check(m.tool_calls[0].function.name == "get_weather" and m.tool_calls[0].id.startswith("call_"), f"named: {m}")
            check(json_holds(json.loads(m.tool_calls[0].function.arguments), weather), f"named arguments: {m}")
            # "required": one or more calls of any of the tools ("tool_calls").
            r = c.chat.completions.create(model="tiny-smollm2", messages=messages, tools=tools, max_tokens=400, seed=seed,
                                          temperature=1.0, tool_choice="required")
            m = r.choices[0].message
            check(r.choices[0].finish_reason == "tool_calls" and m.content is None and len(m.tool_calls) >= 1,
                  f"required: {r.choices[0]}")
            for call in m.tool_calls:
                check(json_holds(json.loads(call.function.arguments), schemas[call.function.name]), f"required: {call}")
        # Streamed: the same calls (ids aside) in one delta when the choice ends.
        calls, finish = {}, None
        for chunk in c.chat.completions.create(model="tiny-smollm2", messages=messages, tools=tools, max_tokens=400, seed=1,
                                               temperature=1.0, tool_choice="required", stream=True):
            for ch in chunk.choices:
                for tc in ch.delta.tool_calls or []:
                    calls[tc.index] = (tc.function.name, tc.function.arguments)
                finish = ch.finish_reason or finish
        whole = c.chat.completions.create(model="tiny-smollm2", messages=messages, tools=tools, max_tokens=400, seed=1,
                                          temperature=1.0, tool_choice="required")
        check([calls[i] for i in range(len(calls))] ==
              [(x.function.name, x.function.arguments) for x in whole.choices[0].message.tool_calls] and finish == "tool_calls",
              f"streamed tool calls equal whole: {calls} {whole.choices[0].message.tool_calls}")
        # The next turn takes the call and its result back (arguments as the JSON text they came as).
        call = whole.choices[0].message.tool_calls[0]
        follow = messages + [{"role": "assistant", "content": None, "tool_calls": [call.model_dump()]},
                             {"role": "tool", "tool_call_id": call.id, "content": "sunny"}]
        r = c.chat.completions.create(model="tiny-smollm2", messages=follow, tools=tools, max_tokens=4, temperature=0)
        check(r.choices[0].message.content is not None, "a turn after a tool result")


def case_parsed_tool_calls():
    # A random-weight model writes no calls of its own: a grammar makes it write one in Hermes's
    # format (Qwen's), which --tool-call-parser hermes must turn into tool_calls.
    tools = [{"type": "function", "function": {"name": "get_weather", "parameters": {
        "type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}]
    call = 'root ::= "Checking. <tool_call>\\n{\\"name\\": \\"get_weather\\", \\"arguments\\": {\\"city\\": \\"" [a-z]{1,6} "\\"}}\\n</tool_call>"'
    plain = 'root ::= "Sunny, " [a-z]{2,5} "."'
    messages = [{"role": "user", "content": "Weather in Paris?"}]
    with Server(ARGS.binary, "--tool-call-parser", "hermes", "--enable-auto-tool-choice") as s:
        c = client(s)
        for seed in range(3):
            r = c.chat.completions.create(model="tiny-smollm2", messages=messages, tools=tools, max_tokens=200, seed=seed,
                                          temperature=1.0, extra_body={"guided_grammar": call})
            m = r.choices[0].message
            check(r.choices[0].finish_reason == "tool_calls" and m.content == "Checking." and len(m.tool_calls) == 1,
                  f"parsed: {r.choices[0]}")
            check(m.tool_calls[0].function.name == "get_weather" and
                  json.loads(m.tool_calls[0].function.arguments)["city"].isalpha(), f"parsed call: {m.tool_calls}")
            pieces, calls, finish = [], [], None
            for chunk in c.chat.completions.create(model="tiny-smollm2", messages=messages, tools=tools, max_tokens=200, seed=seed,
                                                   temperature=1.0, stream=True, extra_body={"guided_grammar": call}):
                for ch in chunk.choices:
                    pieces.append(ch.delta.content or "")
                    calls += [(tc.function.name, tc.function.arguments) for tc in ch.delta.tool_calls or []]
                    finish = ch.finish_reason or finish
            check("".join(pieces).strip() == "Checking." and calls == [(x.function.name, x.function.arguments) for x in m.tool_calls]
                  and finish == "tool_calls", f"streamed parsed call: {pieces} {calls} {finish}")
        # No call written, or tool_choice "none": the text as content.
        r = c.chat.completions.create(model="tiny-smollm2", messages=messages, tools=tools, max_tokens=200, seed=1,
                                      temperature=1.0, extra_body={"guided_grammar": plain})
        check(r.choices[0].finish_reason == "stop" and r.choices[0].message.tool_calls is None and
              r.choices[0].message.content.startswith("Sunny, "), f"no call: {r.choices[0]}")
        r = c.chat.completions.create(model="tiny-smollm2", messages=messages, tools=tools, max_tokens=200, seed=1,
                                      temperature=1.0, tool_choice="none", extra_body={"guided_grammar": call})
        check(r.choices[0].message.tool_calls is None and "<tool_call>" in r.choices[0].message.content,
              f"tool_choice none: {r.choices[0]}")
    # Llama 3.2's pythonic format: the whole answer a Python list of calls.
    pythonic = 'root ::= "[get_weather(city=\'" [a-z]{1,6} "\', days=" [1-9] ")]"'
    with Server(ARGS.binary, "--tool-call-parser", "pythonic") as s:
        r = client(s).chat.completions.create(model="tiny-smollm2", messages=messages, tools=tools, max_tokens=200,
                                              seed=1, temperature=1.0, extra_body={"guided_grammar": pythonic})
        m = r.choices[0].message
        args = json.loads(m.tool_calls[0].function.arguments) if m.tool_calls else {}
        check(r.choices[0].finish_reason == "tool_calls" and m.content is None and len(m.tool_calls) == 1 and
              args["city"].isalpha() and 1 <= args["days"] <= 9, f"pythonic call: {r.choices[0]}")


def case_reasoning_parser():
    # Grammars make the random-weight model think in Qwen3's <think> block, then answer or call.
    think = 'root ::= "<think>\\n" [a-z ]{3,8} "\\n</think>\\n\\nAnswer " [0-9]{2} "."'
    call = ('root ::= "<think>\\nok\\n</think>\\n\\n<tool_call>\\n{\\"name\\": \\"get_weather\\", '
            '\\"arguments\\": {\\"city\\": \\"" [a-z]{2,4} "\\"}}\\n</tool_call>"')
    tools = [{"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object"}}}]
    messages = [{"role": "user", "content": "Think first."}]
    with Server(ARGS.binary, "--reasoning-parser", "qwen3", "--tool-call-parser", "hermes") as s:
        for seed in range(3):
            body = {"messages": messages, "max_tokens": 200, "seed": seed, "temperature": 1.0, "guided_grammar": think}
            st, r, _ = s.post("/v1/chat/completions", body)
            m = r["choices"][0]["message"]
            check(st == 200 and re.fullmatch(r"\n[a-z ]{3,8}\n", m["reasoning_content"]) and
                  re.fullmatch(r"Answer [0-9]{2}\.", m["content"]), f"reasoning split: {r}")
            reasoning, content = "", ""
            for chunk in client(s).chat.completions.create(model="tiny-smollm2", stream=True, messages=messages, max_tokens=200,
                                                           seed=seed, temperature=1.0, extra_body={"guided_grammar": think}):
                for ch in chunk.choices:
                    reasoning += (ch.delta.model_extra or {}).get("reasoning_content") or ""
                    content += ch.delta.content or ""
            check(reasoning == m["reasoning_content"] and content == m["content"], f"streamed: {reasoning!r} {content!r}")
        # Held text keeps its logprobs: the stream's add up to the whole answer's, prompt logprobs included.
        body = {"messages": messages, "max_tokens": 200, "seed": 2, "temperature": 1.0, "guided_grammar": think,
                "logprobs": True, "top_logprobs": 2, "prompt_logprobs": 1}
        st, whole, _ = s.post("/v1/chat/completions", body)
        streamed, prompt_lp = [], []
        _, text, _ = s.request("POST", "/v1/chat/completions", dict(body, stream=True))
        for event in [json.loads(line[6:]) for line in text.splitlines() if line.startswith("data: {")]:
            for ch in event.get("choices", []):
                streamed += (ch.get("logprobs") or {}).get("content") or []
                prompt_lp += [ch["prompt_logprobs"]] if ch.get("prompt_logprobs") else []
        w = whole["choices"][0]
        check(st == 200 and streamed == w["logprobs"]["content"] and len(streamed) > 5,
              f"streamed logprobs of held text: {len(streamed)} against {len(w['logprobs']['content'])}")
        check(prompt_lp == [w["prompt_logprobs"]], f"streamed prompt logprobs once, as whole: {prompt_lp[:1]}")
        st, r, _ = s.post("/v1/chat/completions", {"messages": messages, "max_tokens": 200, "seed": 1, "temperature": 1.0,
                                                   "guided_grammar": call, "tools": tools})
        c = r["choices"][0]
        check(c["finish_reason"] == "tool_calls" and c["message"]["reasoning_content"] == "\nok\n" and
              c["message"]["content"] is None and c["message"]["tool_calls"][0]["function"]["name"] == "get_weather",
              f"reasoning, then a call: {r}")
        st, r, _ = s.post("/v1/chat/completions", {"messages": messages, "max_tokens": 20, "seed": 1, "temperature": 1.0,
                                                   "guided_grammar": 'root ::= "Plain."'})
        m = r["choices"][0]["message"]
        check(m["content"] == "Plain." and "reasoning_content" not in m, f"no thinking: {r}")


def case_disconnect_frees_pages():
    # smollm2-135m on the CPU: ~30 ms a step, slow enough to leave mid-stream.
    with Server(ARGS.slow_binary) as s:
        sock = socket.create_connection(("127.0.0.1", s.port))
        body = json.dumps({"prompt": "Hello there", "max_tokens": 500, "stream": True, "ignore_eos": True})
        sock.sendall(f"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                     f"Content-Length: {len(body)}\r\n\r\n{body}".encode())
        data = b""
        while data.count(b"data:") < 4:
            data += sock.recv(65536)
        before = s.metrics()
        check(before["kiln:kv_cache_pages_in_use"] > 0, "the request holds pages while it runs")
        sock.close()
        t0 = time.time()
        while time.time() - t0 < 10:
            m = s.metrics()
            if m["kiln:kv_cache_pages_in_use"] == 0:
                break
            time.sleep(0.005)
        steps = m["kiln:engine_steps_total"] - before["kiln:engine_steps_total"]
        print(f"pages back {time.time() - t0:.3f} s after the close; {steps:.0f} steps ran in between "
              f"(including the ones before the close was seen)")
        check(m["kiln:kv_cache_pages_in_use"] == 0, "pages still in use after the client left")
        check(m["kiln:request_success_total{abort}"] == 1, "the request counts as aborted")
        check(m["kiln:generation_tokens_total"] < 100, "the request stopped generating")


def case_metrics_count_what_clients_received():
    with Server(ARGS.binary, "--max-waiting", "512") as s:
        c = client(s)
        received = {"prompt": 0, "completion": 0}
        lock = threading.Lock()

        def run(i):
            if i % 2:
                _, _, usage = stream_completion(c, model="tiny-smollm2", prompt=PROMPTS[i % 8], max_tokens=5 + i % 20,
                                                temperature=0.9, seed=i, stream_options={"include_usage": True})
            else:
                usage = c.chat.completions.create(model="tiny-smollm2", messages=[{"role": "user", "content": PROMPTS[i % 8]}],
                                                  max_tokens=5 + i % 20, temperature=0.9, seed=i, stop=["e"]).usage
            with lock:
                received["prompt"] += usage.prompt_tokens
                received["completion"] += usage.completion_tokens

        with concurrent.futures.ThreadPoolExecutor(32) as pool:
            list(pool.map(run, range(256)))
        m = s.metrics()
        print(f"clients received {received}; /metrics: prompt {m['kiln:prompt_tokens_total']:.0f}, "
              f"generation {m['kiln:generation_tokens_total']:.0f}")
        check(m["kiln:generation_tokens_total"] == received["completion"], "generation_tokens_total != what clients received")
        check(m["kiln:prompt_tokens_total"] == received["prompt"], "prompt_tokens_total != what clients received")
        check(m["kiln:time_to_first_token_seconds_count"] == 256, "one TTFT observation per request")
        check(m["kiln:num_requests_running"] == 0 and m["kiln:num_requests_waiting"] == 0, "idle at the end")
        check(m["kiln:prefix_cache_hits_total"] > 0, "repeated prompts hit the prefix cache")


def case_errors():
    with Server(ARGS.binary, "--max-request-bytes", "8192", "--max-waiting", "100", api_key="sekret") as s:
        auth = {"Authorization": "Bearer sekret"}
        st, body, _ = s.post("/v1/completions", {"prompt": "hi"}, {"Authorization": "Bearer wrong"})
        check(st == 401 and "error" in body, f"wrong key: {st} {body}")
        st, body, _ = s.post("/v1/completions", {"prompt": "hi"})
        check(st == 401, "missing key")
        for wrong in ["Bearer sekre", "Bearer sekret2", "Bearer sekreT", "sekret", "Bearer sekret sekret"]:
            st, body, _ = s.post("/v1/completions", {"prompt": "hi"}, {"Authorization": wrong})
            check(st == 401, f"key {wrong!r}: {st}")
        bad = [({"prompt": "hi", "temperature": -1}, "temperature"), ({"prompt": "hi", "top_p": 2}, "top_p"),
               ({"prompt": "hi", "max_tokens": 0}, "max_tokens"), ({"prompt": "hi", "max_tokens": "x"}, "max_tokens"),
               ({"prompt": 5}, "prompt"), ({}, "prompt"), ({"prompt": [1, 2, 999999]}, "prompt"),
               ({"prompt": "hi", "n": 0}, "n"), ({"prompt": "hi", "stop": 3}, "stop"),
               ({"prompt": "hi", "logprobs": 50}, "logprobs"), ({"prompt": "hi", "logit_bias": {"x": 1}}, "logit_bias"),
               ({"prompt": "hi", "presence_penalty": 3}, "presence_penalty"), ({"prompt": "hi", "max_tokens": 100000}, "max_tokens"),
               ({"prompt": "hi", "stream_options": {"include_usage": True}}, "stream_options"),
               ({"prompt": "hi " * 600}, "prompt"),
               # Never narrowed: 2^64 - 1 is not top_k -1 (off), 1e300 is no n.
               ({"prompt": "hi", "top_k": 18446744073709551615}, "top_k"), ({"prompt": "hi", "n": 1e300}, "n"),
               # More completions (prompts x n) than --max-waiting could ever queue.
               ({"prompt": "hi", "n": 101}, "n"), ({"prompt": ["hi"] * 26, "n": 4}, "prompt"),
               # Lists copied into every choice stay bounded: stop strings, one bias a token.
               ({"prompt": "hi", "stop": ["x"] * 1025}, "stop"), ({"prompt": "hi", "stop": ["x", ""]}, "stop"),
               ({"prompt": "hi", "logit_bias": {"5": 1, "05": 2}}, "logit_bias"),
               # 1024 choices x 500 tokens x 21: more logprob entries than an answer may hold.
               ({"prompt": ["hi"] * 8, "n": 128, "max_tokens": 500, "logprobs": 20}, "logprobs"),
               # Asked for and not done: refused rather than ignored.
               ({"prompt": "hi", "guided_regex": "(?=a)b"}, "guided_regex"),
               ({"prompt": "hi", "guided_whitespace_pattern": " *"}, "guided_whitespace_pattern"),
               ({"prompt": "hi", "use_beam_search": True}, "use_beam_search"),
               # Structured output the server cannot honour, or asked for twice.
               ({"prompt": "hi", "response_format": {"type": "json_schema", "json_schema": {"name": "x", "schema":
                 {"type": "object", "properties": {"zip": {"type": "string", "format": "email"}}}}}}, "response_format"),
               ({"prompt": "hi", "response_format": {"type": "xml"}}, "response_format"),
               ({"prompt": "hi", "guided_grammar": "root ::= root \"a\""}, "guided_grammar"),
               ({"prompt": "hi", "guided_choice": []}, "guided_choice"),
               ({"prompt": "hi", "guided_json": "{not json"}, "guided_json"),
               ({"prompt": "hi", "guided_choice": ["a"], "min_tokens": 2}, "min_tokens"),
               ({"prompt": "hi", "guided_choice": ["a"], "guided_grammar": "root ::= \"a\""}, "guided_grammar")]
        for request, field in bad:
            st, body, _ = s.post("/v1/completions", request, auth)
            check(st == 400, f"{request}: status {st}")
            check(body["error"]["param"] == field and field in body["error"]["message"], f"{request}: {body}")
        # ... and what changes nothing here is ignored, as vLLM ignores fields it does not know.
        st, body, _ = s.post("/v1/completions", {"prompt": "hi", "max_tokens": 2, "user": "u1", "use_beam_search": False,
                                                 "response_format": {"type": "text"}}, auth)
        check(st == 200, f"harmless fields: {st} {body}")
        st, body, _ = s.post("/v1/chat/completions", {"messages": [{"role": "user", "content": "x"}], "tool_choice":
                                                      {"type": "function", "function": {"name": "g"}},
                                                      "tools": [{"type": "function", "function": {"name": "f"}}]}, auth)
        check(st == 400 and body["error"]["param"] == "tool_choice", f"tool_choice names no tool: {st} {body}")
        st, body, _ = s.post("/v1/chat/completions", {"messages": [{"role": "user", "content": "x"}], "tool_choice": "required"},
                             auth)
        check(st == 400 and body["error"]["param"] == "tools", f"tool_choice required without tools: {st} {body}")
        st, body, _ = s.post("/v1/chat/completions", {"messages": [{"role": "user", "content": "x"}], "tool_choice": "required",
                                                      "tools": [{"type": "function", "function": {"name": "f"}}],
                                                      "response_format": {"type": "json_object"}}, auth)
        check(st == 400 and body["error"]["param"] == "tool_choice", f"tool_choice with response_format: {st} {body}")
        st, body, _ = s.post("/v1/chat/completions", {"messages": [{"role": "user", "content": "x"}], "tool_choice": "auto",
                                                      "max_tokens": 2, "tools": [{"type": "function", "function": {"name": "f"}}]},
                             auth)
        check(st == 200, f"tool_choice auto: {st} {body}")
        st, body, _ = s.post("/v1/chat/completions", {"messages": [{"content": "x"}]}, auth)
        check(st == 400 and body["error"]["param"] == "messages", f"chat without role: {body}")
        st, body, _ = s.post("/v1/completions", {"model": "gpt-4", "prompt": "hi"}, auth)
        check(st == 404 and body["error"]["param"] == "model", f"unknown model: {st} {body}")
        st, text, _ = s.request("POST", "/v1/completions", raw=b"{not json", headers=auth)
        check(st == 400 and "JSON" in json.loads(text)["error"]["message"], "bad JSON")
        st, text, _ = s.request("POST", "/v1/completions", raw=b'{"prompt": "hi", "prompt": "evil"}', headers=auth)
        check(st == 400 and "prompt" in json.loads(text)["error"]["message"], f"repeated key: {st} {text}")
        st, text, _ = s.request("POST", "/v1/completions", raw=json.dumps({"prompt": "x" * 10000}).encode(), headers=auth)
        check(st == 413 and json.loads(text)["error"]["code"] == 413, f"too large: {st} {text}")
        st, text = s.get("/v1/models")
        check(st == 401, "models needs the key too")
        # The openai client sees the same errors as exceptions.
        c = client(s)
        try:
            c.completions.create(model="tiny-smollm2", prompt="hi", temperature=-1)
            check(False, "no exception for a bad request")
        except openai.BadRequestError as e:
            check("temperature" in str(e), str(e))


def case_overload_gets_503():
    with Server(ARGS.slow_binary, "--max-num-seqs", "1", "--max-waiting", "2") as s:
        results = []

        def run(i):
            st, body, headers = s.post("/v1/completions", {"prompt": "Hello", "max_tokens": 10, "ignore_eos": True})
            results.append((st, headers.get("Retry-After")))

        threads = [threading.Thread(target=run, args=(i,)) for i in range(12)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        codes = sorted(r[0] for r in results)
        print("status codes:", codes)
        check(codes.count(200) >= 3, "the running and waiting requests succeed")
        check(codes.count(503) >= 1, "overload gets 503")
        check(all(r[1] == "1" for r in results if r[0] == 503), "503 carries Retry-After")
        check(set(codes) <= {200, 503}, "only 200 and 503")
        check(s.metrics()["kiln:request_rejected_total"] == codes.count(503), "rejections are counted")


def case_sigterm_drains_and_exits_0():
    s = Server(ARGS.slow_binary)
    c = client(s)
    out = {}

    def run():
        _, finish, _ = stream_completion(c, model="smollm2-135m", prompt="Hello", max_tokens=30, extra_body={"ignore_eos": True})
        out["finish"] = finish

    t = threading.Thread(target=run)
    t.start()
    time.sleep(0.5)
    s.proc.send_signal(signal.SIGTERM)
    time.sleep(0.2)
    st, _ = s.get("/health")
    t.join()
    code = s.stop()
    check(out.get("finish") == "length", f"the running request finished: {out}")
    check(code == 0, f"exit code {code}: {''.join(s.log)}")
    check(st in (0, 200, 503), "health during the drain")


def case_models_health_tokenize():
    with Server(ARGS.binary, "--served-model-name", "my-model") as s:
        c = client(s)
        models = c.models.list()
        check([m.id for m in models.data] == ["my-model"], f"models: {models}")
        st, body, _ = s.post("/tokenize", {"prompt": "Hello there"})
        check(st == 200 and body["count"] == len(body["tokens"]) and body["max_model_len"] == 512, f"tokenize: {body}")
        st, back, _ = s.post("/detokenize", {"tokens": body["tokens"]})
        check(back["prompt"] == "Hello there", f"detokenize: {back}")
        st, body, _ = s.post("/tokenize", {"messages": [{"role": "user", "content": "hi"}]})
        check(st == 200 and body["count"] > 3, "tokenize messages")
        st, text = s.get("/version")
        check(st == 200 and "kiln" in text, "version")
        r = c.completions.create(model="my-model", prompt="hi", max_tokens=2)
        check(r.model == "my-model", "served model name in responses")


def case_chat_repl_under_a_pipe():
    # The chat command from a pipe: one message per line, /clear starts over (with a seed, the same
    # answers again), /exit ends it, the later turns reuse the earlier turns' KV pages.
    first = "Tell me a story about the sea, the sky and the mountains, and the little model that wanted to talk."
    conversation = f"{first}\nAnd then?\n"
    p = subprocess.run([ARGS.binary, "chat", "--backend", "ref", "--random-weights", "1", "--tokenizer", TOKENIZER,
                        "--temp", "0.8", "-s", "5", "-n", "6"], input=conversation + "/clear\n" + conversation + "/exit\nnot read\n",
                       capture_output=True, text=True, timeout=120)
    check(p.returncode == 0, f"exit {p.returncode}: {p.stderr}")
    half = len(p.stdout) // 2
    check(len(p.stdout) % 2 == 0 and p.stdout[:half] == p.stdout[half:], f"after /clear the answers repeat: {p.stdout!r}")
    import re
    m = re.search(r"(\d+) turns, (\d+) of (\d+) prompt tokens from the prefix cache", p.stderr)
    check(m is not None, f"summary line: {p.stderr}")
    turns, cached, total = map(int, m.groups())
    check(turns == 4, f"four turns: {p.stderr}")
    check(cached >= 32, f"later turns reuse the earlier ones' pages: {p.stderr}")


CASES = {name[5:]: fn for name, fn in globals().items() if name.startswith("case_")}


def main():
    global ARGS
    parser = argparse.ArgumentParser()
    parser.add_argument("--binary", required=True)
    parser.add_argument("--slow-binary", required=True)
    parser.add_argument("case", choices=sorted(CASES))
    ARGS = parser.parse_args()
    t0 = time.time()
    CASES[ARGS.case]()
    print(f"{ARGS.case}: passed in {time.time() - t0:.1f} s")


if __name__ == "__main__":
    main()
