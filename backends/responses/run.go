package responses

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"

	"github.com/tidwall/gjson"

	"github.com/switchyard-ai/switchyard/backends/caller"
	"github.com/switchyard-ai/switchyard/backends/vectorstores"
	"github.com/switchyard-ai/switchyard/internal/apierror"
)

// maxUpstreamBody bounds a non-streamed chat completion read from the
// gateway.
const maxUpstreamBody = 64 << 20

// errClientGone ends a run whose client disconnected: there is nobody to
// answer, and the upstream call was cancelled with the request context.
var errClientGone = errors.New("responses: client disconnected")

// upstreamError is a non-2xx answer of the gateway, passed to the client
// as it is (status and OpenAI error body) when nothing was sent yet.
type upstreamError struct {
	status     int
	body       []byte
	retryAfter string
}

func (e *upstreamError) Error() string { return fmt.Sprintf("gateway answered %d", e.status) }

// write passes the gateway's answer through. A body that is not an OpenAI
// error (a proxy's plain-text page) is replaced by one with the same status.
func (e *upstreamError) write(w http.ResponseWriter) {
	if !gjson.ValidBytes(e.body) || gjson.GetBytes(e.body, "error.message").Type != gjson.String {
		(&apierror.Error{Status: e.status, Code: "upstream_error",
			Message: fmt.Sprintf("The model request failed with status %d.", e.status)}).Write(w)
		return
	}
	w.Header().Set("content-type", "application/json")
	if e.retryAfter != "" {
		w.Header().Set("retry-after", e.retryAfter)
	}
	w.WriteHeader(e.status)
	_, _ = w.Write(e.body)
}

// responseError is the Response's error object for err, raised after the
// stream began.
func failure(err error) *responseError {
	var ue *upstreamError
	if errors.As(err, &ue) {
		code := "server_error"
		if ue.status == http.StatusTooManyRequests {
			code = "rate_limit_exceeded"
		}
		msg := gjson.GetBytes(ue.body, "error.message").Str
		if msg == "" {
			msg = fmt.Sprintf("The model request failed with status %d.", ue.status)
		}
		return &responseError{Code: code, Message: msg}
	}
	var ae *apierror.Error
	if errors.As(err, &ae) {
		return &responseError{Code: "server_error", Message: ae.Message}
	}
	var se *errStreamError
	if errors.As(err, &se) && se.msg != "" {
		return &responseError{Code: "server_error", Message: se.msg}
	}
	return &responseError{Code: "server_error", Message: "The model stream ended unexpectedly."}
}

// run generates one response: one or more chat completions through the
// gateway (more when the model uses web search), translated into output
// items and, when streaming, into Responses events as they arrive.
type run struct {
	s     *Service
	owner string
	req   *createRequest
	obj   *responseObject
	conv  conversation
	usage usage
	ev    *eventWriter // nil when not streaming

	results  []SearchResult // every web search result of this response
	searches int64

	// The item being generated (at most one at a time) and what the
	// current step produced.
	msg      *msgState
	call     *callState
	finish   string
	stepText strings.Builder // the step's text, when it offered web search
	visible  int             // output items the step produced
	hidden   []*callState    // the step's built-in tool calls, run by the service
	userCall bool
	offered  bool // the step offered the model web search or code

	offerCode bool // the step offers the python function (code_interpreter)

	offerFiles  bool                  // the step offers the file_search function
	fileResults []vectorstores.Result // every file search result of this response
}

type msgState struct {
	id      string
	index   int
	parts   [][]byte // finished content parts
	kind    byte     // of the open part: 't' text, 'r' refusal, 0 none
	partIdx int
	cur     strings.Builder
}

type callState struct {
	id, callID, name string
	upIndex          int64 // the tool call's index in the chat completion
	index            int   // output index
	hidden           bool
	args             strings.Builder
}

func (r *run) emit(typ string, fields func([]byte) []byte) {
	if r.ev != nil {
		r.ev.send(typ, fields)
	}
}

// emitResponse sends an event carrying the Response as it stands.
func (r *run) emitResponse(typ string) {
	if r.ev == nil {
		return
	}
	body := r.obj.marshal()
	r.ev.send(typ, func(d []byte) []byte {
		d = append(d, `"response":`...)
		d = append(d, body...)
		return append(d, ',')
	})
}

