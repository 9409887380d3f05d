"""What a consumer group reports beyond its position: triggers found on target tables."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, generate_latest

from consumers.metrics import ConsumerMetrics


def test_triggers_on_target_tables_are_counted_and_listed() -> None:
    registry = CollectorRegistry()
    metrics = ConsumerMetrics(registry, "svc", "g")
    assert metrics.trigger_notes() == "NONE"
    assert 'trep_target_triggers{group="g",service="svc"} 0.0' in generate_latest(
        registry).decode()  # the series exists before any trigger is found
    metrics.target_triggers("s.orders", ["audit (AFTER INSERT)", "fix (BEFORE UPDATE)"])
    metrics.target_triggers("s.items", ["stamp (BEFORE INSERT)"])
    metrics.target_triggers("s.other", [])
    assert metrics.trigger_notes() == ("s.items: stamp (BEFORE INSERT); s.orders: audit "
                                       "(AFTER INSERT), fix (BEFORE UPDATE)")
    assert 'trep_target_triggers{group="g",service="svc"} 3.0' in generate_latest(
        registry).decode()
    metrics.target_triggers("s.orders", [])  # dropped on the target, table seen again
    assert metrics.trigger_notes() == "s.items: stamp (BEFORE INSERT)"


def test_cascades_count_child_rows_and_keep_the_deepest_chain() -> None:
    registry = CollectorRegistry()
    metrics = ConsumerMetrics(registry, "svc", "g")
    text = generate_latest(registry).decode()
    assert 'trep_cascaded_rows_total{group="g",service="svc"} 0.0' in text
    assert 'trep_cascade_depth{group="g",service="svc"} 0.0' in text
    metrics.cascaded(3, 2)
    metrics.cascaded(1, 1)
    text = generate_latest(registry).decode()
    assert 'trep_cascaded_rows_total{group="g",service="svc"} 4.0' in text
    assert 'trep_cascade_depth{group="g",service="svc"} 2.0' in text


def test_every_new_registry_gets_the_metrics_even_at_a_dead_ones_address() -> None:
    # CPython reuses a collected registry's address at once: keyed by id(), the new one
    # got the dead one's families and stayed empty (a flake of the test above in CI).
    for _ in range(50):
        registry = CollectorRegistry()
        ConsumerMetrics(registry, "svc", "g")
        assert "trep_cascade_depth" in generate_latest(registry).decode()
        del registry
