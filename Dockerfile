# syntax=docker/dockerfile:1
# The Switchyard image: switchyard (CLI, `up`), switchyard-control-plane and
# switchyard-sidecar in /usr/local/bin, run as a non-root user. The Helm
# chart (helm/switchyard) uses it for the control plane, for sidecar
# containers, and to copy the sidecar into stdio servers' pods.
#   docker build -t REGISTRY/switchyard:0.1.0 .

FROM rust:1.95-slim-bookworm AS build
# The `dist` profile (Cargo.toml): release with fat LTO and one codegen
# unit. Less resident memory per process and no more CPU per call than
# `release`, for a build of about 17 minutes on 2 cores
# (docs/reliability.md, "Idle RSS").
# protoc builds the gRPC contracts (tonic/prost) and etcd-client.
RUN apt-get update \
 && apt-get install -y --no-install-recommends protobuf-compiler \
 && rm -rf /var/lib/apt/lists/*
WORKDIR /src
COPY . .
RUN --mount=type=cache,target=/usr/local/cargo/registry \
    --mount=type=cache,target=/src/target \
    cargo build --profile dist --locked -p switchyard-control-plane -p switchyard-sidecar --bins \
 && mkdir -p /out \
 && cp target/dist/switchyard target/dist/switchyard-control-plane \
       target/dist/switchyard-sidecar /out/ \
 && scripts/check-glibc.sh /out

FROM debian:bookworm-slim
# ca-certificates: trust for https:// MCP servers and OAuth endpoints.
RUN apt-get update \
 && apt-get install -y --no-install-recommends ca-certificates \
 && rm -rf /var/lib/apt/lists/* \
 && groupadd --gid 10001 switchyard \
 && useradd --uid 10001 --gid 10001 --no-create-home --home-dir /nonexistent \
      --shell /usr/sbin/nologin switchyard
COPY --from=build /out/ /usr/local/bin/
USER 10001:10001
# gRPC (engines, admins, sidecars) and HTTP (/metrics, /healthz, /readyz).
EXPOSE 7700 7780
CMD ["switchyard-control-plane", "--config", "/etc/switchyard/config/switchyard.toml"]
