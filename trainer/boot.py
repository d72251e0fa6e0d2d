"""The Pod's boot on a public image (T1, R5): install the trainer's environment, then run it.

Run as `python3 <bundle>/trainer/boot.py` by the start command (trainer/protocol/boot.py) with
the image's own Python, so it uses the standard library and `trainer.protocol` only. It:
1. finds the environment for the bundle's `requirements.lock` on the volume, under the lock's
   hash (`/workspace/.tensorant/venvs/<hash>`): a second run on the same volume skips 2–3;
2. otherwise makes a virtual environment that sees the image's packages (its torch is reused
   where the lock's pin allows it), installs only what the image lacks or has at another version
   (pip, `--no-deps`: the lock is the whole closure), and checks that the training stack imports;
3. marks it ready and renames it into place (two Pods on one volume never share half of one);
4. `exec`s `python -m trainer` from it: the trainer, which handles SIGTERM itself, takes this
   process's place (under `tini -g` when the image has it and this is the container's PID 1).
Each step reports on the trainer's channels (stdout = the Pod's log, the mailbox, the callbacks):
progress `installing` (a boot phase: a sign of life, not the start of training), and logs.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import site
import subprocess
import sys
import threading
import time
from pathlib import Path

BUNDLE_DIR = Path(__file__).resolve().parent.parent
if str(BUNDLE_DIR) not in sys.path:
    sys.path.insert(0, str(BUNDLE_DIR))

from trainer.protocol import ENV_RUN_ID, Manifest, ManifestError  # noqa: E402 - on sys.path now
from trainer.protocol.boot import CACHE_DIR, LOCK_NAME  # noqa: E402
from trainer.protocol.layout import ENV_WORKSPACE, VOLUME_MOUNT, FailureReason  # noqa: E402
from trainer.reporter import Reporter  # noqa: E402
from trainer.run import make_reporter, read_manifest  # noqa: E402
from trainer.settings import Settings, SettingsError  # noqa: E402

READY = ".tensorant-ready"
IMAGE_SITE_PTH = "_tensorant_image_site.pth"
# The CUDA 13.0 build of torch: PyPI's default build may need a newer driver than the hosts run.
TORCH_INDEX = "https://download.pytorch.org/whl/cu130"
IMPORT_CHECK = "import torch, transformers, peft, safetensors, trainer.main"
HEARTBEAT_S = 60.0  # well inside the stall time: a long install is never taken for a hang

# Run inside the new environment: prints each lock line that is not installed at its version.
_MISSING = r"""
import sys, importlib.metadata as md
try:
    from packaging.markers import Marker
except ImportError:
    Marker = None
for raw in open(sys.argv[1]):
    line = raw.split("#", 1)[0].strip()
    if not line:
        continue
    req, _, marker = line.partition(";")
    if marker.strip() and Marker is not None and not Marker(marker.strip()).evaluate():
        continue
    name, _, version = req.strip().partition("==")
    try:
        have = md.version(name.strip())
    except md.PackageNotFoundError:
        have = None
    if have is None or have.split("+", 1)[0] != version.strip():
        print(line)
