"""Configuration of a warehouse target (``target: {type: warehouse, ...}``).

```yaml
consumers:
  warehouse:
    target:
      type: warehouse
      location: file:///data/warehouse          # or s3a://bucket/dw, hdfs://nn/dw, abfss://...
      spark:
        master: local[*]                        # or spark://host:7077, yarn, k8s://...
        conf: {spark.driver.memory: 2g}         # any spark.* setting
    block_commit_rows: 300000                   # the applier's defaults: 300,000 rows / 30 s
    block_commit_ms: 30000
```

Every location is a Hadoop URI that Spark can read and write (``file://``, ``s3a://``,
``hdfs://``, ``abfss://``); credentials and endpoints go in ``spark.conf`` as
``spark.hadoop.*`` settings, exactly as for any Spark job.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, Field, field_validator, model_validator

from consumers.naming import check_template

#: Placeholders of ``table_path`` and ``table_name``.
TABLE_FIELDS = ("location", "schema", "table")

#: Tungsten's Hive-friendly separator (seeds/002): 0x01 between fields.
HIVE_SEPARATOR = "\x01"


class SparkSettings(BaseModel):
    """Where Spark runs and how it is tuned: any ``spark.*`` setting."""

    model_config = {"extra": "forbid"}

    #: ``local[*]`` runs Spark inside the replicator's process (one machine); a cluster's
    #: master URL (``spark://host:7077``, ``yarn``, ``k8s://...``) sends the work there. Under
    #: ``spark-submit`` (``trep-warehouse run``) the master given to spark-submit wins.
    master: str = "local[*]"
    #: ``sc://host:port``: use a Spark Connect server instead of a Spark of this process
    #: (``master``, ``class_archive`` and the static ``conf`` settings are the server's
    #: then; the ``spark.sql.*`` and ``spark.databricks.*`` ones apply to the group's
    #: session). Starting or restarting the group costs no JVM. The staging location must
    #: be a path the server reads too.
    remote: str | None = None
    #: Application name shown by the cluster manager.
    app_name: str = "tungsten-warehouse"
    #: Any ``spark.*`` setting (static ones apply when this process starts Spark). Without
    #: ``spark.jars`` or ``spark.jars.packages`` the Delta jars are resolved from Maven
    #: Central at start-up (delta-spark's ``configure_spark_with_delta_pip``).
    conf: dict[str, str] = Field(default_factory=dict)
    #: ``auto``: the driver JVM maps a class-data archive of Spark's classes, built in the
    #: background the first time (``consumers/warehouse/class_archive.py``): a restarted
    #: group reaches its first MERGE seconds sooner. ``off``: load classes the usual way.
    class_archive: Literal["auto", "off"] = "auto"

    @field_validator("conf")
    @classmethod
    def _spark_keys(cls, value: dict[str, str]) -> dict[str, str]:
        bad = [k for k in value if not k.startswith("spark.")]
        if bad:
            raise ValueError(f"not spark.* settings: {', '.join(bad)}")
        return {k: str(v) for k, v in value.items()}


class WarehouseTarget(BaseModel):
    """Delta Lake tables materialized by Spark from CSV staging files (Tungsten's batch apply).

    Each block of THL events becomes one CSV staging file per table (seeds/002 layout), which
    Spark reads, types per the THL column specs, collapses to the last operation per key and
    MERGEs into one Delta table per source table. The position lives in a Delta
    ``trep_commit_seqno`` table; every write is guarded by the seqno (``_seqno`` per row) and
    made idempotent with Delta's transaction ids, so a replay never changes the tables.
    """

    model_config = {"extra": "forbid"}

    type: Literal["warehouse"] = "warehouse"
    #: Base URI of the warehouse; the other locations default to folders under it.
    location: str
    #: Where CSV staging files go (default ``<location>/staging``).
    staging_uri: str | None = None
    #: Delta table of each source table, by path: ``{location}``, ``{schema}`` and ``{table}``
    #: are replaced (schema and table names made path-safe). Default
    #: ``{location}/{schema}/{table}``.
    table_path: str | None = None
    #: ... or by name in Spark's catalog (e.g. ``dw.{schema}__{table}``), instead of a path.
    #: Needs a persistent catalog (Hive metastore, Unity) configured in ``spark.conf``.
    table_name: str | None = None
    #: Where the group's Delta tracking tables live (``trep_commit_seqno``, ``heartbeat``,
    #: ``trep_staged_files``); default ``<location>/tungsten_<service>``.
    tracking_uri: str | None = None
    #: ``merge``: Spark MERGEs each batch into Delta. ``stage-only``: leave the CSV files for
    #: an external loader and record each one in ``trep_staged_files``.
    mode: Literal["merge", "stage-only"] = "merge"
    #: Field separator of the staging files: 0x01 (Hive's, Tungsten's default) or a comma.
    separator: Literal["\x01", ","] = "\x01"
    #: Quote every non-NULL field (Redshift-style quoted CSV); otherwise only where needed.
    #: Either way NULL is an empty unquoted field and the empty string is ``""``.
    quote_all: bool = False
    #: Keep staging files after their batch is merged (a change history on storage).
    keep_staging: bool = False
    #: Tables without a primary key: ``refuse`` (OFFLINE:ERROR naming table and seqno) or
    #: ``history``: an append-only Delta table of every row change (``_op``, ``_seqno``,
    #: ``_row``, ``_committime`` and the row image).
    keyless: Literal["refuse", "history"] = "refuse"
    #: A Delta column whose source column is gone (dropped or renamed): ``error``, ``keep``
    #: it (rows written from then on get NULL there), or ``drop`` it. Default: the group's
    #: ``schema_changes`` decides (``lenient``, ``ignore``: keep; ``evolve``: drop;
    #: ``exception``: error).
    dropped_columns: Literal["error", "keep", "drop"] | None = None
    #: A source column whose type changed: ``error``, or ``keep-wider``: write values into
    #: the Delta column when it holds every value of the new type (the source narrowed),
    #: else stop. Default: the group's ``schema_changes`` decides (``exception``: error;
    #: every other mode: keep-wider).
    type_changes: Literal["error", "keep-wider"] | None = None
    #: MySQL zero dates ('0000-00-00 ...') have no Spark form: store ``null`` (like
    #: Connector/J's zeroDateTimeBehavior=convertToNull) or stop with an ``error``.
    zero_dates: Literal["null", "error"] = "null"
    #: Spark: where it runs and its settings.
    spark: SparkSettings = Field(default_factory=SparkSettings)
    #: Rows of a block after which the applier writes its staging files out and starts new
    #: ones (bounds the replicator's memory on huge blocks). A table's files of one block
    #: are still one MERGE (``staging.coalesced``); a key staged in two of them is ranked
    #: by Spark instead of collapsed in Python, so the default is the default block's rows.
    staging_flush_rows: int = Field(300_000, gt=0)
    #: Also record every applied seqno in ``trep_apply_audit`` (tests prove exactly once).
    audit_seqnos: bool = False

    @field_validator("location", "staging_uri", "tracking_uri")
    @classmethod
    def _uri(cls, value: str | None) -> str | None:
        if value is None:
            return None
        if "://" not in value and not value.startswith("/"):
            raise ValueError(f"{value!r}: give a URI (file:///..., s3a://..., hdfs://...) or "
                             "an absolute path")
        return value.rstrip("/")

    @model_validator(mode="after")
    def _one_naming(self) -> WarehouseTarget:
        if self.table_path is not None and self.table_name is not None:
            raise ValueError("set table_path or table_name, not both")
        for what, template in (("table_path", self.table_path),
                               ("table_name", self.table_name)):
            if template is not None:
                check_template(template, TABLE_FIELDS, what, required=("table",))
        return self

    def staging(self) -> str:
        """The staging location URI."""
        return uri(self.staging_uri or f"{self.location}/staging")

    def tracking(self, service: str) -> str:
        """The tracking tables' location URI."""
        return uri(self.tracking_uri or f"{self.location}/tungsten_{service}")


def uri(location: str) -> str:
    """An absolute path as a ``file://`` URI; URIs unchanged."""
    return f"file://{location}" if location.startswith("/") else location
