package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"

	"github.com/switchyard-ai/switchyard/internal/testing/fake"
)

// cmdFake runs one fake vendor upstream alone (benchmarks, demos).
func cmdFake(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("fake", flag.ContinueOnError)
	fs.SetOutput(stderr)
	listen := fs.String("listen", "127.0.0.1:8091", "address to listen on")
	kind := fs.String("kind", fake.KindOpenAI, "wire format: openai, anthropic or gemini")
	keyEnv := fs.String("api-key-env", "", "environment variable holding the credential the fake requires (none if empty)")
	serviceTime := fs.Duration("service-time", 0, "fixed delay before the first byte of every response")
	chunkDelay := fs.Duration("chunk-delay", 0, "pause between streamed events")
	var cache fake.CacheOptions
	fs.BoolVar(&cache.Enabled, "prompt-cache", false, "model the vendor's prompt cache (openai and anthropic): cached tokens in usage, a faster first byte")
	fs.IntVar(&cache.MinTokens, "prompt-cache-min-tokens", 0, "shortest prefix cached, in the fake's tokens (words); 0: 1024")
	fs.IntVar(&cache.Entries, "prompt-cache-entries", 0, "prefixes remembered, least recently used first out; 0: 4096")
	fs.DurationVar(&cache.CachedServiceTime, "cached-service-time", 0, "delay before the first byte of a reply whose whole prompt was cached (instead of -service-time; a partly cached prompt waits in proportion)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if !cache.Enabled && (cache.MinTokens != 0 || cache.Entries != 0 || cache.CachedServiceTime != 0) {
		return fmt.Errorf("fake: -prompt-cache-min-tokens, -prompt-cache-entries and -cached-service-time need -prompt-cache")
	}
	if cache.MinTokens < 0 || cache.Entries < 0 || cache.CachedServiceTime < 0 {
		return fmt.Errorf("fake: prompt cache settings must not be negative")
	}
	opts := fake.Options{ServiceTime: *serviceTime, ChunkDelay: *chunkDelay, PromptCache: cache}
	if *keyEnv != "" {
		opts.APIKey = os.Getenv(*keyEnv)
	}
	_, addr, err := fake.Start(ctx, *listen, *kind, opts)
	if err != nil {
		return err
	}
	// The base URL a provider of this kind would be configured with.
	base := "http://" + addr.String()
	if *kind == fake.KindOpenAI {
		base += "/v1"
	}
	if cache.Enabled {
		fmt.Fprintf(stdout, "fake %s upstream at %s (prompt cache on)\n", *kind, base)
	} else {
		fmt.Fprintf(stdout, "fake %s upstream at %s\n", *kind, base)
	}
	<-ctx.Done()
	return nil
}

// startDemoUpstream starts one of make run's demo vendors. The binary is
// the one place that wires the fakes (test doubles) into the product.
func startDemoUpstream(ctx context.Context, listen, kind, apiKey string) (io.Closer, error) {
	srv, _, err := fake.Start(ctx, listen, kind, fake.Options{APIKey: apiKey})
	if err != nil {
		return nil, err
	}
	return srv, nil
}
