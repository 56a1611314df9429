//go:build !linux

package netns

// Run fails: network namespaces are Linux only.
func Run(ns string, f func()) error { return ErrUnsupported }
