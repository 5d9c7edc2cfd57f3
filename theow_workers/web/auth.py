"""Who may see the console and who may approve: passwords, signed sessions, CSRF tokens.

Decisions, the same rule as Flower's (``theow_workers/ops/flower.py``):

- No password, no console: ``THEOW_WEB_PASSWORD`` unset refuses to start.
- Two roles. ``THEOW_WEB_PASSWORD`` logs in a *reviewer* (approves and
  rejects); ``THEOW_WEB_READONLY_PASSWORD``, when set, logs in a *reader*
  who sees every page and whose POSTs are refused with 403.
- A login is a cookie holding ``role|name|nonce|expiry`` and an HMAC of it.
  The HMAC key is derived from a random server secret (``web-secret`` in
  ``THEOW_HOME``, made on first start, readable by its owner only) and both
  passwords: a cookie that leaks says nothing about a password, and changing
  a password logs everyone out; no server-side session table.
- Every form carries a CSRF token, an HMAC of the session's nonce; a POST
  without it, or with another session's, is refused with 403. The cookie is
  also ``SameSite=Strict`` and ``HttpOnly``.

>>> keys = Keys.from_passwords("s3cret", "", secret=b"server secret")
>>> cookie = keys.session_cookie("reviewer", "ada")
>>> keys.session(cookie).role, keys.session(cookie).name
('reviewer', 'ada')
>>> keys.session(cookie + "x") is None
True
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import os
import secrets
import time
from dataclasses import dataclass
from pathlib import Path

REVIEWER, READER = "reviewer", "reader"
COOKIE = "theow_session"
SESSION_SECONDS = 12 * 3600
NAME_CHARS = 60


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


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).decode().rstrip("=")


def _unb64(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


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


def _check_passwords(reviewer: str, reader: str) -> None:
    if not reviewer:
        raise WebAuthError(
            "the web console is never started without authentication: set THEOW_WEB_PASSWORD "
            "(and THEOW_WEB_READONLY_PASSWORD for read-only logins)"
        )
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

    def _sign(self, payload: str) -> str:
        return _b64(hmac.new(self.key, payload.encode(), hashlib.sha256).digest())

    def session_cookie(self, role: str, name: str, now: float | None = None) -> str:
        expiry = int((now or time.time()) + SESSION_SECONDS)
        clean = " ".join(name.split())[:NAME_CHARS] or role
        payload = "|".join((role, _b64(clean.encode()), secrets.token_hex(16), str(expiry)))
        return f"{payload}|{self._sign(payload)}"

    def session(self, cookie: str | None, now: float | None = None) -> Session | None:
        """The session a cookie proves, or None (missing, forged, expired)."""
        if not cookie or cookie.count("|") != 4:
            return None
        payload, signature = cookie.rsplit("|", 1)
        if not hmac.compare_digest(signature, self._sign(payload)):
            return None
        role, name, nonce, expiry = payload.split("|")
        if not expiry.isdigit() or int(expiry) < (now or time.time()):
            return None
        if role not in (REVIEWER, READER):
            return None
        return Session(role, _unb64(name).decode(errors="replace"), nonce)

    def csrf_token(self, session: Session) -> str:
        return self._sign(f"csrf|{session.nonce}")

    def csrf_ok(self, session: Session, token: str | None) -> bool:
        return bool(token) and hmac.compare_digest(str(token), self.csrf_token(session))
