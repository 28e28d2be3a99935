package gateway

import (
	"context"

	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"google.golang.org/grpc/metadata"

	"github.com/switchyard-ai/switchyard/envoy/dataplane"
	"github.com/switchyard-ai/switchyard/extproc"
	"github.com/switchyard-ai/switchyard/internal/inprocgrpc"
)

// localExtProc is extproc as the data plane's ext_proc filters call it in
// process: each Process stream is an extproc.Session whose handler runs on
// the request's goroutine, so an exchange costs no goroutine hand-off (on
// the in-process gRPC channel it cost two, and one more goroutine and its
// queues per stream).
type localExtProc struct{ srv *extproc.Server }

func (l localExtProc) OpenSession(ctx context.Context, md metadata.MD) dataplane.ExtProcSession {
	return &localSession{s: l.srv.OpenSession(ctx, md)}
}

// localSession hands the data plane's body messages to extproc as deep
// copies, the in-process channel's (field by field, body copies from
// per-direction blocks, inprocgrpc.Copier): the data plane reuses its
// messages once a call returns (body chunks, the headers message refilled
// for the response), while extproc keeps parts of the bodies it receives
// and edits request bodies in place.
//
// Headers messages are handed over as they are (a copy cost four
// allocations and a few kilobytes each, four such messages a request),
// because extproc keeps nothing of one past Handle that the data plane may
// change: it reads header values in place only within the call
// (headerView) and copies the ones it keeps (headerValue); what it keeps
// as it is are strings, which nothing changes (header names, the string
// values of the forwarded metadata, whose Structs the data plane replaces
// rather than edits). A change to extproc that keeps a header value's
// bytes, or a view of them, past Handle must copy them, or this must copy
// headers messages again.
//
// extproc's replies are handed back as they are, which the data plane's
// contract (dataplane.ExtProcSession) allows because extproc never changes
// a reply, or a part of one, that the data plane may still read:
//   - the only replies it changes after returning them are a stream's
//     reused chunk replies (passChunk, editChunk and editBody in stream
//     and upstreamStream), and their body bytes (upstreamStream.out, the
//     SSE filter's output): changed by the next chunk's Handle, after the
//     data plane has written or drained the previous chunk (it calls the
//     same processor again only then);
//   - what the data plane keeps longer is built for the reply (request and
//     buffered response body mutations: fresh bytes, or the request's copy
//     edited in place, which is extproc's own; header mutations; immediate
//     responses; usage metadata) or shared read-only (the key's cached
//     metadata Structs, keyMeta, and the shared mode overrides, never
//     modified), and the data plane only reads replies (it merges metadata
//     copy-on-write).
type localSession struct {
	s  *extproc.Session
	cp inprocgrpc.Copier
}

func (l *localSession) Handle(ctx context.Context, req *extprocv3.ProcessingRequest) (*extprocv3.ProcessingResponse, error) {
	switch req.GetRequest().(type) {
	case *extprocv3.ProcessingRequest_RequestHeaders, *extprocv3.ProcessingRequest_ResponseHeaders:
		return l.s.Handle(ctx, req)
	}
	return l.s.Handle(ctx, l.cp.Request(req))
}

func (l *localSession) Close(ctx context.Context) { l.s.Close(ctx) }
