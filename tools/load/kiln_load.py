#!/usr/bin/env python3
"""Load generator for an OpenAI-compatible server (kiln serve, vLLM, llama-server, ...): N
concurrent streaming clients, requests arriving as a Poisson process, each streamed over its own
keep-alive HTTP/1.1 connection (asyncio, no third-party client). Reports time to first token,
inter-token latency (per streamed chunk) and end-to-end latency percentiles, throughput, errors
and lost requests, as JSON, and a PNG of the distributions (with matplotlib, when installed).

    tools/load/kiln_load.py --url http://127.0.0.1:8000 --requests 2000 --concurrency 200 \\
        --rate 400 --max-tokens 16 --json out.json --png out.png

Exit status 1 when any request failed or was lost (started but never finished)."""
import argparse
import asyncio
import json
import random
import statistics
import sys
import time
import urllib.parse

PROMPTS = ["Hello there", "Once upon a time", "What is the capital of France?", "Tell me a story about the sea",
           "The quick brown fox jumps over the lazy dog", "Why is the sky blue?", "Write a poem about cats and dogs",
           "one two three four five six seven"]


async def read_headers(reader):
    status_line = await reader.readline()
    if not status_line:
        raise ConnectionError("connection closed")
    status = int(status_line.split()[1])
    headers = {}
    while True:
        line = await reader.readline()
        if line in (b"\r\n", b"\n", b""):
            break
        k, _, v = line.decode().partition(":")
        headers[k.strip().lower()] = v.strip()
    return status, headers


async def read_body_chunks(reader, headers):
    """Yields the body's pieces as they arrive (chunked or Content-Length)."""
    if headers.get("transfer-encoding", "").lower() == "chunked":
        while True:
            size = int((await reader.readline()).split(b";")[0], 16)
            if size == 0:
                await reader.readline()
                return
            data = await reader.readexactly(size)
            await reader.readline()
            yield data
    else:
        n = int(headers.get("content-length", "0"))
        if n:
            yield await reader.readexactly(n)


class Client:
    """One keep-alive connection, reopened when the server closes it."""

    def __init__(self, url, api_key):
        u = urllib.parse.urlparse(url)
        self.host, self.port, self.base = u.hostname, u.port or 80, u.path.rstrip("/")
        self.api_key = api_key
        self.reader = self.writer = None

    async def stream(self, path, body, on_event):
        if self.writer is None:
            self.reader, self.writer = await asyncio.open_connection(self.host, self.port)
        data = json.dumps(body).encode()
        auth = f"Authorization: Bearer {self.api_key}\r\n" if self.api_key else ""
        self.writer.write((f"POST {self.base}{path} HTTP/1.1\r\nHost: {self.host}\r\nContent-Type: application/json\r\n"
                           f"{auth}Content-Length: {len(data)}\r\n\r\n").encode() + data)
        await self.writer.drain()
        status, headers = await read_headers(self.reader)
        buffer = b""
        async for piece in read_body_chunks(self.reader, headers):
            if status != 200:
                buffer += piece
                continue
            buffer += piece
            while b"\n\n" in buffer:
                event, buffer = buffer.split(b"\n\n", 1)
                if event.startswith(b"data: "):
                    on_event(event[6:])
        if headers.get("connection", "").lower() == "close":
            self.close()
        return status, buffer

    def close(self):
        if self.writer is not None:
            self.writer.close()
        self.reader = self.writer = None


