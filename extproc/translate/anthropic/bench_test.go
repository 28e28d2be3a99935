package anthropic

import (
	"strings"
	"testing"
)

// BenchmarkStreamTextDelta measures Stream.Translate on one upstream chunk
// holding one text_delta event, the bulk of every streamed reply.
func BenchmarkStreamTextDelta(b *testing.B) {
	s := NewStream("client-model")
	head := []byte("event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"id\":\"msg_01Bench\",\"type\":\"message\",\"role\":\"assistant\",\"content\":[],\"usage\":{\"input_tokens\":10,\"output_tokens\":1}}}\n\n" +
		"event: content_block_start\ndata: {\"type\":\"content_block_start\",\"index\":0,\"content_block\":{\"type\":\"text\",\"text\":\"\"}}\n\n")
	dst, err := s.Translate(nil, head, false)
	if err != nil {
		b.Fatal(err)
	}
	ev := []byte("event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"text_delta\",\"text\":\" a few words of text\"}}\n\n")
	b.SetBytes(int64(len(ev)))
	b.ReportAllocs()
	for b.Loop() {
		if dst, err = s.Translate(dst[:0], ev, false); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkStreamTextDeltaSplit is the same event arriving in two chunks, so
// the splitter carries a partial event between calls.
func BenchmarkStreamTextDeltaSplit(b *testing.B) {
	s := NewStream("client-model")
	dst, _ := s.Translate(nil, []byte("data: {\"type\":\"message_start\",\"message\":{\"id\":\"msg_01Bench\",\"usage\":{\"input_tokens\":10}}}\n\n"), false)
	ev := []byte("event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"text_delta\",\"text\":\" a few words of text\"}}\n\n")
	first, second := ev[:40], ev[40:]
	b.SetBytes(int64(len(ev)))
	b.ReportAllocs()
	var err error
	for b.Loop() {
		dst, _ = s.Translate(dst[:0], first, false)
		if dst, err = s.Translate(dst, second, false); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkTranslateRequestImage measures a request carrying a 4 MiB image:
// the cost should be one pass and one copy.
func BenchmarkTranslateRequestImage(b *testing.B) {
	body := []byte(`{"model":"m","messages":[{"role":"system","content":"Describe images."},{"role":"user","content":[{"type":"text","text":"What is this?"},` +
		`{"type":"image_url","image_url":{"url":"data:image/png;base64,` + strings.Repeat("QUJD", 1<<20) + `"}}]}],"max_tokens":300}`)
	b.SetBytes(int64(len(body)))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := TranslateRequest(body, "claude-up", Options{}); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkTranslateRequestChat measures an ordinary small request with tools.
func BenchmarkTranslateRequestChat(b *testing.B) {
	body := []byte(`{"model":"m","messages":[{"role":"system","content":"Be brief."},{"role":"user","content":"What's the weather in Paris?"},` +
		`{"role":"assistant","content":null,"tool_calls":[{"id":"call_1","type":"function","function":{"name":"get_weather","arguments":"{\"city\":\"Paris\"}"}}]},` +
		`{"role":"tool","tool_call_id":"call_1","content":"sunny, 24C"}],"tools":[{"type":"function","function":{"name":"get_weather","description":"Weather.",` +
		`"parameters":{"type":"object","properties":{"city":{"type":"string"}},"required":["city"]}}}],"temperature":0.2,"stream":true,"stream_options":{"include_usage":true}}`)
	b.ReportAllocs()
	for b.Loop() {
		if _, err := TranslateRequest(body, "claude-up", Options{}); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkTranslateResponse measures a typical non-streaming text reply.
func BenchmarkTranslateResponse(b *testing.B) {
	body := []byte(msgPrefix + `"content":[{"type":"text","text":"Hello! How can I help you today?"}],"stop_reason":"end_turn","stop_sequence":null,"usage":{"input_tokens":12,"output_tokens":9}}`)
	b.ReportAllocs()
	for b.Loop() {
		if _, err := TranslateResponse(200, body, "client-model"); err != nil {
			b.Fatal(err)
		}
	}
}
