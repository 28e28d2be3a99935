package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"

	"github.com/switchyard-ai/switchyard/providers/fake"
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
	if err := fs.Parse(args); err != nil {
		return err
	}
	opts := fake.Options{ServiceTime: *serviceTime, ChunkDelay: *chunkDelay}
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
	fmt.Fprintf(stdout, "fake %s upstream at %s\n", *kind, base)
	<-ctx.Done()
	return nil
}
