package dataplane

import (
	"runtime"
	"sync"
)

// The stream-done work of a finished request (the ratelimit filter's
// stream-done call, the access log line, the metrics) runs on a few
// long-lived workers fed by a bounded queue, not on a goroutine of its own:
// a fresh goroutine starts on a small stack and grows it again, copy by
// copy, through the rate limit call's depth on every request, where a
// worker's stack stays grown between requests (until a GC shrinks it).
//
// Nothing is lost or postponed without bound: a request's work waits
// behind at most streamDoneQueuePerWorker others per worker, each bounded
// by the ratelimit filter's timeout; when the queue is full the request's
// work runs at once on a goroutine of its own, as it did before the
// queue. Close waits for everything queued (DataPlane.streamDone) before
// the workers stop, so a shutdown charges every finished request.

// streamDoneQueuePerWorker is the queue's capacity per worker (a
// variable for the tests, which make the queue overflow).
var streamDoneQueuePerWorker = 8

// streamDoneQueue is the workers' queue.
type streamDoneQueue struct {
	mu      sync.RWMutex // guards stopped against enqueue
	stopped bool
	q       chan *requestState
	stop    chan struct{}
	workers sync.WaitGroup
}

// streamDoneWorkers is the number of workers: one per processor the Go
// scheduler runs, at least two.
func streamDoneWorkers() int { return max(runtime.GOMAXPROCS(0), 2) }

func newStreamDoneQueue(d *DataPlane) *streamDoneQueue {
	n := streamDoneWorkers()
	sq := &streamDoneQueue{q: make(chan *requestState, n*streamDoneQueuePerWorker), stop: make(chan struct{})}
	sq.workers.Add(n)
	for range n {
		go func() {
			defer sq.workers.Done()
			for {
				select {
				case s := <-sq.q:
					d.runStreamDone(s)
				case <-sq.stop:
					return
				}
			}
		}()
	}
	return sq
}

// enqueue hands s's stream-done work to the workers, or runs it on a
// goroutine of its own when the queue is full or stopped. The caller has
// counted it in DataPlane.streamDone.
func (sq *streamDoneQueue) enqueue(d *DataPlane, s *requestState) {
	sq.mu.RLock()
	defer sq.mu.RUnlock()
	if !sq.stopped {
		select {
		case sq.q <- s:
			return
		default:
		}
	}
	go d.runStreamDone(s)
}

// close makes later requests run their work on goroutines of their own,
// waits for the queued work (wait, DataPlane.streamDone.Wait) and stops
// the workers.
func (sq *streamDoneQueue) close(wait func()) {
	sq.mu.Lock()
	sq.stopped = true
	sq.mu.Unlock()
	wait()
	close(sq.stop)
	sq.workers.Wait()
}

// runStreamDone is one finished request's stream-done work.
func (d *DataPlane) runStreamDone(s *requestState) {
	defer d.streamDone.Done()
	s.rateLimitStreamDone()
	s.logAccess()
	s.observe()
}
