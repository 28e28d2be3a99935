package envelope

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
)

// Streamed sealing, for content too large to hold in memory (file blobs up
// to 200 MB). The plaintext is cut into segments of SegmentSize bytes, each
// sealed on its own with AES-256-GCM, so writing and reading use one
// segment's memory and a read at any offset decrypts only the segments it
// touches.
//
// Layout: a header, then the sealed segments back to back.
//
//	header:  "SYS1" | segment size (uint32, big-endian) | salt (16 bytes)
//	segment: ciphertext | tag (16 bytes); every one SegmentSize bytes of
//	         plaintext but the last, which holds 1..SegmentSize (0 only when
//	         the whole plaintext is empty)
//
// Each stream seals under its own key, HMAC-SHA256(DEK, salt), so segment
// nonces can be counters: 11 bytes of segment index and a final flag byte,
// 1 on the last segment only. Cutting the stream at a segment boundary
// leaves a last segment sealed as not final, which fails to open; the
// header and the object's field are the associated data of every segment.
const (
	SegmentSize  = 64 << 10
	streamMagic  = "SYS1"
	headerSize   = 4 + 4 + 16
	tagSize      = 16
	maxSegmentSz = 16 << 20
)

// ErrTruncated: a stream ends before its final segment.
var ErrTruncated = errors.New("envelope: sealed stream is truncated")

func (dk *DataKey) streamAEAD(salt []byte) (aeadSealer, error) {
	m := hmac.New(sha256.New, dk.raw)
	m.Write([]byte("switchyard stream\x00"))
	m.Write(salt)
	return newAEAD(m.Sum(nil))
}

type aeadSealer interface {
	Seal(dst, nonce, plaintext, ad []byte) []byte
	Open(dst, nonce, ciphertext, ad []byte) ([]byte, error)
}

func segmentNonce(i uint64, final bool) []byte {
	n := make([]byte, 12)
	binary.BigEndian.PutUint64(n[3:11], i)
	if final {
		n[11] = 1
	}
	return n
}

// SealedSize is the size of the stream sealing n bytes of plaintext.
func SealedSize(n int64) int64 {
	segs := (n + SegmentSize - 1) / SegmentSize
	if segs == 0 {
		segs = 1
	}
	return headerSize + n + segs*tagSize
}

// Writer seals what is written to it onto an underlying writer. Close
// seals the final segment; without it the stream does not open.
type Writer struct {
	w      io.Writer
	aead   aeadSealer
	ad     []byte
	buf    []byte // plaintext of the segment being filled
	out    []byte
	index  uint64
	err    error
	closed bool
}

// NewWriter starts a sealed stream of field of dk's object on w, writing
// the header at once.
func (dk *DataKey) NewWriter(w io.Writer, field string) (*Writer, error) {
	hdr := make([]byte, headerSize)
	copy(hdr, streamMagic)
	binary.BigEndian.PutUint32(hdr[4:8], SegmentSize)
	if _, err := rand.Read(hdr[8:]); err != nil {
		return nil, fmt.Errorf("envelope: %w", err)
	}
	a, err := dk.streamAEAD(hdr[8:])
	if err != nil {
		return nil, err
	}
	if _, err := w.Write(hdr); err != nil {
		return nil, err
	}
	return &Writer{
		w: w, aead: a, ad: append(hdr, dk.contentAD(field)...),
		buf: make([]byte, 0, SegmentSize), out: make([]byte, 0, SegmentSize+tagSize),
	}, nil
}

// Write seals p's bytes as segments fill. A full segment is held until
// more bytes arrive, so that the last segment is never empty.
func (sw *Writer) Write(p []byte) (int, error) {
	if sw.err != nil {
		return 0, sw.err
	}
	if sw.closed {
		return 0, errors.New("envelope: write after close")
	}
	n := 0
	for len(p) > 0 {
		if len(sw.buf) == SegmentSize {
			if err := sw.flush(false); err != nil {
				return n, err
			}
		}
		c := copy(sw.buf[len(sw.buf):SegmentSize], p)
		sw.buf = sw.buf[:len(sw.buf)+c]
		p = p[c:]
		n += c
	}
	return n, nil
}

func (sw *Writer) flush(final bool) error {
	sw.out = sw.aead.Seal(sw.out[:0], segmentNonce(sw.index, final), sw.buf, sw.ad)
	if _, err := sw.w.Write(sw.out); err != nil {
		sw.err = err
		return err
	}
	sw.index++
	sw.buf = sw.buf[:0]
	return nil
}

// Close seals the final segment. It does not close the underlying writer.
func (sw *Writer) Close() error {
	if sw.err != nil {
		return sw.err
	}
	if sw.closed {
		return nil
	}
	sw.closed = true
	return sw.flush(true)
}

// Reader opens a sealed stream held by an io.ReaderAt of known size. It
// reads sequentially (Read, Seek) and at any offset (ReadAt); every byte it
// returns has been authenticated. ReadAt is safe for concurrent use, Read
// and Seek are not.
type Reader struct {
	r        io.ReaderAt
	aead     aeadSealer
	ad       []byte
	seg      int64 // plaintext size of a full segment
	segments uint64
	lastCT   int64 // sealed size of the last segment
	size     int64 // plaintext size
	off      int64 // Read's position
	// cache of the last segment Read opened.
	cached  uint64
	valid   bool
	plain   []byte
	scratch []byte
}

