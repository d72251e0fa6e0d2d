"""Console sessions kept on the server: the cookie holds a random id, never the token.

A session holds the member token's hash (looked up in the members view on every request, so a
removed member or a rotated token stops working at once) and the session's CSRF token. A signed-out
visitor gets a session too (CSRF only), which sign-in replaces with a new id (no fixation).
"""

from __future__ import annotations

import secrets
import threading
import time
from dataclasses import dataclass, field

COOKIE = "tensorant_session"
TTL_SECONDS = 12 * 3600
MAX_SESSIONS = 10_000


@dataclass
class Session:
    id: str
    csrf: str
    token_hash: str | None = None
    created: float = field(default_factory=time.monotonic)

    @property
    def expired(self) -> bool:
        return time.monotonic() - self.created > TTL_SECONDS


class SessionStore:
    """In-memory, per process: a restart signs everyone out (paste the token again)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._sessions: dict[str, Session] = {}

    def new(self, token_hash: str | None = None) -> Session:
        s = Session(secrets.token_urlsafe(32), secrets.token_urlsafe(32), token_hash)
        with self._lock:
            if len(self._sessions) >= MAX_SESSIONS:
                oldest = min(self._sessions.values(), key=lambda x: x.created)
                del self._sessions[oldest.id]
            self._sessions[s.id] = s
        return s

    def get(self, session_id: str | None) -> Session | None:
        if not session_id:
            return None
        with self._lock:
            s = self._sessions.get(session_id)
            if s is not None and s.expired:
                del self._sessions[session_id]
                return None
            return s

    def drop(self, session_id: str | None) -> None:
        with self._lock:
            self._sessions.pop(session_id or "", None)
