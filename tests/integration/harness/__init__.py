"""What the integration tests' services have in common, in one place.

The conftests of each area (extractor, consumers, change topics, Elasticsearch, conformance,
warehouse) build a service of their own shape; what they all do the same way lives here, by
job: writing the service file (``config``), SQL on the servers (``sql``), processes the
tests start and kill (``processes``), reading the THL (``thl``) and waiting on what the
components publish in ZooKeeper (``status``), and tearing a service down (``cleanup``). The
servers themselves and the gate that shares them stay in ``tests/integration/conftest.py``
and ``sharing.py``.
"""
