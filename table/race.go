//go:build race

package table

// raceEnabled reports a build with the race detector (see Warm).
const raceEnabled = true
