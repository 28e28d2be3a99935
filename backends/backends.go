// Package backends owns assembling the stateful API services (files,
// batches, responses, vector stores) behind one http.Handler, each behind the caller
// check (backends/caller), and their lifecycles. docs/backends-design.md is
// the contract with extproc and the data plane.
package backends

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"sync"
	"time"

	"github.com/switchyard-ai/switchyard/backends/batches"
	"github.com/switchyard-ai/switchyard/backends/caller"
	"github.com/switchyard-ai/switchyard/backends/conversations"
	"github.com/switchyard-ai/switchyard/backends/files"
	"github.com/switchyard-ai/switchyard/backends/onbehalf"
	"github.com/switchyard-ai/switchyard/backends/responses"
	"github.com/switchyard-ai/switchyard/backends/vectorstores"
	"github.com/switchyard-ai/switchyard/internal/apierror"
)

// Options configure the backends.
type Options struct {
	// DataDir holds each service's database and the file blobs.
	DataDir string
	// Token is the internal token extproc sends with the caller headers.
	Token string
	// Gateway sends batch lines and responses' model calls through the
	// gateway on an owner's behalf.
	Gateway *onbehalf.Client
	// Search, when set, serves the Responses API's web_search tool.
	Search responses.Searcher
	// CodeInterpreter, when set, serves the Responses API's
	// code_interpreter tool.
	CodeInterpreter responses.CodeRunner
	// BatchStore and BatchResults, when set, keep batches and their line
	// results (fleet mode: batches.PostgresStore and PostgresResults);
	// nil: SQLite and the local spool under DataDir. The batches service
	// closes BatchStore.
	BatchStore   batches.Store
	BatchResults batches.Results
	// BatchLease is how long a replica's claim on a running batch lasts
	// without renewal (batches.Options.Lease; 0: its default).
	BatchLease time.Duration
	// EmbeddingModel, when set, turns on vector stores and the file_search
	// tool: chunks and queries are embedded with it through the gateway.
	EmbeddingModel string
	// BatchLinesPerDay is a tier's daily batch line allowance
	// (batches.Options.LinesPerDay); nil: none is checked.
	BatchLinesPerDay func(tier string) (lines int64, limited bool)
	// BatchPaceAfter times the batch runner's pauses for a key's tokens
	// per minute (batches.Options.After); nil: time.After.
	BatchPaceAfter func(time.Duration) <-chan time.Time
	// ResponsesStore and VectorStore, when set, keep the stored responses
	// and the vector stores instead of the SQLite databases in DataDir (a
	// fleet's Postgres stores). The Service closes them, also when New
	// fails.
	ResponsesStore responses.Store
	VectorStore    vectorstores.Store
	// ConversationStore, when set, keeps the conversations instead of
	// DataDir/conversations.db (a fleet's Postgres store). The Service
	// closes it, also when New fails.
	ConversationStore conversations.Store
	// Tokenizers names each model's tokenizer, which the Responses API's
	// truncation "auto" counts with (responses.Options.Tokenizers).
	Tokenizers map[string]string
	// Background configures background responses; its Store, when set,
	// keeps their runs (a fleet's Postgres store), nil: SQLite in DataDir.
	// The Service closes the Store, also when New fails.
	Background responses.BackgroundOptions
	// Files, when set, is the files service to use (fleet storage) instead
	// of the one in DataDir; Close closes it.
	Files  *files.Store
	Logger *slog.Logger
}

// Service is the running backends.
type Service struct {
	files     *files.Store
	batches   *batches.Service
	responses *responses.Service
	convs     *conversations.Service
	vectors   *vectorstores.Service // nil without an embedding model
	handler   http.Handler
	cancel    context.CancelFunc
	running   sync.WaitGroup
}

