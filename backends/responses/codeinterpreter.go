package responses

import (
	"context"
	"strconv"

	"github.com/tidwall/gjson"

	"github.com/switchyard-ai/switchyard/backends/sandbox"
	"github.com/switchyard-ai/switchyard/internal/apierror"
)

// The code_interpreter tool runs the way web_search does: the model is
// offered a function (python), the service runs the model's calls to it in
// a sandbox (CodeRunner) and feeds the logs back as the call's tool
// message, and the client sees code_interpreter_call items and events,
// never the function call.

// CodeRunner runs the code_interpreter tool's Python; *sandbox.Runner
// implements it. Available is consulted on every request: a runner that
// cannot run code leaves the tool refused.
type CodeRunner interface {
	Available() error
	Run(ctx context.Context, code string) (sandbox.Result, error)
}

// pythonFunction is the function offered in place of code_interpreter.
const pythonFunction = "python"

// pythonDefinition is its chat completions tool definition.
const pythonDefinition = `{"type":"function","function":{"name":"python",` +
	`"description":"Run a Python 3 program in a sandbox and get back what it printed (stdout, then stderr). ` +
	`There is no network access. Every call starts a fresh interpreter in an empty working directory, ` +
	`so nothing is kept between calls: print the values you need.",` +
	`"parameters":{"type":"object","properties":{"code":{"type":"string","description":"The Python program to run."}},` +
	`"required":["code"],"additionalProperties":false}}}`

// codeInterpreterTool is the request's code_interpreter tool.
type codeInterpreterTool struct {
	// containerID names the response's container: the client's, or one
	// minted on the first call. Every call of a response reports the same
	// one. Nothing persists in it between calls (each run is fresh).
	containerID string
}

// parseCodeInterpreter reads a code_interpreter tool: container is an id
// or {"type":"auto"}. What needs a persistent container (uploaded files)
// or the network is refused rather than ignored.
func (req *createRequest) parseCodeInterpreter(param string, t gjson.Result) *apierror.Error {
	if req.codeInterpreter != nil {
		return apierror.InvalidParam(param+".type", "Duplicate tool 'code_interpreter' in tools.")
	}
	for _, f := range req.fnTools {
		if f.name == pythonFunction {
			return apierror.InvalidParam("tools", "The function name '%s' is reserved for the code interpreter tool.", pythonFunction)
		}
	}
	ci := &codeInterpreterTool{}
	c := t.Get("container")
	switch {
	case !c.Exists() || c.Type == gjson.Null:
		return apierror.MissingParam(param + ".container")
	case c.Type == gjson.String:
		if c.Str == "" {
			return apierror.InvalidParam(param+".container", "Invalid '%s.container': empty string. Expected a container id or an object.", param)
		}
		ci.containerID = c.Str
	case c.IsObject():
		if typ := c.Get("type"); typ.Exists() && typ.Str != "auto" {
			return apierror.InvalidParam(param+".container.type", "Invalid value: '%s'. Supported values are: 'auto'.", typ.Str)
		}
		if ids := c.Get("file_ids"); ids.IsArray() && len(ids.Array()) > 0 {
			return apierror.InvalidParam(param+".container.file_ids", "Files in code interpreter containers are not supported on this gateway.")
		}
		if np := c.Get("network_policy.type"); np.Exists() && np.Str != "disabled" {
			return apierror.InvalidParam(param+".container.network_policy", "Code interpreter containers have no network access on this gateway.")
		}
		// memory_limit is accepted and not applied: the gateway's operator
		// sets the sandbox's limits.
	default:
		return typeError(param+".container", "a string or an object", c)
	}
	req.codeInterpreter = ci
	return nil
}

// checkCodeInterpreter refuses a request with code_interpreter when this
// gateway cannot run code.
func (s *Service) checkCodeInterpreter(req *createRequest) *apierror.Error {
	if req.codeInterpreter == nil || (s.code != nil && s.code.Available() == nil) {
		return nil
	}
	return apierror.InvalidParam("tools", "The tool type 'code_interpreter' is not available on this gateway.")
}

// codeOffer says whether step offers the model the python function:
// under the same bounds as web search (steps left, max_tool_calls, which
// counts every built-in tool call).
func (r *run) codeOffer(step int) bool {
	return r.req.codeInterpreter != nil && step < r.s.maxSteps && r.toolBudget()
}

