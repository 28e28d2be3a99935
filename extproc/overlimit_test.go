package extproc

import (
	"testing"
	"time"

	"github.com/switchyard-ai/switchyard/ratelimit"
)

// A remembered refusal holds until its window resets, and a change of the
// key's limits (an administrator raising them) forgets it at once.
func TestOverLimitMemory(t *testing.T) {
	var o overLimit
	now := time.Now()
	lim := ratelimit.Limits{RPM: 10, TPM: 100}
	o.remember("k", &overEntry{until: now.Add(30 * time.Second), lim: lim, typ: "requests"})
	for _, tc := range []struct {
		name string
		lim  ratelimit.Limits
		at   time.Time
		want bool
	}{
		{"within the window", lim, now.Add(29 * time.Second), true},
		{"limits raised", ratelimit.Limits{RPM: 20, TPM: 100}, now, false},
		{"window over", lim, now.Add(30 * time.Second), false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o.remember("k", &overEntry{until: now.Add(30 * time.Second), lim: lim, typ: "requests"})
			if got := o.check("k", tc.lim, tc.at) != nil; got != tc.want {
				t.Errorf("refused = %v, want %v", got, tc.want)
			}
		})
	}
	if o.check("other", lim, now) != nil {
		t.Error("a key never refused is refused")
	}
}
