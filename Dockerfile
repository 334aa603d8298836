# syntax=docker/dockerfile:1
# Atoll's image: the `atoll` command (controller, webhook, what-if tools) for the Helm chart.
#   docker build -t atoll:0.1.0 .      (the chart's default image.repository is atoll, its tag the appVersion)
# Runs as uid 65532 on a read-only root filesystem; numba's compiled kernels are cached at build
# and copied to a writable volume by the chart's init container (NUMBA_CACHE_DIR).

ARG PYTHON_IMAGE=python:3.11-slim-bookworm

# ---------------------------------------------------------------- build: a venv with Atoll installed
FROM ${PYTHON_IMAGE} AS build
ENV PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1 PYTHONDONTWRITEBYTECODE=1
WORKDIR /src
COPY pyproject.toml README.md ./
COPY admission admission
COPY topology topology
COPY policies policies
COPY helm/image/constraints.txt /tmp/constraints.txt
RUN python -m venv /opt/atoll/venv \
 && /opt/atoll/venv/bin/pip install --no-compile --constraint /tmp/constraints.txt . \
 && /opt/atoll/venv/bin/python -m compileall -q /opt/atoll/venv/lib

# Warm numba's cache: place every example workload on every bundled cluster model, so each
# kernel is compiled for the argument types the controller uses. The cache is keyed by the
# kernels' source path and mtime, both kept by the copy into the final stage.
COPY config /src/config
ENV NUMBA_CACHE_DIR=/opt/atoll/numba-cache
RUN set -e; for cluster in /src/config/clusters/*.yaml; do \
      for workload in /src/config/workloads/*.yaml; do \
        /opt/atoll/venv/bin/atoll place --cluster "$cluster" --workload "$workload" --profiles /src/config/profiles.yaml \
          --format json > /dev/null || true; \
      done; \
    done; \
    test -n "$(find /opt/atoll/numba-cache -name '*.nbi' -print -quit)" || { echo "numba cache is empty" >&2; exit 1; }

# ---------------------------------------------------------------- runtime: no compilers, no pip, non-root
FROM ${PYTHON_IMAGE}
RUN groupadd --gid 65532 atoll \
 && useradd --uid 65532 --gid 65532 --no-create-home --home-dir /scratch --shell /usr/sbin/nologin atoll \
 && python -m pip uninstall -y -q pip setuptools wheel || true
COPY --from=build /opt/atoll /opt/atoll
ENV PATH=/opt/atoll/venv/bin:$PATH \
    NUMBA_CACHE_DIR=/scratch/numba-cache \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1
USER 65532:65532
WORKDIR /scratch
EXPOSE 8080 8081 9443
ENTRYPOINT ["atoll"]
CMD ["run"]