func appendItemRef(d []byte, itemID string, outputIndex int) []byte {
	d = append(d, `"item_id":`...)
	d = appendString(d, itemID)
	d = append(d, `,"output_index":`...)
	d = strconv.AppendInt(d, int64(outputIndex), 10)
	return append(d, ',')
}

func (r *run) emitItem(typ string, index int, item []byte) {
	r.emit(typ, func(d []byte) []byte {
		d = append(d, `"output_index":`...)
		d = strconv.AppendInt(d, int64(index), 10)
		d = append(d, `,"item":`...)
		d = append(d, item...)
		return append(d, ',')
	})
}

// execute runs the steps. It returns nil when the response finished
// (completed or incomplete), otherwise the error that ended it.
func (r *run) execute(ctx context.Context) error {
	for step := 1; ; step++ {
		offerSearch := r.req.webSearch != nil && step < r.s.maxSteps && r.toolBudget()
		var maxTokens int64
		if r.req.maxOutputTokens > 0 {
			// The limit covers the whole response, every step included.
			maxTokens = r.req.maxOutputTokens - r.usage.OutputTokens
			if maxTokens < 1 {
				r.setIncomplete("max_output_tokens")
				return nil
			}
		}
		r.offerCode = r.codeOffer(step)
		r.offerFiles = r.fileSearchOffer(step)
		err := r.step(ctx, offerSearch, maxTokens)
		if err != nil {
			return err
		}
		r.endStep()

		switch r.finish {
		case "length":
			r.setIncomplete("max_output_tokens")
			return nil
		case "content_filter":
			r.setIncomplete("content_filter")
			return nil
		}
		// Function calls go back to the client; a step that asks for them
		// ends the response even if it also asked for a search.
		if len(r.hidden) == 0 || r.userCall || !r.offered {
			return nil
		}
		r.conv.addAssistantCalls(r.stepText.String(), r.hidden)
		for _, c := range r.hidden {
			// A model may make many calls at once in one step: each one
			// counts against the bound, and those past it are answered
			// without being run (every call needs its tool message).
			if !r.toolBudget() {
				r.conv.addToolResult(c.callID, toolLimitResult)
				continue
			}
			runTool := r.runSearch
			if r.isCodeCall(c.name) {
				runTool = r.runCode
			}
			if r.isFileSearchCall(c.name) {
				runTool = r.runFileSearch
			}
			if err := runTool(ctx, c); err != nil {
				return err
			}
		}
	}
}

// errStepTimeout is the cause of a step's context ending at StepTimeout.
var errStepTimeout = errors.New("responses: step timeout")

// step runs one chat completion of the response, within StepTimeout: the
// request, the answer and its translation into items (and events).
func (r *run) step(ctx context.Context, offerSearch bool, maxTokens int64) error {
	sctx, cancel := context.WithTimeoutCause(ctx, r.s.stepTimeout, errStepTimeout)
	defer cancel()
	err := r.stepWithin(sctx, offerSearch, maxTokens)
	if err != nil && ctx.Err() == nil && errors.Is(context.Cause(sctx), errStepTimeout) {
		// The step's reads saw their context end and took it for the
		// client leaving; it was the deadline.
		r.s.log.Warn("responses: model step timed out", "response", r.obj.ID, "timeout", r.s.stepTimeout)
		return apierror.Server(http.StatusGatewayTimeout, "upstream_timeout",
			fmt.Sprintf("The model did not finish answering within %s.", r.s.stepTimeout))
	}
	return err
}

func (r *run) stepWithin(ctx context.Context, offerSearch bool, maxTokens int64) error {
	resp, err := r.post(ctx, r.chatBody(offerSearch, maxTokens))
	if err != nil {
		return err
	}
	if r.ev != nil && !r.ev.started {
		// Headers go out only once the gateway accepted the first
		// request, so its refusals (rate limits, bad requests) reach
		// the client as HTTP errors, as OpenAI's do.
		r.ev.start()
		r.emitResponse("response.created")
		r.emitResponse("response.in_progress")
	}
	r.beginStep(offerSearch || r.offerCode || r.offerFiles)
	if r.req.stream && strings.HasPrefix(resp.Header.Get("content-type"), "text/event-stream") {
		err = r.readStream(ctx, resp.Body)
	} else {
		err = r.readCompletion(ctx, resp.Body)
	}
	resp.Body.Close()
	return err
}

