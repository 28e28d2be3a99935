package vectorstores

import (
	"context"
	"errors"
	"fmt"
	"path"
	"strings"
	"time"

	"github.com/switchyard-ai/switchyard/backends/files"
	"github.com/switchyard-ai/switchyard/internal/envelope"
)

// supportedExt are the file types indexed: OpenAI's text types for file
// search and common data and markup formats, read as UTF-8 text, and PDF,
// DOCX and HTML, whose text is extracted first (extract.go).
var supportedExt = map[string]bool{
	".txt": true, ".md": true, ".markdown": true, ".rst": true, ".tex": true, ".log": true,
	".json": true, ".jsonl": true, ".csv": true, ".tsv": true, ".xml": true, ".yaml": true, ".yml": true, ".toml": true,
	".html": true, ".htm": true, ".css": true, ".pdf": true, ".docx": true,
	".c": true, ".h": true, ".cc": true, ".cpp": true, ".hpp": true, ".cs": true, ".go": true, ".java": true,
	".js": true, ".mjs": true, ".ts": true, ".tsx": true, ".jsx": true, ".kt": true, ".php": true, ".py": true,
	".rb": true, ".rs": true, ".scala": true, ".sh": true, ".sql": true, ".swift": true,
}

// fileError fails a vector store file with last_error {code, message}; the
// message is for the owner and never holds content.
type fileError struct{ code, message string }

func (e *fileError) Error() string { return "vectorstores: " + e.code + ": " + e.message }

// pending returns up to limit files waiting to be indexed, oldest first.
func (s *Service) pending(ctx context.Context, limit int) ([]Job, error) {
	return s.store.Pending(ctx, limit)
}

// index indexes one file and records the outcome. A file interrupted by
// shutdown stays in_progress and is indexed again by the next Run.
func (s *Service) index(ctx context.Context, j Job) {
	start := time.Now()
	n, usage, err := s.indexFile(ctx, j)
	if ctx.Err() != nil {
		return
	}
	status, code, msg := StatusCompleted, "", ""
	if err != nil {
		if errors.Is(err, ErrLeaseLost) {
			s.log.Warn("vectorstores: indexing stopped: another replica took the file over", "store", j.StoreID, "file", j.FileID)
			return
		}
		if errors.Is(err, ErrDetached) {
			s.log.Info("vectorstores: file detached while indexing", "store", j.StoreID, "file", j.FileID)
			return
		}
		status, usage = StatusFailed, 0
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
		s.log.Warn("vectorstores: file indexing failed", "store", j.StoreID, "file", j.FileID, "code", code, "err", err)
	}
	// Recorded even if the service is stopping now: the work is done.
	fctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	if err := s.finish(fctx, j, status, code, msg, usage); err != nil {
		s.log.Error("vectorstores: record indexing outcome", "store", j.StoreID, "file", j.FileID, "err", err)
		return
	}
	if status == StatusCompleted {
		s.log.Info("vectorstores: file indexed", "store", j.StoreID, "file", j.FileID, "chunks", n,
			"usage_bytes", usage, "elapsed", time.Since(start).Round(time.Millisecond))
	}
}

// finish records a file's outcome, if the file is still the attach this
// job indexed. A failed file keeps no chunks.
func (s *Service) finish(ctx context.Context, j Job, status, code, msg string, usage int64) error {
	return s.store.Finish(ctx, j, status, code, msg, usage)
}

// indexFile chunks, embeds and stores a file, returning its chunk count
// and usage in bytes (chunk text and vectors).
func (s *Service) indexFile(ctx context.Context, j Job) (int, int64, error) {
	// Chunks of an attempt a crash interrupted; a new data key seals this
	// attempt's.
	dk, err := s.resetChunks(ctx, j)
	if err != nil {
		return 0, 0, err
	}
	ext := strings.ToLower(path.Ext(j.Filename))
	if !supportedExt[ext] {
		return 0, 0, &fileError{code: codeUnsupported, message: fmt.Sprintf(
			"Files of type '%s' are not supported for file search on this gateway: only PDF, DOCX, HTML and text files (such as .txt, .md, .json, .jsonl, .csv and source code) are.", ext)}
	}
	f, fh, err := s.files.Open(ctx, j.Owner, j.FileID)
	if errors.Is(err, files.ErrNotFound) {
		return 0, 0, &fileError{code: codeInvalid, message: "The file was deleted before it could be indexed."}
	}
	if err != nil {
		return 0, 0, err
	}
	defer fh.Close()
	text, err := extractText(ext, fh, fh, f.Bytes)
	if err != nil {
		return 0, 0, err
	}

	ch := newChunker(text, s.tok, j.ChunkTokens, j.Overlap, MaxFileTokens)
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
		if err := s.checkChunkLimits(ctx, j, len(batch)); err != nil {
			return err
		}
		vecs, err := s.embed(ctx, j.Owner, batch)
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
			return 0, 0, fmt.Errorf("vectorstores: read %s: %w", j.FileID, err)
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

// insertChunks seals and stores a batch of chunks, if the file is still the
// attach being indexed (else ErrDetached: nothing is written), and the
// chunk limits, checked again as they are stored, allow. It returns the
// bytes stored (text and vectors).
func (s *Service) insertChunks(ctx context.Context, j Job, dk *envelope.DataKey, seq int, texts []string, vecs [][]float32) (int64, error) {
	chunks := make([]Chunk, len(texts))
	var n int64
	for i, text := range texts {
		v := encodeVector(vecs[i])
		chunks[i] = Chunk{Seq: int64(seq + i), Sealed: dk.Seal(chunkField(int64(seq+i)), []byte(text)), Vector: v}
		n += int64(len(text) + len(v))
	}
	err := s.store.InsertChunks(ctx, j, chunks, func(inStore, ofOwner int64) error {
		return s.chunkLimitError(inStore, ofOwner, len(texts))
	})
	if err != nil {
		return 0, err
	}
	return n, nil
}

// resetChunks deletes the chunks of j's generation and zeroes its count,
// and gives the generation a new data key for its chunks (ErrDetached if
// the file is no longer attached: no key is left behind).
func (s *Service) resetChunks(ctx context.Context, j Job) (*envelope.DataKey, error) {
	dk, wrapped, err := s.keys.NewDataKey(chunkKeyID(j.StoreID, j.FileID, j.Gen))
	if err != nil {
		return nil, err
	}
	if err := s.store.ResetChunks(ctx, j, wrapped); err != nil {
		return nil, err
	}
	return dk, nil
}

// checkChunkLimits fails j (a *fileError naming the limit) if n more chunks
// would take its store past maxStore or its owner past maxOwner. The counts
// include the chunks j stored so far, and those of files being indexed.
func (s *Service) checkChunkLimits(ctx context.Context, j Job, n int) error {
	inStore, ofOwner, err := s.store.ChunkCounts(ctx, j.StoreID, j.Owner)
	if err != nil {
		return err
	}
	return s.chunkLimitError(inStore, ofOwner, n)
}

// chunkLimitError is the *fileError of n more chunks in a store holding
// inStore of an owner holding ofOwner, nil if they fit.
func (s *Service) chunkLimitError(inStore, ofOwner int64, n int) error {
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
