# syntax=docker/dockerfile:1
# The fleetbench controller and CLI. Built from the repository root:
#   docker build -f deploy/images/controller.Dockerfile -t REGISTRY/fleetbench-controller:VERSION .
ARG BUILD_IMAGE=rust:1.95-bookworm
ARG BASE_IMAGE=debian:bookworm-slim

FROM ${BUILD_IMAGE} AS build
WORKDIR /src
COPY . .
RUN cargo build --release --locked -p fleetbench-controller -p fleetbench \
      --bin fleetbench-controller --bin fleetbench \
 && mkdir /out \
 && cp target/release/fleetbench-controller target/release/fleetbench /out/ \
 && strip /out/*

FROM ${BASE_IMAGE}
ARG BASE_IMAGE
ARG VERSION=0.1.0
ARG REVISION=unknown
LABEL org.opencontainers.image.title="fleetbench-controller" \
      org.opencontainers.image.description="fleetbench controller (inventory, scheduler, results store, API, /metrics) and CLI" \
      org.opencontainers.image.version="${VERSION}" \
      org.opencontainers.image.revision="${REVISION}" \
      org.opencontainers.image.licenses="Apache-2.0" \
      org.opencontainers.image.source="https://example.invalid/fleetbench" \
      org.opencontainers.image.base.name="${BASE_IMAGE}"
RUN apt-get update \
 && apt-get install -y --no-install-recommends ca-certificates \
 && rm -rf /var/lib/apt/lists/* \
 && groupadd --system --gid 10001 fleetbench \
 && useradd --system --uid 10001 --gid 10001 --home-dir /var/lib/fleetbench --shell /usr/sbin/nologin fleetbench \
 && install -d -o 10001 -g 10001 -m 0750 /var/lib/fleetbench
COPY --from=build /out/ /usr/local/bin/
ENV HOME=/var/lib/fleetbench
USER 10001:10001
WORKDIR /var/lib/fleetbench
EXPOSE 7070 9464
ENTRYPOINT ["/usr/local/bin/fleetbench-controller"]
CMD ["--config", "/etc/fleetbench/controller.toml"]
