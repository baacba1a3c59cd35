# The allocator image the manifests in deploy/ expect:
#   docker build -t ghcr.io/allocator/allocator:latest .
# One static binary (serve, repair, migrate, ...) on distroless, as a
# non-root user (65532). The VCS revision Go embeds comes from the build
# context's .git, so build from a checkout.
FROM golang:1.26 AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY . .
RUN CGO_ENABLED=0 go build -trimpath -o /out/allocator ./cmd/allocator

FROM gcr.io/distroless/static-debian12:nonroot
COPY --from=build /out/allocator /usr/local/bin/allocator
USER 65532:65532
ENTRYPOINT ["/usr/local/bin/allocator"]