async def one_request(client, args, i, record):
    chat = args.endpoint == "chat"
    if args.prompt_ids_len:
        # Token-id prompts (a server without a tokenizer, random weights): distinct per request.
        rng = random.Random(args.seed * 1000003 + i)
        prompt = [rng.randrange(args.prompt_ids_vocab) for _ in range(args.prompt_ids_len)]
    else:
        prompt = PROMPTS[i % len(PROMPTS)] + (f" {i}" if args.unique_prompts else "")
    body = {"model": args.model, "max_tokens": args.max_tokens, "temperature": args.temperature, "seed": i,
            "stream": True, "stream_options": {"include_usage": True}, "ignore_eos": args.ignore_eos}
    if args.model is None:
        del body["model"]
    if chat:
        body["messages"] = [{"role": "user", "content": prompt}]
    else:
        body["prompt"] = prompt
    record.update(start=time.perf_counter(), chunks=[], usage=None, done=False, status=None)

    def on_event(data):
        if data == b"[DONE]":
            record["done"] = True
            return
        j = json.loads(data)
        if j.get("usage"):
            record["usage"] = j["usage"]
        for c in j.get("choices", []):
            text = c.get("delta", {}).get("content") if chat else c.get("text")
            if text is not None and (text or c.get("finish_reason") is None):
                record["chunks"].append(time.perf_counter())
            if c.get("finish_reason"):
                record["finish_reason"] = c["finish_reason"]

    try:
        status, rest = await client.stream("/v1/chat/completions" if chat else "/v1/completions", body, on_event)
        record["status"] = status
        if status != 200:
            record["error"] = rest.decode(errors="replace")[:300]
    except Exception as e:  # a transport failure counts as an error, and the connection is reopened
        record["error"] = f"{type(e).__name__}: {e}"
        client.close()
    record["end"] = time.perf_counter()


async def run(args):
    rng = random.Random(args.seed)
    records = [dict() for _ in range(args.requests)]
    idle = asyncio.Queue()
    for _ in range(args.concurrency):
        idle.put_nowait(Client(args.url, args.api_key))
    tasks = []
    t0 = time.perf_counter()

    async def launch(i):
        client = await idle.get()
        try:
            await one_request(client, args, i, records[i])
        finally:
            idle.put_nowait(client)

    for i in range(args.requests):
        tasks.append(asyncio.create_task(launch(i)))
        if args.rate > 0:
            await asyncio.sleep(rng.expovariate(args.rate))
    await asyncio.wait_for(asyncio.gather(*tasks), timeout=args.timeout)
    wall = time.perf_counter() - t0
    while not idle.empty():
        idle.get_nowait().close()
    return records, wall


def percentiles(values):
    if not values:
        return {"count": 0}
    v = sorted(values)
    pick = lambda p: v[min(len(v) - 1, int(p * (len(v) - 1) + 0.5))]  # noqa: E731
    return {"count": len(v), "mean_ms": 1e3 * statistics.fmean(v), "p50_ms": 1e3 * pick(0.5), "p90_ms": 1e3 * pick(0.9),
            "p99_ms": 1e3 * pick(0.99), "max_ms": 1e3 * v[-1]}


def summarize(args, records, wall):
    ok = [r for r in records if r.get("status") == 200 and r.get("done")]
    errors = [r for r in records if r.get("error") or (r.get("status") not in (None, 200))]
    lost = [r for r in records if r not in ok and r not in errors]
    ttft = [r["chunks"][0] - r["start"] for r in ok if r["chunks"]]
    itl = [b - a for r in ok for a, b in zip(r["chunks"], r["chunks"][1:])]
    e2e = [r["end"] - r["start"] for r in ok]
    out_tokens = sum((r["usage"] or {}).get("completion_tokens", 0) for r in ok)
    in_tokens = sum((r["usage"] or {}).get("prompt_tokens", 0) for r in ok)
    return {
        "url": args.url, "endpoint": args.endpoint, "requests": args.requests, "concurrency": args.concurrency,
        "rate_per_s": args.rate, "max_tokens": args.max_tokens, "succeeded": len(ok), "errors": len(errors),
        "lost": len(lost), "error_samples": [r.get("error") or r.get("status") for r in errors[:5]],
        "wall_s": wall, "requests_per_s": len(ok) / wall, "output_tokens": out_tokens, "prompt_tokens": in_tokens,
        "output_tokens_per_s": out_tokens / wall,
        "ttft": percentiles(ttft), "inter_token": percentiles(itl), "e2e": percentiles(e2e),
    }


