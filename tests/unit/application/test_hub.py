"""C7 on the service layer with a working fake Hub: the token is checked before it is vaulted,
a refusal is recorded without it, a replacement records both fingerprints, drafts on gated
models ask the Hub with it, and only a gated run's trainer is given it."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import pytest

from application.errors import HubUnavailable, InvalidHubToken
from application.hub import HUB_TOKEN
from application.ports import HubAccount
from application.run_settings import RunSettings
from application.services import Services, build_services
from domain.base_models import BaseModelAccessDenied, BaseModelGated
from domain.errors import NotFound
from domain.hub import HubNotConnected, HubTokenCheckFailed, HubTokenRotated, WrongKindOfHubToken
from domain.run import LaunchRejected
from tests.builders import trial, upload_chats, volume
from tests.fakes import GOOD_KEY, FakeCompute, FakeObjectStore, FakeVault, FixedClock

FULL = "hf_" + "F" * 34
NO_LLAMA = "hf_" + "N" * 34
LLAMA = "meta-llama/Llama-3.1-8B-Instruct"
MISTRAL = "mistralai/Mistral-7B-Instruct-v0.3"


@dataclass
class FakeHub:
    """Two users: one granted every repository, one never granted Llama."""

    down: bool = False
    asked: list[tuple[str, str]] = field(default_factory=list)

    def whoami(self, token: str) -> HubAccount:
        self.asked.append(("whoami", ""))
        if self.down:
            raise HubUnavailable("the Hub did not answer")
        if token == FULL:
            return HubAccount("trainer", "read")
        if token == NO_LLAMA:
            return HubAccount("newcomer", "fineGrained")
        raise InvalidHubToken("the Hub refused the token")

    def can_read(self, token: str, repo_id: str) -> bool:
        self.asked.append(("auth-check", repo_id))
        if self.down:
            raise HubUnavailable("the Hub did not answer")
        return token == FULL or (token == NO_LLAMA and not repo_id.startswith("meta-llama/"))

    def page(self, repo_id: str) -> str:
        return f"https://hub.example/{repo_id}"

    def revision(self, token: str | None, repo_id: str) -> str:
        self.asked.append(("revision", repo_id))
        raise HubUnavailable("the Hub did not answer")


World = tuple[Services, FakeVault, str, str, str]


@pytest.fixture
def hub() -> FakeHub:
    return FakeHub()


@pytest.fixture
def world(tmp_path: Path, hub: FakeHub) -> World:
    vault = FakeVault()
    services = build_services(
        {"PERSISTENCE_MODULE": "eventsourcing.sqlite", "SQLITE_DBNAME": str(tmp_path / "e.db")},
        compute=FakeCompute(),
        objects=FakeObjectStore(),
        vault=vault,
        clock=FixedClock(),
        settings=RunSettings(trainer_secret=b"k" * 32),
        hub=hub,
    )
    org = services.organizations.create("Acme")
    services.connections.connect(org, "owner", GOOD_KEY)
    services.storage.bind_volume(org, "owner", volume())
    project, _ = services.projects.create(org, "owner", "bot")
    dv = upload_chats(services, org, project, "owner")
    return services, vault, org, project, dv


def test_c7_a_token_is_checked_before_it_is_vaulted_and_a_refusal_keeps_no_token(
    world: World, hub: FakeHub
) -> None:
    services, vault, org, _, _ = world
    with pytest.raises(InvalidHubToken):
        services.hub.connect(org, "owner", "hf_" + "X" * 34)
    with pytest.raises(WrongKindOfHubToken):
        services.hub.connect(org, "owner", GOOD_KEY)  # a RunPod key, refused unasked
    assert hub.asked == [("whoami", "")]
    hub.down = True
    with pytest.raises(HubUnavailable):
        services.hub.connect(org, "owner", FULL)
    assert services.hub.token(org) is None
    assert (org, HUB_TOKEN) not in vault.secrets
    conn = services.hub.connection(org)
    assert conn is not None and conn.status == "not_connected"
    failed = [e for e in services.log.events.get(conn.id) if isinstance(e, HubTokenCheckFailed)]
    assert [e.reason for e in failed] == ["invalid-hub-token", "hub-unreachable"]
    for e in failed:
        assert "X" * 34 not in repr(e.__dict__) and FULL not in repr(e.__dict__)


def test_c7_a_replacement_records_both_fingerprints_and_removal_empties_the_vault(
    world: World,
) -> None:
    services, vault, org, _, _ = world
    services.hub.connect(org, "owner", NO_LLAMA)
    services.hub.connect(org, "owner", FULL)
    conn = services.hub.connection(org)
    assert conn is not None
    assert (conn.username, conn.role, conn.token_fingerprint) == ("trainer", "read", "…FFFF")
    rotated = [e for e in services.log.events.get(conn.id) if isinstance(e, HubTokenRotated)]
    assert [(e.old_fingerprint, e.new_fingerprint) for e in rotated] == [("…NNNN", "…FFFF")]
    assert services.hub.token(org) == FULL
    services.hub.disconnect(org, "owner")
    assert services.hub.token(org) is None
    assert (org, HUB_TOKEN) not in vault.secrets
    with pytest.raises(HubNotConnected):
        services.hub.disconnect(org, "owner")


def test_c7_drafts_on_gated_models_ask_the_hub_with_the_token(world: World, hub: FakeHub) -> None:
    services, _, org, project, dv = world
    services.runs.draft(org, "owner", trial(project, dv))  # open: the Hub is not asked
    assert hub.asked == []
    with pytest.raises(BaseModelGated, match="PUT /v1/connections/huggingface"):
        services.runs.draft(org, "owner", trial(project, dv, base_model=LLAMA))
    services.hub.connect(org, "owner", NO_LLAMA)
    with pytest.raises(BaseModelAccessDenied) as denied:
        services.runs.draft(org, "owner", trial(project, dv, base_model=LLAMA))
    assert denied.value.extra["licence_page"] == f"https://hub.example/{LLAMA}"
    assert "newcomer" in denied.value.detail and "accept the licence" in denied.value.detail
    services.runs.draft(org, "owner", trial(project, dv, base_model=MISTRAL))
    services.hub.connect(org, "owner", FULL)
    run_id, _ = services.runs.draft(org, "owner", trial(project, dv, base_model=LLAMA))
    assert ("auth-check", LLAMA) in hub.asked
    hub.down = True
    with pytest.raises(HubUnavailable):
        services.runs.update_draft(org, run_id, "owner", trial(project, dv, base_model=LLAMA))


def test_c7_only_a_gated_models_run_is_given_the_token(world: World) -> None:
    services, _, org, _, _ = world
    with pytest.raises(NotFound, match="not gated"):
        services.hub.token_for_run(org, "Qwen/Qwen2.5-7B-Instruct")
    with pytest.raises(NotFound, match="not gated"):
        services.hub.token_for_run(org, "storage:models/mine")
    with pytest.raises(HubNotConnected):
        services.hub.token_for_run(org, LLAMA)
    services.hub.connect(org, "owner", FULL)
    assert services.hub.token_for_run(org, LLAMA) == FULL


def test_c7_a_launch_asks_again_and_records_the_refusal_before_renting(world: World) -> None:
    services, _, org, project, dv = world
    services.hub.connect(org, "owner", FULL)
    run_id, _ = services.runs.draft(org, "owner", trial(project, dv, base_model=LLAMA))
    services.hub.connect(org, "owner", NO_LLAMA)  # replaced by a token without Llama
    with pytest.raises(BaseModelAccessDenied):
        services.runs.launch(org, run_id, "owner", True, "1.64")
    run = services.log.run(org, run_id)
    assert run.state == "draft" and run.pod_id is None
    rejected = [e for e in services.runs.history(run_id, 0, 100) if isinstance(e, LaunchRejected)]
    assert [e.reason for e in rejected] == ["base-model-access-denied"]
