"""Kafka cluster ids that the storage tool accepts."""

from __future__ import annotations

import base64

from stack.services.kafka import new_cluster_id


def test_a_cluster_id_never_starts_with_a_dash() -> None:
    draws = iter([b"\xf8" * 16, b"\x01" * 16])  # the first encodes to '-...'
    assert base64.urlsafe_b64encode(b"\xf8" * 16).startswith(b"-")
    cluster_id = new_cluster_id(lambda: next(draws))
    assert cluster_id == base64.urlsafe_b64encode(b"\x01" * 16).decode().rstrip("=")
    assert len(cluster_id) == 22


def test_random_cluster_ids_are_valid() -> None:
    ids = {new_cluster_id() for _ in range(500)}
    assert len(ids) == 500
    assert not any(i.startswith("-") or "=" in i or len(i) != 22 for i in ids)
