//go:build !race

package generate_test

// raceEnabled: the test binary runs under the race detector.
const raceEnabled = false