// maxBuiltinCalls bounds the built-in tool calls (web search, code, file
// search) one response runs, whatever max_tool_calls says: each may take
// seconds of sandbox time or a paid search.
const maxBuiltinCalls = 16

// toolLimitResult answers a built-in tool call past the bound.
const toolLimitResult = "Not run: this response reached its limit of tool calls. Answer with what you have."

// toolBudget reports whether another built-in tool call may run.
func (r *run) toolBudget() bool {
	return r.searches < maxBuiltinCalls && (r.req.maxToolCalls == 0 || r.searches < r.req.maxToolCalls)
}

// incompleteDisconnected is the incomplete_details reason of a streamed
// response whose client went away before it finished. OpenAI's enum has
// only max_output_tokens and content_filter, neither of which is true here;
// the SDKs read the reason as a plain string.
const incompleteDisconnected = "client_disconnected"

// cutShort ends a response whose client went away mid-stream: the message
// being written is kept as far as it got, marked incomplete; a function
// call still being written is dropped, since its arguments are unfinished
// and a continuation could not answer it. No more events are sent.
func (r *run) cutShort() {
	if r.ev != nil && r.ev.err == nil {
		r.ev.err = errClientGone
	}
	r.call = nil
	if r.msg != nil {
		r.finishMessage("incomplete")
	}
	r.setIncomplete(incompleteDisconnected)
}

func (r *run) setIncomplete(reason string) {
	r.obj.Status = "incomplete"
	r.obj.IncompleteDetails = &incomplete{Reason: reason}
}

func (r *run) beginStep(offered bool) {
	r.offered = offered
	r.finish = ""
	r.stepText.Reset()
	r.visible = 0
	r.hidden = r.hidden[:0]
	r.userCall = false
}

// endStep closes the open item. A step that produced nothing the client
// sees and no search to run still yields a message: a Response always says
// what the model answered, if only "". (A web_search call in a step that
// did not offer the tool is dropped: the model was told it had none.)
func (r *run) endStep() {
	status := "completed"
	if r.finish == "length" || r.finish == "content_filter" {
		status = "incomplete"
	}
	r.closeOpen(status)
	if r.visible == 0 && (len(r.hidden) == 0 || !r.offered) {
		r.startMessage()
		r.finishMessage(status)
	}
}

func (r *run) closeOpen(status string) {
	if r.msg != nil {
		r.finishMessage(status)
	}
	if r.call != nil {
		r.finishCall(status)
	}
}

// post sends one chat completion request through the gateway.
func (r *run) post(ctx context.Context, body []byte) (*http.Response, error) {
	resp, err := r.s.gw.Do(ctx, r.owner, caller.OriginResponses, http.MethodPost, "/v1/chat/completions", bytes.NewReader(body))
	if err != nil {
		if ctx.Err() != nil {
			return nil, errClientGone
		}
		r.s.log.Error("responses: gateway unreachable", "response", r.obj.ID, "err", err)
		return nil, apierror.Server(http.StatusBadGateway, "gateway_unreachable", "The model gateway could not be reached.")
	}
	if resp.StatusCode/100 != 2 {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
		resp.Body.Close()
		return nil, &upstreamError{status: resp.StatusCode, body: b, retryAfter: resp.Header.Get("retry-after")}
	}
	return resp, nil
}

