#!/usr/bin/env bash
# The project's test command (README "Quick start"): every package with the
# race detector, then the Kubernetes manifests module.
set -euo pipefail
cd "$(dirname "$0")/.."
go test -race -count=1 ./...
if [ -f k8s/go.mod ]; then (cd k8s && go test -count=1 ./...); fi
