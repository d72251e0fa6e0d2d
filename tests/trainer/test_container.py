"""T1: the image's entrypoint runs what the package installs as `tensorant-trainer`."""

from __future__ import annotations

import ast
import json
import re
import subprocess
import sys
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
DOCKERFILE = (ROOT / "trainer" / "Dockerfile").read_text()


def _instruction(name: str) -> list[str]:
    """The arguments of every `name` instruction, continuation lines joined."""
    joined = re.sub(r"\\\n\s*", " ", DOCKERFILE)
    return [line.split(None, 1)[1] for line in joined.splitlines() if line.startswith(name + " ")]


def test_the_dockerfile_entrypoint_and_the_packaged_console_script_agree() -> None:
    (entrypoint,) = _instruction("ENTRYPOINT")
    argv = json.loads(entrypoint)  # exec form: tini gets the signals, not a shell
    assert argv[:3] == ["/usr/bin/tini", "-g", "--"]
    assert argv[4:] == ["-m", "trainer"]
    scripts = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["scripts"]
    assert scripts["tensorant-trainer"] == "trainer.main:main"
    # `python -m trainer` is trainer/__main__.py, which must call that same function.
    tree = ast.parse((ROOT / "trainer" / "__main__.py").read_text())
    imports = [
        (n.module, a.name) for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) for a in n.names
    ]
    assert ("trainer.main", "main") in imports
    script = Path(sys.executable).with_name("tensorant-trainer")
    as_module = subprocess.run(
        [sys.executable, "-m", "trainer", "--version"], capture_output=True, text=True, check=False
    )
    as_script = subprocess.run(
        [str(script), "--version"], capture_output=True, text=True, check=False
    )
    assert as_module.returncode == as_script.returncode == 0
    assert as_module.stdout == as_script.stdout and as_module.stdout.startswith(
        "tensorant-trainer "
    )


def test_the_image_is_cuda_13_with_a_cu130_torch_and_the_locked_libraries() -> None:
    (base,) = _instruction("FROM")
    assert re.fullmatch(r"nvidia/cuda:13\.0\.\d+-base-ubuntu24\.04", base)
    assert "ARG TORCH_INDEX_URL=https://download.pytorch.org/whl/cu130" in DOCKERFILE
    assert "tini" in " ".join(_instruction("RUN"))
    lock = tomllib.loads((ROOT / "uv.lock").read_text())
    locked = {p["name"]: p["version"] for p in lock["package"]}
    pins = dict(
        line.split("==")
        for line in (ROOT / "trainer" / "requirements.txt").read_text().splitlines()
        if line and not line.startswith("#")
    )
    assert pins and all(locked[name] == version for name, version in pins.items()), pins
    group = tomllib.loads((ROOT / "pyproject.toml").read_text())["dependency-groups"]["trainer"]
    names = {re.split(r"[<>=~!\[ ]", spec)[0] for spec in group}
    assert names - {"torch"} <= set(pins)


def _arg(name: str) -> str:
    (value,) = [a.split("=", 1)[1] for a in _instruction("ARG") if a.startswith(name + "=")]
    return value


def test_the_image_torch_is_the_torch_the_tests_run_on() -> None:
    """One torch: the baked image's (Dockerfile ARG) is uv.lock's, which the tests train with."""
    lock = tomllib.loads((ROOT / "uv.lock").read_text())
    (torch,) = [p["version"] for p in lock["package"] if p["name"] == "torch"]
    assert _arg("TORCH_VERSION") == torch


def test_the_image_workflow_builds_this_dockerfile_with_its_pins_on_a_tag() -> None:
    """.github/workflows/trainer-image.yml cannot run here: its paths and pins are held to the
    Dockerfile and uv.lock instead."""
    import yaml

    workflow = yaml.safe_load((ROOT / ".github" / "workflows" / "trainer-image.yml").read_text())
    trigger = workflow.get("on", workflow.get(True))  # YAML 1.1 reads a bare `on` as true
    assert trigger["push"]["tags"] and "branches" not in trigger["push"]
    (job,) = workflow["jobs"].values()
    (build,) = [s for s in job["steps"] if "docker/build-push-action" in s.get("uses", "")]
    given = build["with"]
    assert (ROOT / given["context"]).is_dir() and (ROOT / given["file"]).is_file()
    assert (ROOT / given["file"]).read_text() == DOCKERFILE
    assert given["context"] == str(Path(given["file"]).parent) and given["push"] is True
    args = dict(line.strip().split("=", 1) for line in given["build-args"].splitlines() if line)
    env = workflow["env"]
    resolved = {k: env[v.removeprefix("${{ env.").removesuffix(" }}")] for k, v in args.items()}
    assert set(resolved) == {"TORCH_VERSION", "TORCH_INDEX_URL"}
    for name, value in resolved.items():
        assert value == _arg(name), name
    lock = tomllib.loads((ROOT / "uv.lock").read_text())
    (torch,) = [p["version"] for p in lock["package"] if p["name"] == "torch"]
    assert resolved["TORCH_VERSION"] == torch


def test_the_pod_s_boot_runs_on_the_image_s_python_alone() -> None:
    """trainer/boot.py runs before any environment exists, with the public image's Python:
    it imports nothing but the standard library and the bundle itself (-S: no site-packages)."""
    probe = (
        "import runpy, sys; runpy.run_path('trainer/boot.py', run_name='not_main'); "
        "third = {m.split('.')[0] for m in sys.modules} & "
        "{'torch', 'transformers', 'peft', 'safetensors', 'huggingface_hub', 'requests'}; "
        "print(sorted(third))"
    )
    done = subprocess.run(
        [sys.executable, "-S", "-c", probe], cwd=ROOT, capture_output=True, text=True, check=False
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"
