//go:build !race

package protocodec

const raceEnabled = false
