//go:build amd64 && !purego

#include "textflag.h"

// The contents of a JSON string, 64 bytes per iteration (see
// scanStringAVX2 in jsonscan_amd64.go, and scanStringTail, the portable
// loop this must agree with byte for byte; the fuzz and differential tests
// in jsonscan_test.go hold them to it).
//
// Per 64-byte block, as bit masks (bit k = byte k):
//   quotes, backslashes, controls (bytes < 0x20).
//   escaped: the bytes that follow an odd run of backslashes, by
//     simdjson's carry-less method (json_escape_scanner.h): with
//     potential = backslashes &^ carry-in and ODD = 0xAAAA...,
//     code = (((potential << 1) | ODD) - potential) ^ ODD;
//     escaped = code ^ (backslashes | carry-in); carry-out = bit 63 of
//     (code & backslashes).
//   The string ends at the first quote that is not escaped. Up to and
//   including it there must be no control character, every escaped byte
//   other than a quote or backslash must be one of / b f n r t u (nibble
//   lookup), and the 4 bytes after an escaped u must be hex digits (nibble
//   lookup; they may spill into the next block, carried in state bits 8-11).
// Blocks without backslashes or carried state skip all escape work; blocks
// whose escapes are all \" and \\ skip the lookups. Errors are gathered
// and looked at once the string ends (or the blocks run out): only the
// last block's are cut at the closing quote.

// Nibble tables (16 bytes, repeated for both 128-bit lanes of VPSHUFB): a
// byte c is in the set iff lo[c & 15] & hi[c >> 4] != 0.
// Escape characters " \ / b f n r t u: high nibble 2 -> bit 0, 5 -> bit 1,
// 6 -> bit 2, 7 -> bit 3; u alone also has bit 7, so VPMOVMSKB of the
// lookup is the mask of u's.
DATA escLo<>+0(SB)/8, $0x00048008000d0000
DATA escLo<>+8(SB)/8, $0x0104000200000000
DATA escLo<>+16(SB)/8, $0x00048008000d0000
DATA escLo<>+24(SB)/8, $0x0104000200000000
GLOBL escLo<>(SB), RODATA|NOPTR, $32

DATA escHi<>+0(SB)/8, $0x8804020000010000
DATA escHi<>+8(SB)/8, $0x0000000000000000
DATA escHi<>+16(SB)/8, $0x8804020000010000
DATA escHi<>+24(SB)/8, $0x0000000000000000
GLOBL escHi<>(SB), RODATA|NOPTR, $32

// Hex digits: high nibble 3 -> bit 0 (low 0-9), 4 and 6 -> bit 1 (low 1-6).
DATA hexLo<>+0(SB)/8, $0x0103030303030301
DATA hexLo<>+8(SB)/8, $0x0000000000000101
DATA hexLo<>+16(SB)/8, $0x0103030303030301
DATA hexLo<>+24(SB)/8, $0x0000000000000101
GLOBL hexLo<>(SB), RODATA|NOPTR, $32

DATA hexHi<>+0(SB)/8, $0x0002000201000000
DATA hexHi<>+8(SB)/8, $0x0000000000000000
DATA hexHi<>+16(SB)/8, $0x0002000201000000
DATA hexHi<>+24(SB)/8, $0x0000000000000000
GLOBL hexHi<>(SB), RODATA|NOPTR, $32

DATA bytes22<>+0(SB)/8, $0x2222222222222222
GLOBL bytes22<>(SB), RODATA|NOPTR, $8
DATA bytes5c<>+0(SB)/8, $0x5c5c5c5c5c5c5c5c
GLOBL bytes5c<>(SB), RODATA|NOPTR, $8
DATA bytes1f<>+0(SB)/8, $0x1f1f1f1f1f1f1f1f
GLOBL bytes1f<>(SB), RODATA|NOPTR, $8
DATA bytes0f<>+0(SB)/8, $0x0f0f0f0f0f0f0f0f
GLOBL bytes0f<>(SB), RODATA|NOPTR, $8

