"""Who may see the console and who may approve: passwords, sessions, CSRF tokens.

Decisions, the same rule as Flower's (``theow_workers/ops/flower.py``):

- No password, no console: ``THEOW_WEB_PASSWORD`` unset refuses to start, and
  so does a weak one (under 12 characters, a common password, or fewer than 5
  different characters): the login is on the network, and guessing is cheap.
- Two roles. ``THEOW_WEB_PASSWORD`` logs in a *reviewer* (approves and
  rejects); ``THEOW_WEB_READONLY_PASSWORD``, when set, logs in a *reader*
  who sees every page and whose POSTs are refused with 403.
- A login is a server-side session (``Sessions``): the cookie holds only a
  random id, so logging out ends it for good, and a restart (or a changed
  password) logs everyone out. The console is one process and needs no Redis
  otherwise: the sessions live in its memory.
- Every form carries a CSRF token, an HMAC of the session's nonce keyed by a
  random server secret (``web-secret`` in ``THEOW_HOME``, made on first start,
  readable by its owner only); a POST without it, or with another session's,
  is refused with 403. The cookie is also ``SameSite=Strict`` and ``HttpOnly``.

>>> keys = Keys.from_passwords("a long reviewer secret", "", secret=b"server secret")
>>> sessions = Sessions()
>>> cookie = sessions.open(keys.role_for("a long reviewer secret") or "", "ada")
>>> sessions.get(cookie).role, sessions.get(cookie).name
('reviewer', 'ada')
>>> sessions.close(cookie); sessions.get(cookie) is None
True
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import os
import secrets
import threading
import time
from dataclasses import dataclass
from pathlib import Path

REVIEWER, READER = "reviewer", "reader"
COOKIE = "theow_session"
SESSION_SECONDS = 12 * 3600
# Only a password holder opens sessions; the cap keeps a scripted login loop from growing memory.
SESSION_LIMIT = 10_000
NAME_CHARS = 60
MIN_PASSWORD_CHARS = 12
MIN_DISTINCT_CHARS = 5
# Long enough to pass the length rule and still among the first guesses of any list.
COMMON_PASSWORDS = frozenset(
    {
        "123456789012",
        "1234567890123",
        "12345678901234",
        "123456789abc",
        "1q2w3e4r5t6y",
        "qwertyuiop12",
        "qwertyuiopasdf",
        "qwerty123456",
        "password1234",
        "password12345",
        "password123!",
        "passwordpassword",
        "iloveyou1234",
        "letmein12345",
        "welcome12345",
        "administrator",
        "admin1234567",
        "changeme1234",
        "change-me-please",
        "changemeplease",
        "choose-one-please",
        "correcthorsebatterystaple",
        "correct horse battery staple",
        "theow-password",
        "theowpassword",
        "theow-console",
        "reviewer-password",
        "secretpassword",
        "supersecret123",
        "trustno1trustno1",
        "monkey123456",
        "football1234",
        "baseball1234",
    }
)


class WebAuthError(ValueError):
    """The console cannot be started safely with these settings."""


@dataclass(frozen=True)
class Session:
    role: str
    name: str
    nonce: str

    @property
    def can_review(self) -> bool:
        return self.role == REVIEWER


def server_secret(home: Path) -> bytes:
    """The deployment's random signing secret, made once in ``home`` (mode 0600)."""
    path = home / "web-secret"
    if not path.exists():
        home.mkdir(parents=True, exist_ok=True)
        draft = home / f".web-secret.{os.getpid()}"
        fd = os.open(draft, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as f:
            f.write(secrets.token_bytes(32).hex())
        try:  # a link never replaces: of two consoles starting at once, one secret wins
            os.link(draft, path)
        except FileExistsError:
            pass
        finally:
            draft.unlink()
    try:
        secret = bytes.fromhex(path.read_text().strip())
    except ValueError:
        secret = b""
    if len(secret) < 16:
        raise WebAuthError(
            f"{path}: not a secret of 16 bytes or more in hex; delete it for a new one"
        )
    return secret


def password_problem(password: str) -> str | None:
    """Why ``password`` is too weak for the console, or None.

    >>> password_problem("x")
    'is 1 character long; use 12 or more'
    >>> password_problem("correct horse battery staple")
    'is a common password'
    """
    if len(password) < MIN_PASSWORD_CHARS:
        unit = "character" if len(password) == 1 else "characters"
        return f"is {len(password)} {unit} long; use {MIN_PASSWORD_CHARS} or more"
    if password.lower() in COMMON_PASSWORDS:
        return "is a common password"
    if len(set(password.lower())) < MIN_DISTINCT_CHARS:
        return f"has fewer than {MIN_DISTINCT_CHARS} different characters"
    return None


def _check_passwords(reviewer: str, reader: str) -> None:
    if not reviewer:
        raise WebAuthError(
            "the web console is never started without authentication: set THEOW_WEB_PASSWORD "
            "(and THEOW_WEB_READONLY_PASSWORD for read-only logins)"
        )
    for variable, password in (
        ("THEOW_WEB_PASSWORD", reviewer),
        ("THEOW_WEB_READONLY_PASSWORD", reader),
    ):
        problem = password and password_problem(password)
        if problem:
            raise WebAuthError(f"{variable} {problem} (e.g. the output of `openssl rand -hex 16`)")
    if reader and hmac.compare_digest(reader, reviewer):
        raise WebAuthError("THEOW_WEB_READONLY_PASSWORD must differ from THEOW_WEB_PASSWORD")


@dataclass(frozen=True)
class Keys:
    reviewer_password: str
    reader_password: str
    key: bytes

    @classmethod
    def from_passwords(cls, reviewer: str, reader: str, secret: bytes) -> Keys:
        _check_passwords(reviewer, reader)
        key = hmac.new(secret, f"theow-web\0{reviewer}\0{reader}".encode(), hashlib.sha256)
        return cls(reviewer, reader, key.digest())

    @classmethod
    def for_deployment(cls, reviewer: str, reader: str, home: Path) -> Keys:
        """The passwords checked first, then the server secret of ``home`` (made if new)."""
        _check_passwords(reviewer, reader)
        return cls.from_passwords(reviewer, reader, server_secret(home))

    def role_for(self, password: str) -> str | None:
        """The role this password logs in, or None; compared in constant time."""
        given = password.encode()
        if hmac.compare_digest(given, self.reviewer_password.encode()):
            return REVIEWER
        if self.reader_password and hmac.compare_digest(given, self.reader_password.encode()):
            return READER
        return None

    def csrf_token(self, session: Session) -> str:
        digest = hmac.new(self.key, f"csrf|{session.nonce}".encode(), hashlib.sha256).digest()
        return base64.urlsafe_b64encode(digest).decode().rstrip("=")

    def csrf_ok(self, session: Session, token: str | None) -> bool:
        return bool(token) and hmac.compare_digest(str(token), self.csrf_token(session))


class Sessions:
    """The logins of this console process, each ended by logout or after ``seconds``.

    The cookie is a random id and nothing else: it proves nothing once closed,
    and it carries no role or name that a reader could alter.
    """

    def __init__(self, seconds: float = SESSION_SECONDS, limit: int = SESSION_LIMIT) -> None:
        self.seconds = seconds
        self.limit = limit
        self._open: dict[str, tuple[Session, float]] = {}  # id -> session, expiry
        self._lock = threading.Lock()

    def open(self, role: str, name: str, now: float | None = None) -> str:
        """A new session for ``role``; returns the cookie value."""
        now = time.time() if now is None else now
        clean = " ".join(name.split())[:NAME_CHARS] or role
        sid = secrets.token_urlsafe(32)
        with self._lock:
            if len(self._open) >= self.limit:
                self._forget_expired(now)
            while len(self._open) >= self.limit:  # still full: the oldest login goes
                del self._open[next(iter(self._open))]
            self._open[sid] = (Session(role, clean, secrets.token_hex(16)), now + self.seconds)
        return sid

    def get(self, cookie: str | None, now: float | None = None) -> Session | None:
        """The session a cookie names, or None (missing, unknown, closed, expired)."""
        if not cookie:
            return None
        now = time.time() if now is None else now
        with self._lock:
            found = self._open.get(cookie)
            if found is None:
                return None
            session, expiry = found
            if expiry <= now:
                del self._open[cookie]
                return None
            return session

    def close(self, cookie: str | None) -> None:
        with self._lock:
            self._open.pop(cookie or "", None)

    def _forget_expired(self, now: float) -> None:
        for sid in [sid for sid, (_, expiry) in self._open.items() if expiry <= now]:
            del self._open[sid]
