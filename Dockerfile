# The allocator image the manifests in deploy/ run:
#   hack/image.sh    (docker, podman or nerdctl; tags ghcr.io/allocator/allocator:<version>)
# tagged with the release in internal/version/VERSION (what `allocator
# version` prints), never :latest: the manifests name that version with
# imagePullPolicy IfNotPresent. The VCS revision Go embeds beside it comes
# from the build context's .git, when there is one.
# One static binary (serve, repair, migrate, ...) on distroless. Its default
# user is 65532; the repair Jobs run as it (the etcd key readable through
# fsGroup), the static pod as root, as kube-apiserver (kubeadm's keys are
# root's, mode 0600). test/e2e/manifest_test.go reads USER and ENTRYPOINT
# below.
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
