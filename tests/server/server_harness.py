"""Starts a kiln model binary's `serve` on a free loopback port for the server tests and the load
test, and stops it: the binary, random weights, the CPU backend, and tests/server/tiny-chat's
tokenizer (a byte-level BPE small enough for the tiny models)."""
import json
import os
import re
import signal
import subprocess
import time
import urllib.error
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
TOKENIZER = os.path.join(HERE, "tiny-chat")


class Server:
    def __init__(self, binary, *extra, seed=1, api_key=None, ready_timeout=60):
        self.binary = binary
        args = [binary, "serve", "--backend", "ref", "--random-weights", str(seed), "--tokenizer", TOKENIZER,
                "--host", "127.0.0.1", "--port", "0", *extra]
        if api_key:
            args += ["--api-key", api_key]
        self.api_key = api_key
        self.proc = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        self.log = []
        deadline = time.time() + ready_timeout
        self.port = None
        while self.port is None:
            line = self.proc.stderr.readline()
            if not line:
                raise RuntimeError("server exited before listening: " + "".join(self.log))
            self.log.append(line)
            m = re.search(r"listening on http://127\.0\.0\.1:(\d+)", line)
            if m:
                self.port = int(m.group(1))
        while True:
            status, _ = self.get("/health")
            if status == 200:
                break
            if time.time() > deadline:
                raise RuntimeError("server not ready in time")
            time.sleep(0.05)

    @property
    def url(self):
        return f"http://127.0.0.1:{self.port}"

    def request(self, method, path, body=None, headers=None, raw=None):
        data = raw if raw is not None else (json.dumps(body).encode() if body is not None else None)
        h = {"Content-Type": "application/json", **(headers or {})}
        req = urllib.request.Request(self.url + path, data=data, method=method, headers=h)
        try:
            with urllib.request.urlopen(req, timeout=60) as r:
                return r.status, r.read().decode(), dict(r.headers)
        except urllib.error.HTTPError as e:
            return e.code, e.read().decode(), dict(e.headers)

    def get(self, path):
        try:
            status, body, _ = self.request("GET", path)
            return status, body
        except (ConnectionError, urllib.error.URLError):
            return 0, ""

    def post(self, path, body, headers=None):
        status, text, hdrs = self.request("POST", path, body, headers)
        return status, (json.loads(text) if text else None), hdrs

    def metrics(self):
        from prometheus_client.parser import text_string_to_metric_families
        _, text = self.get("/metrics")
        out = {}
        for family in text_string_to_metric_families(text):
            for s in family.samples:
                key = s.name + ("" if "finished_reason" not in s.labels else "{" + s.labels["finished_reason"] + "}")
                if "le" not in s.labels:
                    out[key] = s.value
        return out

    def stop(self, sig=signal.SIGTERM, timeout=60):
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
        try:
            code = self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            code = self.proc.wait()
        self.log.extend(self.proc.stderr.readlines())
        return code

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.stop()
