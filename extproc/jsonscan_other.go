//go:build !amd64 || purego

package extproc

// Without the amd64 assembly, strings are scanned by the portable loop.
var useAVX512, useAVX2 = false, false

func useVector() bool { return false }

func scanStringVector(*byte, int, uint64) (int, int, uint64) {
	panic("extproc: no vector string scanner")
}
