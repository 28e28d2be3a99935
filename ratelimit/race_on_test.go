//go:build race

package ratelimit_test

// raceEnabled: see TestConformance's live tier change on Redis.
const raceEnabled = true
