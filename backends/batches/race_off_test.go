//go:build !race

package batches

const raceEnabled = false