"""


def _run(
    command: list[str],
    *,
    check: bool,
    capture_output: bool = False,
    env: dict[str, str] | None = None,
) -> subprocess.CompletedProcess[str]:
    """Our own commands (the image's Python, the new environment's), never a shell."""
    return subprocess.run(  # noqa: S603
        command, check=check, capture_output=capture_output, env=env, text=True
    )


def _workspace() -> Path:
    return Path(os.environ.get(ENV_WORKSPACE) or VOLUME_MOUNT).absolute()


def lock_hash(lock: bytes) -> str:
    return hashlib.sha256(lock).hexdigest()[:16]


class Boot:
    def __init__(self, reporter: Reporter) -> None:
        self.r = reporter
        self.lock = (BUNDLE_DIR / LOCK_NAME).read_bytes()
        self.key = lock_hash(self.lock)
        self.venvs = _workspace() / CACHE_DIR / "venvs"
        self.venv = self.venvs / self.key
        self._busy = threading.Event()

    @property
    def python(self) -> Path:
        return self.venv / "bin" / "python"

    def run(self) -> bool:
        """True when the environment is ready (installed now or found on the volume)."""
        started = time.monotonic()
        if (self.venv / READY).is_file():
            self.r.log(f"boot: environment {self.key} found on the volume; install skipped")
            installed = False
        else:
            self.r.progress("installing", 0, 1, force=True)
            try:
                self._install()
            except (OSError, subprocess.CalledProcessError) as e:
                detail = f"the trainer's environment could not be installed: {e}"
                self.r.log(detail)
                self.r.failed(FailureReason.INTERNAL_ERROR, detail[:500])
                return False
            self.r.progress("installing", 1, 1, force=True)
            installed = True
        what = "installed" if installed else "cached"
        self.r.log(f"boot: environment {what}; boot took {time.monotonic() - started:.2f}s")
        return True

    def _install(self) -> None:
        self.venvs.mkdir(parents=True, exist_ok=True)
        tmp = self.venvs / f"{self.key}.tmp{os.getpid()}"
        shutil.rmtree(tmp, ignore_errors=True)
        self.r.log(f"boot: making environment {self.key} (the image's packages are reused)")
        _run(
            [sys.executable, "-m", "venv", "--system-site-packages", "--without-pip", str(tmp)],
            check=True,
        )
        python = tmp / "bin" / "python"
        purelib = self._out(
            [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"]
        )
        # Whatever the image's Python sees (its site-packages, or a virtual environment the image
        # runs in) is seen by the new one: the image's torch is reused where the lock allows.
        # (addsitedir, not a bare path: the image's own .pth files are read too.)
        Path(purelib.strip(), IMAGE_SITE_PTH).write_text(
            "".join(
                f"import site; site.addsitedir({p!r})\n"
                for p in site.getsitepackages()
                if Path(p).is_dir()
            )
        )
        lock_file = BUNDLE_DIR / LOCK_NAME
        missing = self._out([str(python), "-c", _MISSING, str(lock_file)]).splitlines()
        if missing:
            self.r.log(f"boot: installing {len(missing)} packages the image lacks")
            self._pip(python, missing, tmp)
        else:
            self.r.log("boot: the image has every pinned package; nothing to download")
        self.r.log("boot: checking that the training stack imports")
        env = {**os.environ, "PYTHONPATH": str(BUNDLE_DIR)}
        _run([str(python), "-c", IMPORT_CHECK], check=True, env=env)
        (tmp / READY).write_text(self.key + "\n")
        try:
            os.rename(tmp, self.venv)
        except OSError:  # another Pod on this volume finished first: use its environment
            shutil.rmtree(tmp, ignore_errors=True)

    def _pip(self, python: Path, missing: list[str], tmp: Path) -> None:
        has_pip = _run([str(python), "-m", "pip", "--version"], check=False, capture_output=True)
        if has_pip.returncode:
            _run([str(python), "-m", "ensurepip", "--default-pip"], check=True)
        pip = [str(python), "-m", "pip", "install", "--no-input", "--disable-pip-version-check"]
        torch = [line.split(";")[0].strip() for line in missing if line.startswith("torch==")]
        rest = [line for line in missing if not line.startswith("torch==")]
        self._busy.set()
        threading.Thread(target=self._heartbeat, daemon=True).start()
        try:
            if torch:  # with its CUDA 13.0 libraries, from PyTorch's index
                self.r.log(f"boot: installing {torch[0]} from {TORCH_INDEX}")
                _run([*pip, "--index-url", TORCH_INDEX, torch[0]], check=True)
            if rest:  # the lock is the whole closure: nothing else is resolved
                wanted = tmp / "missing.txt"
                wanted.write_text("".join(f"{line}\n" for line in rest))
                _run([*pip, "--no-deps", "-r", str(wanted)], check=True)
        finally:
            self._busy.clear()

    def _heartbeat(self) -> None:
        while self._busy.is_set():
            time.sleep(HEARTBEAT_S)
            if self._busy.is_set():
                self.r.progress("installing", 0, 1, force=True)

    @staticmethod
    def _out(command: list[str]) -> str:
        return str(_run(command, check=True, capture_output=True).stdout)


def _reporter() -> Reporter:
    """The trainer's own channels: stdout, the callbacks and the mailbox (status.json on the
    volume, or the manifest's presigned PUTs), so a boot shows on whichever reaches the control
    plane; stdout alone when the run's settings or manifest cannot be read (the trainer then
    reports why)."""
    try:
        settings = Settings.from_env()
    except SettingsError:
        return Reporter(os.environ.get(ENV_RUN_ID, ""), None, progress_s=0.0)
    try:
        manifest: Manifest | None = read_manifest(settings)
    except ManifestError:
        manifest = None
    return make_reporter(settings, manifest, attempt=1)


def main() -> int:
    reporter = _reporter()
    boot = Boot(reporter)
    ready = boot.run()
    reporter.close(callback_wait_s=5.0)
    if not ready:
        while True:  # RunPod restarts a container that exits: wait to be stopped instead
            time.sleep(3600)
    env = {**os.environ, "PYTHONPATH": str(BUNDLE_DIR), "PYTHONUNBUFFERED": "1"}
    argv = [str(boot.python), "-m", "trainer"]
    tini = shutil.which("tini")
    if tini and os.getpid() == 1:  # a Python PID 1 would need its own SIGTERM handling
        argv = [tini, "-g", "--", *argv]
    sys.stdout.flush()
    os.execve(argv[0], argv, env)  # noqa: S606 - the trainer takes this process's place
    return 0  # not reached


if __name__ == "__main__":
    sys.exit(main())
