#!/usr/bin/env bash
# The project's test command (README "Quick start"): every package with the
# race detector, then the Kubernetes manifests module and the gubernator
# compatibility module.
set -euo pipefail
cd "$(dirname "$0")/.."
# loadtest's real-process cluster tests run last, alone: their timing
# (gossip noticing a kill, assignments renewed before they end) is what
# they check, and on a two-core machine the peer and cmd packages' own
# clusters running beside them starve it.
go test -race -count=1 -timeout 30m $(go list ./... | grep -v '/loadtest$')
go test -race -count=1 -timeout 30m ./loadtest
if [ -f k8s/go.mod ]; then (cd k8s && go test -count=1 ./...); fi
# gubernator's own test cases through its Go client (own Go module)
if [ -f compat/gubernator/go.mod ]; then (cd compat/gubernator && go test -count=1 ./...); fi