// func scanStringAVX2(p *byte, n int, state uint64) (pos, consumed int, newState uint64)
//
// Registers: SI the block, CX the last block that fits, R8 carry-in
// (escaped first byte), R9 hex digits owed by the previous block, R10
// errors of the blocks before, R11 ODD; per block AX quotes, BX
// backslashes, DX errors, R12-R14 DI scratch.
// Y15 '"', Y14 '\', Y13 0x1f, Y12 0x0f, Y11/Y10 escape tables, Y9/Y8 hex
// tables, Y6 zero; Y0/Y1 the block, Y2-Y5 scratch.
// Needs AVX2 and BMI1 (ANDN, BLSMSK).
TEXT ·scanStringAVX2(SB), NOSPLIT, $0-48
	MOVQ p+0(FP), SI
	MOVQ n+8(FP), CX
	LEAQ -64(SI)(CX*1), CX
	MOVQ state+16(FP), R8
	MOVQ R8, R9
	ANDQ $1, R8
	SHRQ $8, R9
	XORQ R10, R10
	MOVQ $0xAAAAAAAAAAAAAAAA, R11

	// Constants from memory: a legacy-SSE MOVQ to an XMM register after
	// a 256-bit instruction costs an SSE/AVX state transition (measured
	// at hundreds of nanoseconds a call), so no SSE encodings here.
	VPBROADCASTQ bytes22<>(SB), Y15
	VPBROADCASTQ bytes5c<>(SB), Y14
	VPBROADCASTQ bytes1f<>(SB), Y13
	VPBROADCASTQ bytes0f<>(SB), Y12
	VMOVDQU escLo<>(SB), Y11
	VMOVDQU escHi<>(SB), Y10
	VMOVDQU hexLo<>(SB), Y9
	VMOVDQU hexHi<>(SB), Y8
	VPXOR Y6, Y6, Y6

loop:
	CMPQ SI, CX
	JA   more
	VMOVDQU (SI), Y0
	VMOVDQU 32(SI), Y1
	VPCMPEQB Y0, Y15, Y2
	VPMOVMSKB Y2, AX
	VPCMPEQB Y1, Y15, Y3
	VPMOVMSKB Y3, R12
	SHLQ $32, R12
	ORQ  R12, AX                     // AX = quotes
	VPCMPEQB Y0, Y14, Y2
	VPMOVMSKB Y2, BX
	VPCMPEQB Y1, Y14, Y3
	VPMOVMSKB Y3, R12
	SHLQ $32, R12
	ORQ  R12, BX                     // BX = backslashes
	VPMINUB Y0, Y13, Y2
	VPCMPEQB Y2, Y0, Y2
	VPMOVMSKB Y2, DX
	VPMINUB Y1, Y13, Y3
	VPCMPEQB Y3, Y1, Y3
	VPMOVMSKB Y3, R12
	SHLQ $32, R12
	ORQ  R12, DX                     // DX = errors: control characters

	MOVQ BX, R12
	ORQ  R8, R12
	ORQ  R9, R12
	JZ   check                       // nothing escaped: every quote is real

	ANDNQ BX, R8, R12                // potential = backslashes &^ carry-in
	LEAQ (R12)(R12*1), R13
	ORQ  R11, R13
	SUBQ R12, R13
	XORQ R11, R13                    // R13 = code
	MOVQ BX, R12
	ORQ  R8, R12
	XORQ R13, R12                    // R12 = escaped
	ANDQ BX, R13
	SHRQ $63, R13
	MOVQ R13, R8                     // carry-out
	MOVQ AX, R13
	ORQ  BX, R13
	ANDNQ R12, R13, R14              // R14 = escaped, other than quotes and backslashes
	ANDNQ AX, R12, AX                // AX = quotes not escaped

	MOVQ R14, R13
	ORQ  R9, R13
	JZ   check                       // only \" and \\ here

	VPSRLW $4, Y0, Y4
	VPAND  Y12, Y4, Y4
	VPAND  Y12, Y0, Y5
	VPSHUFB Y5, Y11, Y2
	VPSHUFB Y4, Y10, Y3
	VPAND  Y2, Y3, Y2
	VPMOVMSKB Y2, BX                 // u
	VPCMPEQB Y6, Y2, Y2
	VPMOVMSKB Y2, R13                // not an escape character
	VPSRLW $4, Y1, Y4
	VPAND  Y12, Y4, Y4
	VPAND  Y12, Y1, Y5
	VPSHUFB Y5, Y11, Y2
	VPSHUFB Y4, Y10, Y3
	VPAND  Y2, Y3, Y2
	VPMOVMSKB Y2, DI
	SHLQ $32, DI
	ORQ  DI, BX                      // BX = u
	VPCMPEQB Y6, Y2, Y2
	VPMOVMSKB Y2, R12
	SHLQ $32, R12
	ORQ  R12, R13                    // R13 = not an escape character
	ANDQ R14, R13
	ORQ  R13, DX                     // errors: bad escapes
	ANDQ R14, BX                     // BX = escaped u
	MOVQ BX, R13
	ORQ  R9, R13
	JZ   check                       // no \u here or owed

	VPSRLW $4, Y0, Y4
	VPAND  Y12, Y4, Y4
	VPAND  Y12, Y0, Y5
	VPSHUFB Y5, Y9, Y2
	VPSHUFB Y4, Y8, Y3
	VPAND  Y2, Y3, Y2
	VPCMPEQB Y6, Y2, Y2
	VPMOVMSKB Y2, R14
	VPSRLW $4, Y1, Y4
	VPAND  Y12, Y4, Y4
	VPAND  Y12, Y1, Y5
	VPSHUFB Y5, Y9, Y2
	VPSHUFB Y4, Y8, Y3
	VPAND  Y2, Y3, Y2
	VPCMPEQB Y6, Y2, Y2
	VPMOVMSKB Y2, DI
	SHLQ $32, DI
	ORQ  DI, R14                     // R14 = not a hex digit
	LEAQ (BX)(BX*1), R13
	LEAQ (R13)(R13*1), DI
	ORQ  DI, R13
	SHLQ $1, DI
	ORQ  DI, R13
	SHLQ $1, DI
	ORQ  DI, R13
	ORQ  R9, R13                     // R13 = must be hex digits
	ANDQ R14, R13
	ORQ  R13, DX                     // errors: bad \u digits
	MOVQ BX, R9                      // digits owed by this block
	SHRQ $60, R9
	MOVQ BX, DI
	SHRQ $61, DI
	ORQ  DI, R9
	MOVQ BX, DI
	SHRQ $62, DI
	ORQ  DI, R9
	SHRQ $63, BX
	ORQ  BX, R9

