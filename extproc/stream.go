package extproc

import (
	"context"
	"fmt"
	"runtime/debug"

	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/switchyard-ai/switchyard/internal/config"
	"github.com/switchyard-ai/switchyard/internal/keys"
)

// respKind is how the response body is processed.
type respKind uint8

const (
	respNone respKind = iota // not seen (mode NONE)
	respJSON                 // BUFFERED: read usage, fix up errors
	respSSE                  // STREAMED: read usage, maybe cut the usage chunk
)

// operation is the endpoint a request is for.
type operation uint8

const (
	opNone       operation = iota
	opChat                 // POST /v1/chat/completions
	opEmbeddings           // POST /v1/embeddings
)

func (o operation) path() string {
	if o == opEmbeddings {
		return embeddingsPath
	}
	return chatPath
}

// stream is the state of one HTTP request, carried across the messages of
// its Process stream. Only the stream's goroutine touches it.
type stream struct {
	srv       *Server
	requestID string // for logs only

	op  operation // set for an authenticated POST of an endpoint extproc serves
	key keys.Key
	// origin is catalog.OriginBatch or OriginResponses for a backend's call
	// with the internal token, "" for clients.
	origin string
	// keyMeta is the key's dynamic metadata (request.go).
	keyMeta *keyMeta
	// ownsBody: request bodies came in gRPC messages that nothing else
	// holds, so they may be edited in place (request.go, rewrite).
	ownsBody bool
	routed   bool
	model    string // canonical model id
	provider string

	status int
	kind   respKind
	sse    sseFilter

	usage     Usage
	haveUsage bool
	recorded  bool
	// pricing is the model's, once the model is known.
	pricing config.Pricing
	// refused: the gateway answered the request itself with an error
	// (status) after authenticating the key (noteRefusal).
	refused bool
	limits  limitState

	// Replies reused for every chunk of a response body so the per-chunk
	// path does not allocate (chunkReplies makes them with the first
	// chunk: most requests never have one). Reuse is safe because Send
	// serialises a reply before the next message is read, and nothing else
	// holds them.
	passChunk *extprocv3.ProcessingResponse
	editChunk *extprocv3.ProcessingResponse
	editBody  *extprocv3.BodyMutation_Body

	// in is the message Process receives into (server.go).
	in extprocv3.ProcessingRequest
}

func newStream(s *Server) *stream {
	return &stream{srv: s}
}

// chunkReplies makes the reused chunk replies if they are not made yet.
func (st *stream) chunkReplies() {
	if st.passChunk != nil {
		return
	}
	p := &chunkReplyParts{}
	p.passW.ResponseBody, p.pass.Response = &p.passBR, &p.passW
	p.bm.Mutation, p.cr.BodyMutation = &p.body, &p.bm
	p.editBR.Response, p.editW.ResponseBody, p.edit.Response = &p.cr, &p.editBR, &p.editW
	st.passChunk, st.editChunk, st.editBody = &p.pass, &p.edit, &p.body
}

// chunkReplyParts are a stream's two reused chunk replies (as
// responseBodyReply(nil) and responseBodyReply with a body mutation make
// them) and their parts, allocated together: one allocation, not five.
// The parts point at each other and are never copied.
type chunkReplyParts struct {
	pass, edit     extprocv3.ProcessingResponse
	passW, editW   extprocv3.ProcessingResponse_ResponseBody
	passBR, editBR extprocv3.BodyResponse
	cr             extprocv3.CommonResponse
	bm             extprocv3.BodyMutation
	body           extprocv3.BodyMutation_Body
}

// handle answers one message. A panic in a phase is turned into a gRPC
// error, which ends this stream only: a fail-closed Envoy answers the
// client with an error and the server keeps serving.
func (st *stream) handle(ctx context.Context, req *extprocv3.ProcessingRequest) (resp *extprocv3.ProcessingResponse, err error) {
	defer func() {
		if r := recover(); r != nil {
			// The panic value and stack name code, never request content.
			st.srv.log.Error("extproc: panic in phase", "request_id", st.requestID,
				"panic", fmt.Sprint(r), "stack", string(debug.Stack()))
			resp, err = nil, errInternal
		}
	}()
	switch m := req.GetRequest().(type) {
	case *extprocv3.ProcessingRequest_RequestHeaders:
		return st.requestHeaders(ctx, m.RequestHeaders), nil
	case *extprocv3.ProcessingRequest_RequestBody:
		return st.noteRefusal(st.requestBody(ctx, m.RequestBody)), nil
	case *extprocv3.ProcessingRequest_ResponseHeaders:
		return st.withLimitHeaders(st.responseHeaders(ctx, m.ResponseHeaders)), nil
	case *extprocv3.ProcessingRequest_ResponseBody:
		return st.responseBody(ctx, m.ResponseBody), nil
	case *extprocv3.ProcessingRequest_RequestTrailers:
		// Trailers are SKIPped by config; answer in kind if one comes anyway.
		return &extprocv3.ProcessingResponse{Response: &extprocv3.ProcessingResponse_RequestTrailers{
			RequestTrailers: &extprocv3.TrailersResponse{}}}, nil
	case *extprocv3.ProcessingRequest_ResponseTrailers:
		return &extprocv3.ProcessingResponse{Response: &extprocv3.ProcessingResponse_ResponseTrailers{
			ResponseTrailers: &extprocv3.TrailersResponse{}}}, nil
	default:
		return nil, status.Errorf(codes.InvalidArgument, "extproc: unexpected message %T", m)
	}
}

// setUsage remembers the usage the provider reported.
func (st *stream) setUsage(u Usage) {
	if u.TotalTokens == 0 {
		u.TotalTokens = u.PromptTokens + u.CompletionTokens
	}
	st.usage, st.haveUsage = u, true
}

// noteRefusal remembers that an authenticated request of an endpoint
// extproc serves was refused with an error status, so it is counted as the
// key's error (recordUsage).
func (st *stream) noteRefusal(resp *extprocv3.ProcessingResponse) *extprocv3.ProcessingResponse {
	if ir := resp.GetImmediateResponse(); ir != nil && st.op != opNone && st.key.ID != "" {
		if code := int(ir.GetStatus().GetCode()); code >= 400 {
			st.refused, st.status = true, code
		}
	}
	return resp
}

// recordUsage tells the UsageRecorder, once, about the usage seen (with its
// cost), or about the error answered.
func (st *stream) recordUsage(ctx context.Context) {
	failed := st.status >= 400 && (st.routed || st.refused)
	if st.recorded || !(st.haveUsage && st.routed) && !failed {
		return
	}
	st.recorded = true
	if st.srv.usage == nil {
		return
	}
	u := st.usage
	u.Error = failed
	u.CostMicros = st.pricing.CostMicros(u.PromptTokens, u.CachedTokens, u.CompletionTokens)
	// Tokens were spent even if the client has gone: do not let the
	// stream's cancellation stop the recorder from charging them.
	st.srv.usage.RecordUsage(context.WithoutCancel(ctx), &st.key, st.model, u)
}

// finish runs when the Process stream ends, however it ends.
func (st *stream) finish(ctx context.Context) {
	defer func() {
		if r := recover(); r != nil {
			st.srv.log.Error("extproc: panic recording usage", "request_id", st.requestID, "panic", fmt.Sprint(r))
		}
	}()
	if st.kind == respSSE && !st.haveUsage && st.sse.seen {
		st.setUsage(st.sse.usage)
	}
	st.chargeUnreported(ctx)
	st.chargeLocal(ctx)
	st.recordUsage(ctx)
}
