"""The compiled part of the project: typed loops where the extractor's CPU goes.

Everything else is in pyproject.toml. ``make venv`` builds the extension in place
(``build_ext --inplace``), so a checkout run with ``PYTHONPATH`` set finds it too.
"""

from Cython.Build import cythonize
from setuptools import Extension, setup

setup(ext_modules=cythonize(
    [Extension("extractor._row_images", ["extractor/_row_images.pyx"]),
     Extension("thl_topics._avro_rows", ["thl_topics/_avro_rows.pyx"]),
     Extension("thl_topics._avro_read", ["thl_topics/_avro_read.pyx"]),
     Extension("consumers.sql._render_rows", ["consumers/sql/_render_rows.pyx"]),
     Extension("consumers.sql._adapt_rows", ["consumers/sql/_adapt_rows.pyx"]),
     Extension("consumers.sql._collapse", ["consumers/sql/_collapse.pyx"]),
     Extension("consumers.warehouse._stage_lines", ["consumers/warehouse/_stage_lines.pyx"])],
    compiler_directives={"language_level": "3"}, quiet=True))
