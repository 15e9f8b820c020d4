# The gateway image. Build: docker build --build-arg VERSION=$(git describe --tags --always) -t sandgate .
FROM golang:1.26-bookworm AS build
# Stamped into the gateway: `gateway version` and /healthz show it.
ARG VERSION=dev
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY . .
RUN CGO_ENABLED=0 go build -trimpath -ldflags="-X main.version=${VERSION}" -o /out/gateway ./cmd/gateway \
 && CGO_ENABLED=0 go build -trimpath -ldflags='-s -w' -o /out/sandboxd ./cmd/sandboxd

FROM debian:bookworm-slim
RUN apt-get update && apt-get install -y --no-install-recommends ca-certificates python3 && rm -rf /var/lib/apt/lists/* \
 && useradd --system --uid 10001 --home /var/lib/sandgate --create-home sandgate
COPY --from=build /out/gateway /out/sandboxd /usr/local/bin/
USER sandgate
EXPOSE 8080
ENTRYPOINT ["gateway"]
CMD ["serve"]
