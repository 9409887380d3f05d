"""thl list's text layout follows Tungsten's (seeds/000)."""

from __future__ import annotations

from thl_topics.event import ColumnSpec, RowAction, RowChange, Statement, ThlEvent
from thl_topics.schema_change import ChangeKind, SchemaChange
from trep.thl_format import format_event


def test_row_and_statement_layout() -> None:
    spec = [ColumnSpec(1, "id", "INT", primary_key=True), ColumnSpec(2, "name", "VARCHAR")]
    event = ThlEvent(
        seqno=3583, epoch=2500, source_id="host1",
        event_id="mysql-bin.000007:0000000625753960;0", shard_id="test",
        tstamp=1_369_655_385_000_000,
        metadata={"mysql_server_id": "1687011", "dbms_type": "mysql", "service": "firstrep",
                  "shard": "test"},
        data=[Statement("SET INSERT_ID = 3", default_schema="test",
                        options={"autocommit": "1"}),
              RowChange(RowAction.UPDATE, "test", "user", column_specs=spec, key_specs=spec,
                        column_values=[[2, "Charles"]], key_values=[[2, None]])])
    assert format_event(event).splitlines() == [
        "SEQ# = 3583 / FRAG# = 0 (last frag)",
        "- TIME = 2013-05-27 11:49:45.0",
        "- EPOCH# = 2500",
        "- EVENTID = mysql-bin.000007:0000000625753960;0",
        "- SOURCEID = host1",
        "- METADATA = [mysql_server_id=1687011;dbms_type=mysql;service=firstrep;shard=test]",
        "- TYPE = tungsten.thl.ThlEvent",
        "- OPTIONS = [autocommit = 1]",
        "- SCHEMA = test",
        "- SQL(0) = SET INSERT_ID = 3",
        "- SQL(1) =",
        " - ACTION = UPDATE",
        " - SCHEMA = test",
        " - TABLE = user",
        " - ROW# = 0",
        "  - COL(1: id) = 2",
        "  - COL(2: name) = Charles",
        "  - KEY(1: id) = 2",
        "  - KEY(2: name) = NULL",
    ]


def test_a_ddl_statement_lists_its_schema_changes() -> None:
    ddl = Statement("ALTER TABLE t DROP c, RENAME COLUMN a TO b", default_schema="test",
                    schema_changes=[SchemaChange(ChangeKind.DROP_COLUMN, "test", "t", column="c"),
                                    SchemaChange(ChangeKind.RENAME_COLUMN, "test", "t",
                                                 column="a", new_name="b")])
    event = ThlEvent(seqno=1, epoch=0, source_id="h", event_id="b.000001:0000000000000004;0",
                     shard_id="test", tstamp=0, data=[ddl])
    assert format_event(event).splitlines()[-3:] == [
        "- SQL(0) = ALTER TABLE t DROP c, RENAME COLUMN a TO b",
        " - SCHEMA_CHANGE = drop_column test.t.c",
        " - SCHEMA_CHANGE = rename_column test.t.a -> b",
    ]
