# syntax=docker/dockerfile:1
#
# One image, two static binaries: regional-limiter (default entrypoint) and reconciler.
#   docker build -t quota:dev .
#   docker run --rm quota:dev --help
#   docker run --rm --entrypoint /usr/local/bin/reconciler quota:dev migrate
# The Terraform modules (deploy/terraform) take the image reference as var.image and set the
# command of each container explicitly.

ARG GO_VERSION=1.26

FROM golang:${GO_VERSION}-bookworm AS build
WORKDIR /src
ENV CGO_ENABLED=0 GOOS=linux GOFLAGS=-trimpath
# Dependencies first, so that source edits do not re-download modules.
COPY go.mod go.sum ./
RUN go mod download
COPY . .
RUN go build -buildvcs=false -ldflags="-s -w" -o /out/regional-limiter ./cmd/regional-limiter && \
    go build -buildvcs=false -ldflags="-s -w" -o /out/reconciler ./cmd/reconciler

# distroless/static: CA certificates, tzdata, /etc/passwd with nonroot (65532); no shell.
FROM gcr.io/distroless/static-debian12:nonroot
COPY --from=build /out/regional-limiter /out/reconciler /usr/local/bin/
USER 65532:65532
WORKDIR /var/lib/quota
# 8080 limiter API and /metrics, 7946 memberlist (tcp+udp), 8081 reconciler.
EXPOSE 8080 7946 7946/udp 8081
ENTRYPOINT ["/usr/local/bin/regional-limiter"]