check:
	TESTQ AX, AX
	JNZ  found
	ORQ  DX, R10
	ADDQ $64, SI
	JMP  loop

found:
	BLSMSKQ AX, BX                   // bits up to and including the first quote
	ANDQ BX, DX
	ORQ  DX, R10
	JNZ  invalid
	BSFQ AX, AX
	MOVQ p+0(FP), DI
	SUBQ DI, SI
	ADDQ SI, AX
	MOVQ AX, pos+24(FP)
	MOVQ SI, consumed+32(FP)
	MOVQ $0, newState+40(FP)
	VZEROUPPER
	RET

invalid:
	MOVQ $-1, pos+24(FP)
	MOVQ $0, consumed+32(FP)
	MOVQ $0, newState+40(FP)
	VZEROUPPER
	RET

more:
	TESTQ R10, R10
	JNZ  invalid
	MOVQ p+0(FP), DI
	SUBQ DI, SI
	MOVQ $-2, pos+24(FP)
	MOVQ SI, consumed+32(FP)
	SHLQ $8, R9
	ORQ  R9, R8
	MOVQ R8, newState+40(FP)
	VZEROUPPER
	RET

// func scanStringAVX512(p *byte, n int, state uint64) (pos, consumed int, newState uint64)
//
// scanStringAVX2 with AVX-512BW: one 64-byte vector per block, compared
// straight into mask registers. Same registers, Z for Y, and K1-K5.
TEXT ·scanStringAVX512(SB), NOSPLIT, $0-48
	MOVQ p+0(FP), SI
	MOVQ n+8(FP), CX
	LEAQ -64(SI)(CX*1), CX
	MOVQ state+16(FP), R8
	MOVQ R8, R9
	ANDQ $1, R8
	SHRQ $8, R9
	XORQ R10, R10
	MOVQ $0xAAAAAAAAAAAAAAAA, R11

	VPBROADCASTQ bytes22<>(SB), Z15
	VPBROADCASTQ bytes5c<>(SB), Z14
	VPBROADCASTQ bytes1f<>(SB), Z13
	VPBROADCASTQ bytes0f<>(SB), Z12
	VBROADCASTI32X4 escLo<>(SB), Z11
	VBROADCASTI32X4 escHi<>(SB), Z10
	VBROADCASTI32X4 hexLo<>(SB), Z9
	VBROADCASTI32X4 hexHi<>(SB), Z8

