package metadata

import (
	"fmt"
	"strings"
	"testing"

	"github.com/tidwall/gjson"
)

func TestParse(t *testing.T) {
	var many []string
	for i := range MaxPairs + 1 {
		many = append(many, fmt.Sprintf(`"k%d":"v"`, i))
	}
	tests := []struct {
		name, doc string
		want      string // raw kept; "" for nil
		param     string // error param; "" for none
	}{
		{"absent", `{}`, "", ""},
		{"null", `{"metadata":null}`, "", ""},
		{"ok", `{"metadata":{"a":"b"}}`, `{"a":"b"}`, ""},
		{"16 pairs", `{"metadata":{` + strings.Join(many[:MaxPairs], ",") + `}}`, `{` + strings.Join(many[:MaxPairs], ",") + `}`, ""},
		{"17 pairs", `{"metadata":{` + strings.Join(many, ",") + `}}`, "", "metadata"},
		{"not an object", `{"metadata":"x"}`, "", "metadata"},
		{"key of 64 runes", `{"metadata":{"` + strings.Repeat("é", 64) + `":"v"}}`, `{"` + strings.Repeat("é", 64) + `":"v"}`, ""},
		{"key too long", `{"metadata":{"` + strings.Repeat("k", 65) + `":"v"}}`, "", "metadata"},
		{"value not a string", `{"metadata":{"a":1}}`, "", "metadata.a"},
		{"value of 512 runes", `{"metadata":{"a":"` + strings.Repeat("é", 512) + `"}}`, `{"a":"` + strings.Repeat("é", 512) + `"}`, ""},
		{"value too long", `{"metadata":{"a":"` + strings.Repeat("v", 513) + `"}}`, "", "metadata.a"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := Parse(gjson.Get(tt.doc, "metadata"))
			switch {
			case tt.param != "":
				if err == nil || err.Param != tt.param || err.Status != 400 {
					t.Fatalf("err = %v, want a 400 on %q", err, tt.param)
				}
			case err != nil:
				t.Fatalf("unexpected error %v", err)
			case string(got) != tt.want:
				t.Fatalf("raw = %q, want %q", got, tt.want)
			}
		})
	}
}