// NewReader opens the sealed stream of field of dk's object that r holds
// in its first size bytes. The header is checked here; each segment when it
// is read.
func (dk *DataKey) NewReader(r io.ReaderAt, size int64, field string) (*Reader, error) {
	hdr := make([]byte, headerSize)
	if size < headerSize+tagSize {
		return nil, fmt.Errorf("envelope: open stream of %s: %w", dk.objectID, ErrTruncated)
	}
	if _, err := r.ReadAt(hdr, 0); err != nil {
		return nil, fmt.Errorf("envelope: open stream of %s: %w", dk.objectID, err)
	}
	seg := int64(binary.BigEndian.Uint32(hdr[4:8]))
	if string(hdr[:4]) != streamMagic || seg == 0 || seg > maxSegmentSz {
		return nil, fmt.Errorf("envelope: open stream of %s: not a sealed stream: %w", dk.objectID, ErrOpen)
	}
	a, err := dk.streamAEAD(hdr[8:])
	if err != nil {
		return nil, err
	}
	body := size - headerSize
	full := seg + tagSize
	segs := (body + full - 1) / full
	last := body - (segs-1)*full
	if last < tagSize || (last == tagSize && segs > 1) {
		// A last segment too short to hold a tag, or an empty one after
		// others (which Writer never makes): cut or padded.
		return nil, fmt.Errorf("envelope: open stream of %s: %w", dk.objectID, ErrTruncated)
	}
	return &Reader{
		r: r, aead: a, ad: append(hdr, dk.contentAD(field)...), seg: seg,
		segments: uint64(segs), lastCT: last, size: body - segs*tagSize,
	}, nil
}

// Size is the plaintext size.
func (sr *Reader) Size() int64 { return sr.size }

// openSegment decrypts segment i into dst (reusing its capacity).
func (sr *Reader) openSegment(i uint64, dst, scratch []byte) ([]byte, []byte, error) {
	full := sr.seg + tagSize
	n := full
	final := i == sr.segments-1
	if final {
		n = sr.lastCT
	}
	if cap(scratch) < int(n) {
		scratch = make([]byte, n)
	}
	scratch = scratch[:n]
	if _, err := sr.r.ReadAt(scratch, headerSize+int64(i)*full); err != nil {
		if errors.Is(err, io.EOF) {
			err = ErrTruncated // the file shrank since NewReader
		}
		return dst, scratch, fmt.Errorf("envelope: read segment %d: %w", i, err)
	}
	pt, err := sr.aead.Open(dst[:0], segmentNonce(i, final), scratch, sr.ad)
	if err != nil {
		if final {
			// A stream cut at a segment boundary ends in a segment that
			// was sealed as not final.
			if _, err2 := sr.aead.Open(dst[:0], segmentNonce(i, false), scratch, sr.ad); err2 == nil {
				return dst, scratch, fmt.Errorf("envelope: segment %d: %w", i, ErrTruncated)
			}
		}
		return dst, scratch, fmt.Errorf("envelope: segment %d: %w", i, ErrOpen)
	}
	return pt, scratch, nil
}

// ReadAt reads len(p) bytes of plaintext at off.
func (sr *Reader) ReadAt(p []byte, off int64) (int, error) {
	if off < 0 {
		return 0, errors.New("envelope: negative offset")
	}
	var plain, scratch []byte
	n := 0
	for len(p) > 0 {
		if off >= sr.size {
			return n, io.EOF
		}
		seg := sr.seg
		i := uint64(off / seg)
		var err error
		plain, scratch, err = sr.openSegment(i, plain, scratch)
		if err != nil {
			return n, err
		}
		c := copy(p, plain[off-int64(i)*seg:])
		p = p[c:]
		n += c
		off += int64(c)
	}
	return n, nil
}

// Read reads the plaintext sequentially from the Seek position.
func (sr *Reader) Read(p []byte) (int, error) {
	if sr.off >= sr.size {
		return 0, io.EOF
	}
	seg := sr.seg
	i := uint64(sr.off / seg)
	if !sr.valid || sr.cached != i {
		var err error
		sr.valid = false
		if sr.plain == nil {
			sr.plain = make([]byte, 0, seg)
		}
		sr.plain, sr.scratch, err = sr.openSegment(i, sr.plain, sr.scratch)
		if err != nil {
			return 0, err
		}
		sr.cached, sr.valid = i, true
	}
	c := copy(p, sr.plain[sr.off-int64(i)*seg:])
	sr.off += int64(c)
	return c, nil
}

// Seek sets Read's position.
func (sr *Reader) Seek(offset int64, whence int) (int64, error) {
	switch whence {
	case io.SeekStart:
	case io.SeekCurrent:
		offset += sr.off
	case io.SeekEnd:
		offset += sr.size
	default:
		return 0, errors.New("envelope: bad whence")
	}
	if offset < 0 {
		return 0, errors.New("envelope: negative position")
	}
	sr.off = offset
	return offset, nil
}
