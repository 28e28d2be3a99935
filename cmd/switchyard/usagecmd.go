package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"strings"

	"github.com/switchyard-ai/switchyard/internal/gateway"
	usagedb "github.com/switchyard-ai/switchyard/internal/usage"
)

const usageUsage = `switchyard usage: what keys used and spent, per day (UTC), key and model

  usage [--data-dir DIR | --config FILE] [--key KEY_OR_ID] [--since YYYY-MM-DD] [--until YYYY-MM-DD] [--format json|csv]

Without --key, every key's rows. Days are inclusive. With --config, its
storage section says where usage is kept (PostgreSQL: every replica's,
the DSN from the variable storage.metadata.dsn_env names). A running
gateway writes its counts every 5 s, so the last seconds may be missing
(the admin API's GET /admin/v1/usage includes them).
`

// cmdUsage is `switchyard usage`.
func cmdUsage(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("usage", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() { fmt.Fprint(stderr, usageUsage) }
	dataDir := fs.String("data-dir", ".data", "the gateway's data directory (SQLite storage)")
	cfgPath := fs.String("config", "", "configuration: its storage section says where usage and keys are (default: SQLite in --data-dir)")
	key := fs.String("key", "", "a key or key id (default: every key)")
	since := fs.String("since", "", "first day, YYYY-MM-DD (default: the first)")
	until := fs.String("until", "", "last day, YYYY-MM-DD (default: the last)")
	format := fs.String("format", usagedb.FormatJSON, "json or csv")
	if _, err := parseArgs(fs, args, 0); err != nil {
		return err
	}
	if *format != usagedb.FormatJSON && *format != usagedb.FormatCSV {
		return fmt.Errorf("usage: --format must be json or csv")
	}
	q := usagedb.Query{Since: *since, Until: *until}
	if err := q.Validate(); err != nil {
		return err
	}
	cfg, err := loadConfig(*cfgPath)
	if err != nil {
		return err
	}
	if *key != "" {
		// A secret or an id names the key; rows are kept by id.
		ks, err := gateway.OpenKeyStore(ctx, cfg.Storage, *dataDir)
		if err != nil {
			return err
		}
		k, err := ks.Get(ctx, strings.TrimSpace(*key))
		ks.Close()
		if err != nil {
			return fmt.Errorf("usage: --key: %w", err)
		}
		q.KeyID = k.ID
	}
	store, err := gateway.OpenUsageStore(ctx, cfg.Storage, *dataDir)
	if err != nil {
		return err
	}
	defer store.Close()
	rows, err := store.Query(ctx, q)
	if err != nil {
		return err
	}
	return usagedb.WriteRows(stdout, *format, rows)
}
