package vectorstores

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"path"
	"strings"
	"time"

	"github.com/switchyard-ai/switchyard/backends/files"
	"github.com/switchyard-ai/switchyard/internal/envelope"
)

// supportedExt are the file types indexed, all read as UTF-8 text: OpenAI's
// text types for file search, plus common data and markup formats. PDF and
// Office documents would need extraction this gateway does not do.
var supportedExt = map[string]bool{
	".txt": true, ".md": true, ".markdown": true, ".rst": true, ".tex": true, ".log": true,
	".json": true, ".jsonl": true, ".csv": true, ".tsv": true, ".xml": true, ".yaml": true, ".yml": true, ".toml": true,
	".html": true, ".htm": true, ".css": true,
	".c": true, ".h": true, ".cc": true, ".cpp": true, ".hpp": true, ".cs": true, ".go": true, ".java": true,
	".js": true, ".mjs": true, ".ts": true, ".tsx": true, ".jsx": true, ".kt": true, ".php": true, ".py": true,
	".rb": true, ".rs": true, ".scala": true, ".sh": true, ".sql": true, ".swift": true,
}

// fileError fails a vector store file with last_error {code, message}; the
// message is for the owner and never holds content.
type fileError struct{ code, message string }

func (e *fileError) Error() string { return "vectorstores: " + e.code + ": " + e.message }

// errDetached stops indexing a file that was detached (or whose store was
// deleted) meanwhile.
var errDetached = errors.New("vectorstores: file detached while indexing")

// job is a file to index: an in_progress row.
type job struct {
	storeID, fileID, owner, filename string
	gen                              int64
	chunkTokens, overlap             int
}

// pending returns up to limit files waiting to be indexed, oldest first.
func (s *Service) pending(ctx context.Context, limit int) ([]job, error) {
	rows, err := s.db.QueryContext(ctx, `SELECT store_id, file_id, owner, filename, gen, chunk_tokens, overlap
		FROM store_files WHERE status = ? ORDER BY created_at LIMIT ?`, statusInProgress, limit)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []job
	for rows.Next() {
		var j job
		if err := rows.Scan(&j.storeID, &j.fileID, &j.owner, &j.filename, &j.gen, &j.chunkTokens, &j.overlap); err != nil {
			return nil, err
		}
		out = append(out, j)
	}
	return out, rows.Err()
}

// index indexes one file and records the outcome. A file interrupted by
// shutdown stays in_progress and is indexed again by the next Run.
func (s *Service) index(ctx context.Context, j job) {
	start := time.Now()
	n, usage, err := s.indexFile(ctx, j)
	if ctx.Err() != nil {
		return
	}
	status, code, msg := statusCompleted, "", ""
	if err != nil {
		if errors.Is(err, errDetached) {
			s.log.Info("vectorstores: file detached while indexing", "store", j.storeID, "file", j.fileID)
			return
		}
		status, usage = statusFailed, 0
		var fe *fileError
		var ee *embedError
		switch {
		case errors.As(err, &fe):
			code, msg = fe.code, fe.message
		case errors.As(err, &ee):
			code = codeServer
			msg = fmt.Sprintf("The file's chunks could not be embedded: the embeddings request failed with status %d.", ee.status)
			if ee.message != "" {
				msg += " " + ee.message
			}
		default:
			code, msg = codeServer, "The file could not be indexed."
		}
		s.log.Warn("vectorstores: file indexing failed", "store", j.storeID, "file", j.fileID, "code", code, "err", err)
	}
	// Recorded even if the service is stopping now: the work is done.
	fctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	if err := s.finish(fctx, j, status, code, msg, usage); err != nil {
		s.log.Error("vectorstores: record indexing outcome", "store", j.storeID, "file", j.fileID, "err", err)
		return
	}
	if status == statusCompleted {
		s.log.Info("vectorstores: file indexed", "store", j.storeID, "file", j.fileID, "chunks", n,
			"usage_bytes", usage, "elapsed", time.Since(start).Round(time.Millisecond))
	}
}

