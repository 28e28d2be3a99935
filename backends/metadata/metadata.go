// Package metadata owns OpenAI's `metadata` request field, shared by
// batches, responses and vector stores: an object of at most 16 string
// pairs, keys of at most 64 characters and values of at most 512.
package metadata

import (
	"unicode/utf8"

	"github.com/tidwall/gjson"

	"github.com/switchyard-ai/switchyard/internal/apierror"
)

// OpenAI's limits on a metadata object (characters, not bytes).
const (
	MaxPairs    = 16
	MaxKeyLen   = 64
	MaxValueLen = 512
)

// Parse checks v, the request's `metadata`, and returns its raw JSON to
// store as is; nil when it is absent or null.
func Parse(v gjson.Result) ([]byte, *apierror.Error) {
	if !v.Exists() || v.Type == gjson.Null {
		return nil, nil
	}
	if !v.IsObject() {
		return nil, apierror.InvalidParam("metadata", "Invalid type for 'metadata': expected an object of strings.")
	}
	n := 0
	var aerr *apierror.Error
	v.ForEach(func(k, val gjson.Result) bool {
		n++
		switch {
		case n > MaxPairs:
			aerr = apierror.InvalidParam("metadata", "Invalid 'metadata': too many properties. Expected at most %d.", MaxPairs)
		case utf8.RuneCountInString(k.Str) > MaxKeyLen:
			aerr = apierror.InvalidParam("metadata", "Invalid 'metadata': keys may have at most %d characters.", MaxKeyLen)
		case val.Type != gjson.String:
			aerr = apierror.InvalidParam("metadata."+k.Str, "Invalid type for 'metadata.%s': expected a string.", k.Str)
		case utf8.RuneCountInString(val.Str) > MaxValueLen:
			aerr = apierror.InvalidParam("metadata."+k.Str, "Invalid 'metadata.%s': values may have at most %d characters.", k.Str, MaxValueLen)
		}
		return aerr == nil
	})
	if aerr != nil {
		return nil, aerr
	}
	return []byte(v.Raw), nil
}
