# shardlimiter image: one static binary, nothing else.
#
# The binary is built outside the image (no base image can be pulled where
# this is built), so this is not a multi-stage build:
#   scripts/build-image.sh [tag]
# or by hand, from the repository root:
#   CGO_ENABLED=0 GOOS=linux go build -trimpath -ldflags "-s -w" \
#       -o shardlimiter ./cmd/shardlimiter
#   docker build -t shardlimiter:dev .
#
# There is no shell in the image: Kubernetes probes are httpGet and the
# preStop hook is lifecycle.preStop.sleep (see k8s/components/limiter).
FROM scratch

COPY shardlimiter /shardlimiter

# Numeric, so no /etc/passwd is needed; matches runAsUser/runAsGroup in the
# Kubernetes manifests.
USER 65532:65532

# http (API, /healthz, /readyz, /metrics), gRPC (API and peers), gossip.
EXPOSE 8080 8081 7946/tcp 7946/udp

ENTRYPOINT ["/shardlimiter"]
