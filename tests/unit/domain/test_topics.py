"""Events are stored under explicit topics, so classes can move without breaking replay."""

from __future__ import annotations

import importlib
import inspect
import pkgutil
from datetime import UTC, datetime
from pathlib import Path
from types import ModuleType

from eventsourcing.application import Application
from eventsourcing.domain import Aggregate, CanMutateAggregate
from eventsourcing.utils import get_topic, register_topic, resolve_topic

import domain
from domain.base import EXPLICIT_TOPICS, TensorantAggregate
from domain.organization import Organization, OrganizationCreated

REQUIRED = [
    "OrganizationCreated",
    "MemberAdded",
    "MemberRemoved",
    "MemberRoleChanged",
    "MemberTokenRotated",
    "ConnectionSaved",
    "ConnectionCheckFailed",
    "KeyRotated",
    "WritePermissionProven",
    "Disconnected",
    "VolumeBound",
    "CustomS3Bound",
    "StorageCheckFailed",
    "StorageCredentialsRotated",
    "StorageLocked",
    "VolumeResized",
    "ProjectCreated",
    "DatasetVersionRegistered",
    "DatasetTokensCounted",
    "RunDrafted",
    "RunDraftUpdated",
    "RunDiscarded",
    "LaunchConfirmed",
    "LaunchRejected",
    "PodLaunched",
    "TrainingStarted",
    "AdapterExported",
    "ExportFailed",
    "RuntimeLimitReached",
    "AdapterVerified",
    "AdapterVerificationFailed",
    "PodStopped",
    "PodResumed",
    "PodTerminationRequested",
    "PodTerminationFailed",
    "PodTerminated",
    "RecoveryRequested",
    "RunSucceeded",
    "RunFailed",
    "RunCancelled",
    "OrphanPodFound",
    "ProviderChargesRecorded",
]


def domain_modules() -> list[ModuleType]:
    """Every module of the domain package, found on disk: a new aggregate cannot be missed."""
    return [
        importlib.import_module(f"{domain.__name__}.{info.name}")
        for info in pkgutil.walk_packages(domain.__path__)
    ]


def all_event_classes() -> list[type]:
    found = []
    for module in domain_modules():
        for _, obj in inspect.getmembers(module, inspect.isclass):
            if issubclass(obj, CanMutateAggregate) and obj.__module__ == module.__name__:
                found.append(obj)
    return found


def aggregate_classes() -> list[type[Aggregate]]:
    """Every aggregate (created events store its topic), not the shared base."""
    return [
        obj
        for module in domain_modules()
        for _, obj in inspect.getmembers(module, inspect.isclass)
        if issubclass(obj, TensorantAggregate)
        and obj is not TensorantAggregate
        and obj.__module__ == module.__name__
    ]


def test_discovery_finds_every_aggregate_module() -> None:
    names = {cls.__name__ for cls in aggregate_classes()}
    assert {
        "Organization",
        "Connection",
        "Storage",
        "Project",
        "Run",
        "OrphanPods",
        "ProviderBill",
    } <= names


def test_every_event_named_by_the_product_exists() -> None:
    names = {c.__name__ for c in all_event_classes()}
    assert set(REQUIRED) <= names, set(REQUIRED) - names


def test_every_event_class_has_an_explicit_topic_that_is_not_its_module_path() -> None:
    for cls in all_event_classes():
        topic = cls.__dict__.get("TOPIC")
        assert topic, f"{cls.__name__} has no explicit topic"
        assert topic.startswith("tensorant."), topic
        assert get_topic(cls) == topic
        assert resolve_topic(topic) is cls
        assert EXPLICIT_TOPICS[topic] is cls


def test_every_aggregate_and_its_event_bases_have_explicit_topics() -> None:
    for agg in aggregate_classes():
        for cls in (agg, agg.Event, agg.Created):
            topic = cls.__dict__.get("TOPIC")
            assert topic and topic.startswith("tensorant."), cls.__qualname__
            assert get_topic(cls) == topic


def test_every_event_records_its_actor() -> None:
    for cls in all_event_classes():
        assert "actor" in {f for f in cls.__dataclass_fields__}, cls.__name__


def test_events_stored_under_an_old_module_path_still_load(tmp_path: Path) -> None:
    """A class that moved keeps loading once its old topic is registered as an alias."""
    app = Application(
        env={"PERSISTENCE_MODULE": "eventsourcing.sqlite", "SQLITE_DBNAME": str(tmp_path / "e.db")}
    )
    org = Organization.create("Acme", "own", "u", datetime(2026, 1, 1, tzinfo=UTC))
    app.save(org)
    # Rewrite the stored topic as an older release (module path topic) would have written it.
    old_topic = "tensorant_old.models:OrganizationCreated"
    with app.recorder.datastore.transaction(commit=True) as c:  # type: ignore[attr-defined]
        c.execute(
            "UPDATE stored_events SET topic = ? WHERE originator_id = ?", (old_topic, org.id.hex)
        )
    register_topic(old_topic, OrganizationCreated)
    fresh = Application(
        env={"PERSISTENCE_MODULE": "eventsourcing.sqlite", "SQLITE_DBNAME": str(tmp_path / "e.db")}
    )
    loaded = fresh.repository.get(org.id)
    assert loaded.name == "Acme"
    stored = next(iter(fresh.recorder.select_notifications(1, 1)))
    assert stored.topic == old_topic
