//go:build pin

// Package pin keeps planned dependencies in go.mod while the packages that
// will import them are being written. Removed once they are all imported.
package pin

import (
	_ "github.com/buraksezer/consistent"
	_ "github.com/cespare/xxhash/v2"
	_ "github.com/hashicorp/memberlist"
	_ "github.com/prometheus/client_golang/prometheus"
	_ "go.uber.org/goleak"
)
