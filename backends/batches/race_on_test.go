//go:build race

package batches

// raceEnabled: the race detector allocates, and sync.Pool drops items at
// random under it, so allocation counts mean nothing.
const raceEnabled = true
