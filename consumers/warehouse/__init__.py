"""The warehouse applier: CSV staging and Spark MERGEs into Delta Lake (Tungsten batch apply)."""
