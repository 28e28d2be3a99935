package gateway

import (
	"context"
	"log/slog"
	"time"

	"github.com/switchyard-ai/switchyard/extproc"
	"github.com/switchyard-ai/switchyard/internal/keys"
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

// startUsage opens the usage store in dataDir and starts its Recorder. The
// closers it returns write what is left, then close the store: run them
// after extproc has stopped.
func startUsage(ctx context.Context, dataDir string, interval time.Duration, log *slog.Logger) (*usage.Recorder, []func(), error) {
	store, err := usage.OpenSQLite(ctx, dataDir)
	if err != nil {
		return nil, nil, err
	}
	rec, err := usage.NewRecorder(ctx, store, usage.RecorderOptions{FlushInterval: interval, Logger: log})
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
