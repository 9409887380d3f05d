"""The Elasticsearch target's configuration: hosts, template, credentials kept out of sight."""

from __future__ import annotations

import pytest
from pydantic import SecretStr, ValidationError

from consumers.elasticsearch.config import ElasticsearchTarget
from consumers.registry import applier_types


def test_defaults_and_one_host_as_a_string() -> None:
    cfg = ElasticsearchTarget.model_validate({"type": "elasticsearch",
                                              "hosts": "http://es1:9200"})
    assert cfg.hosts == ["http://es1:9200"]
    assert (cfg.index, cfg.deletes, cfg.document_fields) == ("{schema}.{table}", "hard", [])
    assert "elasticsearch" in applier_types()


@pytest.mark.parametrize("template", ["{schema}", "{schema}.{tabel}", "{0}.{table}"])
def test_templates_must_name_one_index_per_table(template: str) -> None:
    with pytest.raises(ValidationError, match="index"):
        ElasticsearchTarget(hosts=["http://es1:9200"], index=template)


def test_credentials_never_show() -> None:
    cfg = ElasticsearchTarget(hosts=["https://user:pw@es1:9200", "es2:9200"], username="u",
                              password=SecretStr("secret"))
    assert cfg.printable() == "elasticsearch https://es1:9200,es2:9200"
    assert "secret" not in repr(cfg)
    assert cfg.client_options()["basic_auth"] == ("u", "secret")
    keyed = ElasticsearchTarget(hosts=["http://es1:9200"], api_key=SecretStr("a2V5"))
    assert keyed.client_options()["api_key"] == "a2V5"
    assert "basic_auth" not in keyed.client_options()


def test_unknown_settings_are_refused() -> None:
    with pytest.raises(ValidationError, match="extra"):
        ElasticsearchTarget.model_validate({"hosts": ["http://es1:9200"], "idx": "x"})
