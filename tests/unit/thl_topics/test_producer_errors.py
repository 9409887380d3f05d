"""Kafka errors of the transactional producer, as the extractor must see them."""

from __future__ import annotations

import pytest
from confluent_kafka import KafkaError

from thl_topics.errors import KafkaAccessError, ThlError, ThlUnavailable
from thl_topics.producer import ProducerFatal, ProducerFenced, producer_error


@pytest.mark.parametrize("err", [
    KafkaError(KafkaError._FENCED),
    KafkaError(KafkaError.PRODUCER_FENCED),
    KafkaError(KafkaError.INVALID_PRODUCER_EPOCH),
    # What produce() raises once a background delivery made the producer fatal.
    KafkaError(KafkaError._FATAL, "Unable to produce message: Local: Fatal error"),
])
def test_fenced_or_fatal_producers_can_never_write_again(err: KafkaError) -> None:
    mapped = producer_error("thl.s", err)
    assert isinstance(mapped, ProducerFenced)
    assert str(mapped).startswith("thl.s: ")


def test_another_fatal_error_starts_over_with_a_new_producer() -> None:
    # An abort that overtook its transaction's registration (confluentinc/librdkafka#4849):
    # the producer is dead, nobody else took over; a new producer can go on.
    err = KafkaError(KafkaError.INVALID_TXN_STATE, "Failed to end transaction", fatal=True)
    mapped = producer_error("thl.s", err)
    assert type(mapped) is ProducerFatal
    assert isinstance(mapped, ThlUnavailable)  # transient: the extractor starts over
    assert "INVALID_TXN_STATE" in str(mapped) or "Failed to end transaction" in str(mapped)
    assert not isinstance(producer_error("thl.s", KafkaError(KafkaError.INVALID_TXN_STATE)),
                          ProducerFatal)  # not fatal: an error of this transaction only


def test_a_broker_away_is_unavailable_and_a_refusal_is_an_error() -> None:
    assert type(producer_error("thl.s", KafkaError(KafkaError._TRANSPORT))) is ThlUnavailable
    refused = producer_error("thl.s", KafkaError(KafkaError.MSG_SIZE_TOO_LARGE))
    assert type(refused) is ThlError


def test_a_refused_transactional_id_is_an_access_error_not_fencing() -> None:
    # Fatal too, but the operator must grant an ACL, not look for a second extractor.
    err = KafkaError(KafkaError.TRANSACTIONAL_ID_AUTHORIZATION_FAILED, "not authorized",
                     fatal=True)
    mapped = producer_error("thl.s", err, {"bootstrap.servers": "k1:9094",
                                           "security.protocol": "SASL_SSL"})
    assert isinstance(mapped, KafkaAccessError)
    assert str(mapped).startswith("Kafka broker k1:9094 (SASL_SSL) denied access")
    assert "ACLs" in str(mapped)