// New opens the stores and starts the batch runner (resuming unfinished
// batches) and the retention sweepers (files here; responses sweep their
// own).
func New(ctx context.Context, opts Options) (_ *Service, err error) {
	log := opts.Logger
	if log == nil {
		log = slog.Default()
	}
	s := &Service{}
	// The stores passed in not yet handed to their services are closed
	// here if New fails, or (the vector store) when vector stores are off.
	respStore, vecStore, convStore, bgStore := opts.ResponsesStore, opts.VectorStore, opts.ConversationStore, opts.Background.Store
	defer func() {
		if err != nil {
			s.Close()
			if respStore != nil {
				_ = respStore.Close()
			}
			if convStore != nil {
				_ = convStore.Close()
			}
			if bgStore != nil {
				_ = bgStore.Close()
			}
		}
		if vecStore != nil {
			_ = vecStore.Close()
		}
	}()
	if s.files = opts.Files; s.files == nil {
		if s.files, err = files.Open(ctx, opts.DataDir, files.Options{Logger: log.With("service", "files")}); err != nil {
			return nil, err
		}
	}
	if s.batches, err = batches.New(ctx, batches.Options{DataDir: opts.DataDir, Files: s.files, Gateway: opts.Gateway,
		Store: opts.BatchStore, Results: opts.BatchResults, Lease: opts.BatchLease,
		LinesPerDay: opts.BatchLinesPerDay, After: opts.BatchPaceAfter, Logger: log.With("service", "batches")}); err != nil {
		return nil, err
	}
	var fileSearch responses.FileSearcher // a nil *vectorstores.Service must not become a non-nil interface
	if opts.EmbeddingModel != "" {
		if s.vectors, err = vectorstores.New(ctx, vectorstores.Options{DataDir: opts.DataDir, Files: s.files, Store: vecStore,
			Gateway: opts.Gateway, EmbeddingModel: opts.EmbeddingModel, Logger: log.With("service", "vectorstores")}); err != nil {
			return nil, err
		}
		vecStore = nil // the service's now
		fileSearch = s.vectors
	}
	if s.convs, err = conversations.New(ctx, conversations.Options{DataDir: opts.DataDir, Store: convStore,
		Logger: log.With("service", "conversations")}); err != nil {
		return nil, err
	}
	convStore = nil // the service's now
	if s.responses, err = responses.New(ctx, responses.Options{DataDir: opts.DataDir, Gateway: opts.Gateway, Store: respStore,
		Search: opts.Search, FileSearch: fileSearch, CodeInterpreter: opts.CodeInterpreter,
		Conversations: s.convs, Tokenizers: opts.Tokenizers, Background: opts.Background,
		Logger: log.With("service", "responses")}); err != nil {
		return nil, err
	}
	respStore, bgStore = nil, nil
	mux := http.NewServeMux()
	mux.Handle("/v1/files", s.files.Handler())
	mux.Handle("/v1/files/", s.files.Handler())
	mux.Handle("/v1/batches", s.batches.Handler())
	mux.Handle("/v1/batches/", s.batches.Handler())
	mux.Handle("/v1/responses", s.responses.Handler())
	mux.Handle("/v1/responses/", s.responses.Handler())
	mux.Handle("/v1/conversations", s.convs.Handler())
	mux.Handle("/v1/conversations/", s.convs.Handler())
	if s.vectors != nil {
		mux.Handle("/v1/vector_stores", s.vectors.Handler())
		mux.Handle("/v1/vector_stores/", s.vectors.Handler())
	}
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		apierror.NotFound(r.URL.Path).Write(w)
	})
	s.handler = caller.Require(opts.Token, log, mux)

	runCtx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	s.cancel = cancel
	runs := map[string]func(context.Context) error{"batch runner": s.batches.Run, "file sweeper": s.files.Run}
	if s.vectors != nil {
		runs["vector store indexer"] = s.vectors.Run
	}
	for name, run := range runs {
		s.running.Go(func() {
			if err := run(runCtx); err != nil && !errors.Is(err, context.Canceled) {
				log.Error(name+" stopped", "error", err)
			}
		})
	}
	return s, nil
}

// Handler serves /v1/files, /v1/batches, /v1/responses,
// /v1/conversations and, with an embedding model, /v1/vector_stores.
func (s *Service) Handler() http.Handler { return s.handler }

// Close stops the runner (in-flight lines are resumed at the next start)
// and closes the stores.
func (s *Service) Close() {
	if s.cancel != nil {
		s.cancel()
		s.running.Wait()
	}
	if s.responses != nil {
		_ = s.responses.Close()
	}
	if s.convs != nil {
		_ = s.convs.Close()
	}
	if s.batches != nil {
		_ = s.batches.Close()
	}
	if s.vectors != nil {
		_ = s.vectors.Close()
	}
	if s.files != nil {
		_ = s.files.Close()
	}
}

// WritePrometheus writes the backends' metrics: the batch backlog.
func (s *Service) WritePrometheus(ctx context.Context, w io.Writer) error {
	return s.batches.WritePrometheus(ctx, w)
}
