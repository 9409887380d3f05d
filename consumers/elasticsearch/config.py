"""Configuration of an Elasticsearch target (``target: {type: elasticsearch, ...}``).

```yaml
consumers:
  search:
    target:
      type: elasticsearch
      hosts: ["https://es1:9200"]
      username: tungsten               # or api_key; the password in `password:`
      index: "{schema}.{table}"        # one index per table, lower-cased
      deletes: tombstone               # replay-safe deletes behind a filtered alias
      document_fields: [committime, seqno]
```
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, Field, SecretStr, field_validator

from consumers.naming import NamePolicy, check_template

#: Placeholders an index template may use.
INDEX_FIELDS = ("schema", "table", "service")

#: Optional fields a document can carry besides the row's columns.
DocumentField = Literal["source_schema", "source_table", "committime", "seqno"]


class ElasticsearchTarget(BaseModel):
    """An Elasticsearch 8 cluster reached through the official ``elasticsearch`` client."""

    model_config = {"extra": "forbid"}

    type: Literal["elasticsearch"] = "elasticsearch"
    #: Node URLs, e.g. ``["http://127.0.0.1:9200"]`` (a single string is accepted).
    hosts: list[str] = Field(min_length=1)
    #: Basic authentication; the password goes in ``password``. Never logged.
    username: str | None = None
    password: SecretStr | None = None
    #: An API key (the base64 ``id:key`` form), instead of a user. Never logged.
    api_key: SecretStr | None = None
    #: CA bundle for https, and whether to verify the server's certificate.
    ca_certs: str | None = None
    verify_certs: bool = True
    #: Seconds one request may take (a bulk of ``bulk_max_bytes`` included).
    request_timeout_s: float = Field(60.0, gt=0)
    #: Index name template, one index per source table: ``{schema}``, ``{table}`` and
    #: ``{service}`` are replaced; the result is lower-cased, and characters Elasticsearch
    #: refuses in index names (space, ``"*,/<>?\\|#:``) become ``_``. Two tables that end up
    #: with one name are refused (the second stops the group); name them in ``indices``.
    index: str = "{schema}.{table}"
    #: Index names or templates for particular tables, by ``schema.table`` (an exact name
    #: first, then shell wildcards in order); they win over ``index``.
    indices: dict[str, str] = Field(default_factory=dict)
    #: ``map``: a name Elasticsearch refuses is lower-cased, its refused characters become
    #: ``_`` and a long one is cut with a hash (two tables meeting on one index stop the
    #: group); ``strict``: stop the group on every name that would change.
    names: NamePolicy = "map"
    #: ``hard``: a delete removes the document (Elasticsearch remembers its version only
    #: for ``index.gc_deletes`` and not across a restart, so a replay from before the
    #: delete shows the row again until it reaches the delete). ``tombstone``: a delete
    #: writes a ``_deleted`` document that keeps its version; applications read the
    #: index name through a filtered alias, the documents live in ``<index>.all``.
    deletes: Literal["hard", "tombstone"] = "hard"
    #: Fields added to every document: ``source_schema``, ``source_table``, ``committime``
    #: (the source commit time) and ``seqno``; a column of the same name is refused.
    document_fields: list[DocumentField] = Field(default_factory=list)
    #: Settings of the indices the applier creates, e.g. ``{"number_of_replicas": 1,
    #: "index.gc_deletes": "1h"}``. An index that exists is used as it is.
    index_settings: dict[str, Any] = Field(default_factory=dict)
    #: Map BIGINT UNSIGNED and BIT(64) to ``unsigned_long``: ``auto`` when every node has the
    #: ``x-pack-unsigned-long`` module (the default distribution does), else ``double``
    #: (searchable approximately; ``_source`` keeps the exact digits either way).
    unsigned_long: Literal["auto", "yes", "no"] = "auto"
    #: Map DECIMAL(p<=15, s) to ``scaled_float`` (exact in searches and aggregations):
    #: ``auto`` when every node has the ``mapper-extras`` module, else ``double``.
    scaled_float: Literal["auto", "yes", "no"] = "auto"
    #: Zero and partial dates ('0000-00-00'), which no date field holds: ``null`` stores
    #: NULL, counted in ``trep_values_changed_total{kind="zero_date"}``; ``error`` stops the
    #: group at the seqno (``consumers.zero_dates``).
    zero_dates: Literal["null", "error"] = "null"
    #: A bulk request holds this many bytes at most; a block larger than that is sent in
    #: several requests, one at a time.
    bulk_max_bytes: int = Field(8 * 1024 * 1024, ge=64 * 1024)
    #: Bulk items refused as overload (429, 503) are sent again this many times, with
    #: backoff, before the block fails as a transient error (and is retried from the
    #: stored position).
    bulk_retries: int = Field(5, ge=0)

    @field_validator("hosts", mode="before")
    @classmethod
    def _one_host(cls, value: object) -> object:
        return [value] if isinstance(value, str) else value

    @field_validator("index")
    @classmethod
    def _template(cls, value: str) -> str:
        return check_template(value, INDEX_FIELDS, "index", required=("table",))

    @field_validator("indices")
    @classmethod
    def _templates(cls, value: dict[str, str]) -> dict[str, str]:
        for template in value.values():
            check_template(template, INDEX_FIELDS, "index")
        return value

    def client_options(self) -> dict[str, Any]:
        """Keyword arguments of ``elasticsearch.Elasticsearch`` for this target."""
        options: dict[str, Any] = {"hosts": list(self.hosts),
                                   "request_timeout": self.request_timeout_s,
                                   "verify_certs": self.verify_certs,
                                   # Connection failures are retried here; a request that
                                   # timed out is left to the runtime (it replays from the
                                   # stored position, which every write tolerates).
                                   "max_retries": 2, "retry_on_timeout": False}
        if self.ca_certs:
            options["ca_certs"] = self.ca_certs
        if self.api_key is not None:
            options["api_key"] = self.api_key.get_secret_value()
        elif self.username is not None:
            password = self.password.get_secret_value() if self.password else ""
            options["basic_auth"] = (self.username, password)
        return options

    def printable(self) -> str:
        """The target for errors and status: its node URLs, without credentials."""
        return "elasticsearch " + ",".join(_strip_credentials(h) for h in self.hosts)


def _strip_credentials(url: str) -> str:
    scheme, sep, rest = url.partition("://")
    if not sep:
        scheme, rest = "", url
    host = rest.rsplit("@", 1)[-1]
    return f"{scheme}://{host}" if scheme else host
