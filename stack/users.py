"""The unprivileged account for servers that refuse to run as root (PostgreSQL, Elasticsearch)."""

from __future__ import annotations

import functools
import os
import pwd
from pathlib import Path

from stack import process

SERVICE_USER = os.environ.get("TREP_SERVICE_USER", "trepstack")


@functools.cache
def service_user() -> str | None:
    """Name of the account to run servers as, or None when we are not root (run as ourselves)."""
    if os.geteuid() != 0:
        return None
    try:
        pwd.getpwnam(SERVICE_USER)
    except KeyError:
        process.run("stack", ["useradd", "--system", "--no-create-home", "--shell",
                              "/usr/sbin/nologin", SERVICE_USER])
    return SERVICE_USER


def hand_over(path: Path) -> None:
    """Give ``path`` (recursively) to the service user, so the server can write there."""
    user = service_user()
    if user is None:
        return
    entry = pwd.getpwnam(user)
    for root, dirs, files in os.walk(path):
        os.chown(root, entry.pw_uid, entry.pw_gid)
        for name in dirs + files:
            os.chown(os.path.join(root, name), entry.pw_uid, entry.pw_gid, follow_symlinks=False)
