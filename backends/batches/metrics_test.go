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
		total, completed, failed int
	}{
		{"batch_a", statusInProgress, 10, 3, 1},
		{"batch_b", statusInProgress, 5, 0, 0},
		{"batch_c", statusValidating, 7, 0, 0},
		{"batch_d", statusCompleted, 9, 9, 0},
	} {
		if _, err := e.svc.store.db.ExecContext(ctx, `INSERT INTO batches
			(id, owner, endpoint, input_file_id, completion_window, status, created_at, expires_at, total, completed, failed)
			VALUES (?, 'key_o', '/v1/chat/completions', 'file-x', '24h', ?, 1, 2, ?, ?, ?)`,
			r.id, r.status, r.total, r.completed, r.failed); err != nil {
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
