// Package manifests holds no code: it is the home of the offline tests for the
// Kubernetes manifests under base/, components/ and overlays/, and for the
// Helm chart in deploy/helm/shardlimiter.
//
// The tests render each overlay with `kubectl kustomize` and the chart in
// each mode through the Helm SDK (as `helm template` does), decode the
// result strictly into the typed Kubernetes API objects, and check that the
// pieces agree with each other and with the shardlimiter binary (env vars
// it reads, ports it listens on, probe paths it answers, shutdown timing).
// Each check runs on every rendering (render_test.go, sources); the chart's
// defaults are also compared with the overlays object by object. The chart
// is linted, packaged, and its values schema must refuse typos.
package manifests
