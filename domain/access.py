"""Who may do what (A1, A2): roles and the permissions each grants."""

from __future__ import annotations

from domain.errors import Forbidden

OWNER, MEMBER, AUDITOR, FINANCE = "owner", "member", "auditor", "finance"
ROLES = (OWNER, MEMBER, AUDITOR, FINANCE)

# Permission -> roles that hold it. Reading the organization's cards is open to every role.
PERMISSIONS: dict[str, frozenset[str]] = {
    "read": frozenset(ROLES),
    "manage_connections": frozenset({OWNER}),
    "manage_members": frozenset({OWNER}),
    "discover_volumes": frozenset({OWNER}),
    "manage_projects": frozenset({OWNER, MEMBER}),
    "manage_runs": frozenset({OWNER, MEMBER}),
    "billing": frozenset({OWNER, FINANCE}),
    "audit": frozenset({OWNER, AUDITOR}),
    "manage_webhooks": frozenset({OWNER}),
}


def require(role: str, permission: str) -> None:
    """A2: refuse with 403 when the role lacks the permission."""
    if role not in PERMISSIONS[permission]:
        raise Forbidden(f"the role '{role}' may not {permission.replace('_', ' ')}", role=role)
