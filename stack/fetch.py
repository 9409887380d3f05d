"""Downloads into the cache: plain files, Maven artifacts, Debian packages."""

from __future__ import annotations

import functools
import glob
import os
import shutil
import urllib.error
import urllib.request
from collections.abc import Sequence
from pathlib import Path

from stack import process
from stack.errors import StackError
from stack.settings import CACHE_DIR, JAVA_HOME, MAVEN_REPO_URL, cache_dir


def download(service: str, url: str, dest: Path) -> Path:
    """Fetch ``url`` to ``dest`` once; a partial download never looks complete."""
    if dest.exists():
        return dest
    dest.parent.mkdir(parents=True, exist_ok=True)
    part = dest.with_name(dest.name + ".part")
    try:
        with urllib.request.urlopen(url, timeout=60) as resp, part.open("wb") as out:  # noqa: S310
            shutil.copyfileobj(resp, out, length=1 << 20)
    except (urllib.error.URLError, OSError) as exc:
        part.unlink(missing_ok=True)
        raise StackError(service, f"download of {url} failed: {exc}") from exc
    part.rename(dest)
    return dest


def maven_file(service: str, group: str, artifact: str, version: str,
               ext: str = "jar", classifier: str = "") -> Path:
    """One artifact straight from the Maven repository, cached under ``maven/``."""
    suffix = f"-{classifier}" if classifier else ""
    name = f"{artifact}-{version}{suffix}.{ext}"
    url = f"{MAVEN_REPO_URL}/{group.replace('.', '/')}/{artifact}/{version}/{name}"
    return download(service, url, cache_dir("maven", group, artifact, version) / name)


def maven_runtime_jars(service: str, coords: Sequence[str], dest: Path,
                       log: Path | None = None) -> list[Path]:
    """Resolve ``group:artifact:version`` coordinates with their runtime dependencies.

    Maven does the resolution (with its local repository in the cache) and copies the jars to
    ``dest``; a marker file makes the second call free.
    """
    marker = dest / ".complete"
    if not marker.exists():
        dest.mkdir(parents=True, exist_ok=True)
        deps = "\n".join(
            "<dependency><groupId>{}</groupId><artifactId>{}</artifactId>"
            "<version>{}</version></dependency>".format(*c.split(":")) for c in coords
        )
        pom = dest / "pom.xml"
        pom.write_text(
            "<project xmlns='http://maven.apache.org/POM/4.0.0'><modelVersion>4.0.0</modelVersion>"
            "<groupId>local.stack</groupId><artifactId>fetch</artifactId><version>1</version>"
            f"<dependencies>{deps}</dependencies></project>\n"
        )
        process.run(
            service,
            ["mvn", "-B", "-q", "-f", str(pom), f"-Dmaven.repo.local={cache_dir('m2')}",
             "dependency:copy-dependencies", "-DincludeScope=runtime",
             f"-DoutputDirectory={dest}"],
            log=log, env={"JAVA_HOME": str(JAVA_HOME)}, timeout=1800,
        )
        marker.touch()
    return sorted(dest.glob("*.jar"))


@functools.cache
def _apt_updated() -> bool:
    process.run("apt", ["apt-get", "update", "-q"], log=CACHE_DIR / "apt.log", timeout=900)
    return True


def apt_install(service: str, packages: Sequence[str], binaries: Sequence[str]) -> None:
    """Install Debian packages unless every binary they provide is already there.

    A binary is a command name looked up on PATH or a path pattern (``/usr/lib/x/*/bin/y``).
    """
    if all(shutil.which(b) or glob.glob(b) for b in binaries):
        return
    if os.geteuid() != 0:
        raise StackError(service, f"missing {', '.join(binaries)}; install as root: "
                                  f"apt-get install {' '.join(packages)}")
    _apt_updated()
    process.run(service, ["apt-get", "install", "-y", "-q", "--no-install-recommends",
                          *packages], log=CACHE_DIR / "apt.log",
                env={"DEBIAN_FRONTEND": "noninteractive"}, timeout=1800)
