package batches

import (
	"bytes"
	"context"
	"errors"

	"fmt"
	"io"
	"iter"
	"sync"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/switchyard-ai/switchyard/internal/envelope"
)

// PostgresResults keeps line results in the batch_results table of the
// batches component (PGMigrations): one row per line, committed before
// Record returns, keyed by (batch, custom_id) so a result recorded twice
// (a replica that lost its lease racing the one that took over) keeps the
// first. Whichever replica resumes a batch reads them, and the output and
// error files are assembled from them in input order.
//
// With a keyring, each line is sealed (envelope) with a data key of its
// batch, bound to its custom_id; the wrapped key is kept in
// batch_result_keys and deleted with the lines.
type PostgresResults struct {
	pool *pgxpool.Pool
	ring *envelope.Keyring

	mu   sync.Mutex
	keys map[string]*envelope.DataKey // unwrapped, by batch
}

var _ Results = (*PostgresResults)(nil)

// NewPostgresResults uses pool, migrated with PGMigrations (as
// OpenPostgresStore's PostgresStore.Pool is). ring, when not nil, seals
// the lines; every replica must then have the same keys.
func NewPostgresResults(pool *pgxpool.Pool, ring *envelope.Keyring) *PostgresResults {
	return &PostgresResults{pool: pool, ring: ring, keys: map[string]*envelope.DataKey{}}
}

func resultKeyObject(batchID string) string { return "batch_results/" + batchID }

// key returns the batch's data key, making it (once, whichever replica
// gets there first) if create is set; nil without a keyring, or when the
// batch has none and create is not set.
func (p *PostgresResults) key(ctx context.Context, batchID string, create bool) (*envelope.DataKey, error) {
	if p.ring == nil {
		return nil, nil
	}
	p.mu.Lock()
	dk := p.keys[batchID]
	p.mu.Unlock()
	if dk != nil {
		return dk, nil
	}
	obj := resultKeyObject(batchID)
	if create {
		_, w, err := p.ring.NewDataKey(obj)
		if err != nil {
			return nil, err
		}
		if _, err := p.pool.Exec(ctx, `INSERT INTO batch_result_keys (batch_id, wrapped) VALUES ($1, $2)
			ON CONFLICT (batch_id) DO NOTHING`, batchID, w); err != nil {
			return nil, fmt.Errorf("batches: result key: %w", err)
		}
	}
	var w []byte
	err := p.pool.QueryRow(ctx, `SELECT wrapped FROM batch_result_keys WHERE batch_id = $1`, batchID).Scan(&w)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("batches: result key: %w", err)
	}
	if dk, err = p.ring.Unwrap(obj, w); err != nil {
		return nil, fmt.Errorf("batches: result key: %w", err)
	}
	p.mu.Lock()
	p.keys[batchID] = dk
	p.mu.Unlock()
	return dk, nil
}

// Record is Results.Record: durable when it returns.
func (p *PostgresResults) Record(ctx context.Context, batchID string, r Result) error {
	line := r.Line
	if p.ring != nil {
		dk, err := p.key(ctx, batchID, true)
		if err != nil {
			return err
		}
		line = dk.Seal(r.CustomID, line)
	}
	_, err := p.pool.Exec(ctx, `INSERT INTO batch_results (batch_id, custom_id, idx, kind, line)
		VALUES ($1, $2, $3, $4, $5) ON CONFLICT (batch_id, custom_id) DO NOTHING`,
		batchID, r.CustomID, r.Index, int16(r.Kind), line)
	if err != nil {
		return fmt.Errorf("batches: record result: %w", err)
	}
	return nil
}

// Sync is Results.Sync: every Record is committed already.
func (p *PostgresResults) Sync(context.Context, string) error { return nil }

// resultPage is how many rows one query of Recorded and Stream reads: they
// page by (kind, idx) rather than hold one query open over a large batch.
const resultPage = 500

// Recorded is Results.Recorded, in (kind, index) order.
func (p *PostgresResults) Recorded(ctx context.Context, batchID string) iter.Seq2[Result, error] {
	return func(yield func(Result, error) bool) {
		for _, kind := range []ResultKind{ResultOutput, ResultError} {
			for r, err := range p.page(ctx, batchID, kind) {
				if !yield(r, err) || err != nil {
					return
				}
			}
		}
	}
}

