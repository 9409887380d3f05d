"""docker-compose.yml describes the same topology as the local stack."""

from __future__ import annotations

import subprocess

import yaml

from stack import services
from stack.fetch import apt_install
from stack.settings import REPO_ROOT

COMPOSE = REPO_ROOT / "docker-compose.yml"
#: The stack runs FerretDB where users with Docker run a real MongoDB.
COMPOSE_NAME = {"ferretdb": "mongodb", "spark-standalone": "spark-worker"}


def test_compose_file_is_valid_and_names_every_stack_service() -> None:
    # Debian's docker-compose validates and resolves the file without a Docker engine.
    apt_install("docker-compose", ["docker-compose"], ["docker-compose"])
    out = subprocess.run(["docker-compose", "-f", str(COMPOSE), "config", "--services"],
                         capture_output=True, text=True, check=True).stdout
    expected = {COMPOSE_NAME.get(name, name) for name in services.NAMES}
    assert set(out.split()) == expected


def test_compose_source_has_the_binlog_settings_the_extractor_needs() -> None:
    spec = yaml.safe_load(COMPOSE.read_text())
    command = spec["services"]["mariadb-source"]["command"]
    for setting in ("--binlog-format=ROW", "--binlog-row-image=FULL",
                    "--binlog-row-metadata=FULL", "--server-id=1"):
        assert setting in command


def test_compose_registry_serves_the_stack_port_and_keeps_its_schemas() -> None:
    spec = yaml.safe_load(COMPOSE.read_text())["services"]["apicurio"]
    assert spec["ports"] == ["127.0.0.1:18081:8080"]
    # In-memory storage would reuse schema ids after a restart: the topics would decode
    # with the wrong schemas.
    assert spec["environment"]["APICURIO_DATASOURCE_URL"].startswith("jdbc:h2:file:")
