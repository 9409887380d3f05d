"""An in-memory target with injectable faults: the runtime's test double (like dlt's dummy)."""