// page yields kind's results of the batch in index order (then custom_id,
// should two share an index), resultPage rows per query. Rows are yielded
// as they arrive, so one result at a time is held, however large.
func (p *PostgresResults) page(ctx context.Context, batchID string, kind ResultKind) iter.Seq2[Result, error] {
	return func(yield func(Result, error) bool) {
		dk, err := p.key(ctx, batchID, false)
		if err != nil {
			yield(Result{}, err)
			return
		}
		after, afterID := int64(-1<<62), ""
		for {
			n, ok, err := p.pageFrom(ctx, batchID, kind, dk, &after, &afterID, yield)
			if err != nil {
				yield(Result{}, fmt.Errorf("batches: read results: %w", err))
				return
			}
			if !ok || n < resultPage {
				return
			}
		}
	}
}

// pageFrom yields up to resultPage results after (*after, *afterID) and
// moves them on; ok is false when yield asked to stop.
func (p *PostgresResults) pageFrom(ctx context.Context, batchID string, kind ResultKind, dk *envelope.DataKey,
	after *int64, afterID *string, yield func(Result, error) bool) (n int, ok bool, err error) {
	rows, err := p.pool.Query(ctx, `SELECT custom_id, idx, line FROM batch_results
		WHERE batch_id = $1 AND kind = $2 AND (idx, custom_id) > ($3, $4) ORDER BY idx, custom_id LIMIT $5`,
		batchID, int16(kind), *after, *afterID, resultPage)
	if err != nil {
		return 0, false, err
	}
	defer rows.Close()
	for rows.Next() {
		r := Result{Kind: kind}
		if err := rows.Scan(&r.CustomID, &r.Index, &r.Line); err != nil {
			return n, false, err
		}
		if dk != nil {
			if r.Line, err = dk.Open(r.CustomID, r.Line); err != nil {
				return n, false, err
			}
		}
		n++
		*after, *afterID = r.Index, r.CustomID
		if !yield(r, nil) {
			return n, false, nil
		}
	}
	return n, true, rows.Err()
}

// Stream is Results.Stream: the kind's lines in input order, read a page
// at a time as the reader is drained.
func (p *PostgresResults) Stream(ctx context.Context, batchID string, kind ResultKind) (io.ReadCloser, int64, error) {
	var size, n int64
	if err := p.pool.QueryRow(ctx, `SELECT coalesce(sum(length(line)), 0), count(*) FROM batch_results WHERE batch_id = $1 AND kind = $2`,
		batchID, int16(kind)).Scan(&size, &n); err != nil {
		return nil, 0, fmt.Errorf("batches: read results: %w", err)
	}
	if p.ring != nil {
		size -= n * envelope.SealOverhead // lines with a key are all sealed
	}
	next, stop := iter.Pull2(p.page(ctx, batchID, kind))
	return &resultReader{next: next, stop: stop}, size, nil
}

type resultReader struct {
	next func() (Result, error, bool)
	stop func()
	buf  bytes.Reader
	err  error
}

func (r *resultReader) Read(b []byte) (int, error) {
	for r.buf.Len() == 0 {
		if r.err != nil {
			return 0, r.err
		}
		res, err, ok := r.next()
		switch {
		case !ok:
			r.err = io.EOF
		case err != nil:
			r.err = err
		default:
			r.buf.Reset(res.Line)
		}
	}
	return r.buf.Read(b)
}

func (r *resultReader) Close() error {
	r.stop()
	return nil
}

// Delete is Results.Delete.
func (p *PostgresResults) Delete(ctx context.Context, batchID string) error {
	err := pgx.BeginFunc(ctx, p.pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `DELETE FROM batch_results WHERE batch_id = $1`, batchID); err != nil {
			return err
		}
		_, err := tx.Exec(ctx, `DELETE FROM batch_result_keys WHERE batch_id = $1`, batchID)
		return err
	})
	if err != nil {
		return fmt.Errorf("batches: delete results: %w", err)
	}
	p.mu.Lock()
	delete(p.keys, batchID)
	p.mu.Unlock()
	return nil
}
