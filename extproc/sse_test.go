package extproc

import (
	"math/rand/v2"
	"strings"
	"testing"
)

// feed runs chunks through a filter and returns what the client receives.
func feed(f *sseFilter, chunks []string) string {
	var out strings.Builder
	for i, c := range chunks {
		b, replace := f.chunk([]byte(c), i == len(chunks)-1)
		if replace {
			out.Write(b)
		} else {
			out.WriteString(c)
		}
	}
	return out.String()
}

func TestSSEFilterEverySplit(t *testing.T) {
	crlf := func(s string) string { return strings.ReplaceAll(s, "\n", "\r\n") }
	streams := []struct {
		name       string
		in         string
		withoutUse string // in with the usage event cut
	}{
		{"lf", roleEvent + contentEvent + finishEvent + usageEvent + doneEvent, roleEvent + contentEvent + finishEvent + doneEvent},
		{"crlf", crlf(roleEvent + contentEvent + usageEvent + doneEvent), crlf(roleEvent + contentEvent + doneEvent)},
		{"usage last, no blank line", roleEvent + strings.TrimSuffix(usageEvent, "\n\n"), roleEvent},
		{"comments and event names", ": keep-alive\n\nevent: chunk\n" + contentEvent + usageEvent + doneEvent, ": keep-alive\n\nevent: chunk\n" + contentEvent + doneEvent},
		{"error event", `data: {"error":{"message":"overloaded","type":"server_error"}}` + "\n\n", `data: {"error":{"message":"overloaded","type":"server_error"}}` + "\n\n"},
	}
	for _, s := range streams {
		for _, drop := range []bool{false, true} {
			want := s.in
			if drop {
				want = s.withoutUse
			}
			for cut := 0; cut <= len(s.in); cut++ {
				f := &sseFilter{drop: drop}
				if got := feed(f, []string{s.in[:cut], s.in[cut:]}); got != want {
					t.Fatalf("%s drop=%v split at %d:\n got %q\nwant %q", s.name, drop, cut, got, want)
				}
				if strings.Contains(s.in, `"usage":{`) && (!f.seen || f.usage != wantUsage) {
					t.Fatalf("%s drop=%v split at %d: usage %+v seen=%v", s.name, drop, cut, f.usage, f.seen)
				}
			}
			// Many small random chunks.
			r := rand.New(rand.NewPCG(1, 2))
			for range 200 {
				var chunks []string
				for rest := s.in; len(rest) > 0; {
					n := min(1+r.IntN(40), len(rest))
					chunks = append(chunks, rest[:n])
					rest = rest[n:]
				}
				f := &sseFilter{drop: drop}
				if got := feed(f, chunks); got != want {
					t.Fatalf("%s drop=%v chunks %q:\n got %q\nwant %q", s.name, drop, chunks, got, want)
				}
			}
		}
	}
}

func TestSSEFilterKeepsUsageWithChoices(t *testing.T) {
	// Some providers put usage on the last content chunk; its content
	// matters more than hiding the usage field.
	ev := `data: {"choices":[{"index":0,"delta":{"content":"bye"},"finish_reason":"stop"}],"usage":{"prompt_tokens":1,"completion_tokens":2,"total_tokens":3}}` + "\n\n"
	f := &sseFilter{drop: true}
	if got := feed(f, []string{ev + doneEvent}); got != ev+doneEvent {
		t.Errorf("got %q", got)
	}
	if !f.seen || f.usage.TotalTokens != 3 {
		t.Errorf("usage %+v", f.usage)
	}
}

func TestSSEFilterGivesUpOnEndlessEvent(t *testing.T) {
	f := &sseFilter{drop: true}
	big := strings.Repeat("x", maxPendingEvent/2)
	in := []string{"data: " + big, big, big, "tail\n\n"}
	if got := feed(f, in); got != strings.Join(in, "") {
		t.Errorf("bytes lost or reordered (%d vs %d)", len(got), len(strings.Join(in, "")))
	}
	if !f.off || f.carry != nil {
		t.Errorf("filter still buffering: off=%v carry=%d", f.off, len(f.carry))
	}
}

func TestGeneratedBytes(t *testing.T) {
	for _, tc := range []struct {
		name, ev string
		want     int64
	}{
		{"content", `data: {"choices":[{"index":0,"delta":{"role":"assistant","content":"Hello"}}]}`, 5},
		{"escaped", `data: {"choices":[{"delta":{"content":"a\"b"}}]}`, 4},
		{"tool arguments", `data: {"choices":[{"delta":{"tool_calls":[{"index":0,"function":{"name":"f","arguments":"{\"x\":1}"}}]}}]}`, 9},
		{"reasoning and refusal", `data: {"choices":[{"delta":{"reasoning_content":"hmm","refusal":"no"}}]}`, 5},
		{"value named content is not a key", `data: {"choices":[{"delta":{"role":"content"}}]}`, 0},
		{"null content", `data: {"choices":[{"delta":{"content":null}}],"usage":null}`, 0},
		{"done", `data: [DONE]`, 0},
		{"truncated", `data: {"choices":[{"delta":{"content":"abc`, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := generatedBytes(tc.ev); got != tc.want {
				t.Errorf("generatedBytes = %d, want %d", got, tc.want)
			}
		})
	}
}
