#!/usr/bin/env bash
# The project's test command (README "Quick start"): every package with the
# race detector, then the Kubernetes manifests module and the gubernator
# compatibility module.
set -euo pipefail
cd "$(dirname "$0")/.."
go test -race -count=1 ./...
if [ -f k8s/go.mod ]; then (cd k8s && go test -count=1 ./...); fi
# gubernator's own test cases through its Go client (own Go module)
if [ -f compat/gubernator/go.mod ]; then (cd compat/gubernator && go test -count=1 ./...); fi