// isCodeCall says whether a model's call to name is the service's to run.
func (r *run) isCodeCall(name string) bool {
	return r.req.codeInterpreter != nil && name == pythonFunction
}

// runCode runs one python call of the model and adds its logs to the
// conversation. Code that raises or hits a limit is a completed (or, at
// the timeout, failed) call whose logs say so; a sandbox that cannot run
// is reported to the model, which answers without it, rather than failing
// the response.
func (r *run) runCode(ctx context.Context, c *callState) error {
	ci := r.req.codeInterpreter
	if ci.containerID == "" {
		ci.containerID = r.s.newID("cntr_")
	}
	args := c.args.String()
	code := gjson.Get(args, "code")
	src := code.Str
	if !gjson.Valid(args) || code.Type != gjson.String {
		// Models trained on OpenAI's own python tool send the program
		// bare, not as JSON arguments.
		src = args
	}
	id := r.s.newID("ci_")
	index := len(r.obj.Output)
	ref := func(d []byte) []byte { return appendItemRef(d, id, index) }
	r.emitItem("response.output_item.added", index, codeInterpreterItem(id, "in_progress", "", ci.containerID, nil, false))
	r.emit("response.code_interpreter_call.in_progress", ref)
	r.emit("response.code_interpreter_call_code.delta", func(d []byte) []byte {
		d = ref(d)
		d = append(d, `"delta":`...)
		d = appendString(d, src)
		return append(d, ',')
	})
	r.emit("response.code_interpreter_call_code.done", func(d []byte) []byte {
		d = ref(d)
		d = append(d, `"code":`...)
		d = appendString(d, src)
		return append(d, ',')
	})
	r.emit("response.code_interpreter_call.interpreting", ref)

	res, err := r.s.code.Run(ctx, src)
	r.searches++ // every built-in tool call counts (max_tool_calls, tool_choice)
	status, content, logs := "completed", "", ""
	switch {
	case err != nil:
		if ctx.Err() != nil {
			return errClientGone
		}
		r.s.log.Warn("responses: code interpreter run failed", "response", r.obj.ID, "item", id, "err", err)
		status = "failed"
		content = "The code could not be run: the code interpreter failed. Answer without it, and say that running code was not possible."
	default:
		logs = res.Logs()
		content = logs
		if content == "" {
			content = "The code ran (exit status " + strconv.Itoa(res.ExitCode) + ") and printed nothing."
		}
		if res.TimedOut {
			status = "failed"
		} else {
			r.emit("response.code_interpreter_call.completed", ref)
		}
		r.s.log.Debug("responses: code interpreter ran", "response", r.obj.ID, "item", id,
			"exit_code", res.ExitCode, "timed_out", res.TimedOut, "truncated", res.Truncated)
	}
	var outputs []string
	if err == nil && logs != "" {
		outputs = []string{logs}
	}
	item := codeInterpreterItem(id, status, src, ci.containerID, outputs, r.req.includeCodeOutputs)
	r.emitItem("response.output_item.done", index, item)
	r.obj.Output = append(r.obj.Output, item)
	r.conv.addToolResult(c.callID, content)
	return nil
}

// codeInterpreterItem renders a code_interpreter_call item. Its outputs
// (logs) are listed only when the request included
// code_interpreter_call.outputs, as OpenAI's are; otherwise null.
func codeInterpreterItem(id, status, code, containerID string, logs []string, withOutputs bool) []byte {
	b := make([]byte, 0, 128+len(code))
	b = append(b, `{"id":`...)
	b = appendString(b, id)
	b = append(b, `,"type":"code_interpreter_call","status":"`...)
	b = append(b, status...)
	b = append(b, `","code":`...)
	b = appendString(b, code)
	b = append(b, `,"container_id":`...)
	b = appendString(b, containerID)
	b = append(b, `,"outputs":`...)
	if !withOutputs {
		return append(b, `null}`...)
	}
	b = append(b, '[')
	for i, l := range logs {
		if i > 0 {
			b = append(b, ',')
		}
		b = append(b, `{"type":"logs","logs":`...)
		b = appendString(b, l)
		b = append(b, '}')
	}
	return append(b, `]}`...)
}
