package batches

import (
	"context"
	"fmt"
	"io"
	"strings"
)

// backlogStatuses are the statuses of unfinished batches, in the order the
// gauge lists them.
var backlogStatuses = []string{StatusValidating, StatusInProgress, StatusFinalizing, StatusCancelling}

// WritePrometheus writes the batch backlog, read from the store at each
// scrape through the Store interface (so every implementation serves it):
// the batches not yet in a terminal state by status, and the lines of
// in-progress batches not yet answered.
func (s *Service) WritePrometheus(ctx context.Context, w io.Writer) error {
	counts := map[string]int64{}
	for _, st := range backlogStatuses {
		counts[st] = 0
	}
	ids, err := s.store.Active(ctx)
	if err != nil {
		return fmt.Errorf("batches: backlog: %w", err)
	}
	var pending int64
	for _, id := range ids {
		b, err := s.store.Load(ctx, id)
		if err != nil {
			continue // finished or deleted since Active: not backlog
		}
		if _, ok := counts[b.Status]; !ok {
			continue
		}
		counts[b.Status]++
		if b.Status == StatusInProgress {
			pending += max(b.Counts.Total-b.Counts.Completed-b.Counts.Failed, 0)
		}
	}
	var sb strings.Builder
	sb.WriteString("# HELP switchyard_batches Batches not yet finished, by status.\n# TYPE switchyard_batches gauge\n")
	for _, st := range backlogStatuses {
		fmt.Fprintf(&sb, "switchyard_batches{status=%q} %d\n", st, counts[st])
	}
	fmt.Fprintf(&sb, "# HELP switchyard_batch_lines_pending Lines of in-progress batches not yet answered.\n# TYPE switchyard_batch_lines_pending gauge\nswitchyard_batch_lines_pending %d\n", pending)
	_, err = io.WriteString(w, sb.String())
	return err
}
