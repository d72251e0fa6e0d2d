"""`tensorant serve --sandbox` as a user starts it: a process of its own on free ports, its
output captured (the owner token is printed once), stopped with SIGTERM."""

from __future__ import annotations

import os
import random
import re
import shutil
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx


def _ephemeral_low() -> int:
    try:
        return int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768  # Linux's default


def free_port() -> int:
    """A free loopback port below the kernel's ephemeral range. The server we start binds it a
    moment later; a port the kernel chose (bind to 0) could meanwhile be handed to another
    test's server, and ours would then fail to bind while the other answered our requests."""
    for _ in range(500):
        port = random.randint(20000, _ephemeral_low() - 1)
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    raise RuntimeError("no free loopback port below the ephemeral range")


class Served:
    """A running `tensorant serve` process and what it printed."""

    def __init__(self, proc: subprocess.Popen[str], port: int, sandbox_port: int) -> None:
        self.proc = proc
        self.port = port
        self.sandbox_port = sandbox_port
        self.lines: list[str] = []
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.lines.append(line.rstrip("\n"))

    @property
    def output(self) -> str:
        return "\n".join(self.lines)

    def wait_for(self, pattern: str, timeout: float = 60) -> re.Match[str]:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            found = re.search(pattern, self.output)
            if found:
                return found
            if self.proc.poll() is not None:
                break
            time.sleep(0.1)
        raise AssertionError(f"no {pattern!r} in the output of serve:\n{self.output}")

    def owner_token(self) -> str:
        return self.wait_for(r"Owner token \(shown once\): (tnt_\S+)").group(1)

    def wait_healthy(self, timeout: float = 60) -> None:
        deadline = time.monotonic() + timeout
        while True:
            assert self.proc.poll() is None, f"serve exited:\n{self.output}"
            try:
                if httpx.get(f"{self.base_url}/healthz", timeout=5).status_code == 200:
                    return
            except httpx.TransportError:
                pass
            assert time.monotonic() < deadline, self.output
            time.sleep(0.2)

    def cli(self, *args: str) -> str:
        """A `tensorant` command against the same data directory (e.g. `admin create-org`)."""
        done = subprocess.run(
            [_exe(), *args], check=False, env=self.env, capture_output=True, text=True, timeout=120
        )
        assert done.returncode == 0, done.stdout + done.stderr
        return done.stdout

    env: dict[str, str]


def _exe() -> str:
    return shutil.which("tensorant", path=str(Path(sys.executable).parent)) or "tensorant"


@contextmanager
def serve(tmp_path: Path, *, sandbox: bool = True, **settings: str) -> Iterator[Served]:
    """`tensorant serve --sandbox` with `TENSORANT_<NAME>` settings; SIGTERM at the end. With
    `sandbox=False`, `tensorant serve` alone: the settings say where RunPod is."""
    port, sandbox_port = free_port(), free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("TENSORANT_")}
    env.update(
        TENSORANT_DATA_DIR=str(tmp_path / "data"),
        TENSORANT_RECONCILE_INTERVAL="0.5",
        TENSORANT_PROJECTION_POLL_INTERVAL="0.2",
        TENSORANT_LOG_FORMAT="text",
        TENSORANT_COUNT_TOKENS="false",  # P1 counting: on where a test asks (count_tokens)
        COLUMNS="400",
    )
    env.update({f"TENSORANT_{k.upper()}": v for k, v in settings.items()})
    args = ["--sandbox", "--sandbox-port", str(sandbox_port)] if sandbox else []
    proc = subprocess.Popen(
        [_exe(), "serve", "--port", str(port), *args],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    served = Served(proc, port, sandbox_port)
    served.env = env
    try:
        yield served
    finally:
        if proc.poll() is None:
            proc.terminate()
            try:
                proc.wait(15)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(5)
