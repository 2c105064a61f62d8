"""Fixtures for the server tests: `ssmkit serve` started on a free loopback port, its output
collected, stopped with SIGTERM (and required to exit 0) at the end."""

import os
import pathlib
import re
import signal
import subprocess
import threading
import time

import openai
import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
BIN = os.environ.get("SSMKIT_BIN", str(ROOT / "build" / "release" / "ssmkit"))
HERE = pathlib.Path(__file__).resolve().parent
TEMPLATES = HERE / "templates"
# One engine thread: the tests compare texts, and the CI machine has two shared cores.
THREADS = "1"


class Server:
    """A running `ssmkit serve` process."""

    def __init__(self, *args, startup_timeout=60):
        self.args = args
        self.proc = subprocess.Popen(
            [BIN, "--threads", THREADS, "serve", "--port", "0", *args],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        self.lines = []
        self._ready = threading.Event()
        self.url = None
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()
        if not self._ready.wait(startup_timeout) or self.url is None:
            self.proc.kill()
            raise RuntimeError("ssmkit serve did not start:\n" + "".join(self.lines))

    def _read(self):
        for line in self.proc.stdout:
            self.lines.append(line)
            m = re.search(r"listening on (http://\S+)", line)
            if m:
                self.url = m.group(1)
                self._ready.set()
        self._ready.set()

    @property
    def host_port(self):
        host, port = self.url.removeprefix("http://").split(":")
        return host, int(port)

    def client(self, api_key="unused", timeout=120):
        return openai.OpenAI(base_url=self.url + "/v1", api_key=api_key, timeout=timeout,
                             max_retries=0)

    def rss_kb(self):
        with open(f"/proc/{self.proc.pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1])
        raise RuntimeError("no VmRSS")

    def metrics(self):
        """The /metrics samples as {name{labels}: value}."""
        import urllib.request

        with urllib.request.urlopen(self.url + "/metrics", timeout=30) as r:
            text = r.read().decode()
        samples = {}
        for line in text.splitlines():
            if line and not line.startswith("#"):
                key, value = line.rsplit(" ", 1)
                samples[key] = float(value)
        return samples

    def stop(self, timeout=90):
        """SIGTERM; the exit code (the process must exit within `timeout`)."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        try:
            code = self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            raise
        self._reader.join(10)
        return code

    def output(self):
        return "".join(self.lines)


@pytest.fixture
def start_server():
    """A factory: start_server(*args) -> Server; every server it started is stopped after the
    test and must exit with 0."""
    servers = []

    def start(*args, **kw):
        s = Server(*args, **kw)
        servers.append(s)
        return s

    yield start
    for s in servers:
        code = s.stop()
        assert code == 0, f"ssmkit serve exited with {code}:\n{s.output()}"


@pytest.fixture(scope="module")
def server():
    """The built-in model with a chat template of the tests (templates/granite_like.jinja)."""
    s = Server("--slots", "8", "--chat-template", str(TEMPLATES / "granite_like.jinja"))
    yield s
    code = s.stop()
    assert code == 0, f"ssmkit serve exited with {code}:\n{s.output()}"


def generate(prompt, max_tokens, *extra):
    """`ssmkit generate`'s continuation of `prompt` (its stdout without the echoed prompt and
    the final newline)."""
    out = subprocess.run(
        [BIN, "--threads", THREADS, "generate", "--prompt", prompt, "--max-tokens",
         str(max_tokens), *extra],
        capture_output=True, check=True, timeout=120,
    ).stdout.decode()
    assert out.startswith(prompt) and out.endswith("\n")
    return out[len(prompt):-1]


def wait_for(predicate, timeout=30, interval=0.05):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(interval)
    return predicate()
