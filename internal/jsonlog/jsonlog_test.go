package jsonlog

import (
	"bytes"
	"context"
	"log/slog"
	"math"
	"strconv"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/structpb"
)

// TestFastPathMatchesSlog: a line written through the fast path is byte for
// byte the line slog's JSONHandler writes for the same record.
func TestFastPathMatchesSlog(t *testing.T) {
	at := time.Date(2026, 11, 25, 18, 5, 34, 123456000, time.FixedZone("X", 3600))
	strs := []string{"", "plain", `quo"te`, `back\slash`, "nl\ncr\rtab\t", "ctl\x00\x01\x1f\x7f", "<html>&amp;",
		"héllo wörld", "bad\xffutf8\xc3", "line\u2028para\u2029", "emoji 😀"}
	anys := []any{int64(42), int64(-7), 3.5, 1e21, 1e-7, true, nil, "s\"", map[string]any{"b": 1.0, "a": "<x>"},
		[]any{"x", 2.0}, math.Inf(1), math.NaN()}
	for _, with := range [][]slog.Attr{nil, {slog.String("component", "dataplane")},
		{slog.Int("n", 3), slog.Group("g", slog.String("k", "v\n"))}} {
		for _, level := range []slog.Level{slog.LevelInfo, slog.LevelError, slog.LevelWarn + 1} {
			var want, got bytes.Buffer
			ref := slog.Handler(slog.NewJSONHandler(&want, nil))
			var h slog.Handler = NewHandler(&got, nil)
			if with != nil {
				ref, h = ref.WithAttrs(with), h.WithAttrs(with)
			}
			r := slog.NewRecord(at, level, "acc\"ess", 0)
			buf, ok := h.(*Handler).AppendStart(nil, at, level, "acc\"ess")
			if !ok {
				t.Fatal("no fast path")
			}
			for i, s := range strs {
				k := string(rune('a'+i)) + s
				r.AddAttrs(slog.String(k, s))
				buf = AppendString(buf, k, s)
			}
			r.AddAttrs(slog.Int64("int", -12))
			buf = AppendInt(buf, "int", -12)
			for i, v := range anys {
				k := "any" + string(rune('a'+i))
				r.AddAttrs(slog.Any(k, v))
				buf = AppendAny(buf, k, v)
			}
			if err := ref.Handle(context.Background(), r); err != nil {
				t.Fatal(err)
			}
			if err := h.(*Handler).WriteLine(buf); err != nil {
				t.Fatal(err)
			}
			if got.String() != want.String() {
				t.Errorf("with %v, level %v:\n got %s\nwant %s", with, level, got.String(), want.String())
			}
		}
	}
}

// TestNoFastPath: where the fast path could not match slog (groups,
// ReplaceAttr, source, an attribute with a built-in's name), there is none,
// and records still go through slog.
func TestNoFastPath(t *testing.T) {
	var b bytes.Buffer
	for name, h := range map[string]slog.Handler{
		"group":       NewHandler(&b, nil).WithGroup("g"),
		"replaceAttr": NewHandler(&b, &slog.HandlerOptions{ReplaceAttr: func(_ []string, a slog.Attr) slog.Attr { return a }}),
		"source":      NewHandler(&b, &slog.HandlerOptions{AddSource: true}),
		"msg attr":    NewHandler(&b, nil).WithAttrs([]slog.Attr{slog.String("msg", "x")}),
	} {
		if _, ok := h.(*Handler).AppendStart(nil, time.Now(), slog.LevelInfo, "m"); ok {
			t.Errorf("%s: a fast path", name)
		}
	}
	b.Reset()
	slog.New(NewHandler(&b, &slog.HandlerOptions{Level: slog.LevelWarn})).Info("dropped")
	slog.New(NewHandler(&b, nil)).Info("kept", "k", 1)
	if bytes.Contains(b.Bytes(), []byte("dropped")) || !bytes.Contains(b.Bytes(), []byte(`"msg":"kept","k":1}`)) {
		t.Errorf("slog path: %s", b.String())
	}
}

// TestAppendStructValue: a Struct value is encoded as encoding/json (through
// slog.Any) encodes its AsInterface, nested floats, escapes and key order
// included; what encoding/json cannot encode is refused.
func TestAppendStructValue(t *testing.T) {
	strs := []string{"", "plain", `quo"te\`, "nl\ncr\rtab\tbs\bff\f", "ctl\x00\x1f\x7f", "<html>&amp;", "bad\xffutf8",
		"line\u2028para\u2029", "😀"}
	nums := []float64{0, math.Copysign(0, -1), 1, -7, 0.25, 5000, 1e9, 1e20, 1e21, 1e-6, 1e-7, 123456789.125, -3.5e-9, math.MaxFloat64, math.SmallestNonzeroFloat64}
	var vals []*structpb.Value
	for _, s := range strs {
		vals = append(vals, structpb.NewStringValue(s))
	}
	for _, f := range nums {
		vals = append(vals, structpb.NewNumberValue(f))
	}
	vals = append(vals, structpb.NewBoolValue(false), structpb.NewNullValue(), &structpb.Value{})
	fields := map[string]*structpb.Value{}
	for i, v := range vals {
		fields[strs[i%len(strs)]+strconv.Itoa(i)] = v
	}
	list := structpb.NewListValue(&structpb.ListValue{Values: vals})
	obj := structpb.NewStructValue(&structpb.Struct{Fields: fields})
	nested := structpb.NewStructValue(&structpb.Struct{Fields: map[string]*structpb.Value{"b": list, "a": obj, "c": structpb.NewListValue(&structpb.ListValue{})}})
	for _, v := range append(vals, list, obj, nested) {
		var want bytes.Buffer
		slog.New(slog.NewJSONHandler(&want, &slog.HandlerOptions{ReplaceAttr: func(g []string, a slog.Attr) slog.Attr {
			if len(g) == 0 && a.Key != "v" {
				return slog.Attr{}
			}
			return a
		}})).Info("", "v", v.AsInterface())
		got, ok := AppendStructValue([]byte(`{"v":`), v)
		if !ok {
			t.Fatalf("%v refused", v)
		}
		if g, w := string(got)+"}\n", want.String(); g != w {
			t.Errorf("got  %s\nwant %s", g, w)
		}
	}
	for _, f := range []float64{math.NaN(), math.Inf(-1)} {
		bad := structpb.NewListValue(&structpb.ListValue{Values: []*structpb.Value{structpb.NewNumberValue(1), structpb.NewNumberValue(f)}})
		if got, ok := AppendStructValue([]byte("x"), bad); ok || string(got) != "x" {
			t.Errorf("%v: %q, %v", f, got, ok)
		}
	}
}
