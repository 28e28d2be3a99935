// Package vectorstores owns OpenAI's Vector Stores API of the gateway's
// backends (/v1/vector_stores): stores of an owner's uploaded files, the
// files attached to them, their indexing (chunking, embedding through the
// gateway's own /v1/embeddings on the owner's behalf), the search over them
// (POST /v1/vector_stores/{id}/search, and Search for the Responses API's
// file_search tool), and retention (expires_after, a sweeper). State lives
// in DATA_DIR/vectorstores.db: store and file rows, and each chunk's text
// with its embedding. docs/backends-design.md is the contract with extproc
// and the gateway.
//
// Indexing runs in Run, in the background, a bounded number of files at a
// time: attaching a file writes its row in_progress and wakes the indexer,
// which streams the file from the files store, cuts it into overlapping
// chunks of at most max_chunk_size_tokens tokens (the tokenizer package's
// cl100k_base, the encoding of OpenAI's embedding models), embeds them in
// batches and inserts them. A restart resumes files still in_progress. Only
// text files are indexed (.txt, .md, .json, .jsonl, .csv, .html, source
// code: supportedExt); other files fail with last_error unsupported_file.
//
// Chunks are bounded so that searches are: a store holds at most
// MaxStoreChunks (default 100,000) chunks and an owner's stores together at
// most MaxOwnerChunks (default 250,000). The indexer checks both before it
// embeds each batch of a file's chunks and again as it stores them; a file
// that would go past either fails (invalid_file, last_error naming the
// limit) and keeps no chunks. Detaching files or deleting stores makes
// room.
//
// Search is brute force over the chunks of the stores searched, streamed
// row by row from SQLite, keeping the best max_num_results in a heap; only
// chunks of files that are completed, and still attached, are ever read
// (every chunk carries its attach's generation, see store_files.gen). The
// score blends the embeddings' cosine similarity with lexical overlap (see
// score), so keyword queries rank the chunk that contains them first even
// with embeddings that are not semantic, such as the fake provider's.
//
// File batches (/v1/vector_stores/{id}/file_batches) attach up to
// MaxBatchFiles files in one request; a batch's status and file_counts are
// its files', and cancelling it cancels those still in progress at once.
//
// What OpenAI offers and this gateway refuses with a 400 naming the
// parameter: rewrite_query true and non-text files. An expired store is
// gone: 404, like an expired file, and the sweeper deletes it (OpenAI
// shows status "expired" for a while).
package vectorstores

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"sync"
	"time"

	"github.com/switchyard-ai/switchyard/backends/caller"
	"github.com/switchyard-ai/switchyard/backends/files"
	"github.com/switchyard-ai/switchyard/internal/envelope"
	"github.com/switchyard-ai/switchyard/internal/tokenizer"
)

// Files is the owner's uploaded files; *files.Store implements it. Both
// methods return an error wrapping files.ErrNotFound for a file that is not
// the owner's (or no longer exists).
type Files interface {
	Get(ctx context.Context, owner, id string) (files.File, error)
	Open(ctx context.Context, owner, id string) (files.File, files.Content, error)
}

// Gateway sends requests to the gateway's public API on behalf of an owner;
// *onbehalf.Client implements it. A non-2xx answer is not an error.
type Gateway interface {
	Do(ctx context.Context, owner, origin, method, path string, body io.Reader) (*http.Response, error)
}

// Options configures a Service.
type Options struct {
	// DataDir holds vectorstores.db (when Store is nil) and the key file
	// of encryption at rest (when Keys is nil).
	DataDir string
	// Store keeps the stores, files and chunks (default: the SQLite store
	// in DataDir/vectorstores.db, OpenSQLiteStore). The Service closes it.
	Store Store
	// Keys seals the chunks Store keeps (default: envelope.Load(DataDir)).
	Keys *envelope.Keyring
	// Files reads the files attached to stores.
	Files Files
	// Gateway embeds chunks and queries through /v1/embeddings.
	Gateway Gateway
	// EmbeddingModel is the model id sent to /v1/embeddings, e.g.
	// "openai/text-embedding-3-small" (required). Changing it makes the
	// chunks embedded before incomparable: they are skipped by searches
	// until their files are attached again.
	EmbeddingModel string
	// Origin is the x-switchyard-origin of the embedding calls; "":
	// caller.OriginResponses, so indexing and searches count against the
	// owner's per-minute limits like the owner's own embeddings do.
	Origin string
	// Tokenizer names the tokenizer chunk sizes are counted in
	// (tokenizer.For); "": cl100k_base, the encoding of OpenAI's embedding
	// models.
	Tokenizer string
	// MaxStoreChunks is the most chunks one store may hold; 0:
	// DefaultMaxStoreChunks. A file whose chunks would take its store past
	// it fails with last_error naming the limit.
	MaxStoreChunks int64
	// MaxOwnerChunks is the most chunks all of an owner's stores may hold
	// together; 0: DefaultMaxOwnerChunks. A file whose chunks would take
	// the owner past it fails with last_error naming the limit.
	MaxOwnerChunks int64
	// Concurrency is how many files are indexed at once; 0: 4.
	Concurrency int
	// SweepInterval is how often expired stores and detached chunks are
	// deleted; 0: five minutes.
	SweepInterval time.Duration
	// Now is the clock; nil: time.Now.
	Now func() time.Time
	// Logger receives ids, statuses and counts, never file content or
	// queries; nil: slog.Default().
	Logger *slog.Logger
}

