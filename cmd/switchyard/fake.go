package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"

	"github.com/switchyard-ai/switchyard/providers/fake"
)

// cmdFake runs the fake OpenAI-compatible upstream alone (benchmarks, demos).
func cmdFake(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("fake", flag.ContinueOnError)
	fs.SetOutput(stderr)
	listen := fs.String("listen", "127.0.0.1:8091", "address to listen on")
	keyEnv := fs.String("api-key-env", "", "environment variable holding the credential the fake requires (none if empty)")
	serviceTime := fs.Duration("service-time", 0, "fixed delay before the first byte of every response")
	if err := fs.Parse(args); err != nil {
		return err
	}
	opts := fake.Options{ServiceTime: *serviceTime}
	if *keyEnv != "" {
		opts.APIKey = os.Getenv(*keyEnv)
	}
	_, addr, err := fake.Start(ctx, *listen, opts)
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "fake OpenAI upstream at http://%s/v1\n", addr)
	<-ctx.Done()
	return nil
}
