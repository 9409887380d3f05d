"""Change topics for data teams: the THL fanned out into one Kafka topic per source table."""
