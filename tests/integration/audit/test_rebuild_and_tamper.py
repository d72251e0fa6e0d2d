"""U4 rebuilds equal live views; U3 tampering with stored events is found at its position."""

from __future__ import annotations

import json

import pytest

from projections.store.engine import Projector
from projections.views.audit import AuditView, InvalidAnchor, anchors_from, entries, verify
from projections.views.registry import all_projections
from tests.integration.audit.conftest import World


def test_u4_every_view_rebuilt_from_the_log_equals_the_live_view(world: World) -> None:
    for projection in all_projections():
        live = world.views.digest(projection.name)
        shadow = Projector(world.log, world.views, projection, view=f"{projection.name}__rebuild")
        topics = list(getattr(projection, "topics", ()) or ())
        read = world.log.recorder.select_notifications(1, 1_000_000, topics=topics)
        assert shadow.rebuild() == len(read), projection.name  # each event its topics name
        assert world.views.digest(shadow.view) == live, projection.name
    assert world.views.position("billing") == world.log.recorder.max_notification_id()


def test_u3_an_untouched_log_verifies(world: World) -> None:
    result = verify(world.log, world.views)
    assert result.ok and result.first_bad_position is None
    assert result.events_checked == world.log.recorder.max_notification_id()
    one = verify(world.log, world.views, world.orgs[1].org_id)
    assert one.ok and 0 < one.events_checked < result.events_checked


def _positions(world: World, org_id: str, type_name: str) -> list[int]:
    found = entries(world.log, world.views, org_id, limit=10_000, type_=type_name)
    return [e["position"] for e in found]


@pytest.mark.parametrize("tamper", ["altered_state", "deleted_row", "reordered_pair"])
def test_u3_tampering_is_detected_at_the_first_bad_position(world: World, tamper: str) -> None:
    acme = world.orgs[0].org_id
    col = world.id_column
    launched = _positions(world, acme, "PodLaunched")
    stopped = _positions(world, acme, "PodStopped")
    if tamper == "altered_state":
        bad = launched[0]
        (state,) = world.execute(f"SELECT state FROM {{table}} WHERE {col} = ?", bad)[0]
        forged = bytes(state).replace(b"1.64", b"0.64")
        assert forged != bytes(state)
        world.execute(f"UPDATE {{table}} SET state = ? WHERE {col} = ?", forged, bad)
    elif tamper == "deleted_row":
        bad = stopped[0]
        world.execute(f"DELETE FROM {{table}} WHERE {col} = ?", bad)
    else:
        bad, other = launched[0], stopped[0]
        world.execute(f"UPDATE {{table}} SET {col} = -1 WHERE {col} = ?", bad)
        world.execute(f"UPDATE {{table}} SET {col} = ? WHERE {col} = ?", bad, other)
        world.execute(f"UPDATE {{table}} SET {col} = ? WHERE {col} = -1", other)
    result = verify(world.log, world.views)
    assert not result.ok
    assert result.first_bad_position == bad
    assert verify(world.log, world.views, acme).first_bad_position == bad
    assert verify(world.log, world.views, world.orgs[1].org_id).ok  # Globex's chain is intact
    if tamper == "deleted_row":
        # The view still lists the entry the log lost: its position and hash, nothing else.
        (gone,) = [
            e for e in entries(world.log, world.views, acme, limit=10_000) if e["position"] == bad
        ]
        assert gone["hash"] and gone["type"] is None and gone["data"] is None


def test_u3_a_forged_event_behind_a_rebuilt_view_is_caught_by_an_anchor(world: World) -> None:
    """Whoever can write the database can forge an event and rebuild the chain to match it;
    a head kept outside the database still tells."""
    acme, globex = (h.org_id for h in world.orgs)
    before = verify(world.log, world.views)
    anchors = {org: (h["position"], h["head"]) for org, h in before.heads.items()}
    assert set(anchors) == {acme, globex}
    forged_at = _positions(world, acme, "PodLaunched")[0]
    assert forged_at < anchors[acme][0]  # the forgery is in the anchored stretch of history
    col = world.id_column
    (state,) = world.execute(f"SELECT state FROM {{table}} WHERE {col} = ?", forged_at)[0]
    world.execute(
        f"UPDATE {{table}} SET state = ? WHERE {col} = ?",
        bytes(state).replace(b"1.64", b"0.64"),
        forged_at,
    )
    Projector(world.log, world.views, AuditView()).rebuild()  # the chain agrees with the forgery

    laundered = verify(world.log, world.views)
    assert laundered.ok  # without an anchor, nothing to compare with
    caught = verify(world.log, world.views, anchors=anchors)
    assert not caught.ok
    assert caught.first_bad_position == anchors[acme][0]  # the first anchor that no longer holds
    assert verify(world.log, world.views, globex, anchors=anchors).ok  # Globex is untouched


def test_u3_an_anchored_event_that_was_deleted_is_reported(world: World) -> None:
    acme = world.orgs[0].org_id
    head = verify(world.log, world.views, acme).heads[acme]
    world.execute(f"DELETE FROM {{table}} WHERE {world.id_column} = ?", head["position"])
    Projector(world.log, world.views, AuditView()).rebuild()
    result = verify(world.log, world.views, acme, anchors={acme: (head["position"], head["head"])})
    assert not result.ok and result.first_bad_position == head["position"]


def test_u3_anchors_from_an_earlier_output_and_a_bad_file() -> None:
    text = json.dumps({"ok": True, "heads": {"o1": {"position": 7, "head": "ab" * 32, "count": 3}}})
    assert anchors_from(text) == {"o1": (7, "ab" * 32)}
    for bad in ("not json", "{}", '{"heads": []}', '{"heads": {"o1": {"head": "x"}}}'):
        with pytest.raises(InvalidAnchor):
            anchors_from(bad)
