# syntax=docker/dockerfile:1
# The fleetbench agent on top of vLLM's official image (vllm/vllm-openai), so the agent starts the
# engine as its own child (it owns the process group) with everything the engine needs already
# there. Built from the repository root:
#   docker build -f deploy/images/agent-vllm.Dockerfile -t REGISTRY/fleetbench-agent:VERSION-vllm .
# Another release of the engine: --build-arg BASE_IMAGE=... (docs/deploy.md, "Images").
ARG BASE_IMAGE=vllm/vllm-openai:v0.30.0
# The Rust build runs on the oldest glibc of the engine images (Ubuntu 22.04), so the binaries
# run on all of them.
ARG BUILD_IMAGE=ubuntu:22.04

FROM ${BUILD_IMAGE} AS build
SHELL ["/bin/bash", "-o", "pipefail", "-c"]
RUN apt-get update \
 && apt-get install -y --no-install-recommends ca-certificates curl gcc libc6-dev \
 && rm -rf /var/lib/apt/lists/*
ENV RUSTUP_HOME=/opt/rustup CARGO_HOME=/opt/cargo PATH=/opt/cargo/bin:$PATH
WORKDIR /src
# The toolchain rust-toolchain.toml pins, installed before the sources so that it is cached.
COPY rust-toolchain.toml ./
RUN curl --proto '=https' --tlsv1.2 -sSf https://sh.rustup.rs \
      | sh -s -- -y --profile minimal --default-toolchain none \
 && rustup toolchain install
COPY . .
RUN cargo build --release --locked -p fleetbench-agent -p fleetbench-sim \
      --bin fleetbench-agent --bin fleetbench-agentctl --bin fleetbench-sim \
 && mkdir /out \
 && cp target/release/fleetbench-agent target/release/fleetbench-agentctl target/release/fleetbench-sim /out/ \
 && strip /out/*

FROM ${BASE_IMAGE}
ARG BASE_IMAGE
ARG VERSION=0.1.0
ARG REVISION=unknown
LABEL org.opencontainers.image.title="fleetbench-agent-vllm" \
      org.opencontainers.image.description="fleetbench agent with vllm: starts the engine, measures it on loopback, streams GPU telemetry" \
      org.opencontainers.image.version="${VERSION}" \
      org.opencontainers.image.revision="${REVISION}" \
      org.opencontainers.image.licenses="Apache-2.0" \
      org.opencontainers.image.source="https://example.invalid/fleetbench" \
      org.opencontainers.image.base.name="${BASE_IMAGE}"
COPY --from=build /out/ /usr/local/bin/
COPY deploy/images/agent.toml /etc/fleetbench/agent.toml
COPY deploy/helm/fleetbench/files/profiles/vllm.toml /etc/fleetbench/profiles/vllm.toml
# The engine runs as the agent's user, uid 10001, never root. Its HOME and every cache root it
# writes are in two directories that user owns; the chart mounts volumes there.
RUN cat /etc/fleetbench/profiles/vllm.toml >> /etc/fleetbench/agent.toml \
 && (getent group 10001 || groupadd --system --gid 10001 fleetbench) \
 && useradd --system --uid 10001 --gid 10001 --home-dir /var/lib/fleetbench-agent --shell /usr/sbin/nologin fleetbench \
 && install -d -o 10001 -g 10001 -m 0750 /var/lib/fleetbench-agent /var/cache/fleetbench-agent
ENV HOME=/var/lib/fleetbench-agent \
    XDG_CACHE_HOME=/var/cache/fleetbench-agent \
    HF_HOME=/var/cache/fleetbench-agent/huggingface \
    TORCHINDUCTOR_CACHE_DIR=/var/cache/fleetbench-agent/torchinductor \
    TRITON_CACHE_DIR=/var/cache/fleetbench-agent/triton \
    VLLM_CACHE_ROOT=/var/cache/fleetbench-agent/vllm \
    FLASHINFER_WORKSPACE_BASE=/var/cache/fleetbench-agent \
    CUDA_CACHE_PATH=/var/cache/fleetbench-agent/nv-compute \
    OUTLINES_CACHE_DIR=/var/cache/fleetbench-agent/outlines \
    LLAMA_CACHE=/var/cache/fleetbench-agent/llama.cpp
USER 10001:10001
WORKDIR /var/lib/fleetbench-agent
EXPOSE 7443
ENTRYPOINT ["/usr/local/bin/fleetbench-agent"]
CMD ["--config", "/etc/fleetbench/agent.toml"]
