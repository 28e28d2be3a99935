package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log/slog"

	"github.com/switchyard-ai/switchyard/config"
	"github.com/switchyard-ai/switchyard/controlplane"
	"github.com/switchyard-ai/switchyard/gateway"
)

func loadConfig(path string) (*config.Config, error) {
	if path == "" {
		return config.Default()
	}
	return config.Load(path)
}

func cmdRun(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("run", flag.ContinueOnError)
	fs.SetOutput(stderr)
	cfgPath := fs.String("config", "", "configuration file (default: the embedded demo configuration)")
	dataDir := fs.String("data-dir", ".data", "directory for the key database and other state")
	listen := fs.String("listen", "", "address of the public listener (overrides the config's first listener)")
	insecure := fs.Bool("insecure", false, "allow plain HTTP on a non-loopback address")
	demoKey := fs.Bool("demo-key", false, "create a demo API key (tier standard) and print it")
	logLevel := fs.String("log-level", "info", "debug, info, warn or error")
	if err := fs.Parse(args); err != nil {
		return err
	}
	cfg, err := loadConfig(*cfgPath)
	if err != nil {
		return err
	}
	var level slog.Level
	if err := level.UnmarshalText([]byte(*logLevel)); err != nil {
		return fmt.Errorf("--log-level: %w", err)
	}
	logger := slog.New(slog.NewJSONHandler(stderr, &slog.HandlerOptions{Level: level}))

	g, err := gateway.Start(ctx, gateway.Options{
		Config:         cfg,
		DataDir:        *dataDir,
		Logger:         logger,
		Insecure:       *insecure,
		ListenOverride: *listen,
	})
	if err != nil {
		return err
	}
	defer g.Close()

	fmt.Fprintf(stdout, "Switchyard is serving the OpenAI API at %s\n", g.BaseURL())
	if *demoKey {
		secret, _, err := g.Keys.Create(ctx, "demo", "standard")
		if err != nil {
			return err
		}
		fmt.Fprintf(stdout, "Demo API key (tier standard): %s\n", secret)
		fmt.Fprintf(stdout, "Try it:\n  curl -s %s/chat/completions -H 'Authorization: Bearer %s' -H 'Content-Type: application/json' -d '{\"model\":\"%s\",\"messages\":[{\"role\":\"user\",\"content\":\"Hello!\"}]}'\n",
			g.BaseURL(), secret, cfg.Models[0].ID)
	}
	fmt.Fprintln(stdout, "Press Ctrl-C to stop.")
	<-ctx.Done()
	fmt.Fprintln(stdout, "Shutting down.")
	return nil
}

func cmdValidate(args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("validate", flag.ContinueOnError)
	fs.SetOutput(stderr)
	cfgPath := fs.String("config", "", "configuration file (default: the embedded configuration)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	cfg, err := loadConfig(*cfgPath)
	if err != nil {
		return err
	}
	if _, err := controlplane.Build(cfg, "validate"); err != nil {
		return err
	}
	name := *cfgPath
	if name == "" {
		name = config.DefaultName
	}
	fmt.Fprintf(stdout, "%s: ok (%d listeners, %d providers, %d models)\n", name, len(cfg.Listeners), len(cfg.Providers), len(cfg.Models))
	return nil
}
