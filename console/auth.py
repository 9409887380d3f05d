"""Who may act in the console: a password (its scrypt hash) or a token, from the
environment or the service file; sessions signed by the server, a CSRF token per session.

Reading needs nothing; every action needs a login and the session's CSRF token, and is
logged with who did it (``console.audit``).
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import os
import secrets
from dataclasses import dataclass

#: scrypt cost: about 50 ms a check on this machine, far too slow to guess at.
_N, _R, _P = 1 << 14, 8, 1


def hash_password(password: str, salt: bytes | None = None) -> str:
    """``scrypt$<salt>$<hash>`` (base64) of ``password``."""
    salt = salt or os.urandom(16)
    digest = hashlib.scrypt(password.encode(), salt=salt, n=_N, r=_R, p=_P)
    return "scrypt$" + base64.b64encode(salt).decode() + "$" + base64.b64encode(digest).decode()


def verify_password(password: str, stored: str) -> bool:
    try:
        kind, salt, digest = stored.split("$")
    except ValueError:
        return False
    if kind != "scrypt":
        return False
    got = hashlib.scrypt(password.encode(), salt=base64.b64decode(salt), n=_N, r=_R, p=_P)
    return hmac.compare_digest(got, base64.b64decode(digest))


@dataclass(frozen=True)
class Credentials:
    """The console's users: name -> password hash; or one token (user ``token``)."""

    users: dict[str, str]
    token: str | None = None

    @classmethod
    def from_environment(cls) -> Credentials:
        """``TREP_CONSOLE_USERS`` (``name:scrypt$..;name2:...``) and ``TREP_CONSOLE_TOKEN``."""
        users = {}
        for entry in filter(None, os.environ.get("TREP_CONSOLE_USERS", "").split(";")):
            name, _, stored = entry.partition(":")
            users[name.strip()] = stored.strip()
        return cls(users, os.environ.get("TREP_CONSOLE_TOKEN") or None)

    @property
    def any(self) -> bool:
        """Someone can log in at all (otherwise the console is read-only)."""
        return bool(self.users) or self.token is not None

    def login(self, user: str, password: str) -> str | None:
        """Who logged in (None: refused)."""
        stored = self.users.get(user)
        if stored is not None and verify_password(password, stored):
            return user
        if self.token is not None and user in ("", "token") and hmac.compare_digest(
                password.encode(), self.token.encode()):
            return "token"
        return None


def new_csrf_token() -> str:
    return secrets.token_urlsafe(32)


def csrf_ok(session_token: object, sent: object) -> bool:
    return isinstance(session_token, str) and isinstance(sent, str) and bool(sent) and \
        hmac.compare_digest(session_token.encode(), sent.encode())
