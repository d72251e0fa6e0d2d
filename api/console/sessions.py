"""Console sessions kept on the server: the cookie holds a random id, never the token.

A session holds the member token's hash (looked up in the members view on every request, so a
removed member or a rotated token stops working at once) and the session's CSRF token.

N4: a session is made only at sign-in. A signed-out visitor gets no server state at all: the
sign-in form's CSRF token is a signed double-submit cookie (a random value and its HMAC under
this process's key), checked against the form's copy; anyone can ask for the sign-in page as
often as they like without filling the store. The store is bounded per member (`MAX_PER_USER`:
a new sign-in evicts that member's oldest session) and in all (`MAX_SESSIONS`: expired ones are
dropped first; when every one is live, a new sign-in is refused rather than evicting someone
else's).
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
import threading
import time
from collections import defaultdict
from dataclasses import dataclass, field

from domain.errors import TensorantError

COOKIE = "tensorant_session"
CSRF_COOKIE = "tensorant_csrf"  # signed-out visitors only: the sign-in form's CSRF token
TTL_SECONDS = 12 * 3600
MAX_SESSIONS = 10_000
MAX_PER_USER = 20


class SessionsFull(TensorantError):
    problem = "sessions-full"
    status = 503
    title = "The console has as many signed-in sessions as it keeps"


@dataclass
class Session:
    id: str  # "" for a signed-out visitor (nothing kept on the server)
    csrf: str
    token_hash: str | None = None
    created: float = field(default_factory=time.monotonic)

    @property
    def expired(self) -> bool:
        return time.monotonic() - self.created > TTL_SECONDS


class SessionStore:
    """In-memory, per process: a restart signs everyone out (paste the token again)."""

    def __init__(self, max_sessions: int = MAX_SESSIONS, max_per_user: int = MAX_PER_USER) -> None:
        self._lock = threading.Lock()
        self._sessions: dict[str, Session] = {}
        self._by_user: dict[str, list[str]] = defaultdict(list)  # token hash -> ids, oldest first
        self._key = secrets.token_bytes(32)  # signs the signed-out CSRF cookies
        self.max_sessions = max_sessions
        self.max_per_user = max_per_user

    # ------------------------------------------------------------ signed out: nothing kept
    def _sign(self, nonce: str) -> str:
        return hmac.new(self._key, nonce.encode(), hashlib.sha256).hexdigest()

    def signed_out(self, cookie: str | None) -> tuple[Session, bool]:
        """A signed-out visitor's page session (never stored) and whether its CSRF cookie is
        new: the one the visitor sent when its signature holds, else a fresh one."""
        if cookie and self.valid_csrf(cookie):
            return Session("", cookie), False
        nonce = secrets.token_urlsafe(32)
        return Session("", f"{nonce}.{self._sign(nonce)}"), True

    def valid_csrf(self, value: str) -> bool:
        nonce, _, mac = value.rpartition(".")
        return bool(nonce) and hmac.compare_digest(mac, self._sign(nonce))

    # ------------------------------------------------------------ signed in
    def new(self, token_hash: str) -> Session:
        """A session for a member who just signed in (SessionsFull when every kept session is
        live and the store is full)."""
        s = Session(secrets.token_urlsafe(32), secrets.token_urlsafe(32), token_hash)
        with self._lock:
            mine = self._by_user[token_hash]
            while len(mine) >= self.max_per_user:
                self._sessions.pop(mine.pop(0), None)  # the member's own oldest
            if len(self._sessions) >= self.max_sessions:
                self._drop_expired()
            if len(self._sessions) >= self.max_sessions:
                if not mine:
                    del self._by_user[token_hash]
                raise SessionsFull(
                    f"{self.max_sessions} sessions are signed in; try again later, or use the "
                    "API with your token"
                )
            self._sessions[s.id] = s
            mine.append(s.id)
        return s

    def _drop_expired(self) -> None:
        for gone in [s for s in self._sessions.values() if s.expired]:
            self._remove(gone)

    def _remove(self, s: Session) -> None:
        self._sessions.pop(s.id, None)
        ids = self._by_user.get(s.token_hash or "")
        if ids is not None:
            if s.id in ids:
                ids.remove(s.id)
            if not ids:
                del self._by_user[s.token_hash or ""]

    def get(self, session_id: str | None) -> Session | None:
        if not session_id:
            return None
        with self._lock:
            s = self._sessions.get(session_id)
            if s is not None and s.expired:
                self._remove(s)
                return None
            return s

    def drop(self, session_id: str | None) -> None:
        with self._lock:
            s = self._sessions.get(session_id or "")
            if s is not None:
                self._remove(s)

    def __len__(self) -> int:
        return len(self._sessions)
