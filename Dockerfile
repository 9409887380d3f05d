# The replicator as a container: trep-run, trepctl, thl and trep-console, with the same
# pinned dependencies as `make venv` (pyproject.toml) and the compiled modules (setup.py)
# built in the image. docker-compose.yml runs it beside the servers.
FROM debian:12-slim

# Python 3.11 and gcc for the compiled modules; a JDK 17 runtime for the warehouse's Spark.
RUN apt-get update \
    && apt-get install -y --no-install-recommends python3 python3-venv python3-dev gcc \
       openjdk-17-jre-headless ca-certificates \
    && rm -rf /var/lib/apt/lists/*

WORKDIR /opt/tungsten-kafka
# Behind a TLS-intercepting proxy, give pip its CA at build time (mounted with the build's
# --volume, named by --build-arg PIP_CERT=...); unset, pip trusts the image's CAs.
ARG PIP_CERT
# Dependencies first: a change to the code does not reinstall them.
COPY pyproject.toml setup.py ./
COPY extractor/*.pyx extractor/
COPY thl_topics/*.pyx thl_topics/
RUN python3 -m venv /opt/venv \
    && /opt/venv/bin/pip install --no-cache-dir --upgrade pip \
    && /opt/venv/bin/pip install --no-cache-dir Cython setuptools
COPY . .
# Editable, as `make venv` installs it: the THL codec reads schemas/avro from the checkout.
# The project's modules compiled to bytecode here: the editable install does not, and the
# non-root user below cannot write it, so every process would compile them at its start.
RUN /opt/venv/bin/pip install --no-cache-dir -e . \
    && /opt/venv/bin/python -c "import extractor._row_images, thl_topics._avro_rows" \
    && /opt/venv/bin/python -m compileall -q extractor thl_topics consumers replicator trep \
       stack console

ENV PATH=/opt/venv/bin:$PATH PYTHONUNBUFFERED=1
# A non-root user: nothing here needs root.
RUN useradd --create-home --uid 10001 trep && mkdir -p /data && chown trep /data
USER trep
ENTRYPOINT ["trep-run"]
CMD ["-c", "/opt/tungsten-kafka/docker/service.yml"]
