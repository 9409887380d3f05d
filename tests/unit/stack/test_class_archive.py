"""The driver JVM's class-data archive: when a start maps one, asks for one, or leaves it."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from stack import class_archive
from stack.class_archive import DRIVER_OPTIONS


@pytest.fixture
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> list[Path]:
    """An empty archive folder; background builds are recorded, not started."""
    monkeypatch.setenv("TREP_CACHE_DIR", str(tmp_path))
    started: list[Path] = []
    monkeypatch.setattr(class_archive, "_build_in_background",
                        lambda conf, path: started.append(path))
    return started


CONF = {"spark.jars": "/x/delta.jar", DRIVER_OPTIONS: "-Dlog4j.configurationFile=/x"}


def test_an_existing_archive_is_mapped_after_the_driver_options(cache: list[Path]) -> None:
    path = class_archive.archive_path(CONF)
    assert path is not None and path.parent == class_archive.archive_dir()
    path.parent.mkdir(parents=True)
    path.write_bytes(b"jsa")
    conf = class_archive.use(CONF, "auto")
    assert conf[DRIVER_OPTIONS] == f"-Dlog4j.configurationFile=/x -XX:SharedArchiveFile={path}"
    assert conf["spark.jars"] == CONF["spark.jars"]
    assert cache == []


def test_a_missing_archive_is_built_in_the_background_and_this_start_goes_without(
        cache: list[Path]) -> None:
    conf = class_archive.use(CONF, "auto")
    assert conf == CONF
    assert cache == [class_archive.archive_path(CONF)]


def test_a_failed_build_is_not_tried_again(cache: list[Path]) -> None:
    path = class_archive.archive_path(CONF)
    assert path is not None
    path.parent.mkdir(parents=True)
    path.with_suffix(".failed").write_text("RuntimeError: no archive\n")
    assert class_archive.use(CONF, "auto") == CONF
    assert cache == []


def test_off_and_explicit_archive_options_are_left_alone(cache: list[Path]) -> None:
    assert class_archive.use(CONF, "off") == CONF
    mine = {DRIVER_OPTIONS: "-XX:SharedArchiveFile=/opt/mine.jsa"}
    assert class_archive.use(mine, "auto") == mine
    assert cache == []


def test_the_key_follows_the_jars_and_the_spark_installation(
        cache: list[Path], monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    other = class_archive.archive_path({**CONF, "spark.jars": "/x/delta-4.1.jar"})
    assert other is not None and other != class_archive.archive_path(CONF)
    before = class_archive.archive_path(CONF)
    home = tmp_path / "another-venv" / "pyspark"
    monkeypatch.setenv("SPARK_HOME", str(home))
    elsewhere = class_archive.archive_path(CONF)
    assert elsewhere not in (before, None)
    # The same folder with its jars written again (a virtualenv made again in place).
    (home / "jars").mkdir(parents=True)
    jar = home / "jars" / "spark-core.jar"
    jar.write_bytes(b"x")
    first = class_archive.archive_path(CONF)
    assert first != elsewhere
    os.utime(jar, ns=(1_000_000_000, 1_000_000_000))
    assert class_archive.archive_path(CONF) != first
    # JVM options other than the classpath do not change which archive fits.
    assert class_archive.archive_path({**CONF, DRIVER_OPTIONS: "-Xmx2g"}) == \
        class_archive.archive_path(CONF)


def test_a_new_archive_leaves_only_the_two_newest(tmp_path: Path) -> None:
    import os

    for age, name in enumerate(("c", "b", "a")):
        (tmp_path / f"spark-4.0.0-{name}.jsa").write_bytes(b"jsa")
        (tmp_path / f"spark-4.0.0-{name}.log").write_text("built")
        os.utime(tmp_path / f"spark-4.0.0-{name}.jsa", (1000 - age, 1000 - age))
    (tmp_path / "other.jsa").write_bytes(b"not ours")
    gone = class_archive.prune(tmp_path)
    assert [p.name for p in gone] == ["spark-4.0.0-a.jsa"]
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "other.jsa", "spark-4.0.0-b.jsa", "spark-4.0.0-b.log", "spark-4.0.0-c.jsa",
        "spark-4.0.0-c.log"]
