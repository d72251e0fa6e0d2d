"""How a Pod on a public image brings the trainer itself (T1, R5): the bundle and the start command.

The control plane writes a versioned trainer bundle (`bundle.tar.gz`: the `trainer` package and
`requirements.lock`, every dependency pinned) to the organization's storage once per version.
The Pod's start command fetches it (through the volume's mount, or a presigned GET for custom
S3), checks its sha256, unpacks it on the volume once per version, and hands over to
`trainer/boot.py`, which installs the environment (cached on the volume under the lock's hash)
and `exec`s `python -m trainer`.
"""

from __future__ import annotations

import re
import shlex

from trainer.protocol.layout import VOLUME_MOUNT

ENV_BUNDLE = "TENSORANT_BUNDLE"  # file:///workspace/... (network volume) or a presigned GET
BUNDLE_PREFIX = "tensorant/bundles/"
LOCK_NAME = "requirements.lock"
CACHE_DIR = ".tensorant"  # under the mount: unpacked bundles and the cached environments
_VERSION = re.compile(r"^[0-9a-f]{8,64}$")
_SHA256 = re.compile(r"^[0-9a-f]{64}$")


def bundle_key(version: str) -> str:
    """Where a bundle version lives on the organization's storage."""
    if not _VERSION.match(version):
        raise ValueError(f"not a bundle version: {version!r}")
    return f"{BUNDLE_PREFIX}{version}.tar.gz"


def volume_bundle_url(version: str, mount: str = VOLUME_MOUNT) -> str:
    """TENSORANT_BUNDLE on a network volume: the bundle read through the Pod's mount."""
    return "file://" + mount.rstrip("/") + "/" + bundle_key(version)


def start_command(version: str, sha256: str, mount: str = VOLUME_MOUNT) -> str:
    """The Pod's start command (GraphQL `dockerArgs`, REST v2 `args`): one `bash -c` string.

    The sandbox sets TENSORANT_WORKSPACE to the folder that stands for the mount; on RunPod it is
    unset and the mount itself is used. A bundle is unpacked into a temporary folder and renamed
    into place only when whole and checked, so two Pods on one volume never see half of one."""
    bundle_key(version)
    if not _SHA256.match(sha256):
        raise ValueError(f"not a sha256: {sha256!r}")
    mount = mount.rstrip("/")
    script = "; ".join(
        (
            "set -eu",
            f'W="${{TENSORANT_WORKSPACE:-{mount}}}"',
            f'D="$W/{CACHE_DIR}/bundles/{version}"',
            'echo "tensorant boot: trainer bundle ' + version + '"',
            'if [ ! -f "$D/.ready" ]; then T="$D.tmp$$"; mkdir -p "$T"; '
            f'case "${ENV_BUNDLE}" in file://{mount}/*) '
            f'cp "$W/${{{ENV_BUNDLE}#file://{mount}/}}" "$T/bundle.tar.gz" ;; '
            f'*) curl -fsS --retry 5 -o "$T/bundle.tar.gz" "${ENV_BUNDLE}" ;; esac; '
            f'echo "{sha256}  $T/bundle.tar.gz" | sha256sum -c --quiet -; '
            'tar -xzf "$T/bundle.tar.gz" -C "$T"; rm "$T/bundle.tar.gz"; touch "$T/.ready"; '
            'mv -T "$T" "$D" 2>/dev/null || rm -rf "$T"; fi',
            'exec python3 "$D/trainer/boot.py"',
        )
    )
    return "bash -c " + shlex.quote(script)
