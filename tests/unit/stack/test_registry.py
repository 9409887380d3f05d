"""The service registry: start order, unknown names, port overrides."""

from __future__ import annotations

import pytest

from stack import services, settings


def test_select_keeps_start_order() -> None:
    names = [s.name for s in services.select(["kafka", "zookeeper"])]
    assert names == ["zookeeper", "kafka"]


def test_unknown_service_names_the_known_ones() -> None:
    with pytest.raises(KeyError, match="known: zookeeper"):
        services.select(["oracle"])


def test_port_override_from_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TREP_MARIADB_SOURCE_PORT", "23306")
    assert settings.port("mariadb-source") == 23306
    assert services.get("mariadb-source").port == 23306
