package envoy

import (
	"bytes"
	"encoding/json"
	"fmt"
	"sort"

	cachev3 "github.com/envoyproxy/go-control-plane/pkg/cache/v3"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"
)

// eachResource calls f for every resource of snap, by type (SnapshotTypes
// order) and then name.
func eachResource(snap *cachev3.Snapshot, f func(typ, name string, m proto.Message) error) error {
	for _, typ := range SnapshotTypes(snap) {
		res := snap.GetResources(typ)
		names := make([]string, 0, len(res))
		for n := range res {
			names = append(names, n)
		}
		sort.Strings(names)
		for _, n := range names {
			if err := f(typ, n, res[n]); err != nil {
				return err
			}
		}
	}
	return nil
}

// SnapshotJSONLines renders every resource of snap as one line of protojson
// of a google.protobuf.Any (with @type), as Envoy receives it over xDS: the
// output of `switchyard envoy snapshot`.
func SnapshotJSONLines(snap *cachev3.Snapshot) ([]byte, error) {
	var out bytes.Buffer
	err := eachResource(snap, func(typ, name string, m proto.Message) error {
		a, err := anypb.New(m)
		if err != nil {
			return fmt.Errorf("envoy: pack %s %q: %w", typ, name, err)
		}
		js, err := protojson.MarshalOptions{UseProtoNames: true}.Marshal(a)
		if err != nil {
			return fmt.Errorf("envoy: marshal %s %q: %w", typ, name, err)
		}
		// protojson varies its whitespace on purpose; compact it so the
		// output is stable and one line per resource.
		if err := json.Compact(&out, js); err != nil {
			return fmt.Errorf("envoy: compact %s %q: %w", typ, name, err)
		}
		out.WriteByte('\n')
		return nil
	})
	return out.Bytes(), err
}

// SnapshotYAML renders every resource of snap as a YAML document headed by
// its type and name: the golden form, readable in review.
func SnapshotYAML(snap *cachev3.Snapshot) ([]byte, error) {
	var out bytes.Buffer
	err := eachResource(snap, func(typ, name string, m proto.Message) error {
		a, err := anypb.New(m)
		if err != nil {
			return fmt.Errorf("envoy: pack %s %q: %w", typ, name, err)
		}
		y, err := MarshalYAML(a)
		if err != nil {
			return err
		}
		fmt.Fprintf(&out, "--- # %s %s\n", typ, name)
		out.Write(y)
		return nil
	})
	return out.Bytes(), err
}