loop512:
	CMPQ SI, CX
	JA   more512
	VMOVDQU64 (SI), Z0
	VPCMPEQB Z0, Z15, K1
	KMOVQ K1, AX                     // AX = quotes
	VPCMPEQB Z0, Z14, K2
	KMOVQ K2, BX                     // BX = backslashes
	VPCMPUB $2, Z13, Z0, K3
	KMOVQ K3, DX                     // DX = errors: control characters (<= 0x1f)

	MOVQ BX, R12
	ORQ  R8, R12
	ORQ  R9, R12
	JZ   check512

	ANDNQ BX, R8, R12
	LEAQ (R12)(R12*1), R13
	ORQ  R11, R13
	SUBQ R12, R13
	XORQ R11, R13
	MOVQ BX, R12
	ORQ  R8, R12
	XORQ R13, R12                    // R12 = escaped
	ANDQ BX, R13
	SHRQ $63, R13
	MOVQ R13, R8
	MOVQ AX, R13
	ORQ  BX, R13
	ANDNQ R12, R13, R14              // R14 = escaped, other than quotes and backslashes
	ANDNQ AX, R12, AX                // AX = quotes not escaped

	MOVQ R14, R13
	ORQ  R9, R13
	JZ   check512

	VPSRLW $4, Z0, Z4
	VPANDQ Z12, Z4, Z4
	VPANDQ Z12, Z0, Z5
	VPSHUFB Z5, Z11, Z2
	VPSHUFB Z4, Z10, Z3
	VPANDQ Z2, Z3, Z2
	VPMOVB2M Z2, K4
	KMOVQ K4, BX                     // BX = u
	VPTESTNMB Z2, Z2, K5
	KMOVQ K5, R13                    // R13 = not an escape character
	ANDQ R14, R13
	ORQ  R13, DX
	ANDQ R14, BX                     // BX = escaped u
	MOVQ BX, R13
	ORQ  R9, R13
	JZ   check512

	VPSHUFB Z5, Z9, Z2
	VPSHUFB Z4, Z8, Z3
	VPANDQ Z2, Z3, Z2
	VPTESTNMB Z2, Z2, K5
	KMOVQ K5, R14                    // R14 = not a hex digit
	LEAQ (BX)(BX*1), R13
	LEAQ (R13)(R13*1), DI
	ORQ  DI, R13
	SHLQ $1, DI
	ORQ  DI, R13
	SHLQ $1, DI
	ORQ  DI, R13
	ORQ  R9, R13
	ANDQ R14, R13
	ORQ  R13, DX
	MOVQ BX, R9
	SHRQ $60, R9
	MOVQ BX, DI
	SHRQ $61, DI
	ORQ  DI, R9
	MOVQ BX, DI
	SHRQ $62, DI
	ORQ  DI, R9
	SHRQ $63, BX
	ORQ  BX, R9

check512:
	TESTQ AX, AX
	JNZ  found512
	ORQ  DX, R10
	ADDQ $64, SI
	JMP  loop512

found512:
	BLSMSKQ AX, BX
	ANDQ BX, DX
	ORQ  DX, R10
	JNZ  invalid512
	BSFQ AX, AX
	MOVQ p+0(FP), DI
	SUBQ DI, SI
	ADDQ SI, AX
	MOVQ AX, pos+24(FP)
	MOVQ SI, consumed+32(FP)
	MOVQ $0, newState+40(FP)
	VZEROUPPER
	RET

invalid512:
	MOVQ $-1, pos+24(FP)
	MOVQ $0, consumed+32(FP)
	MOVQ $0, newState+40(FP)
	VZEROUPPER
	RET

more512:
	TESTQ R10, R10
	JNZ  invalid512
	MOVQ p+0(FP), DI
	SUBQ DI, SI
	MOVQ $-2, pos+24(FP)
	MOVQ SI, consumed+32(FP)
	SHLQ $8, R9
	ORQ  R9, R8
	MOVQ R8, newState+40(FP)
	VZEROUPPER
	RET
