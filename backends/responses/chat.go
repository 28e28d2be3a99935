package responses

import (
	"github.com/tidwall/gjson"
)

// conversation is the chat completions messages array a response is
// generated from, built from Responses items. Assistant text and the
// function calls that follow it become one assistant message, as chat
// completions expects (a message with content and tool_calls), so the
// pending assistant turn is held until something else arrives.
type conversation struct {
	msgs [][]byte

	open        bool   // an assistant turn is pending
	pendingText []byte // its content as a raw JSON string, nil for none
	calls       [][]byte
}

// addInstructions adds the request's instructions as the system message
// that opens the conversation. Instructions are not carried over from
// earlier responses (OpenAI documents this), so only the current request's
// are ever added.
func (c *conversation) addInstructions(text string) {
	m := make([]byte, 0, len(text)+32)
	m = append(m, `{"role":"system","content":`...)
	m = appendString(m, text)
	c.msgs = append(c.msgs, append(m, '}'))
}

// addItem adds one normalized item (see normalizeItem and the output item
// shapes).
func (c *conversation) addItem(it gjson.Result) {
	switch it.Get("type").Str {
	case "message":
		role := it.Get("role").Str
		content := it.Get("content")
		if role == "assistant" {
			c.flush()
			c.open = true
			c.pendingText = appendString(nil, messageText(content))
			return
		}
		c.flush()
		if role == "developer" {
			// Chat completions providers behind the gateway all know
			// "system"; OpenAI treats the two alike.
			role = "system"
		}
		m := []byte(`{"role":"`)
		m = append(m, role...)
		m = append(m, `","content":`...)
		m = appendChatContent(m, content)
		c.msgs = append(c.msgs, append(m, '}'))
	case "function_call":
		if !c.open {
			c.open = true
			c.pendingText = nil
		}
		call := []byte(`{"id":`)
		call = append(call, it.Get("call_id").Raw...)
		call = append(call, `,"type":"function","function":{"name":`...)
		call = append(call, it.Get("name").Raw...)
		call = append(call, `,"arguments":`...)
		call = append(call, it.Get("arguments").Raw...)
		c.calls = append(c.calls, append(call, `}}`...))
	case "function_call_output":
		c.flush()
		m := []byte(`{"role":"tool","tool_call_id":`)
		m = append(m, it.Get("call_id").Raw...)
		m = append(m, `,"content":`...)
		out := it.Get("output")
		if out.Type == gjson.String {
			m = append(m, out.Raw...)
		} else {
			// Chat tool messages carry text only.
			m = appendString(m, messageText(out))
		}
		c.msgs = append(c.msgs, append(m, '}'))
	default:
		// reasoning, web_search_call: nothing chat completions can take.
	}
}

// addToolResult adds the result of a tool the service ran itself.
func (c *conversation) addToolResult(callID, content string) {
	c.flush()
	m := []byte(`{"role":"tool","tool_call_id":`)
	m = appendString(m, callID)
	m = append(m, `,"content":`...)
	m = appendString(m, content)
	c.msgs = append(c.msgs, append(m, '}'))
}

// flush renders the pending assistant turn.
func (c *conversation) flush() {
	if !c.open {
		return
	}
	m := []byte(`{"role":"assistant","content":`)
	switch {
	case c.pendingText != nil:
		m = append(m, c.pendingText...)
	case len(c.calls) > 0:
		m = append(m, `null`...)
	default:
		m = append(m, `""`...)
	}
	if len(c.calls) > 0 {
		m = append(m, `,"tool_calls":[`...)
		for i, call := range c.calls {
			if i > 0 {
				m = append(m, ',')
			}
			m = append(m, call...)
		}
		m = append(m, ']')
	}
	c.msgs = append(c.msgs, append(m, '}'))
	c.open, c.pendingText, c.calls = false, nil, nil
}

// appendMessages appends the messages as a JSON array.
func (c *conversation) appendMessages(dst []byte) []byte {
	c.flush()
	dst = append(dst, '[')
	for i, m := range c.msgs {
		if i > 0 {
			dst = append(dst, ',')
		}
		dst = append(dst, m...)
	}
	return append(dst, ']')
}

// appendChatContent renders a normalized message content array as chat
// content: a string for a single text part (what every provider takes),
// otherwise an array of chat parts.
func appendChatContent(dst []byte, content gjson.Result) []byte {
	parts := content.Array()
	if len(parts) == 1 && parts[0].Get("type").Str == "input_text" {
		return append(dst, parts[0].Get("text").Raw...)
	}
	dst = append(dst, '[')
	n := 0
	for _, p := range parts {
		var part []byte
		switch p.Get("type").Str {
		case "input_text", "output_text":
			part = append(append([]byte(`{"type":"text","text":`), p.Get("text").Raw...), '}')
		case "input_image":
			part = []byte(`{"type":"image_url","image_url":{"url":`)
			part = append(part, p.Get("image_url").Raw...)
			if d := p.Get("detail"); d.Type == gjson.String {
				part = append(append(part, `,"detail":`...), d.Raw...)
			}
			part = append(part, `}}`...)
		case "input_file":
			part = []byte(`{"type":"file","file":{"file_data":`)
			part = append(part, p.Get("file_data").Raw...)
			if f := p.Get("filename"); f.Type == gjson.String {
				part = append(append(part, `,"filename":`...), f.Raw...)
			}
			part = append(part, `}}`...)
		default:
			continue
		}
		if n > 0 {
			dst = append(dst, ',')
		}
		dst = append(dst, part...)
		n++
	}
	return append(dst, ']')
}

// addAssistantCalls adds an assistant turn of the service's own: the text
// the model wrote in the step and the tool calls the service runs.
func (c *conversation) addAssistantCalls(text string, calls []*callState) {
	c.flush()
	c.open = true
	if text != "" {
		c.pendingText = appendString(nil, text)
	}
	for _, cs := range calls {
		call := []byte(`{"id":`)
		call = appendString(call, cs.callID)
		call = append(call, `,"type":"function","function":{"name":`...)
		call = appendString(call, cs.name)
		call = append(call, `,"arguments":`...)
		call = appendString(call, cs.args.String())
		c.calls = append(c.calls, append(call, `}}`...))
	}
}
