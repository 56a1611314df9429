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
# The Kubernetes manifests module, and beside it gubernator's own test
# cases through its Go client (own Go module; a node at a time, light):
# together they take the time of the longer, not of both. Each runs to its
# end; the run fails if either failed.
compat="" k8s=0 gub=0
if [ -f compat/gubernator/go.mod ]; then
	compat_log=$(mktemp)
	(cd compat/gubernator && go test -count=1 ./... >"$compat_log" 2>&1) &
	compat=$!
fi
if [ -f k8s/go.mod ]; then (cd k8s && go test -count=1 ./...) || k8s=$?; fi
if [ -n "$compat" ]; then
	wait "$compat" || gub=$?
	cat "$compat_log"
	rm -f "$compat_log"
fi
[ "$k8s" -eq 0 ] && [ "$gub" -eq 0 ]