def plot(path, records, summary):
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("kiln_load: matplotlib is not installed: no PNG", file=sys.stderr)
        return
    ok = [r for r in records if r.get("status") == 200 and r.get("done") and r["chunks"]]
    t0 = min(r["start"] for r in records if "start" in r)
    fig, ax = plt.subplots(1, 3, figsize=(15, 4.2))
    for values, axis, title in [([1e3 * (r["chunks"][0] - r["start"]) for r in ok], ax[0], "time to first token"),
                                ([1e3 * (b - a) for r in ok for a, b in zip(r["chunks"], r["chunks"][1:])], ax[1], "inter-token latency")]:
        v = sorted(values)
        axis.plot(v, [i / max(1, len(v) - 1) for i in range(len(v))])
        axis.set_xscale("log")
        axis.set_xlabel("ms")
        axis.set_ylabel("fraction of requests" if axis is ax[0] else "fraction of tokens")
        axis.set_title(f"{title} (CDF)")
        axis.grid(True, which="both", alpha=0.3)
    ends = sorted(r["end"] - t0 for r in ok)
    ax[2].plot(ends, range(1, len(ends) + 1))
    ax[2].set_xlabel("s")
    ax[2].set_ylabel("requests finished")
    ax[2].set_title(f"{summary['requests_per_s']:.1f} req/s, {summary['output_tokens_per_s']:.0f} output tok/s")
    ax[2].grid(True, alpha=0.3)
    fig.suptitle(f"{summary['requests']} requests, {summary['concurrency']} clients, Poisson rate "
                 f"{summary['rate_per_s'] or 'unbounded'}/s: p50 TTFT {summary['ttft'].get('p50_ms', 0):.1f} ms, "
                 f"p99 {summary['ttft'].get('p99_ms', 0):.1f} ms; {summary['errors']} errors, {summary['lost']} lost")
    fig.tight_layout()
    fig.savefig(path, dpi=100)


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--url", default="http://127.0.0.1:8000")
    p.add_argument("--model", default=None, help="the model field (default: none, the server's)")
    p.add_argument("--api-key", default=None)
    p.add_argument("--endpoint", choices=["completions", "chat"], default="completions")
    p.add_argument("--requests", type=int, default=200)
    p.add_argument("--concurrency", type=int, default=16, help="clients, each with one request in flight at most")
    p.add_argument("--rate", type=float, default=0, help="Poisson arrival rate, requests/s (0: as fast as clients free up)")
    p.add_argument("--max-tokens", type=int, default=64)
    p.add_argument("--temperature", type=float, default=0.8)
    p.add_argument("--ignore-eos", action="store_true", help="every request generates max-tokens tokens (vLLM's ignore_eos)")
    p.add_argument("--unique-prompts", action="store_true", help="append the request number (no prefix-cache hits)")
    p.add_argument("--prompt-ids-len", type=int, default=0, help="send prompts of this many random token ids instead of text")
    p.add_argument("--prompt-ids-vocab", type=int, default=1000, help="token ids of --prompt-ids-len are drawn below this")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--timeout", type=float, default=3600)
    p.add_argument("--json", help="write the summary (and per-request timings) here")
    p.add_argument("--png", help="write the latency plot here")
    args = p.parse_args()
    records, wall = asyncio.run(run(args))
    summary = summarize(args, records, wall)
    print(json.dumps(summary, indent=1))
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"summary": summary, "requests": [
                {"start": r.get("start"), "end": r.get("end"), "status": r.get("status"), "chunk_times": r.get("chunks"),
                 "usage": r.get("usage"), "error": r.get("error")} for r in records]}, f)
    if args.png:
        plot(args.png, records, summary)
    return 1 if summary["errors"] or summary["lost"] else 0


if __name__ == "__main__":
    sys.exit(main())
