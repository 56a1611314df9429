#!/bin/sh
# Builds the shardlimiter container image.
#
#   scripts/build-image.sh [tag]        (default tag: shardlimiter:dev)
#
# The static binary is built on this machine and copied into a FROM scratch
# image, in a temporary build context that holds nothing else. The image is
# for this machine's architecture.
set -eu

tag=${1:-shardlimiter:dev}
root=$(CDPATH= cd -- "$(dirname -- "$0")/.." && pwd)

ctx=$(mktemp -d)
trap 'rm -rf "$ctx"' EXIT
trap 'exit 1' INT TERM

(
	cd "$root"
	CGO_ENABLED=0 GOOS=linux go build -trimpath -ldflags "-s -w" \
		-o "$ctx/shardlimiter" ./cmd/shardlimiter
)
cp "$root/Dockerfile" "$root/.dockerignore" "$ctx/"

docker build --tag "$tag" "$ctx"
