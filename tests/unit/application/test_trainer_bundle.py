"""T1, R5: a launch that needs nothing published. Unless a baked trainer image is set, the Pod
starts from RunPod's public PyTorch image with the bundle's start command; the launch writes the
bundle to the organization's storage once per version and tells the Pod where it is."""

from __future__ import annotations

import io
import re
import tarfile
import tomllib
from pathlib import Path

from adapters.trainer_bundle import ROOT, build_bundle, pack, requirements_lock
from application.ports import S3Credentials, StorageLocation
from application.run_settings import PUBLIC_BASE_IMAGE, RunSettings
from tests.builders import custom_s3, trial, upload_chats
from tests.fakes import GOOD_KEY, S3_ACCESS, S3_SECRET, FakeObjectStore
from tests.unit.application.conftest import new_services, seed_org
from trainer.protocol import POD_ENV
from trainer.protocol.boot import ENV_BUNDLE, bundle_key, volume_bundle_url

SETTINGS = RunSettings(trainer_image="", trainer_secret=b"k" * 32)


def counted_puts(objects: FakeObjectStore) -> list[str]:
    """The keys `objects.put` writes from now on."""
    puts: list[str] = []
    original = objects.put

    def put(location: StorageLocation, creds: S3Credentials, key: str, data: bytes) -> None:
        puts.append(key)
        original(location, creds, key, data)

    objects.put = put  # type: ignore[method-assign,assignment]
    return puts


def test_a_launch_uses_the_public_image_and_writes_the_bundle_once_per_version(
    tmp_path: Path,
) -> None:
    fakes = new_services(tmp_path, settings=SETTINGS, bundle=build_bundle)
    puts = counted_puts(fakes.objects)
    s = fakes.services
    org, first = seed_org(s)
    project = str(s.log.run(org, first).config.project_id)
    dv = str(s.log.run(org, first).config.dataset_version_id)
    second, _ = s.runs.draft(org, "owner", trial(project, dv))
    bundle = build_bundle()
    for run_id in (first, second):
        s.runs.launch(org, run_id, "owner", True, "1.64")
        s.reactor.drive_run(run_id)
    specs = fakes.compute.specs
    assert len(specs) == 2
    for spec in specs:
        assert spec.image == PUBLIC_BASE_IMAGE and spec.start_command == bundle.start_command
        assert set(spec.env) == {*POD_ENV, ENV_BUNDLE}
        assert spec.env[ENV_BUNDLE] == volume_bundle_url(bundle.version)
    assert fakes.objects.buckets["vol1euro"][bundle_key(bundle.version)] == bundle.data
    assert puts.count(bundle_key(bundle.version)) == 1  # the second launch found it there


def test_custom_s3_gets_a_presigned_get_of_the_bundle_and_never_a_key_pair(tmp_path: Path) -> None:
    fakes = new_services(tmp_path, settings=SETTINGS, bundle=build_bundle)
    s = fakes.services
    org = s.organizations.create("Acme")
    s.connections.connect(org, "owner", GOOD_KEY)
    s.storage.bind_custom_s3(org, "owner", custom_s3())
    project, _ = s.projects.create(org, "owner", "bot")
    run_id, _ = s.runs.draft(org, "owner", trial(project, upload_chats(s, org, project)))
    s.runs.launch(org, run_id, "owner", True, "1.64")
    s.reactor.drive_run(run_id)
    [spec] = fakes.compute.specs
    bundle = build_bundle()
    assert spec.env[ENV_BUNDLE].startswith("https://presigned.invalid/custom-bucket/")
    assert spec.env[ENV_BUNDLE].split("?")[0].endswith(bundle_key(bundle.version))
    assert S3_SECRET not in repr(spec) and S3_ACCESS not in repr(spec)
    assert fakes.objects.buckets["custom-bucket"][bundle_key(bundle.version)] == bundle.data


def test_a_baked_trainer_image_runs_its_own_command_and_gets_no_bundle(tmp_path: Path) -> None:
    settings = RunSettings(trainer_image="ghcr.io/acme/tensorant-trainer:1", trainer_secret=b"k")
    fakes = new_services(tmp_path, settings=settings, bundle=build_bundle)
    s = fakes.services
    org, run_id = seed_org(s)
    s.runs.launch(org, run_id, "owner", True, "1.64")
    s.reactor.drive_run(run_id)
    [spec] = fakes.compute.specs
    assert (spec.image, spec.start_command) == ("ghcr.io/acme/tensorant-trainer:1", "")
    assert set(spec.env) == set(POD_ENV)
    assert not [k for k in fakes.objects.buckets["vol1euro"] if k.startswith("tensorant/")]


def test_the_lock_pins_the_trainer_group_at_uv_lock_versions_and_leaves_cuda_to_torch() -> None:
    lock = tomllib.loads((ROOT / "uv.lock").read_text())
    versions: dict[str, set[str]] = {}
    for p in lock["package"]:
        versions.setdefault(p["name"], set()).add(p["version"])
    text = requirements_lock(ROOT / "uv.lock")
    pins = {}
    for line in text.splitlines():
        if line and not line.startswith("#"):
            name, version = re.match(r"^([A-Za-z0-9._-]+)==([^ ;]+)", line).groups()  # type: ignore[union-attr]
            pins[name] = version
    for name in ("torch", "transformers", "peft", "safetensors", "tokenizers", "accelerate"):
        assert pins[name] in versions[name], name
    assert all(v in versions[n] for n, v in pins.items())
    assert not [n for n in pins if n.startswith(("nvidia-", "cuda-")) or n == "triton"]
    assert "fastapi" not in pins and "boto3" not in pins  # the control plane's, not the Pod's


def test_packing_is_deterministic_and_holds_the_trainer_and_its_lock(tmp_path: Path) -> None:
    folder = tmp_path / "trainer"
    (folder / "protocol").mkdir(parents=True)
    (folder / "boot.py").write_text("print('boot')\n")
    (folder / "protocol" / "x.py").write_text("X = 1\n")
    (folder / "__pycache__").mkdir()
    (folder / "__pycache__" / "boot.cpython-311.pyc").write_bytes(b"\0")
    one, two = pack(folder, "torch==1\n"), pack(folder, "torch==1\n")
    assert one == two
    assert pack(folder, "torch==2\n") != one
    with tarfile.open(fileobj=io.BytesIO(one)) as tar:
        names = tar.getnames()
        lock = tar.extractfile("requirements.lock")
        assert lock is not None and lock.read() == b"torch==1\n"
    assert names == ["requirements.lock", "trainer/boot.py", "trainer/protocol/x.py"]