// finish records a file's outcome, if the file is still the attach this
// job indexed. A failed file keeps no chunks.
func (s *Service) finish(ctx context.Context, j job, status, code, msg string, usage int64) error {
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer tx.Rollback()
	chunks := "chunks"
	if status != statusCompleted {
		chunks = "0"
	}
	if _, err := tx.ExecContext(ctx, `UPDATE store_files SET status = ?, error_code = ?, error_message = ?, usage_bytes = ?, chunks = `+chunks+`
		WHERE store_id = ? AND file_id = ? AND gen = ? AND status = ?`,
		status, nullString(code), nullString(msg), usage, j.storeID, j.fileID, j.gen, statusInProgress); err != nil {
		return err
	}
	if status != statusCompleted {
		if _, err := tx.ExecContext(ctx, `DELETE FROM chunks WHERE store_id = ? AND file_id = ? AND gen = ?`,
			j.storeID, j.fileID, j.gen); err != nil {
			return err
		}
		if err := envelope.Delete(ctx, tx, chunkKeyID(j.storeID, j.fileID, j.gen)); err != nil {
			return err
		}
	}
	return tx.Commit()
}

// indexFile chunks, embeds and stores a file, returning its chunk count
// and usage in bytes (chunk text and vectors).
func (s *Service) indexFile(ctx context.Context, j job) (int, int64, error) {
	// Chunks of an attempt a crash interrupted; a new data key seals this
	// attempt's.
	dk, err := s.resetChunks(ctx, j)
	if err != nil {
		return 0, 0, err
	}
	ext := strings.ToLower(path.Ext(j.filename))
	if !supportedExt[ext] {
		return 0, 0, &fileError{code: codeUnsupported, message: fmt.Sprintf(
			"Files of type '%s' are not supported for file search on this gateway: only text files (such as .txt, .md, .json, .jsonl, .csv, .html and source code) are.", ext)}
	}
	_, fh, err := s.files.Open(ctx, j.owner, j.fileID)
	if errors.Is(err, files.ErrNotFound) {
		return 0, 0, &fileError{code: codeInvalid, message: "The file was deleted before it could be indexed."}
	}
	if err != nil {
		return 0, 0, err
	}
	defer fh.Close()

	ch := newChunker(fh, s.tok, j.chunkTokens, j.overlap, MaxFileTokens)
	var (
		batch  []string
		tokens int
		seq    int
		usage  int64
	)
	flush := func() error {
		if len(batch) == 0 {
			return nil
		}
		// Checked before the embeddings are paid for, and again, in the
		// transaction, as the chunks are stored.
		if err := s.checkChunkLimits(ctx, s.db, j, len(batch)); err != nil {
			return err
		}
		vecs, err := s.embed(ctx, j.owner, batch)
		if err != nil {
			return err
		}
		n, err := s.insertChunks(ctx, j, dk, seq, batch, vecs)
		if err != nil {
			return err
		}
		seq += len(batch)
		usage += n
		batch, tokens = batch[:0], 0
		return nil
	}
	for {
		text, ok, err := ch.Next()
		switch {
		case errors.Is(err, errNotText):
			return 0, 0, &fileError{code: codeInvalid, message: "The file is not valid UTF-8 text."}
		case errors.Is(err, errTooManyTokens):
			return 0, 0, &fileError{code: codeInvalid, message: fmt.Sprintf("The file has more than %d tokens.", MaxFileTokens)}
		case err != nil:
			return 0, 0, fmt.Errorf("vectorstores: read %s: %w", j.fileID, err)
		}
		if !ok {
			break
		}
		n := s.tok.Count(text)
		if len(batch) == embedBatchInputs || (len(batch) > 0 && tokens+n > embedBatchTokens) {
			if err := flush(); err != nil {
				return 0, 0, err
			}
		}
		batch = append(batch, text)
		tokens += n
	}
	if err := flush(); err != nil {
		return 0, 0, err
	}
	return seq, usage, nil
}

