"""Configuration of a consumer group: runtime settings, and its target (by ``type``).

```yaml
consumers:
  mariadb:
    target: {type: sql, url: "mysql+pymysql://tungsten@db2:3306/"}
    block_commit_events: 10
    channels: 4          # parallel apply by schema (SQL targets)
```
"""

from __future__ import annotations

from pydantic import BaseModel, Field

from consumers.applier import BlockLimits
from consumers.cascades import ForeignKeyMode
from consumers.registry import TargetConfig
from consumers.schema_changes import SchemaChangeMode
from replicator.config import FilterConfig


class GroupConfig(BaseModel):
    """One consumer group: the runtime's settings and the target it applies to.

    Block limits left unset take the applier's defaults (its declared capabilities).
    """

    model_config = {"extra": "forbid"}

    target: TargetConfig
    #: THL events (source transactions) per block at most ...
    block_commit_events: int | None = Field(None, gt=0)
    #: ... row changes per block at most ...
    block_commit_rows: int | None = Field(None, gt=0)
    #: ... encoded THL bytes per block at most ...
    block_commit_bytes: int | None = Field(None, gt=0)
    #: ... and the longest a block stays open waiting for more events.
    block_commit_ms: int | None = Field(None, ge=0)
    #: Commit a block as soon as no next event is waiting (true: the SQL applier's default)
    #: or only at a limit above (false).
    block_commit_idle: bool | None = None
    #: Go ONLINE when the process starts, unless an operator set the group OFFLINE.
    auto_online: bool = True
    #: Apply-stage replicate/ignore filter (changes only this target).
    filters: FilterConfig = FilterConfig()
    #: Longest a transient failure (target or broker down) is retried before OFFLINE:ERROR;
    #: 0 retries forever.
    retry_limit_s: float = Field(0, ge=0)
    #: Parallel apply: channels applying the THL side by side, by shard (source schema),
    #: each with its own connection and position (``consumers.runtime.shards``). Needs a
    #: target that can (the SQL applier); 1 applies everything in one channel, in THL order.
    channels: int = Field(1, ge=1, le=64)
    #: What the group does with schema changes (``consumers.schema_changes``): ``lenient``
    #: follows them but keeps a dropped column or table; ``evolve`` follows every one;
    #: ``exception`` stops at each; ``ignore`` changes nothing. A TRUNCATE is applied in
    #: every mode but ``ignore``.
    schema_changes: SchemaChangeMode = "lenient"
    #: What the group does where the source's foreign keys cascade (``consumers.cascades``):
    #: ``follow`` deletes or re-points the child rows InnoDB changed, which the binlog does
    #: not hold; ``ignore`` leaves them as they are. MySQL-family targets replay the DDL
    #: and keep the same foreign keys, which cascade by themselves, in either mode.
    foreign_keys: ForeignKeyMode = "follow"

    def block_limits(self, defaults: BlockLimits) -> BlockLimits:
        """The applier's default limits with this group's settings in their place."""
        return defaults.override(self.block_commit_events, self.block_commit_rows,
                                 self.block_commit_bytes, self.block_commit_ms,
                                 self.block_commit_idle)