// chatBody renders the chat completion request for the next step.
func (r *run) chatBody(offerSearch bool, maxTokens int64) []byte {
	req := r.req
	b := make([]byte, 0, 1024)
	b = append(b, `{"model":`...)
	b = appendString(b, req.model)
	b = append(b, `,"messages":`...)
	b = r.conv.appendMessages(b)

	ntools := len(req.fnTools)
	if offerSearch {
		ntools++
	}
	if r.offerCode {
		ntools++
	}
	if r.offerFiles {
		ntools++
	}
	if ntools > 0 {
		b = append(b, `,"tools":[`...)
		for i, t := range req.fnTools {
			if i > 0 {
				b = append(b, ',')
			}
			b = append(b, t.chat...)
		}
		if offerSearch {
			if len(req.fnTools) > 0 {
				b = append(b, ',')
			}
			b = append(b, webSearchDefinition...)
		}
		if r.offerCode {
			if b[len(b)-1] != '[' {
				b = append(b, ',')
			}
			b = append(b, pythonDefinition...)
		}
		if r.offerFiles {
			if b[len(b)-1] != '[' {
				b = append(b, ',')
			}
			b = append(b, fileSearchDefinition...)
		}
		b = append(b, `],"tool_choice":`...)
		switch tc := req.toolChoice; {
		case tc.mode == "function":
			b = append(b, `{"type":"function","function":{"name":`...)
			b = appendString(b, tc.name)
			b = append(b, `}}`...)
		case tc.mode == "web_search" && offerSearch && r.searches == 0:
			b = append(b, `{"type":"function","function":{"name":"`+webSearchFunction+`"}}`...)
		case tc.mode == "code_interpreter" && r.offerCode && r.searches == 0:
			b = append(b, `{"type":"function","function":{"name":"`+pythonFunction+`"}}`...)
		case tc.mode == "file_search" && r.offerFiles && r.searches == 0:
			b = append(b, `{"type":"function","function":{"name":"`+fileSearchFunction+`"}}`...)
		case tc.mode == "required" && r.searches == 0:
			b = append(b, `"required"`...)
		case tc.mode == "none":
			b = append(b, `"none"`...)
		default:
			// After a search, "required" or a forced search would make
			// the model search again instead of answering.
			b = append(b, `"auto"`...)
		}
		if req.parallelToolCalls.Exists() {
			b = append(b, `,"parallel_tool_calls":`...)
			b = append(b, req.parallelToolCalls.Raw...)
		}
	}
	if maxTokens > 0 {
		b = append(b, `,"max_tokens":`...)
		b = strconv.AppendInt(b, maxTokens, 10)
	}
	if req.temperature.Exists() {
		b = append(append(b, `,"temperature":`...), req.temperature.Raw...)
	}
	if req.topP.Exists() {
		b = append(append(b, `,"top_p":`...), req.topP.Raw...)
	}
	if req.responseFormat != nil {
		b = append(append(b, `,"response_format":`...), req.responseFormat...)
	}
	if req.reasoningEffort != "" {
		b = append(b, `,"reasoning_effort":`...)
		b = appendString(b, req.reasoningEffort)
	}
	for _, p := range []struct{ name, v string }{{"user", req.user},
		{"safety_identifier", req.safetyIdentifier}, {"prompt_cache_key", req.promptCacheKey}} {
		if p.v != "" {
			b = append(b, `,"`+p.name+`":`...)
			b = appendString(b, p.v)
		}
	}
	if req.stream {
		b = append(b, `,"stream":true,"stream_options":{"include_usage":true}`...)
	}
	return append(b, '}')
}

// readCompletion reads a non-streamed chat completion.
func (r *run) readCompletion(ctx context.Context, body io.Reader) error {
	b, err := io.ReadAll(io.LimitReader(body, maxUpstreamBody))
	if err != nil {
		if ctx.Err() != nil {
			return errClientGone
		}
		return fmt.Errorf("responses: read completion: %w", err)
	}
	choice := gjson.GetBytes(b, "choices.0")
	if !gjson.ValidBytes(b) || !choice.IsObject() {
		r.s.log.Error("responses: the gateway's chat completion has no choice", "response", r.obj.ID, "bytes", len(b))
		return apierror.Server(http.StatusBadGateway, "bad_upstream_response", "The model returned an invalid answer.")
	}
	msg := choice.Get("message")
	if c := msg.Get("content"); c.Type == gjson.String && c.Str != "" {
		r.textDelta(c.Raw, c.Str)
	}
	if c := msg.Get("refusal"); c.Type == gjson.String && c.Str != "" {
		r.refusalDelta(c.Raw, c.Str)
	}
	i := int64(0)
	msg.Get("tool_calls").ForEach(func(_, tc gjson.Result) bool {
		args := tc.Get("function.arguments")
		r.toolCallDelta(i, tc.Get("id").Str, tc.Get("function.name").Str, args.Raw, args.Str)
		i++
		return true
	})
	r.finish = choice.Get("finish_reason").Str
	r.addUsage(gjson.GetBytes(b, "usage"))
	return nil
}