// Limits, OpenAI's where it documents them.
const (
	// MaxFileIDs is the most file_ids one create request may name.
	MaxFileIDs = 500
	// MaxBatchFiles is the most files (file_ids or files) one file batch
	// may name (OpenAI's limit).
	MaxBatchFiles = 2000
	// MaxFilesPerStore bounds a store's files.
	MaxFilesPerStore = 10_000
	// MaxFileTokens is the most tokens one file may have (OpenAI's limit
	// for file search).
	MaxFileTokens = 5_000_000
	// DefaultMaxStoreChunks and DefaultMaxOwnerChunks bound the chunks a
	// store, and all of an owner's stores, may hold (Options), and so the
	// cost of a search, which reads every chunk of the stores it searches:
	// at most min(stores × 100,000, 250,000) chunks. With the default
	// chunking (800 tokens, 400 overlap: a chunk per 400 tokens) a store
	// holds about 40 million tokens.
	DefaultMaxStoreChunks = 100_000
	DefaultMaxOwnerChunks = 250_000
	// MaxResults bounds max_num_results; DefaultResults is its default.
	MaxResults     = 50
	DefaultResults = 10
	// MaxQueries bounds the queries of one search.
	MaxQueries = 10
	// MaxQueryBytes bounds one query.
	MaxQueryBytes = 4096
	// Chunking: OpenAI's auto strategy and static bounds.
	AutoChunkTokens   = 800
	AutoOverlapTokens = 400
	MinChunkTokens    = 100
	MaxChunkTokens    = 4096
	// MinExpiresDays and MaxExpiresDays bound expires_after.days.
	MinExpiresDays = 1
	MaxExpiresDays = 365

	defaultConcurrency   = 4
	defaultSweepInterval = 5 * time.Minute
	dbFile               = "vectorstores.db"
	idPrefix             = "vs_"
	batchIDPrefix        = "vsfb_"
	idRandLen            = 24
)

// ErrNotFound is returned for a store that does not exist, belongs to
// another owner, or has expired: callers must not tell these apart.
var ErrNotFound = errors.New("vectorstores: not found")

// NotFoundError names the store that was not found; it matches ErrNotFound.
type NotFoundError struct{ ID string }

func (e *NotFoundError) Error() string        { return "vectorstores: vector store " + e.ID + " not found" }
func (e *NotFoundError) Is(target error) bool { return target == ErrNotFound }

// Result is one chunk found by Search.
type Result struct {
	FileID, Filename string
	// Score is in [0, 1], higher is better (see score).
	Score float64
	Text  string
	// Attributes is the vector store file's attributes as a JSON object,
	// or nil.
	Attributes []byte
}

// Service serves /v1/vector_stores and indexes and searches the stores.
type Service struct {
	store      Store
	keys       *envelope.Keyring // seals chunk text (seal.go)
	files      Files
	gw         Gateway
	model      string
	origin     string
	tok        tokenizer.Tokenizer
	workers    int
	maxStore   int64 // chunks per store
	maxOwner   int64 // chunks per owner
	sweepEvery time.Duration
	clock      func() time.Time
	log        *slog.Logger

	// wake tells Run that files were attached or detached.
	wake chan struct{}
	// active holds the files being indexed, by store and file id.
	mu     sync.Mutex
	active map[fileKey]bool
}

type fileKey struct{ store, file string }

