package batches

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"time"

	"github.com/switchyard-ai/switchyard/backends/caller"
	"github.com/switchyard-ai/switchyard/internal/apierror"
)

// The daily line allowance (docs/operations.md, "Batches and the tier
// allowance"): the request lines of an owner's batches created in any 24
// hours are bounded by the owner's tier (Options.LinesPerDay), checked when
// a batch is created. While a batch runs, its lines also draw from the
// key's tokens per minute (pace.go).

// allowanceFor returns the caller's daily line allowance, nil when none
// applies (no LinesPerDay, or a tier without a cap).
func (s *Service) allowanceFor(c caller.Caller) *Allowance {
	if s.opts.LinesPerDay == nil {
		return nil
	}
	n, limited := s.opts.LinesPerDay(c.Tier)
	if !limited {
		return nil
	}
	return &Allowance{LinesPerDay: max(n, 0)}
}

// countLines counts the request lines (non-blank lines) of owner's input
// file, stopping once there are more than limit: over is then true and n is
// limit+1.
func (s *Service) countLines(ctx context.Context, owner, fileID string, limit int64) (n int64, over bool, err error) {
	_, f, err := s.files.Open(ctx, owner, fileID)
	if err != nil {
		return 0, false, err
	}
	defer f.Close()
	lr := newLineReader(f, s.opts.MaxLineBytes)
	for {
		line, tooLong, _, err := lr.next()
		if errors.Is(err, io.EOF) {
			return n, false, nil
		}
		if err != nil {
			return n, false, fmt.Errorf("count lines: %w", err)
		}
		if !tooLong && blank(line) {
			continue
		}
		if n++; n > limit {
			return n, true, nil
		}
		if n%4096 == 0 && ctx.Err() != nil {
			return n, false, ctx.Err()
		}
	}
}

// overAllowance is the 400 for an input file that alone holds more lines
// than the allowance: it could never be run, whatever the wait.
func overAllowance(tier string, limit int64) *apierror.Error {
	return &apierror.Error{Status: http.StatusBadRequest, Type: apierror.TypeInvalidRequest, Code: "batch_line_limit_exceeded",
		Param: "input_file_id",
		Message: fmt.Sprintf("The input file has more than %d request lines, the batch line allowance of your tier (%s) for any 24 hours. "+
			"Split it into smaller batches, or ask your gateway administrator for a larger allowance.", limit, tier)}
}

// allowanceReached is the 429 for a batch that does not fit in what is left
// of the allowance now, with when it will.
func allowanceReached(tier string, al *Allowance, requested int64, now time.Time) *apierror.Error {
	wait := max(al.ResetAt-now.Unix(), 1)
	return &apierror.Error{Status: http.StatusTooManyRequests, Type: apierror.TypeRequests, Code: "batch_line_limit_exceeded",
		RetryAfter: int(wait),
		Message: fmt.Sprintf("Batch line limit reached for lines per day (any 24 hours) on tier %s: Limit %d, Used %d, Requested %d. "+
			"Enough lines leave the 24-hour window in %s; please try again then.",
			tier, al.LinesPerDay, al.Used, requested, time.Duration(wait)*time.Second)}
}
