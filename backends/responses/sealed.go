package responses

import (
	"context"
	"fmt"
	"time"

	"github.com/switchyard-ai/switchyard/internal/envelope"
)

// Bounds of a conversation replayed through previous_response_id: every
// turn loads the whole chain into memory and re-sends it to the model, so
// a chain past either is refused with a 400 rather than silently cut
// (which would drop the conversation's start) or loaded whatever its size.
// Variables for the tests.
var (
	// maxChain bounds how many responses a chain may hold.
	maxChain = 1000
	// maxChainBytes bounds the stored input and output items of a chain
	// together: what one create request may carry.
	maxChainBytes int64 = maxRequestBody
)

// stored is one stored response, in the clear.
type stored struct {
	ID, Owner, PreviousID string
	CreatedAt, ExpiresAt  time.Time
	// Body is the Response object as returned to the client.
	Body []byte
	// Input is this response's own input items (a JSON array), normalized
	// with ids; Output is its output items (a JSON array).
	Input, Output []byte
}

// store is encryption at rest over a Store: a response's body, input and
// output are sealed (envelope) under a data key of its own, made here and
// handed to the Store wrapped, beside the row. Deleting or sweeping a
// response deletes its key with it. Every Store implementation gets this
// layer, so none holds a plaintext or repeats the crypto.
type store struct {
	raw  Store
	keys *envelope.Keyring
}

// Sealed fields of a response, bound into each ciphertext.
const (
	fieldBody   = "body"
	fieldInput  = "input"
	fieldOutput = "output"
)

// sealOverhead is what sealing adds to a row's input and output together.
const sealOverhead = 2 * envelope.SealOverhead

func (s *store) close() error { return s.raw.Close() }

func (s *store) put(ctx context.Context, r *stored) error {
	dk, wrapped, err := s.keys.NewDataKey(r.ID)
	if err != nil {
		return fmt.Errorf("responses: store %s: %w", r.ID, err)
	}
	return s.raw.Put(ctx, Row{ID: r.ID, Owner: r.Owner, PreviousID: r.PreviousID, CreatedAt: r.CreatedAt, ExpiresAt: r.ExpiresAt,
		Body: dk.Seal(fieldBody, r.Body), Input: dk.Seal(fieldInput, r.Input), Output: dk.Seal(fieldOutput, r.Output), Key: wrapped})
}

// body returns the stored Response object of owner's id, live at now.
func (s *store) body(ctx context.Context, owner, id string, now time.Time) ([]byte, error) {
	sealed, wrapped, err := s.raw.Body(ctx, owner, id, now)
	if err != nil {
		return nil, err
	}
	dk, err := s.keys.Unwrap(id, wrapped)
	if err != nil {
		return nil, fmt.Errorf("responses: get %s: %w", id, err)
	}
	b, err := dk.Open(fieldBody, sealed)
	if err != nil {
		return nil, fmt.Errorf("responses: get %s: %w", id, err)
	}
	return b, nil
}

func (s *store) delete(ctx context.Context, owner, id string, now time.Time) error {
	return s.raw.Delete(ctx, owner, id, now)
}

// chain returns the conversation that id ends, in the clear (Store.Chain):
// ErrNotFound, ErrChainTooLong or ErrChainTooLarge as it says, maxBytes
// bounding the plaintext (0: none).
func (s *store) chain(ctx context.Context, owner, id string, now time.Time, maxLen int, maxBytes int64) ([]stored, error) {
	rows, err := s.raw.Chain(ctx, owner, id, now, ChainLimits{MaxLen: maxLen, MaxBytes: maxBytes, Overhead: sealOverhead})
	if err != nil {
		return nil, err
	}
	out := make([]stored, len(rows))
	for i, r := range rows {
		dk, err := s.keys.Unwrap(r.ID, r.Key)
		if err != nil {
			return nil, fmt.Errorf("responses: chain of %s: %w", id, err)
		}
		in, err := dk.Open(fieldInput, r.Input)
		if err != nil {
			return nil, fmt.Errorf("responses: chain of %s: %w", id, err)
		}
		outItems, err := dk.Open(fieldOutput, r.Output)
		if err != nil {
			return nil, fmt.Errorf("responses: chain of %s: %w", id, err)
		}
		out[i] = stored{ID: r.ID, Owner: r.Owner, PreviousID: r.PreviousID, CreatedAt: r.CreatedAt, ExpiresAt: r.ExpiresAt,
			Input: in, Output: outItems}
	}
	return out, nil
}

func (s *store) sweep(ctx context.Context, now time.Time) (int64, error) {
	return s.raw.Sweep(ctx, now)
}
