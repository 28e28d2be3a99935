package config

import (
	"fmt"
	"net/url"
	"time"
)

// Tools configures the Responses API's built-in tools, which the backends
// run themselves. A tool left out is refused with a 400 naming it.
type Tools struct {
	WebSearch       *WebSearch       `yaml:"web_search" json:"web_search,omitempty"`
	FileSearch      *FileSearch      `yaml:"file_search" json:"file_search,omitempty"`
	CodeInterpreter *CodeInterpreter `yaml:"code_interpreter" json:"code_interpreter,omitempty"`
}

// WebSearch is the search vendor behind the web_search tool.
type WebSearch struct {
	// Kind is the vendor's API: "brave" (the Brave Search API).
	Kind    string `yaml:"kind" json:"kind,omitempty"`
	BaseURL string `yaml:"base_url" json:"base_url,omitempty"`
	// APIKeyEnv names the environment variable holding the vendor's key.
	APIKeyEnv string `yaml:"api_key_env" json:"api_key_env,omitempty"`
}

// FileSearch configures file_search over vector stores.
type FileSearch struct {
	// EmbeddingModel is the model (with the embeddings capability) that
	// embeds chunks and queries, called through the gateway.
	EmbeddingModel string `yaml:"embedding_model" json:"embedding_model,omitempty"`
}

// CodeInterpreter configures the sandbox code_interpreter runs Python in.
type CodeInterpreter struct {
	// Python is the interpreter; default python3 on PATH.
	Python string `yaml:"python" json:"python,omitempty"`
	// Timeout bounds one run's wall-clock time (default 30s).
	Timeout time.Duration `yaml:"timeout" json:"timeout,omitempty"`
	// MemoryBytes bounds one run's address space (default 512 MiB).
	MemoryBytes int64 `yaml:"memory_bytes" json:"memory_bytes,omitempty"`
	// AllowUnsandboxed runs code without namespace isolation where the
	// host cannot provide it. Only for trusted, single-user machines.
	AllowUnsandboxed bool `yaml:"allow_unsandboxed" json:"allow_unsandboxed,omitempty"`
}

// WebSearchKinds are the supported search vendors.
var WebSearchKinds = []string{"brave"}

func (v *validator) checkTools(c *Config) {
	t := c.Tools
	if ws := t.WebSearch; ws != nil {
		if !contains(WebSearchKinds, ws.Kind) {
			v.fail(fmt.Sprintf("must be one of %v", WebSearchKinds), "tools", "web_search", "kind")
		}
		if u, err := url.Parse(ws.BaseURL); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			v.fail("must be an http or https URL", "tools", "web_search", "base_url")
		}
	}
	if fs := t.FileSearch; fs != nil {
		m, ok := c.Model(fs.EmbeddingModel)
		switch {
		case fs.EmbeddingModel == "":
			v.fail("is required", "tools", "file_search", "embedding_model")
		case !ok:
			v.fail(fmt.Sprintf("model %q is not in models", fs.EmbeddingModel), "tools", "file_search", "embedding_model")
		case !contains(m.Capabilities, "embeddings"):
			v.fail(fmt.Sprintf("model %q lacks the embeddings capability", fs.EmbeddingModel), "tools", "file_search", "embedding_model")
		}
	}
	if ci := t.CodeInterpreter; ci != nil {
		if ci.Timeout < 0 || ci.MemoryBytes < 0 {
			v.fail("timeout and memory_bytes must be positive", "tools", "code_interpreter")
		}
	}
}

// MissingCredentials lists, one line each, every credential environment
// variable the configuration names (providers' and tools' api_key_env) that
// getenv reports empty, except for vendors that are the config's own demo
// upstreams (the gateway generates those). The gateway serves without them
// (the provider's models fail over or answer 503; the tool fails); validate
// reports them.
func (c *Config) MissingCredentials(getenv func(string) string) []string {
	var missing []string
	for _, p := range c.Providers {
		if p.APIKeyEnv != "" && getenv(p.APIKeyEnv) == "" && !c.IsDemoUpstream(p.BaseURL) {
			missing = append(missing, fmt.Sprintf("provider %q: environment variable %s (api_key_env) is not set", p.Name, p.APIKeyEnv))
		}
	}
	if ws := c.Tools.WebSearch; ws != nil && ws.APIKeyEnv != "" && getenv(ws.APIKeyEnv) == "" && !c.IsDemoUpstream(ws.BaseURL) {
		missing = append(missing, fmt.Sprintf("tools.web_search: environment variable %s (api_key_env) is not set", ws.APIKeyEnv))
	}
	return missing
}

// IsDemoUpstream reports whether baseURL points at one of the demo
// upstreams the gateway starts itself.
func (c *Config) IsDemoUpstream(baseURL string) bool {
	u, err := url.Parse(baseURL)
	if err != nil {
		return false
	}
	for _, d := range c.DemoUpstreams {
		if u.Host == d.Listen {
			return true
		}
	}
	return false
}
