// Package manifests holds no code: it is the home of the offline tests for the
// Kubernetes manifests under base/, components/ and overlays/.
//
// The tests render each overlay with `kubectl kustomize`, decode the result
// strictly into the typed Kubernetes API objects, and check that the pieces
// agree with each other and with the shardlimiter binary (env vars it reads,
// ports it listens on, probe paths it answers, shutdown timing).
package manifests
