package batches

import (
	"context"
	"fmt"
	"io"
	"strings"
)

// WritePrometheus writes the batch backlog, read from the store at each
// scrape: the batches not yet in a terminal state by status, and the lines
// of in-progress batches not yet answered.
func (s *Service) WritePrometheus(ctx context.Context, w io.Writer) error {
	counts := map[string]int64{}
	for _, st := range activeStatuses {
		counts[st] = 0
	}
	rows, err := s.store.db.QueryContext(ctx, `SELECT status, count(*), coalesce(sum(max(total - completed - failed, 0)), 0)
		FROM batches WHERE status IN (?, ?, ?, ?) GROUP BY status`,
		activeStatuses[0], activeStatuses[1], activeStatuses[2], activeStatuses[3])
	if err != nil {
		return fmt.Errorf("batches: backlog: %w", err)
	}
	defer rows.Close()
	var pending int64
	for rows.Next() {
		var st string
		var n, lines int64
		if err := rows.Scan(&st, &n, &lines); err != nil {
			return fmt.Errorf("batches: backlog: %w", err)
		}
		counts[st] = n
		if st == statusInProgress {
			pending = lines
		}
	}
	if err := rows.Err(); err != nil {
		return fmt.Errorf("batches: backlog: %w", err)
	}
	var b strings.Builder
	b.WriteString("# HELP switchyard_batches Batches not yet finished, by status.\n# TYPE switchyard_batches gauge\n")
	for _, st := range activeStatuses {
		fmt.Fprintf(&b, "switchyard_batches{status=%q} %d\n", st, counts[st])
	}
	fmt.Fprintf(&b, "# HELP switchyard_batch_lines_pending Lines of in-progress batches not yet answered.\n# TYPE switchyard_batch_lines_pending gauge\nswitchyard_batch_lines_pending %d\n", pending)
	_, err = io.WriteString(w, b.String())
	return err
}
