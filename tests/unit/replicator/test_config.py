"""Service configuration: YAML, environment overrides, clear errors, hidden secrets."""

from __future__ import annotations

from pathlib import Path

import pytest

from trep.config import ConfigError, load_config


def _write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "service.yml"
    path.write_text(text)
    return path


def test_defaults_and_derived_names(tmp_path: Path) -> None:
    cfg = load_config(_write(tmp_path, "service: alpha\n"))
    assert cfg.thl_topic == "thl.alpha"
    assert cfg.tracking_schema == "tungsten_alpha"
    assert cfg.extractor.fragment_rows == 5000
    assert cfg.kafka.bootstrap_servers == "127.0.0.1:19092"


def test_environment_overrides_the_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = _write(tmp_path, "service: alpha\nsource:\n  port: 3306\n")
    monkeypatch.setenv("TREP_SOURCE__PORT", "13306")
    monkeypatch.setenv("TREP_SOURCE__PASSWORD", "s3cret")
    cfg = load_config(path)
    assert cfg.source.port == 13306
    assert cfg.source.password.get_secret_value() == "s3cret"
    assert "s3cret" not in repr(cfg)


def test_bad_values_name_the_file_and_field(tmp_path: Path) -> None:
    path = _write(tmp_path, "service: alpha\nextractor:\n  fragment_rows: 0\n")
    with pytest.raises(ConfigError, match=r"service\.yml: extractor\.fragment_rows: "):
        load_config(path)


def test_unknown_keys_are_refused(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="kafak"):
        load_config(_write(tmp_path, "service: alpha\nkafak: {}\n"))


def test_service_name_must_be_an_identifier(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="service: Value error, service names"):
        load_config(_write(tmp_path, "service: 'a-b'\n"))


def test_unreadable_yaml(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="cannot read configuration"):
        load_config(_write(tmp_path, "service: [unclosed\n"))