func (r *run) addUsage(u gjson.Result) {
	if !u.IsObject() {
		return
	}
	r.usage.InputTokens += u.Get("prompt_tokens").Int()
	r.usage.OutputTokens += u.Get("completion_tokens").Int()
	r.usage.InputTokensDetails.CachedTokens += u.Get("prompt_tokens_details.cached_tokens").Int()
	r.usage.OutputDetails.ReasoningTokens += u.Get("completion_tokens_details.reasoning_tokens").Int()
	r.usage.TotalTokens = r.usage.InputTokens + r.usage.OutputTokens
}

// Item generation: the same calls serve a whole completion (sync) and its
// stream deltas; events are emitted only when streaming.

func (r *run) startMessage() {
	r.msg = &msgState{id: r.s.newID("msg_"), index: len(r.obj.Output)}
	r.emitItem("response.output_item.added", r.msg.index, messageItem(r.msg.id, "in_progress"))
}

func (r *run) openPart(kind byte) {
	m := r.msg
	if m.kind == kind {
		return
	}
	r.closePart()
	m.kind, m.partIdx = kind, len(m.parts)
	var part []byte
	if kind == 't' {
		part = appendTextContent(nil, "", nil)
	} else {
		part = appendRefusalContent(nil, "")
	}
	r.emit("response.content_part.added", func(d []byte) []byte {
		d = appendItemRef(d, m.id, m.index)
		d = append(d, `"content_index":`...)
		d = strconv.AppendInt(d, int64(m.partIdx), 10)
		d = append(d, `,"part":`...)
		d = append(d, part...)
		return append(d, ',')
	})
}

// textDelta adds text to the message; raw is the same text as a JSON
// string, copied into the event as it came.
func (r *run) textDelta(raw, text string) {
	if r.call != nil {
		r.finishCall("completed")
	}
	if r.msg == nil {
		r.startMessage()
	}
	r.openPart('t')
	m := r.msg
	m.cur.WriteString(text)
	if r.offered {
		// Kept only for the assistant turn that precedes a search.
		r.stepText.WriteString(text)
	}
	r.emit("response.output_text.delta", func(d []byte) []byte {
		d = appendItemRef(d, m.id, m.index)
		d = append(d, `"content_index":`...)
		d = strconv.AppendInt(d, int64(m.partIdx), 10)
		d = append(d, `,"delta":`...)
		d = append(d, raw...)
		return append(d, `,"logprobs":[],`...)
	})
}

func (r *run) refusalDelta(raw, text string) {
	if r.call != nil {
		r.finishCall("completed")
	}
	if r.msg == nil {
		r.startMessage()
	}
	r.openPart('r')
	m := r.msg
	m.cur.WriteString(text)
	r.emit("response.refusal.delta", func(d []byte) []byte {
		d = appendItemRef(d, m.id, m.index)
		d = append(d, `"content_index":`...)
		d = strconv.AppendInt(d, int64(m.partIdx), 10)
		d = append(d, `,"delta":`...)
		d = append(d, raw...)
		return append(d, ',')
	})
}

// closePart finishes the open content part. Text written after a web
// search gets url_citation annotations for the results.
func (r *run) closePart() {
	m := r.msg
	if m.kind == 0 {
		return
	}
	text := m.cur.String()
	m.cur.Reset()
	prefix := func(d []byte) []byte {
		d = appendItemRef(d, m.id, m.index)
		d = append(d, `"content_index":`...)
		d = strconv.AppendInt(d, int64(m.partIdx), 10)
		return append(d, ',')
	}
	var part []byte
	if m.kind == 't' {
		var anns []annotation
		if len(r.results) > 0 {
			anns = citations(text, r.results)
		}
		if len(r.fileResults) > 0 {
			anns = append(anns, fileCitations(text, r.fileResults)...)
			sortAnnotations(anns)
		}
		for i, a := range anns {
			r.emit("response.output_text.annotation.added", func(d []byte) []byte {
				d = prefix(d)
				d = append(d, `"annotation_index":`...)
				d = strconv.AppendInt(d, int64(i), 10)
				d = append(d, `,"annotation":`...)
				d = appendAnnotation(d, a)
				return append(d, ',')
			})
		}
		r.emit("response.output_text.done", func(d []byte) []byte {
			d = prefix(d)
			d = append(d, `"text":`...)
			d = appendString(d, text)
			return append(d, `,"logprobs":[],`...)
		})
		part = appendTextContent(nil, text, anns)
	} else {
		r.emit("response.refusal.done", func(d []byte) []byte {
			d = prefix(d)
			d = append(d, `"refusal":`...)
			d = appendString(d, text)
			return append(d, ',')
		})
		part = appendRefusalContent(nil, text)
	}
	r.emit("response.content_part.done", func(d []byte) []byte {
		d = prefix(d)
		d = append(d, `"part":`...)
		d = append(d, part...)
		return append(d, ',')
	})
	m.parts = append(m.parts, part)
	m.kind = 0
}

