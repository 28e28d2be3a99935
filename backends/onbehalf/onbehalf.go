// Package onbehalf owns calling the gateway's public API on behalf of an
// owner: the batch runner and the Responses service send their model
// requests through the same data plane and extproc as clients do, so
// routing, failover, translation and usage are one code path. They
// authenticate with the internal token and name the owner and the origin
// (docs/backends-design.md).
package onbehalf

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"

	"github.com/switchyard-ai/switchyard/backends/caller"
)

// Client calls the gateway. It is safe for concurrent use.
type Client struct {
	// BaseURL is the gateway's OpenAI base URL, ending in /v1.
	BaseURL string
	// Token is the internal token extproc accepts with an owner.
	Token string
	// HTTP is the client used; nil: a client with keep-alive connections
	// sized for a batch runner's concurrency.
	HTTP *http.Client
}

// New returns a Client for the gateway at baseURL.
func New(baseURL, token string) *Client {
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.MaxIdleConns = 512
	tr.MaxIdleConnsPerHost = 512
	tr.IdleConnTimeout = 90 * time.Second
	// Responses are read as sent: usage is read from them.
	tr.DisableCompression = true
	return &Client{BaseURL: strings.TrimSuffix(baseURL, "/"), Token: token, HTTP: &http.Client{Transport: tr}}
}

// Do sends method path (a path under /v1, such as "/v1/chat/completions")
// with body for owner. The caller closes the response body. A non-2xx
// status is not an error: it is the gateway's answer, in OpenAI's shape.
func (c *Client) Do(ctx context.Context, owner, origin, method, path string, body io.Reader) (*http.Response, error) {
	u := c.BaseURL + strings.TrimPrefix(path, "/v1")
	req, err := http.NewRequestWithContext(ctx, method, u, body)
	if err != nil {
		return nil, fmt.Errorf("onbehalf: %w", err)
	}
	req.Header.Set("authorization", "Bearer "+c.Token)
	req.Header.Set(caller.OnBehalfOfHeader, owner)
	req.Header.Set(caller.OriginHeader, origin)
	if body != nil {
		req.Header.Set("content-type", "application/json")
	}
	hc := c.HTTP
	if hc == nil {
		hc = http.DefaultClient
	}
	resp, err := hc.Do(req)
	if err != nil {
		return nil, fmt.Errorf("onbehalf: %s %s: %w", method, path, err)
	}
	return resp, nil
}
