#!/usr/bin/env python3
"""`lutra serve` driven by OpenAI's own Python client (the `openai` package from PyPI).

    openai_client_check.py LUTRA MODEL --chat            chat checks (an instruct model)
    openai_client_check.py LUTRA MODEL --completions     text-completion checks, refusals
    openai_client_check.py LUTRA MODEL --load 8x25 --parallel 4 [--max-tokens 32] [--json]
    openai_client_check.py - - --external http://127.0.0.1:8090/v1 --load 8x25 --chat
                                                         the same load on a server already running
                                                         (llama-server, for a side-by-side figure)

Starts `LUTRA serve -m MODEL --port 0` on 127.0.0.1, runs the checks against it and stops
it. Exits non-zero on the first failed check. `--load C×R` runs C concurrent clients of
R streamed requests each and prints time to first token (p50/p95) and aggregate tokens/s.
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import threading
import time

import jsonschema
import openai


class Server:
    def __init__(self, lutra, model, extra):
        env = {**os.environ, "LUTRA_IMPORT_CACHE": os.environ.get("LUTRA_IMPORT_CACHE", "off")}
        self.proc = subprocess.Popen(
            [lutra, "serve", "-m", model, "--host", "127.0.0.1", "--port", "0", *extra],
            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, env=env)
        self.log = []
        for line in self.proc.stderr:
            self.log.append(line)
            if line.startswith("listening on http://"):
                self.base = line.strip().removeprefix("listening on ") + "/v1"
                break
        else:
            sys.exit("lutra serve exited before listening:\n" + "".join(self.log))
        threading.Thread(target=lambda: self.log.extend(self.proc.stderr), daemon=True).start()

    def stop(self):
        self.proc.terminate()
        self.proc.wait(timeout=10)


class External:
    """A server someone else started: nothing to stop, no log to read."""

    def __init__(self, base):
        self.base, self.log = base, []

    def stop(self):
        pass


def check(cond, what):
    if not cond:
        sys.exit(f"FAILED: {what}")
    print(f"ok: {what}")


def model_id(client):
    models = client.models.list().data
    check(len(models) == 1, f"/v1/models lists one model ({models[0].id})")
    return models[0].id


def chat_checks(client):
    model = model_id(client)
    messages = [{"role": "system", "content": "You are a concise assistant."},
                {"role": "user", "content": "Write a Python function that adds two numbers."}]
    r = client.chat.completions.create(model=model, messages=messages, max_tokens=48, temperature=0)
    text = r.choices[0].message.content
    check(r.object == "chat.completion" and text and r.choices[0].finish_reason in ("stop", "length"),
          f"a chat completion ({r.usage.completion_tokens} tokens, {r.choices[0].finish_reason}): {text[:60]!r}...")
    check(r.usage.total_tokens == r.usage.prompt_tokens + r.usage.completion_tokens, "usage adds up")

    pieces, finish, usage = [], None, None
    for chunk in client.chat.completions.create(model=model, messages=messages, max_tokens=48, temperature=0,
                                                stream=True, stream_options={"include_usage": True}):
        if chunk.usage:
            usage = chunk.usage
        for c in chunk.choices:
            pieces.append(c.delta.content or "")
            finish = c.finish_reason or finish
    check(len(pieces) > 5 and "".join(pieces) == text, f"the streamed pieces ({len(pieces)}) join to the same text")
    check(finish == r.choices[0].finish_reason and usage and usage.completion_tokens == r.usage.completion_tokens,
          "the stream ends with the same finish_reason and usage")

    # the second turn: the slot kept the first turn's prompt and answer
    turn2 = messages + [{"role": "assistant", "content": text},
                        {"role": "user", "content": "Now make it subtract."}]
    r2 = client.chat.completions.create(model=model, messages=turn2, max_tokens=32, temperature=0)
    cached = r2.usage.prompt_tokens_details.cached_tokens
    timings = r2.model_extra["timings"]
    new = r2.usage.prompt_tokens - cached
    check(cached >= r.usage.prompt_tokens + r.usage.completion_tokens - 2 and timings["prompt_n"] == new,
          f"the second turn computed only its {new} new prompt tokens ({cached} of {r2.usage.prompt_tokens} cached)")

    try:
        client.chat.completions.create(model="gpt-4o", messages=messages, max_tokens=4)
        check(False, "an unknown model is refused")
    except openai.NotFoundError as e:
        check(e.status_code == 404, f"an unknown model is refused: {e.message}")
    try:
        client.chat.completions.create(model=model, messages=[{"role": "user", "content": "otter " * 5000}], max_tokens=4)
        check(False, "a prompt over the context is refused")
    except openai.BadRequestError as e:
        check(e.code == "context_length_exceeded", f"a prompt over the context is refused: {e.message}")
    r = client.chat.completions.create(model=model, max_tokens=200, temperature=0.7, seed=1, response_format={"type": "json_object"},
                                       messages=[{"role": "user", "content": "Describe a river otter in JSON, briefly."}])
    doc = json.loads(r.choices[0].message.content)
    check(isinstance(doc, dict), f"json_object: an object json.loads reads ({len(doc)} keys)")
    schema = {"type": "object", "required": ["name", "legs", "habitat", "friendly"],
              "properties": {"name": {"type": "string"}, "legs": {"type": "integer"},
                             "habitat": {"enum": ["land", "water", "both"]}, "friendly": {"type": "boolean"}}}
    animals = ["otter", "cat", "eagle", "salmon", "frog", "horse", "spider", "penguin", "snake", "dolphin",
               "ant", "owl", "crab", "bat", "cow", "shark", "duck", "bee", "wolf", "turtle"]
    valid = 0
    for i, animal in enumerate(animals):
        r = client.chat.completions.create(
            model=model, max_tokens=200, seed=i, temperature=0.7,
            messages=[{"role": "user", "content": f"Describe a {animal} as JSON."}],
            response_format={"type": "json_schema", "json_schema": {"name": "animal", "strict": True, "schema": schema}})
        doc = json.loads(r.choices[0].message.content)
        jsonschema.validate(doc, schema)
        valid += 1
    check(valid == len(animals), f"json_schema: {valid} of {len(animals)} answers json.loads reads and jsonschema validates")
    try:
        client.chat.completions.create(model=model, messages=messages, max_tokens=4, response_format={
            "type": "json_schema", "json_schema": {"name": "x", "schema": {"type": "string", "format": "email"}}})
        check(False, "a schema keyword lutra does not follow is refused")
    except openai.BadRequestError as e:
        check(e.param == "response_format", f"a schema keyword lutra does not follow is refused, not ignored: {e.message}")


def completion_checks(client, server):
    model = model_id(client)
    r = client.completions.create(model=model, prompt="Once upon a time", max_tokens=24, temperature=0)
    text = r.choices[0].text
    check(r.usage.prompt_tokens > 0 and r.usage.completion_tokens == 24, f"a completion: {text!r}")
    joined = "".join(c.choices[0].text for c in client.completions.create(
        model=model, prompt="Once upon a time", max_tokens=24, temperature=0, stream=True))
    check(joined == text, "the streamed completion joins to the same text")
    bad = openai.OpenAI(base_url=server.base, api_key="wrong", max_retries=0)
    try:
        bad.completions.create(model=model, prompt="Once", max_tokens=2)
        check(False, "a wrong key is refused")
    except openai.AuthenticationError as e:
        check(e.status_code == 401, f"a wrong key is refused: {e.message}")


def load(client, clients, requests, max_tokens, as_json, chat):
    model = model_id(client)
    prompts = ["Write a haiku about otters.", "Explain what a hash map is.", "Name three rivers in Europe.",
               "Write a limerick about a cat.", "What is the capital of France?", "Describe the moon in one sentence.",
               "List the planets in order.", "Say something kind."]
    ttft, tokens, failures, lock = [], [0], [], threading.Lock()

    def run(i):
        for j in range(requests):
            prompt = prompts[(i + j) % len(prompts)]
            t0, first, finish, usage = time.perf_counter(), None, None, None
            common = dict(model=model, max_tokens=max_tokens, stream=True, stream_options={"include_usage": True})
            try:
                if chat:
                    stream = client.chat.completions.create(messages=[{"role": "user", "content": prompt}], **common)
                else:
                    stream = client.completions.create(prompt=prompt, **common)
                for chunk in stream:
                    if chunk.usage:
                        usage = chunk.usage
                    for c in chunk.choices:
                        text = c.delta.content if chat else c.text
                        if first is None and text:
                            first = time.perf_counter() - t0
                        finish = c.finish_reason or finish
            except Exception as e:  # noqa: BLE001 (any failure is counted and reported)
                with lock:
                    failures.append(repr(e))
                continue
            with lock:
                if finish not in ("stop", "length") or usage is None or first is None:
                    failures.append(f"truncated: finish {finish}, usage {usage}")
                else:
                    ttft.append(first)
                    tokens[0] += usage.completion_tokens

    t0 = time.perf_counter()
    threads = [threading.Thread(target=run, args=(i,)) for i in range(clients)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    wall = time.perf_counter() - t0
    check(ttft, f"some requests answered ({failures[:3]})")
    ttft.sort()
    p = lambda q: ttft[min(len(ttft) - 1, int(q * len(ttft)))] * 1e3  # noqa: E731
    result = {"clients": clients, "requests": clients * requests, "failed_or_truncated": len(failures),
              "ttft_p50_ms": round(p(0.5), 1), "ttft_p95_ms": round(p(0.95), 1),
              "completion_tokens": tokens[0], "wall_s": round(wall, 2), "tokens_per_s": round(tokens[0] / wall, 1)}
    if as_json:
        print(json.dumps(result))
    print("| clients × requests | failed or truncated | TTFT p50 | TTFT p95 | tokens | wall | aggregate tokens/s |")
    print("|---|---|---|---|---|---|---|")
    print(f"| {clients} × {requests} | {len(failures)} | {result['ttft_p50_ms']} ms | {result['ttft_p95_ms']} ms "
          f"| {tokens[0]} | {result['wall_s']} s | {result['tokens_per_s']} |")
    check(not failures, f"no failed or truncated response ({failures[:3]})")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("lutra")
    ap.add_argument("model")
    ap.add_argument("--chat", action="store_true")
    ap.add_argument("--completions", action="store_true")
    ap.add_argument("--load", metavar="CxR")
    ap.add_argument("--parallel", default="1")
    ap.add_argument("--max-tokens", type=int, default=32)
    ap.add_argument("--ctx", default="2048")
    ap.add_argument("--threads", default=str(os.cpu_count()))
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--external", metavar="URL", help="use the server at URL (…/v1) instead of starting lutra serve")
    a = ap.parse_args()
    extra = ["--parallel", a.parallel, "--ctx", a.ctx, "-t", a.threads]
    if a.completions:
        extra += ["--api-key", "sesame"]
    server = External(a.external) if a.external else Server(a.lutra, a.model, extra)
    try:
        client = openai.OpenAI(base_url=server.base, api_key="sesame", max_retries=0, timeout=600)
        print(f"lutra serve at {server.base} (openai {openai.__version__})")
        # a server started elsewhere only takes the load (its own answers are not checked)
        if a.chat and not a.external:
            chat_checks(client)
        if a.completions and not a.external:
            completion_checks(client, server)
        if a.load:
            c, r = (int(x) for x in a.load.lower().split("x"))
            load(client, c, r, a.max_tokens, a.json, a.chat)
    finally:
        server.stop()
    panicked = [l for l in server.log if "panicked" in l]
    check(not panicked, "the server logged no panic")


if __name__ == "__main__":
    main()