// insertChunks stores a batch of chunks, if the file is still the attach
// being indexed (else errDetached: nothing is written). It returns the
// bytes stored.
func (s *Service) insertChunks(ctx context.Context, j job, dk *envelope.DataKey, seq int, texts []string, vecs [][]float32) (int64, error) {
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return 0, err
	}
	defer tx.Rollback()
	var one int
	if err := tx.QueryRowContext(ctx, `SELECT 1 FROM store_files WHERE store_id = ? AND file_id = ? AND gen = ? AND status = ?`,
		j.storeID, j.fileID, j.gen, statusInProgress).Scan(&one); errors.Is(err, sql.ErrNoRows) {
		return 0, errDetached
	} else if err != nil {
		return 0, err
	}
	if err := s.checkChunkLimits(ctx, tx, j, len(texts)); err != nil {
		return 0, err
	}
	if _, err := tx.ExecContext(ctx, `UPDATE store_files SET chunks = chunks + ? WHERE store_id = ? AND file_id = ? AND gen = ?`,
		len(texts), j.storeID, j.fileID, j.gen); err != nil {
		return 0, err
	}
	stmt, err := tx.PrepareContext(ctx, `INSERT INTO chunks (store_id, file_id, gen, seq, text, sealed_text, vector) VALUES (?, ?, ?, ?, '', ?, ?)`)
	if err != nil {
		return 0, err
	}
	defer stmt.Close()
	var n int64
	for i, text := range texts {
		v := encodeVector(vecs[i])
		sealed := dk.Seal(chunkField(int64(seq+i)), []byte(text))
		if _, err := stmt.ExecContext(ctx, j.storeID, j.fileID, j.gen, seq+i, sealed, v); err != nil {
			return 0, err
		}
		n += int64(len(text) + len(v))
	}
	return n, tx.Commit()
}

// resetChunks deletes the chunks of j's generation and zeroes its count,
// and makes the generation a new data key for its chunks (errDetached if
// the file is no longer attached: no key is left behind).
func (s *Service) resetChunks(ctx context.Context, j job) (*envelope.DataKey, error) {
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return nil, err
	}
	defer tx.Rollback()
	if _, err := tx.ExecContext(ctx, `DELETE FROM chunks WHERE store_id = ? AND file_id = ? AND gen = ?`,
		j.storeID, j.fileID, j.gen); err != nil {
		return nil, err
	}
	res, err := tx.ExecContext(ctx, `UPDATE store_files SET chunks = 0 WHERE store_id = ? AND file_id = ? AND gen = ?`,
		j.storeID, j.fileID, j.gen)
	if err != nil {
		return nil, err
	}
	if n, err := res.RowsAffected(); err != nil {
		return nil, err
	} else if n == 0 {
		return nil, errDetached
	}
	kid := chunkKeyID(j.storeID, j.fileID, j.gen)
	if err := envelope.Delete(ctx, tx, kid); err != nil {
		return nil, err
	}
	dk, err := s.keys.Create(ctx, tx, kid)
	if err != nil {
		return nil, err
	}
	return dk, tx.Commit()
}

type querier interface {
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
}

// checkChunkLimits fails j (a *fileError naming the limit) if n more chunks
// would take its store past maxStore or its owner past maxOwner. The counts
// include the chunks j stored so far, and those of files being indexed.
func (s *Service) checkChunkLimits(ctx context.Context, q querier, j job, n int) error {
	var inStore, ofOwner int64
	if err := q.QueryRowContext(ctx, `SELECT
		(SELECT COALESCE(SUM(chunks), 0) FROM store_files WHERE store_id = ?),
		(SELECT COALESCE(SUM(chunks), 0) FROM store_files WHERE owner = ?)`,
		j.storeID, j.owner).Scan(&inStore, &ofOwner); err != nil {
		return err
	}
	switch {
	case inStore+int64(n) > s.maxStore:
		return &fileError{code: codeInvalid, message: fmt.Sprintf(
			"Indexing this file would take the vector store past its limit of %d chunks. "+
				"Detach files from the store, or use larger chunks (max_chunk_size_tokens) or less overlap.", s.maxStore)}
	case ofOwner+int64(n) > s.maxOwner:
		return &fileError{code: codeInvalid, message: fmt.Sprintf(
			"Indexing this file would take your vector stores past their limit of %d chunks in all. "+
				"Delete vector stores or detach files you no longer search.", s.maxOwner)}
	}
	return nil
}
