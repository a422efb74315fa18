# The orderly image: one static binary on distroless, as the non-root user.
#   docker build --build-arg VERSION=$(git describe --tags --always) --build-arg COMMIT=$(git rev-parse HEAD) -t orderly .
#   docker run -p 8080:8080 -v orderly-data:/data orderly     # orderly serve, embedded NATS, data in the volume
# The base images are pinned; pin them by digest as well in your registry.
FROM golang:1.26.10-bookworm AS build
ARG VERSION=dev
ARG COMMIT=unknown
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY . .
RUN CGO_ENABLED=0 go build -trimpath -buildvcs=false \
      -ldflags "-s -w -X main.version=${VERSION} -X main.commit=${COMMIT}" \
      -o /out/orderly ./cmd/orderly
# The volumes' mount points, owned by the non-root user (65532) of the final
# image: a named volume mounted there starts with this owner, so `serve` can
# write its data and `credentials init` its keys.
RUN mkdir -p /out/data /out/credentials

FROM gcr.io/distroless/static-debian12:nonroot
ARG VERSION=dev
ARG COMMIT=unknown
LABEL org.opencontainers.image.title="orderly" \
      org.opencontainers.image.description="Order ingestion that is safe to retry, on NATS JetStream" \
      org.opencontainers.image.version="${VERSION}" \
      org.opencontainers.image.revision="${COMMIT}"
COPY --from=build /out/orderly /usr/local/bin/orderly
COPY --from=build --chown=65532:65532 /out/data /data
COPY --from=build --chown=65532:65532 /out/credentials /credentials
USER 65532:65532
VOLUME ["/data"]
EXPOSE 8080 4222
# orderly waits up to 40 s for in-flight work at SIGTERM: give it 45 s
# (docker run --stop-timeout 45, compose stop_grace_period).
STOPSIGNAL SIGTERM
HEALTHCHECK --interval=5s --timeout=4s --start-period=30s --retries=3 \
  CMD ["/usr/local/bin/orderly", "healthcheck", "--url", "http://127.0.0.1:8080/readyz"]
ENTRYPOINT ["/usr/local/bin/orderly"]
# The API listens on every interface of the container, so it starts only with
# tokens (ORDERLY_TOKENS_FILE, a mounted file of "tenant token" lines) or,
# where something in front authenticates the clients, ORDERLY_HTTP_ANONYMOUS=true.
# Its NATS port requires TLS (--nats-tls auto on 0.0.0.0): clients take the CA
# /data/credentials/tls-ca.pem; ORDERLY_NATS_TLS_HOSTS adds the names they use.
CMD ["serve", "--http-addr", "0.0.0.0:8080", "--nats-listen", "0.0.0.0:4222", "--data-dir", "/data"]
