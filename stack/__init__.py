"""stack."""
