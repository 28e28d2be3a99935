package dataplane

import "sync/atomic"

// ExtProcStats count the ext_proc filters' traffic since the data plane
// started, as Envoy's ext_proc statistics do (streams_started,
// stream_msgs_sent), by message kind: how many exchanges a request costs is
// the first thing to know about the filter's price.
type ExtProcStats struct {
	// Streams is the Process streams opened.
	Streams uint64
	// The messages sent, by kind (one reply comes back for each).
	RequestHeaders, RequestBody, ResponseHeaders, ResponseBody uint64
}

// Messages is the number of messages sent, of every kind.
func (s ExtProcStats) Messages() uint64 {
	return s.RequestHeaders + s.RequestBody + s.ResponseHeaders + s.ResponseBody
}

// extProcCounters are one place's ext_proc counters: the listeners'
// (downstream) filters, or the clusters' upstream filters.
type extProcCounters struct {
	streams atomic.Uint64
	msgs    [kindResponseBody + 1]atomic.Uint64 // by msgKind
}

func (c *extProcCounters) stats() ExtProcStats {
	return ExtProcStats{
		Streams:         c.streams.Load(),
		RequestHeaders:  c.msgs[kindRequestHeaders].Load(),
		RequestBody:     c.msgs[kindRequestBody].Load(),
		ResponseHeaders: c.msgs[kindResponseHeaders].Load(),
		ResponseBody:    c.msgs[kindResponseBody].Load(),
	}
}

// ExtProcStats returns the counters of the listeners' ext_proc filters
// (downstream: one Process stream per request) and of the clusters'
// upstream ext_proc filters (one per attempt).
func (d *DataPlane) ExtProcStats() (downstream, upstream ExtProcStats) {
	return d.extProcDown.stats(), d.extProcUp.stats()
}
