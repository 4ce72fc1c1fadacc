# One image for the slotgate proxy and the bundled cluster nodes.
#
#   docker build -t slotgate .
#   docker run --rm -p 6379:6379 slotgate --listen 0.0.0.0:6379 --seed node-1:7000
#   docker run --rm --entrypoint slotgate-node slotgate --port 7000 --cluster-enabled yes
#
# The default entrypoint is the proxy; nodes override it (see deploy/compose.yaml).
# Python runs as PID 1 here, which has no default SIGTERM action: the proxy and the node
# handle SIGTERM themselves, so `docker stop` drains instead of waiting for SIGKILL.

FROM python:3.11-slim-bookworm AS build
WORKDIR /src
COPY pyproject.toml README.md ./
COPY eventcore ./eventcore
COPY protocol ./protocol
COPY proxy ./proxy
COPY node ./node
# the import package: links to the folders above, so the install is slotgate.*
COPY slotgate ./slotgate
# hiredis ships manylinux wheels, so no compiler is needed in the slim image.
RUN pip install --no-cache-dir --prefix=/install .

FROM python:3.11-slim-bookworm
ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1
# redis-tools (redis-cli 7.0) forms the cluster in deploy/compose.yaml's one-shot job. Not
# pinned to a version: the base image's suite (bookworm) fixes it at 7.0, and an exact pin
# would break the build at each Debian security update, which removes the version before it.
# hadolint ignore=DL3008
RUN apt-get update \
    && apt-get install -y --no-install-recommends redis-tools \
    && rm -rf /var/lib/apt/lists/*
COPY --from=build /install /usr/local
RUN groupadd --system --gid 10001 slotgate \
    && useradd --system --uid 10001 --gid 10001 --home-dir /data --create-home slotgate \
    && mkdir -p /etc/slotgate \
    && chown slotgate:slotgate /data
# By uid:gid, so that hosts and Kubernetes' runAsNonRoot can check it without the image's
# /etc/passwd.
USER 10001:10001
WORKDIR /data
VOLUME ["/data"]
# 6379: the proxy's client port; 9716: the proxy's /metrics and /healthz.
EXPOSE 6379 9716
STOPSIGNAL SIGTERM
# Our own CLI does the probe (slim images have no curl); ready = all 16384 slots served.
HEALTHCHECK --interval=5s --timeout=3s --start-period=15s --retries=3 \
    CMD ["slotgate-proxy", "--check-health", "http://127.0.0.1:9716/healthz"]
ENTRYPOINT ["slotgate-proxy"]
CMD ["--listen", "0.0.0.0:6379", "--metrics", "0.0.0.0:9716", "--seed", "node-1:7000"]
