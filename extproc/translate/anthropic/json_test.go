package anthropic

import (
	"encoding/json"
	"testing"
)

func TestAppendJoinedStrings(t *testing.T) {
	got := appendJoinedStrings(nil, []string{`"a\"b"`, `""`, `"\u00e9\n"`})
	var s string
	if err := json.Unmarshal(got, &s); err != nil || s != "a\"bé\n" {
		t.Errorf("joined %s = %q, %v", got, s, err)
	}
}
