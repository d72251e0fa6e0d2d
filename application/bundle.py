"""The trainer bundle on the organization's storage (T1, R5): what a Pod on a public image fetches.

At launch the bundle is written once per version (a HEAD finds it already there: the same
version is the same bytes) to `tensorant/bundles/<version>.tar.gz`, beside the runs' mailboxes.
The Pod is told where it is (TENSORANT_BUNDLE: a file under the volume's mount, or a presigned
GET for custom S3) and its start command carries the version and sha256, so a Pod never runs a
bundle other than the one its launch wrote.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from application.ports import ObjectStore, S3Credentials, StorageLocation
from trainer.protocol.boot import ENV_BUNDLE, bundle_key, start_command, volume_bundle_url


@dataclass(frozen=True)
class TrainerBundle:
    version: str
    sha256: str
    data: bytes = field(repr=False)
    lock: str = field(repr=False)

    @property
    def key(self) -> str:
        return bundle_key(self.version)

    @property
    def start_command(self) -> str:
        return start_command(self.version, self.sha256)


BundleSource = Callable[[], TrainerBundle]


def publish_bundle(
    objects: ObjectStore,
    location: StorageLocation,
    creds: S3Credentials,
    bundle: TrainerBundle,
    *,
    s3: bool,
    expires_s: int,
) -> dict[str, str]:
    """Write the bundle unless this version is there already; the Pod's env that finds it."""
    found = objects.head(location, creds, bundle.key)
    if found is None or found.size != len(bundle.data):
        objects.put(location, creds, bundle.key, bundle.data)
    if s3:
        return {ENV_BUNDLE: objects.presign_get(location, creds, bundle.key, expires_s)}
    return {ENV_BUNDLE: volume_bundle_url(bundle.version)}
