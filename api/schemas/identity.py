"""`GET /v1/me` and `GET /v1/organization` (A1, S7)."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import BaseModel, Field, model_validator

from api.schemas.common import Count, Input, example

Role = Literal["owner", "member", "auditor", "finance"]
ExpiresInDays = Annotated[Count | None, Field(ge=1, le=3650)]


class Me(BaseModel):
    model_config = example(
        user_id="2f1c…", email="owner@example.com", organization_id="8d0e…", role="owner"
    )
    user_id: str
    email: str
    organization_id: str
    role: Literal["owner", "member", "auditor", "finance"]


class Capabilities(BaseModel):
    training: bool
    managed_serving: bool


class OrganizationPublic(BaseModel):
    model_config = example(
        id="8d0e…",
        name="Acme",
        mode="own",
        capabilities={"training": True, "managed_serving": True},
    )
    id: str
    name: str
    mode: Literal["own", "provided"]
    capabilities: Capabilities


class MemberPublic(BaseModel):
    """A member as an owner sees them: never a token or its hash."""

    model_config = example(
        user_id="2f1c…",
        email="ana@example.com",
        role="member",
        created_at="2026-11-30T10:00:00Z",
        token_expires_at=None,
    )
    user_id: str
    email: str
    role: Role
    created_at: str
    token_expires_at: str | None = None
    token_rotated_at: str | None = None


class MemberIn(Input):
    model_config = example(email="ana@example.com", role="member", expires_in_days=90)
    email: Annotated[str, Field(min_length=3, max_length=254, pattern=r"^[^@\s]+@[^@\s]+$")]
    role: Role
    expires_in_days: ExpiresInDays = None


class MemberCreated(BaseModel):
    """The new member and their token: shown once, only its hash is stored."""

    user_id: str
    email: str
    role: Role
    token: str
    token_expires_at: str | None = None


class RoleIn(Input):
    model_config = example(role="auditor")
    role: Role


class MemberChange(Input):
    """An owner's change to a member: a role, a token expiry, or both (absent: unchanged).
    `expires_in_days: null` lifts the expiry; a number sets it that many days from now."""

    model_config = example(role="auditor", expires_in_days=30)
    role: Role | None = None
    expires_in_days: ExpiresInDays = None

    @model_validator(mode="after")
    def _something(self) -> MemberChange:
        if not self.model_fields_set & {"role", "expires_in_days"}:
            raise ValueError("send a role, an expires_in_days (null: never), or both")
        if "role" in self.model_fields_set and self.role is None:
            raise ValueError("role cannot be null")
        return self


class RotateIn(Input):
    model_config = example(expires_in_days=90)
    expires_in_days: ExpiresInDays = None


class NewToken(BaseModel):
    """The caller's new token, shown once; the old one no longer works."""

    token: str
    token_expires_at: str | None = None


class InviteIn(Input):
    """An invite link for `email` with `role`, single-use, expiring after `expires_in_days`."""

    model_config = example(email="ana@example.com", role="member", expires_in_days=7)
    email: Annotated[str, Field(min_length=3, max_length=254, pattern=r"^[^@\s]+@[^@\s]+$")]
    role: Role
    expires_in_days: Annotated[Count, Field(ge=1, le=30)] = 7


class InvitePublic(BaseModel):
    """An open invite; never its secret or its hash."""

    id: str
    email: str
    role: Role
    expires_at: str
    created_at: str


class InviteMade(InvitePublic):
    """The new invite and its link: shown once, only its hash is stored. The link's holder opens
    it in the console (`/invite/<token>`), accepts, and is signed in as a new member."""

    token: str
    link: str
