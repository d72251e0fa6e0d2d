"""Every view, in the order they are built (one projector each)."""

from __future__ import annotations

from typing import Any

from projections.views.audit import AuditView
from projections.views.billing import BillingView
from projections.views.connections import ConnectionsView
from projections.views.deployments import DeploymentsView
from projections.views.identity import MembersView, OrganizationsView, RosterView
from projections.views.orphans import OrphansView
from projections.views.projects import ProjectsView
from projections.views.runs import RunsView
from projections.views.webhooks import WebhooksView


def all_projections() -> list[Any]:
    """Every view the API reads, in the order they are built."""
    return [
        MembersView(),
        RosterView(),
        OrganizationsView(),
        ConnectionsView(),
        ProjectsView(),
        RunsView(),
        OrphansView(),
        BillingView(),
        AuditView(),
        WebhooksView(),
        DeploymentsView(),
    ]
