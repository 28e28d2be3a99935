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

// localSession hands messages across as the in-process channel did, as
// deep copies (its field-by-field copies, body copies from per-direction
// blocks): the data plane reuses its messages once a call returns (body
// chunks, the refilled headers message) while extproc keeps parts of what
// it receives and edits request bodies in place; and extproc reuses its
// chunk replies for the next chunk, while the data plane keeps parts of a
// reply (a mutated body, dynamic metadata) for the rest of the request.
type localSession struct {
	s  *extproc.Session
	cp inprocgrpc.Copier
}

func (l *localSession) Handle(ctx context.Context, req *extprocv3.ProcessingRequest) (*extprocv3.ProcessingResponse, error) {
	resp, err := l.s.Handle(ctx, l.cp.Request(req))
	if err != nil {
		return nil, err
	}
	return l.cp.Response(resp), nil
}

func (l *localSession) Close(ctx context.Context) { l.s.Close(ctx) }
