"""The programs that wire the extractor and the consumer groups together: trep-run, trepctl,
thl, trep-extractor, and the service configuration file they read."""
