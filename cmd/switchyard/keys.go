package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"sort"
	"text/tabwriter"
	"time"

	"github.com/switchyard-ai/switchyard/keys"
)

func cmdKeys(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 {
		return fmt.Errorf("keys: want a subcommand: create, list or revoke")
	}
	fs := flag.NewFlagSet("keys "+args[0], flag.ContinueOnError)
	fs.SetOutput(stderr)
	dataDir := fs.String("data-dir", ".data", "directory holding the key database")
	switch args[0] {
	case "create":
		name := fs.String("name", "", "a name for the key (who or what uses it)")
		tier := fs.String("tier", "standard", "tier: one of the configuration's tiers")
		cfgPath := fs.String("config", "", "configuration whose tiers are allowed (default: the embedded one)")
		if err := fs.Parse(args[1:]); err != nil {
			return err
		}
		cfg, err := loadConfig(*cfgPath)
		if err != nil {
			return err
		}
		if _, ok := cfg.Tiers[*tier]; !ok {
			names := make([]string, 0, len(cfg.Tiers))
			for n := range cfg.Tiers {
				names = append(names, n)
			}
			sort.Strings(names)
			return fmt.Errorf("keys create: unknown tier %q (have %v)", *tier, names)
		}
		if *name == "" {
			return fmt.Errorf("keys create: --name is required")
		}
		store, err := keys.Open(ctx, *dataDir)
		if err != nil {
			return err
		}
		defer store.Close()
		secret, k, err := store.Create(ctx, *name, *tier)
		if err != nil {
			return err
		}
		fmt.Fprintf(stdout, "Created key %s (%s, tier %s). It is shown once; store it now:\n%s\n", k.ID, k.Name, k.Tier, secret)
		return nil
	case "list":
		if err := fs.Parse(args[1:]); err != nil {
			return err
		}
		store, err := keys.Open(ctx, *dataDir)
		if err != nil {
			return err
		}
		defer store.Close()
		list, err := store.List(ctx)
		if err != nil {
			return err
		}
		tw := tabwriter.NewWriter(stdout, 2, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "ID\tPREFIX\tNAME\tTIER\tCREATED\tSTATUS")
		for _, k := range list {
			status := "active"
			if !k.RevokedAt.IsZero() {
				status = "revoked " + k.RevokedAt.UTC().Format(time.RFC3339)
			}
			fmt.Fprintf(tw, "%s\t%s…\t%s\t%s\t%s\t%s\n", k.ID, k.Prefix, k.Name, k.Tier, k.CreatedAt.UTC().Format(time.RFC3339), status)
		}
		return tw.Flush()
	case "revoke":
		if err := fs.Parse(args[1:]); err != nil {
			return err
		}
		if fs.NArg() != 1 {
			return fmt.Errorf("keys revoke: want exactly one key or key id")
		}
		store, err := keys.Open(ctx, *dataDir)
		if err != nil {
			return err
		}
		defer store.Close()
		if err := store.Revoke(ctx, fs.Arg(0)); err != nil {
			return err
		}
		fmt.Fprintln(stdout, "revoked")
		return nil
	}
	return fmt.Errorf("keys: unknown subcommand %q", args[0])
}
