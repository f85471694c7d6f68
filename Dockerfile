# The node, built from this repository.
FROM rust:1-bookworm AS build
RUN apt-get update && apt-get install -y --no-install-recommends \
      cmake clang libclang-dev libcurl4-openssl-dev libssl-dev pkg-config \
    && rm -rf /var/lib/apt/lists/*
WORKDIR /src
COPY . .
# The release profile keeps line tables for profiling on a workstation; with RocksDB's C++
# that makes a binary of about 500 MB. The image's node is built without debug info (about
# 28 MB; symbols stay, so a panic's backtrace still names its functions), and faster.
ENV CARGO_PROFILE_RELEASE_DEBUG=false CARGO_PROFILE_RELEASE_STRIP=debuginfo
RUN cargo build --release --bin ankusa

FROM debian:bookworm-slim
RUN apt-get update && apt-get install -y --no-install-recommends ca-certificates libcurl4 libssl3 curl \
    && rm -rf /var/lib/apt/lists/* && useradd --system --home /var/lib/ankusa ankusa \
    && mkdir -p /var/lib/ankusa && chown ankusa /var/lib/ankusa
COPY --from=build /src/target/release/ankusa /usr/local/bin/ankusa
COPY config/compose.toml /etc/ankusa/ankusa.toml
USER ankusa
WORKDIR /var/lib/ankusa
EXPOSE 8080
ENTRYPOINT ["ankusa", "--config", "/etc/ankusa/ankusa.toml"]
CMD ["serve"]
