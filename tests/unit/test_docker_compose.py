"""docker-compose.yml describes the same topology as the local stack."""

from __future__ import annotations

import subprocess

import yaml

from stack import services
from stack.fetch import apt_install
from stack.settings import REPO_ROOT
from trep.config import load_config

COMPOSE = REPO_ROOT / "docker-compose.yml"
#: The stack runs FerretDB where users with Docker run a real MongoDB.
COMPOSE_NAME = {"ferretdb": "mongodb", "spark-standalone": "spark-worker"}


def test_compose_file_is_valid_and_names_every_stack_service() -> None:
    # Debian's docker-compose validates and resolves the file without a Docker engine.
    apt_install("docker-compose", ["docker-compose"], ["docker-compose"])
    out = subprocess.run(["docker-compose", "-f", str(COMPOSE), "config", "--services"],
                         capture_output=True, text=True, check=True).stdout
    expected = {COMPOSE_NAME.get(name, name) for name in services.NAMES
                if name not in services.SCRATCH}
    assert set(out.split()) == expected | {"replicator", "console"}


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


def test_the_replicator_image_runs_the_compose_service_file() -> None:
    """The image's default command loads docker/service.yml, whose servers are compose
    services (by name, on their container ports), and the console uses the same image."""
    spec = yaml.safe_load(COMPOSE.read_text())["services"]
    assert spec["replicator"]["build"] == "."
    assert spec["console"]["image"] == spec["replicator"]["image"]
    dockerfile = (REPO_ROOT / "Dockerfile").read_text()
    assert 'CMD ["-c", "/opt/tungsten-kafka/docker/service.yml"]' in dockerfile
    cfg = load_config(REPO_ROOT / "docker" / "service.yml")
    hosts = {cfg.source.host, cfg.kafka.bootstrap_servers.split(":")[0],
             cfg.zookeeper.hosts.split(":")[0]}
    assert hosts <= set(spec), hosts
    # The replicator reaches Kafka on the listener advertised to containers.
    kafka = spec["kafka"]["environment"]
    assert "INTERNAL://kafka:29092" in kafka["KAFKA_ADVERTISED_LISTENERS"]
    assert cfg.kafka.bootstrap_servers == "kafka:29092"
