"""The sandbox's Hugging Face Hub (C7) answers the real huggingface_hub client unchanged: whoami,
model info, auth-check for the full-access and the no-Llama token, and snapshot_download of a
published repository, which a second time downloads nothing from the same cache."""

from __future__ import annotations

from pathlib import Path

import pytest
from huggingface_hub import HfApi, constants, snapshot_download
from huggingface_hub.errors import GatedRepoError, HfHubHTTPError, RepositoryNotFoundError

from runpod_sandbox import Sandbox

LLAMA = "meta-llama/Llama-3.1-8B-Instruct"
GEMMA = "google/gemma-2-27b-it"


@pytest.fixture(autouse=True)
def _online(monkeypatch: pytest.MonkeyPatch) -> None:
    """The suite keeps huggingface_hub offline for the trainer's tests; these talk to loopback."""
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", False)


def test_c7_whoami_model_info_and_auth_check_answer_the_real_client(sandbox: Sandbox) -> None:
    creds = sandbox.credentials()
    api = HfApi(endpoint=creds["hub_url"])
    assert api.whoami(token=creds["hf_token"])["name"] == "sandbox-trainer"
    assert api.whoami(token=creds["hf_token_restricted"])["name"] == "sandbox-newcomer"
    with pytest.raises(HfHubHTTPError) as refused:
        api.whoami(token="hf_" + "Q" * 34)
    assert refused.value.response.status_code == 401
    assert api.model_info(LLAMA).gated == "manual"
    assert api.model_info("Qwen/Qwen2.5-7B-Instruct").gated is False
    api.auth_check(LLAMA, token=creds["hf_token"])
    api.auth_check(GEMMA, token=creds["hf_token_restricted"])
    for token, status in ((creds["hf_token_restricted"], 403), (False, 401)):
        with pytest.raises(GatedRepoError) as gated:
            api.auth_check(LLAMA, token=token)
        assert gated.value.response.status_code == status
    with pytest.raises(RepositoryNotFoundError):
        api.auth_check("nobody/nothing", token=creds["hf_token"])


def test_c7_snapshot_download_fetches_once_per_cache(sandbox: Sandbox, tmp_path: Path) -> None:
    creds = sandbox.credentials()
    folder = tmp_path / "model"
    folder.mkdir()
    (folder / "config.json").write_text('{"model_type": "llama"}')
    (folder / "model.safetensors").write_bytes(b"\0" * 4096)
    sandbox.hub.publish(LLAMA, folder)
    cache = tmp_path / "cache"

    def download(token: str) -> Path:
        return Path(
            snapshot_download(LLAMA, cache_dir=cache, token=token, endpoint=creds["hub_url"])
        )

    got = download(creds["hf_token"])
    assert (got / "model.safetensors").read_bytes() == b"\0" * 4096
    assert sorted(sandbox.hub.downloads) == [(LLAMA, "config.json"), (LLAMA, "model.safetensors")]
    assert download(creds["hf_token"]) == got
    assert len(sandbox.hub.downloads) == 2  # the cache answered: nothing downloaded again
    with pytest.raises(GatedRepoError):
        snapshot_download(
            LLAMA,
            cache_dir=tmp_path / "other",
            token=creds["hf_token_restricted"],
            endpoint=creds["hub_url"],
        )


def test_c7_a_folder_is_published_and_downloads_listed_over_http(
    sandbox: Sandbox, tmp_path: Path
) -> None:
    import httpx

    creds = sandbox.credentials()
    folder = tmp_path / "tiny"
    folder.mkdir()
    (folder / "config.json").write_text("{}")
    base = sandbox.base_url
    bad = httpx.post(f"{base}/_sandbox/hub/models", json={"repo_id": "x", "folder": str(folder)})
    assert bad.status_code == 400
    r = httpx.post(
        f"{base}/_sandbox/hub/models", json={"repo_id": "acme/tiny", "folder": str(folder)}
    )
    assert r.status_code == 200 and len(r.json()["sha"]) == 40
    assert HfApi(endpoint=creds["hub_url"]).model_info("acme/tiny").gated is False
    url = f"{creds['hub_url']}/acme/tiny/resolve/main/config.json"
    assert httpx.get(url).content == b"{}"
    assert httpx.get(f"{base}/_sandbox/hub/downloads").json() == [["acme/tiny", "config.json"]]
