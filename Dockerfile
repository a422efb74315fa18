# Build: docker build -t orderly .
FROM golang:1.26 AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY . .
RUN CGO_ENABLED=0 go build -trimpath -ldflags "-s -w" -o /out/orderly ./cmd/orderly

FROM gcr.io/distroless/static-debian12:nonroot
COPY --from=build /out/orderly /usr/local/bin/orderly
EXPOSE 8080 4222
ENTRYPOINT ["/usr/local/bin/orderly"]
CMD ["serve", "--http-addr", "0.0.0.0:8080", "--nats-listen", "0.0.0.0:4222", "--data-dir", "/data"]
