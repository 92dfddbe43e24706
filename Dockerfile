# Build:  docker build -t conclave .        (--build-arg PGO=0: without the
#         profile-guided build, quicker; see below)
# Run the demo (simulated models, no keys, no network):
#         docker run -p 4000:4000 conclave
#         curl -s localhost:4000/v1/chat/completions -d '{"model": "fast", "messages": [{"role": "user", "content": "hi"}]}'
# Your own config (absolute event_log/state_path under /var/lib/conclave):
#         docker run -p 4000:4000 -v $PWD/my.toml:/etc/conclave/conclave.toml:ro \
#           -e CONCLAVE_CONFIG=/etc/conclave/conclave.toml conclave
# The image sets CONCLAVE_CONFIG=/etc/conclave/demo.toml and
# CONCLAVE_LISTEN=0.0.0.0:4000 (a config's 127.0.0.1 cannot be reached from
# outside a container); `--config` and `--listen` override them.
# Stop:   docker stop -t 35 <container>   (SIGTERM drains for server.shutdown_grace,
#         30 s by default; docker's own default of 10 s would cut streams short)
# Reload: docker kill -s HUP <container>
# The binary is built with profile-guided optimization (scripts/pgo-build: an
# instrumented build serves a minute of training load on the build container's
# loopback, then the final build; about a quarter less CPU a request). That
# needs rustc's own LLVM version of llvm-profdata, so the toolchain is pinned
# to one whose LLVM Debian 12 packages (Rust 1.95: LLVM 22, in
# bookworm-security). --build-arg PGO=0 builds plainly (cargo build --release).
FROM rust:1.95-bookworm AS build
ARG PGO=1
RUN if [ "$PGO" = 1 ]; then \
      apt-get update \
      && apt-get install -y --no-install-recommends \
         "llvm-$(rustc -vV | sed -n 's/^LLVM version: \([0-9]*\).*/\1/p')" \
         nginx-light wrk curl python3 \
      && rm -rf /var/lib/apt/lists/*; \
    fi
WORKDIR /src
COPY . .
RUN if [ "$PGO" = 1 ]; then \
      scripts/pgo-build && cp target/pgo/conclave /conclave; \
    else \
      cargo build --release --locked --bin conclave && cp target/release/conclave /conclave; \
    fi \
    && strip /conclave

FROM debian:bookworm-slim
RUN apt-get update \
    && apt-get install -y --no-install-recommends ca-certificates \
    && rm -rf /var/lib/apt/lists/* \
    && useradd --system --uid 10001 --home-dir /var/lib/conclave --create-home conclave
COPY --from=build /conclave /usr/local/bin/conclave
COPY config/demo.toml config/example.toml config/governed.toml /etc/conclave/
# Relative paths in a config are relative to its folder, and /etc/conclave is
# not the conclave user's to write: the shipped configs write their event log
# and state under /var/lib/conclave instead. Give a mounted config absolute
# paths there too.
RUN sed -i -E 's#^(event_log|state_path)( *)= *"([^/"][^"]*)"#\1\2= "/var/lib/conclave/\3"#' /etc/conclave/*.toml
USER conclave
WORKDIR /var/lib/conclave
ENV CONCLAVE_CONFIG=/etc/conclave/demo.toml \
    CONCLAVE_LISTEN=0.0.0.0:4000
EXPOSE 4000
ENTRYPOINT ["conclave"]
CMD ["serve"]
