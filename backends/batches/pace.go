package batches

import (
	"context"
	"sync"
	"time"
)

// pacer holds a run's lines back while its owner's tokens per minute are
// spent. The gateway refuses a batch line whose prompt estimate the key's
// remaining tokens do not cover with a paced 429 (caller.PacedHeader)
// whose retry-after is when the key's window resets; the run then pauses
// until then, and the refused line is sent again: it waits, it does not
// fail, and no attempt is counted (the line never reached a provider, so
// sending it again cannot double it).
type pacer struct {
	after func(time.Duration) <-chan time.Time
	halt  <-chan struct{}

	mu     sync.Mutex
	open   chan struct{} // nil while not paused; closed when the pause ends
	pauses int64         // how many pauses began (a generation number)
}

// generation is taken before a line is sent: a refusal answered after a
// pause that began since then belongs to a window already waited out.
func (p *pacer) generation() int64 {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.pauses
}

// pause holds the run's lines for d, for a line refused that was sent in
// generation gen, unless a pause is on already (lines refused together
// wait for the same window) or began since the line was sent (its
// refusal is stale: it is simply sent again).
func (p *pacer) pause(d time.Duration, gen int64) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.open != nil || p.pauses != gen {
		return
	}
	ch := make(chan struct{})
	p.open = ch
	p.pauses++
	done := p.after(d)
	go func() {
		select {
		case <-done:
		case <-p.halt:
		}
		p.mu.Lock()
		p.open = nil
		p.mu.Unlock()
		close(ch)
	}()
}

// wait returns true once no pause is on, false if the run halts or ctx
// ends first.
func (p *pacer) wait(ctx context.Context) bool {
	p.mu.Lock()
	ch := p.open
	p.mu.Unlock()
	if ch != nil {
		select {
		case <-ch:
		case <-p.halt:
			return false
		case <-ctx.Done():
			return false
		}
	}
	select {
	case <-p.halt:
		return false
	default:
		return ctx.Err() == nil
	}
}
