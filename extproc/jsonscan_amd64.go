//go:build amd64 && !purego

package extproc

import "golang.org/x/sys/cpu"

// The vector string scanners (jsonscan_amd64.s), by what the processor
// has: AVX-512BW, or AVX2; both also need BMI1, which every processor with
// either has in practice. Variables so that tests can run each scanner.
var (
	useAVX512 = cpu.X86.HasAVX512F && cpu.X86.HasAVX512BW && cpu.X86.HasBMI1
	useAVX2   = cpu.X86.HasAVX2 && cpu.X86.HasBMI1
)

// scanStringAVX2 checks string contents 64 bytes at a time from p, while at
// least 64 of the n bytes remain. state carries an escape across blocks: bit
// 0 when the first byte is escaped (it follows an odd run of backslashes),
// bits 8-11 for the first bytes that must be the hex digits of a \u
// escape. It returns the offset of the closing quote, or -1 if the string
// is invalid before it (a control character, a bad escape), or -2 when the
// blocks ran out first: then consumed bytes were checked and newState is
// the state after them.
//
//go:noescape
func scanStringAVX2(p *byte, n int, state uint64) (pos, consumed int, newState uint64)

// scanStringAVX512 is scanStringAVX2 with AVX-512BW.
//
//go:noescape
func scanStringAVX512(p *byte, n int, state uint64) (pos, consumed int, newState uint64)

// scanStringVector runs the best vector scanner the processor has; callers
// check that one of them is there (useVector).
func scanStringVector(p *byte, n int, state uint64) (pos, consumed int, newState uint64) {
	if useAVX512 {
		return scanStringAVX512(p, n, state)
	}
	return scanStringAVX2(p, n, state)
}

// useVector reports whether strings are scanned by a vector scanner.
func useVector() bool { return useAVX512 || useAVX2 }
