"""Server detection of the MongoDB applier, from recorded ``buildInfo`` and ``hello`` answers."""

from __future__ import annotations

import datetime as dt
import re
from typing import Any

import pytest

from consumers.mongodb.server import Unsupported, detect, use_decimal128, use_transactions

#: FerretDB 1.24.0 (SQLite backend) of the local stack, recorded with pymongo 4.20.
FERRETDB_BUILD_INFO: dict[str, Any] = {
    "version": "7.0.42", "gitVersion": "unknown", "modules": [], "sysInfo": "deprecated",
    "versionArray": [7, 0, 42, 0], "bits": 64, "debug": False, "maxBsonObjectSize": 16777216,
    "buildEnvironment": {}, "ferretdbVersion": "v1.24.0",
    "ferretdbFeatures": {"aggregationStages": [
        "$limit", "$match", "$project", "$set", "$unset", "$collStats", "$count", "$group",
        "$skip", "$sort", "$unwind", "$addFields"]},
    "ok": 1.0}
#: Its ``hello``: it claims sessions (logicalSessionTimeoutMinutes) like a replica set would.
FERRETDB_HELLO: dict[str, Any] = {
    "isWritablePrimary": True, "maxBsonObjectSize": 16777216, "maxMessageSizeBytes": 48000000,
    "maxWriteBatchSize": 100000, "localTime": dt.datetime(2026, 11, 23, 19, 21, 50, 111000),
    "logicalSessionTimeoutMinutes": 30, "connectionId": 42, "minWireVersion": 0,
    "maxWireVersion": 21, "readOnly": False, "ok": 1.0}

#: mongod 4.2.9's buildInfo as recorded in a server's local.startup_log (published in a
#: write-up of a Linux box), with the ok field the command adds.
MONGOD_BUILD_INFO: dict[str, Any] = {
    "version": "4.2.9", "gitVersion": "06402114114ffc5146fd4b55402c96f1dc9ec4b5",
    "modules": [], "allocator": "tcmalloc", "javascriptEngine": "mozjs",
    "sysInfo": "deprecated", "versionArray": [4, 2, 9, 0],
    "openssl": {"running": "OpenSSL 1.0.1e-fips 11 Feb 2013",
                "compiled": "OpenSSL 1.0.1e-fips 11 Feb 2013"},
    "buildEnvironment": {"distmod": "rhel70", "distarch": "x86_64",
                         "target_arch": "x86_64", "target_os": "linux"},
    "bits": 64, "debug": False, "maxBsonObjectSize": 16777216,
    "storageEngines": ["biggie", "devnull", "ephemeralForTest", "wiredTiger"], "ok": 1.0}
#: The same answer as a 7.0 server gives it (the fields this applier reads: version).
MONGOD_7: dict[str, Any] = {**MONGOD_BUILD_INFO, "version": "7.0.14",
                            "versionArray": [7, 0, 14, 0]}
#: ``hello`` of a standalone mongod and of a replica set primary, in the shape of the
#: MongoDB manual's examples.
STANDALONE_HELLO: dict[str, Any] = {
    "isWritablePrimary": True, "topologyVersion": {"counter": 0},
    "maxBsonObjectSize": 16777216, "maxMessageSizeBytes": 48000000,
    "maxWriteBatchSize": 100000, "logicalSessionTimeoutMinutes": 30, "connectionId": 7,
    "minWireVersion": 0, "maxWireVersion": 8, "readOnly": False, "ok": 1.0}
REPLICA_SET_HELLO: dict[str, Any] = {
    **STANDALONE_HELLO, "hosts": ["m1:27017", "m2:27017", "m3:27017"], "setName": "rs0",
    "setVersion": 1, "secondary": False, "primary": "m1:27017", "me": "m1:27017"}
MONGOS_HELLO: dict[str, Any] = {**STANDALONE_HELLO, "msg": "isdbgrid"}


def test_ferretdb_is_known_by_build_info_not_by_hello() -> None:
    traits = detect(FERRETDB_BUILD_INFO, FERRETDB_HELLO)
    assert traits.ferretdb and not traits.transactions and not traits.decimal128
    assert not traits.reliable_error_index
    assert traits.name == "FerretDB v1.24.0 (MongoDB 7.0.42 wire)"
    # Even a hello that looked like a replica set's does not give it transactions.
    assert not detect(FERRETDB_BUILD_INFO, REPLICA_SET_HELLO).transactions
    # The same hello with a real mongod's buildInfo is a replica set with transactions.
    assert detect(MONGOD_7, {**FERRETDB_HELLO, "setName": "rs0"}).transactions


def test_transactions_on_against_ferretdb_is_refused_auto_picks_off() -> None:
    traits = detect(FERRETDB_BUILD_INFO, FERRETDB_HELLO)
    with pytest.raises(Unsupported, match=re.escape(
            "FerretDB v1.24.0 has no multi-document transactions")):
        use_transactions("on", traits)
    assert use_transactions("auto", traits) is False
    assert use_transactions("off", traits) is False


def test_replica_set_has_transactions_standalone_has_none() -> None:
    rs = detect(MONGOD_7, REPLICA_SET_HELLO)
    assert rs.transactions and rs.decimal128 and rs.reliable_error_index
    assert not rs.scanning_updates
    assert rs.name == "MongoDB 7.0.14 (replica set rs0)"
    assert use_transactions("auto", rs) is True and use_transactions("on", rs) is True
    assert use_transactions("off", rs) is False
    alone = detect(MONGOD_7, STANDALONE_HELLO)
    assert not alone.transactions and not alone.ferretdb
    with pytest.raises(Unsupported, match="standalone mongod"):
        use_transactions("on", alone)
    assert use_transactions("auto", alone) is False


def test_transactions_need_4_4_where_collections_can_be_created_inside_them() -> None:
    assert detect(MONGOD_7, MONGOS_HELLO).transactions
    assert detect({**MONGOD_7, "versionArray": [4, 4, 0, 0]}, REPLICA_SET_HELLO).transactions
    # The recorded 4.2.9 has transactions, but not collection creation inside them.
    traits = detect(MONGOD_BUILD_INFO, REPLICA_SET_HELLO)
    assert not traits.transactions and "(4.4+ can)" in traits.no_transactions_because
    assert not detect(MONGOD_BUILD_INFO, MONGOS_HELLO).transactions
    # A version given only as text (no versionArray) is read too.
    text_only = {k: v for k, v in MONGOD_7.items() if k != "versionArray"}
    assert detect(text_only, REPLICA_SET_HELLO).name == "MongoDB 7.0.14 (replica set rs0)"


def test_decimal128_only_where_the_server_has_it() -> None:
    ferret = detect(FERRETDB_BUILD_INFO, FERRETDB_HELLO)
    assert use_decimal128("auto", ferret) is False
    assert use_decimal128("string", ferret) is False
    with pytest.raises(Unsupported, match="no Decimal128"):
        use_decimal128("decimal128", ferret)
    mongod = detect(MONGOD_BUILD_INFO, STANDALONE_HELLO)
    assert use_decimal128("auto", mongod) is True
    assert use_decimal128("string", mongod) is False
