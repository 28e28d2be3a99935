package responses

import (
	"context"
	"errors"
	"time"
)

// Store is the row store of stored responses the Service consumes, through
// the sealing layer (sealed.go): it keeps rows whose content is already
// sealed, each with its wrapped data key, and never sees a plaintext or a
// key-encryption key. So encryption at rest is the same for every
// implementation, written once above them. The first implementation is
// SQLite (OpenSQLiteStore); responsestest.Run is the conformance suite any
// implementation must pass.
//
// A row and its data key are one: Put stores both or neither, Delete and
// Sweep delete both in one atomic step, and a row whose key is missing is
// absent to every read. Times are kept to the second. Implementations are
// safe for concurrent use.
type Store interface {
	// Put stores r and its data key r.Key.
	Put(ctx context.Context, r Row) error
	// Body returns the sealed Response object of owner's response id live
	// at now (expiring after now) and its wrapped data key, or
	// ErrNotFound.
	Body(ctx context.Context, owner, id string, now time.Time) (body, key []byte, err error)
	// Delete deletes owner's response id live at now and its data key, or
	// returns ErrNotFound. The implementation makes sure the key leaves its
	// storage (SQLite: its WAL), so a copy of the ciphertext can never be
	// opened again.
	Delete(ctx context.Context, owner, id string, now time.Time) error
	// Chain returns the conversation that id ends: owner's live response id
	// and its live ancestors through PreviousID, oldest first, with ID,
	// Owner, PreviousID, Input, Output and Key set. The walk stops at an
	// ancestor that is gone (deleted, expired, another owner's).
	// ErrNotFound when id itself is not owner's live response;
	// ErrChainTooLong past lim.MaxLen responses; ErrChainTooLarge when
	// lim.MaxBytes > 0 and the rows' Input and Output, less lim.Overhead
	// per row, add up past lim.MaxBytes. The bounds are checked before
	// the content is read.
	Chain(ctx context.Context, owner, id string, now time.Time, lim ChainLimits) ([]Row, error)
	// Sweep deletes the responses expired at now (ExpiresAt <= now) with
	// their data keys, and reports how many.
	Sweep(ctx context.Context, now time.Time) (int64, error)
	Close() error
}

// Row is one stored response as a Store keeps it. Body, Input and Output
// are sealed (envelope) under the response's data key; Key is that key,
// wrapped.
type Row struct {
	ID, Owner, PreviousID string
	CreatedAt, ExpiresAt  time.Time
	Body, Input, Output   []byte
	Key                   []byte
}

// ChainLimits bound a Chain walk.
type ChainLimits struct {
	// MaxLen is the most responses the chain may hold.
	MaxLen int
	// MaxBytes bounds the plaintext of the chain's input and output items
	// together; 0: no bound.
	MaxBytes int64
	// Overhead is what sealing adds to a row's Input and Output together:
	// a row's plaintext size is len(Input) + len(Output) - Overhead.
	Overhead int64
}

// ErrNotFound is a response id that is absent, expired, deleted or another
// owner's: the store does not tell them apart.
var ErrNotFound = errors.New("responses: not found")

// ErrChainTooLong and ErrChainTooLarge: the chain is past maxChain
// responses or maxChainBytes bytes.
var (
	ErrChainTooLong  = errors.New("responses: conversation too long")
	ErrChainTooLarge = errors.New("responses: conversation too large")
)