// New opens the store (by default creating DATA_DIR/vectorstores.db if
// necessary). Files are
// indexed only while Run runs.
func New(ctx context.Context, opts Options) (*Service, error) {
	switch {
	case opts.DataDir == "" && (opts.Store == nil || opts.Keys == nil):
		return nil, errors.New("vectorstores: empty data directory")
	case opts.Files == nil:
		return nil, errors.New("vectorstores: no files store")
	case opts.Gateway == nil:
		return nil, errors.New("vectorstores: no gateway")
	case opts.EmbeddingModel == "":
		return nil, errors.New("vectorstores: no embedding model")
	}
	tokName := opts.Tokenizer
	if tokName == "" {
		tokName = tokenizer.CL100KBase
	}
	tok, err := tokenizer.For(tokName)
	if err != nil {
		return nil, fmt.Errorf("vectorstores: %w", err)
	}
	keys := opts.Keys
	if keys == nil {
		if keys, err = envelope.Load(opts.DataDir); err != nil {
			return nil, fmt.Errorf("vectorstores: open: %w", err)
		}
	}
	st := opts.Store
	if st == nil {
		if st, err = OpenSQLiteStore(ctx, opts.DataDir, keys, opts.Logger); err != nil {
			return nil, err
		}
	}
	s := &Service{
		store: st, keys: keys, files: opts.Files, gw: opts.Gateway, model: opts.EmbeddingModel, origin: opts.Origin,
		tok: tok, workers: opts.Concurrency, maxStore: opts.MaxStoreChunks, maxOwner: opts.MaxOwnerChunks, sweepEvery: opts.SweepInterval, clock: opts.Now, log: opts.Logger,
		wake: make(chan struct{}, 1), active: map[fileKey]bool{},
	}
	if s.origin == "" {
		s.origin = caller.OriginResponses
	}
	if s.workers <= 0 {
		s.workers = defaultConcurrency
	}
	if s.maxStore <= 0 {
		s.maxStore = DefaultMaxStoreChunks
	}
	if s.maxOwner <= 0 {
		s.maxOwner = DefaultMaxOwnerChunks
	}
	if s.sweepEvery <= 0 {
		s.sweepEvery = defaultSweepInterval
	}
	if s.clock == nil {
		s.clock = time.Now
	}
	if s.log == nil {
		s.log = slog.Default()
	}
	return s, nil
}

// Close closes the store; stop Run first.
func (s *Service) Close() error { return s.store.Close() }

// now is the clock at the nanosecond precision the database keeps.
func (s *Service) now() time.Time { return time.Unix(0, s.clock().UnixNano()).UTC() }

// poke wakes Run without blocking.
func (s *Service) poke() {
	select {
	case s.wake <- struct{}{}:
	default:
	}
}

// Run indexes attached files, a few at a time, and sweeps expired stores
// and the chunks of detached files every SweepInterval, until ctx ends; it
// then waits for the files being indexed to stop (they stay in_progress and
// resume at the next Run) and returns nil.
func (s *Service) Run(ctx context.Context) error {
	var wg sync.WaitGroup
	defer wg.Wait()
	sem := make(chan struct{}, s.workers)
	t := time.NewTicker(s.sweepEvery)
	defer t.Stop()
	s.sweep(ctx)
	for {
		jobs, err := s.pending(ctx, 2*s.workers)
		if err != nil && ctx.Err() == nil {
			s.log.Error("vectorstores: list files to index", "err", err)
		}
	dispatch:
		for _, j := range jobs {
			k := fileKey{j.StoreID, j.FileID}
			s.mu.Lock()
			busy := s.active[k]
			s.mu.Unlock()
			if busy {
				continue
			}
			select {
			case sem <- struct{}{}:
			default:
				break dispatch // all workers busy: one will poke when done
			}
			s.mu.Lock()
			s.active[k] = true
			s.mu.Unlock()
			wg.Go(func() {
				defer func() {
					s.mu.Lock()
					delete(s.active, k)
					s.mu.Unlock()
					<-sem
					s.poke()
				}()
				s.index(ctx, j)
			})
		}
		select {
		case <-ctx.Done():
			return nil
		case <-s.wake:
		case <-t.C:
			s.sweep(ctx)
		}
	}
}

const base62 = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"

// newID returns "vs_" and 24 random base62 characters.
func newID() string { return newIDWith(idPrefix) }

// newIDWith returns prefix and 24 random base62 characters.
func newIDWith(prefix string) string {
	out := make([]byte, 0, len(prefix)+idRandLen)
	out = append(out, prefix...)
	var buf [32]byte
	for len(out) < cap(out) {
		_, _ = rand.Read(buf[:]) // never fails (crypto/rand)
		for _, b := range buf {
			// 248 = 4 * 62: every character equally likely.
			if b < 248 && len(out) < cap(out) {
				out = append(out, base62[b%62])
			}
		}
	}
	return string(out)
}
