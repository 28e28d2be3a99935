package batches

import (
	"context"
	"strings"
	"testing"
)

// TestBacklogMetrics: the backlog gauges count unfinished batches by status
// and the unanswered lines of those in progress; finished ones are left out.
func TestBacklogMetrics(t *testing.T) {
	e := newEnv(t, envConfig{}) // no runner: the rows stay as written
	ctx := context.Background()
	for _, r := range []struct {
		id, status               string
		total, completed, failed int64
	}{
		{"batch_a", StatusInProgress, 10, 3, 1},
		{"batch_b", StatusInProgress, 5, 0, 0},
		{"batch_c", StatusValidating, 7, 0, 0},
		{"batch_d", StatusCompleted, 9, 9, 0},
	} {
		b := Batch{ID: r.id, Owner: "key_o", Endpoint: "/v1/chat/completions", InputFileID: "file-x",
			CompletionWindow: "24h", Status: r.status, CreatedAt: 1, ExpiresAt: 2,
			Counts: Counts{Total: r.total, Completed: r.completed, Failed: r.failed}}
		if err := e.svc.store.Create(ctx, b, 100, nil); err != nil {
			t.Fatal(err)
		}
		if err := e.svc.store.Update(ctx, r.id, Change{Counts: &b.Counts}); err != nil {
			t.Fatal(err)
		}
	}
	var b strings.Builder
	if err := e.svc.WritePrometheus(ctx, &b); err != nil {
		t.Fatal(err)
	}
	for _, line := range []string{
		`switchyard_batches{status="validating"} 1`,
		`switchyard_batches{status="in_progress"} 2`,
		`switchyard_batches{status="finalizing"} 0`,
		`switchyard_batches{status="cancelling"} 0`,
		"switchyard_batch_lines_pending 11", // (10-3-1) + 5
	} {
		if !strings.Contains(b.String(), line+"\n") {
			t.Errorf("missing %q in\n%s", line, b.String())
		}
	}
}
