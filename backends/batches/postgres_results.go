package batches

import (
	"bytes"
	"context"

	"fmt"
	"io"
	"iter"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// PostgresResults keeps line results in the batch_results table of the
// batches component (PGMigrations): one row per line, committed before
// Record returns, keyed by (batch, custom_id) so a result recorded twice
// (a replica that lost its lease racing the one that took over) keeps the
// first. Whichever replica resumes a batch reads them, and the output and
// error files are assembled from them in input order.
type PostgresResults struct {
	pool *pgxpool.Pool
}

var _ Results = (*PostgresResults)(nil)

// NewPostgresResults uses pool, migrated with PGMigrations (as
// OpenPostgresStore's PostgresStore.Pool is).
func NewPostgresResults(pool *pgxpool.Pool) *PostgresResults { return &PostgresResults{pool: pool} }

// Record is Results.Record: durable when it returns.
func (p *PostgresResults) Record(ctx context.Context, batchID string, r Result) error {
	_, err := p.pool.Exec(ctx, `INSERT INTO batch_results (batch_id, custom_id, idx, kind, line)
		VALUES ($1, $2, $3, $4, $5) ON CONFLICT (batch_id, custom_id) DO NOTHING`,
		batchID, r.CustomID, r.Index, int16(r.Kind), r.Line)
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

// page yields kind's results of the batch in index order, resultPage rows
// per query.
func (p *PostgresResults) page(ctx context.Context, batchID string, kind ResultKind) iter.Seq2[Result, error] {
	return func(yield func(Result, error) bool) {
		after := int64(-1 << 62)
		for {
			rows, err := p.pool.Query(ctx, `SELECT custom_id, idx, line FROM batch_results
				WHERE batch_id = $1 AND kind = $2 AND idx > $3 ORDER BY idx LIMIT $4`, batchID, int16(kind), after, resultPage)
			if err != nil {
				yield(Result{}, fmt.Errorf("batches: read results: %w", err))
				return
			}
			got, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (Result, error) {
				res := Result{Kind: kind}
				err := r.Scan(&res.CustomID, &res.Index, &res.Line)
				return res, err
			})
			if err != nil {
				yield(Result{}, fmt.Errorf("batches: read results: %w", err))
				return
			}
			for _, r := range got {
				if !yield(r, nil) {
					return
				}
			}
			if len(got) < resultPage {
				return
			}
			after = got[len(got)-1].Index
		}
	}
}

// Stream is Results.Stream: the kind's lines in input order, read a page
// at a time as the reader is drained.
func (p *PostgresResults) Stream(ctx context.Context, batchID string, kind ResultKind) (io.ReadCloser, int64, error) {
	var size int64
	if err := p.pool.QueryRow(ctx, `SELECT coalesce(sum(length(line)), 0) FROM batch_results WHERE batch_id = $1 AND kind = $2`,
		batchID, int16(kind)).Scan(&size); err != nil {
		return nil, 0, fmt.Errorf("batches: read results: %w", err)
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
	if _, err := p.pool.Exec(ctx, `DELETE FROM batch_results WHERE batch_id = $1`, batchID); err != nil {
		return fmt.Errorf("batches: delete results: %w", err)
	}
	return nil
}
