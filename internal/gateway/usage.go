package gateway

import (
	"context"
	"log/slog"
	"time"

	"github.com/switchyard-ai/switchyard/extproc"
	"github.com/switchyard-ai/switchyard/internal/config"
	"github.com/switchyard-ai/switchyard/internal/keys"
	"github.com/switchyard-ai/switchyard/internal/pgdb"
	"github.com/switchyard-ai/switchyard/internal/usage"
)

// usageFlushTimeout bounds the last flush when the gateway closes.
const usageFlushTimeout = 10 * time.Second

// usageSink feeds extproc's usage to the usage Recorder (and to an extra
// recorder the embedder passed in), and gives extproc the spend its
// budgets are checked against.
type usageSink struct {
	rec  *usage.Recorder
	also extproc.UsageRecorder
}

func (s usageSink) RecordUsage(ctx context.Context, k *keys.Key, model string, u extproc.Usage) {
	s.rec.Record(usage.Event{Time: time.Now(), KeyID: k.ID, LimitID: k.LimitID(), Model: model,
		Input: u.PromptTokens, Cached: u.CachedTokens, Output: u.CompletionTokens, CostMicros: u.CostMicros, Error: u.Error})
	if s.also != nil {
		s.also.RecordUsage(ctx, k, model, u)
	}
}

func (s usageSink) MonthSpend(limitID string, now time.Time) int64 {
	return s.rec.MonthSpend(limitID, now)
}

// startUsage opens the usage store storage names (openUsageStore) and
// starts its Recorder. The closers it returns write what is left, then
// close the store: run them after extproc has stopped.
func startUsage(ctx context.Context, st config.Storage, dataDir string, interval time.Duration, log *slog.Logger) (*usage.Recorder, []func(), error) {
	store, ro, err := openUsageStore(ctx, st, dataDir)
	if err != nil {
		return nil, nil, err
	}
	ro.FlushInterval, ro.Logger = interval, log
	rec, err := usage.NewRecorder(ctx, store, ro)
	if err != nil {
		_ = store.Close()
		return nil, nil, err
	}
	rec.Start()
	closers := []func(){
		func() { _ = store.Close() },
		func() {
			ctx, cancel := context.WithTimeout(context.Background(), usageFlushTimeout)
			defer cancel()
			if err := rec.Close(ctx); err != nil {
				log.Error("usage: the last flush failed; the last seconds of usage are lost", "error", err)
			}
		},
	}
	return rec, closers, nil
}

// OpenUsageStore opens the usage store storage names, for reading it
// (`switchyard usage`): PostgreSQL, or SQLite in dataDir.
func OpenUsageStore(ctx context.Context, st config.Storage, dataDir string) (usage.Store, error) {
	s, _, err := openUsageStore(ctx, st, dataDir)
	return s, err
}

// openUsageStore opens the usage store: PostgreSQL when
// storage.metadata.kind is postgres, shared by every replica, whose month
// spend the Recorder then reads back at every flush (so a budget spent
// through other replicas is seen within two flush intervals); otherwise
// SQLite in dataDir.
func openUsageStore(ctx context.Context, st config.Storage, dataDir string) (usage.Store, usage.RecorderOptions, error) {
	if st.Metadata.Kind != config.MetadataPostgres {
		s, err := usage.OpenSQLite(ctx, dataDir)
		return s, usage.RecorderOptions{}, err
	}
	dsn, err := storageDSN(st.Metadata)
	if err != nil {
		return nil, usage.RecorderOptions{}, err
	}
	s, err := usage.OpenPostgres(ctx, dsn, pgdb.Pool{MaxConns: st.Metadata.MaxConns})
	if err != nil {
		return nil, usage.RecorderOptions{}, err
	}
	// Any interval shorter than the flush interval reloads at every flush.
	return s, usage.RecorderOptions{ReloadInterval: time.Nanosecond}, nil
}
