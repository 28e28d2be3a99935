//go:build !linux

package sandbox

import (
	"context"
	"errors"
	"io"
)

// The sandbox needs Linux namespaces; elsewhere Available says so.
const platformSupported = false

const rlimitNproc = 0

func startShim(context.Context, shimConfig, io.Reader, io.Writer, io.Writer) (shimResult, error) {
	return shimResult{}, errors.New("sandbox: Linux only")
}
