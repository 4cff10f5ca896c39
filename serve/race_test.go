//go:build race

package serve

// raceEnabled: the test binary runs under the race detector.
const raceEnabled = true
