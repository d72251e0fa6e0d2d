"""The trainer bundle's bytes (T1, R5): the `trainer` package and a fully pinned requirements lock.

The lock is derived from uv.lock: the closure of the `trainer` dependency group, each package
at the version the tests run on, with the environment markers uv recorded (pip and the Pod's
boot evaluate them). Packing is deterministic (sorted names, no times, no owners), so the same
sources give the same bytes, the same sha256 and so the same version: a bundle is written once.
"""

from __future__ import annotations

import gzip
import hashlib
import io
import re
import tarfile
import tomllib
from collections.abc import Iterable
from functools import cache
from pathlib import Path
from typing import Any

from application.bundle import TrainerBundle
from trainer.protocol.boot import LOCK_NAME

ROOT = Path(__file__).resolve().parent.parent
GROUP = "trainer"
# torch's CUDA runtime: installed with torch from PyTorch's cu130 index (trainer/boot.py), never
# at uv.lock's versions, which are PyPI's torch build's (a newer CUDA than RunPod's hosts run)
_WITH_TORCH = re.compile(r"^(nvidia-.*|cuda-.*|triton)$")
_SKIP_DIRS = {"__pycache__"}
_SKIP_SUFFIXES = {".pyc", ".pyo"}


def requirements_lock(uv_lock: Path, group: str = GROUP) -> str:
    """`name==version ; marker` for every package the group needs, sorted by name."""
    lock = tomllib.loads(uv_lock.read_text())
    packages: list[dict[str, Any]] = lock["package"]
    by_name: dict[str, list[dict[str, Any]]] = {}
    for p in packages:
        by_name.setdefault(p["name"], []).append(p)
    root = next(p for p in packages if p.get("source", {}).get("editable") == ".")
    start = root.get("dev-dependencies", {}).get(group)
    if not start:
        raise ValueError(f"uv.lock has no dependency group {group!r}")
    markers: dict[tuple[str, str], set[str]] = {}  # (name, version) -> markers ("" = always)
    todo: list[tuple[dict[str, Any], str]] = [(dep, "") for dep in start]
    while todo:
        dep, via = todo.pop()
        for pkg in _packages(by_name, dep):
            marker = _and(via, dep.get("marker", ""), _resolution(pkg))
            seen = markers.setdefault((pkg["name"], pkg["version"]), set())
            if marker in seen or "" in seen:
                continue
            seen.add(marker)
            deps = list(pkg.get("dependencies", []))
            for extra in dep.get("extra", []):
                deps += pkg.get("optional-dependencies", {}).get(extra, [])
            todo += [(d, marker) for d in deps]
    lines = []
    for (name, version), ms in sorted(markers.items()):
        if _WITH_TORCH.match(name):
            continue
        line = f"{name}=={version}"
        if "" not in ms:
            line += " ; " + " or ".join(f"({m})" for m in sorted(ms))
        lines.append(line)
    head = (
        f"# The `{group}` group of uv.lock, every package pinned (pip install --no-deps);\n"
        "# torch's CUDA libraries come with torch from PyTorch's cu130 index.\n"
    )
    return head + "".join(f"{line}\n" for line in lines)


Package = dict[str, Any]


def _packages(by_name: dict[str, list[Package]], dep: dict[str, Any]) -> list[Package]:
    found = by_name.get(dep["name"], [])
    if "version" in dep:
        found = [p for p in found if p["version"] == dep["version"]]
    if not found:
        raise ValueError(f"uv.lock lacks {dep['name']} {dep.get('version', '')}".strip())
    return found


def _resolution(pkg: dict[str, Any]) -> str:
    forks = pkg.get("resolution-markers") or []
    return " or ".join(f"({m})" for m in forks) if forks else ""


def _and(*markers: str) -> str:
    parts = [m for m in markers if m]
    if len(parts) <= 1:
        return parts[0] if parts else ""
    return " and ".join(f"({m})" for m in parts)


def _files(folder: Path) -> Iterable[Path]:
    for path in sorted(folder.rglob("*")):
        rel = path.relative_to(folder)
        skipped = _SKIP_DIRS & set(rel.parts) or path.suffix in _SKIP_SUFFIXES
        if path.is_file() and not skipped:
            yield path


def pack(trainer_dir: Path, lock: str) -> bytes:
    """tar.gz of `trainer/...` and `requirements.lock`, the same bytes for the same sources."""
    raw = io.BytesIO()
    with tarfile.open(fileobj=raw, mode="w", format=tarfile.PAX_FORMAT) as tar:
        entries = [(LOCK_NAME, lock.encode())]
        entries += [
            (f"trainer/{p.relative_to(trainer_dir).as_posix()}", p.read_bytes())
            for p in _files(trainer_dir)
        ]
        for name, data in entries:
            info = tarfile.TarInfo(name)
            info.size, info.mode, info.mtime = len(data), 0o644, 0
            tar.addfile(info, io.BytesIO(data))
    out = io.BytesIO()
    with gzip.GzipFile(fileobj=out, mode="wb", mtime=0) as gz:
        gz.write(raw.getvalue())
    return out.getvalue()


@cache
def build_bundle(root: Path = ROOT) -> TrainerBundle:
    """The bundle of this checkout's trainer, built once per process."""
    if not (root / "uv.lock").is_file():
        raise RuntimeError(
            f"the trainer bundle is built from {root / 'uv.lock'} and {root / 'trainer'}: run "
            "from a checkout of the project, or set TENSORANT_TRAINER_IMAGE to a baked image"
        )
    lock = requirements_lock(root / "uv.lock")
    data = pack(root / "trainer", lock)
    sha = hashlib.sha256(data).hexdigest()
    return TrainerBundle(version=sha[:16], sha256=sha, data=data, lock=lock)