func (r *run) finishMessage(status string) {
	m := r.msg
	r.closePart()
	if len(m.parts) == 0 {
		// An empty answer is still an output_text part, as OpenAI's is.
		r.openPart('t')
		r.closePart()
	}
	item := messageItem(m.id, status, m.parts...)
	r.emitItem("response.output_item.done", m.index, item)
	r.obj.Output = append(r.obj.Output, item)
	r.visible++
	r.msg = nil
}

// toolCallDelta adds to tool call upIndex of the completion, starting it
// when it is new. The model's web_search calls are the service's own and
// produce no events.
func (r *run) toolCallDelta(upIndex int64, callID, name, rawArgs, args string) {
	if r.call == nil || r.call.upIndex != upIndex {
		r.closeOpen("completed")
		if callID == "" {
			callID = r.s.newID("call_")
		}
		c := &callState{callID: callID, name: name, upIndex: upIndex, index: len(r.obj.Output),
			hidden: (r.req.webSearch != nil && name == webSearchFunction) || r.isCodeCall(name) || r.isFileSearchCall(name)}
		r.call = c
		if !c.hidden {
			c.id = r.s.newID("fc_")
			r.emitItem("response.output_item.added", c.index, functionCallItem(c.id, "in_progress", callID, name, ""))
		}
	}
	c := r.call
	if args == "" {
		return
	}
	c.args.WriteString(args)
	if !c.hidden {
		r.emit("response.function_call_arguments.delta", func(d []byte) []byte {
			d = appendItemRef(d, c.id, c.index)
			d = append(d, `"delta":`...)
			d = append(d, rawArgs...)
			return append(d, ',')
		})
	}
}

func (r *run) finishCall(status string) {
	c := r.call
	r.call = nil
	if c.hidden {
		r.hidden = append(r.hidden, c)
		return
	}
	args := c.args.String()
	r.emit("response.function_call_arguments.done", func(d []byte) []byte {
		d = appendItemRef(d, c.id, c.index)
		d = append(d, `"name":`...)
		d = appendString(d, c.name)
		d = append(d, `,"arguments":`...)
		d = appendString(d, args)
		return append(d, ',')
	})
	item := functionCallItem(c.id, status, c.callID, c.name, args)
	r.emitItem("response.output_item.done", c.index, item)
	r.obj.Output = append(r.obj.Output, item)
	r.visible++
	r.userCall = true
}

// runSearch runs one web_search call of the model and adds its result to
// the conversation. A failed search is reported to the model, which then
// answers without it, rather than failing the response.
func (r *run) runSearch(ctx context.Context, c *callState) error {
	query := gjson.Get(c.args.String(), "query").Str
	id := r.s.newID("ws_")
	index := len(r.obj.Output)
	ref := func(d []byte) []byte { return appendItemRef(d, id, index) }
	r.emitItem("response.output_item.added", index, webSearchItem(id, "in_progress", query, nil, false))
	r.emit("response.web_search_call.in_progress", ref)
	r.emit("response.web_search_call.searching", ref)

	results, err := r.s.search.Search(ctx, query, r.req.webSearch.count)
	r.searches++
	status, content := "completed", ""
	if err != nil {
		if ctx.Err() != nil {
			return errClientGone
		}
		r.s.log.Warn("responses: web search failed", "response", r.obj.ID, "item", id, "err", err)
		status = "failed"
		content = "The web search failed. Answer without it, and say that searching was not possible."
	} else {
		r.emit("response.web_search_call.completed", ref)
		content = formatResults(query, results)
		r.results = append(r.results, results...)
	}
	item := webSearchItem(id, status, query, results, r.req.includeWebSources)
	r.emitItem("response.output_item.done", index, item)
	r.obj.Output = append(r.obj.Output, item)
	r.conv.addToolResult(c.callID, content)
	return nil
}
