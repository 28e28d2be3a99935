package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/switchyard-ai/switchyard/backends/admin"
	"github.com/switchyard-ai/switchyard/internal/gateway"
	"github.com/switchyard-ai/switchyard/internal/keys"
	usagedb "github.com/switchyard-ai/switchyard/internal/usage"
)

const keysUsage = `switchyard keys: manage API keys (works while a gateway runs on the same data directory)

  keys create   --data-dir DIR --name NAME [--tier TIER] [--rpm N] [--tpm N] [--models a/b,c/d]
                [--monthly-budget USD] [--budget-alert RATIO] [--config FILE]
  keys list     --data-dir DIR [--config FILE]
  keys show     --data-dir DIR [--config FILE] KEY_OR_ID
  keys revoke   --data-dir DIR [--config FILE] KEY_OR_ID
  keys rotate   --data-dir DIR [--grace 24h] [--config FILE] KEY_OR_ID
  keys set-tier --data-dir DIR [--rpm N] [--tpm N] [--models a/b,c/d|*]
                [--monthly-budget USD] [--budget-alert RATIO] [--config FILE] KEY_OR_ID TIER

create and rotate print the new key alone on the last line of stdout; it is
shown once and stored only as a hash. --rpm and --tpm replace the tier's
limits for the key (required for a tier without limits, such as enterprise).
--models limits the key to those model ids ("*": all models).
--monthly-budget caps what the key may spend in a calendar month (UTC), in US
dollars at the models' pricing (0: no budget); --budget-alert is the fraction
of it past which the gateway logs a warning (default 0.8). set-tier keeps the
budget unless they are given.
Revocations, rotations and tier changes reach running gateways within 2 s.
With a --config whose storage.metadata.kind is postgres, the keys are in
PostgreSQL (every replica's) and --data-dir is not used.
`

// keyStore is what the keys command needs of the key store: the admin API's
// operations, and Close.
type keyStore interface {
	admin.KeyStore
	Close() error
}

func cmdKeys(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 {
		fmt.Fprint(stderr, keysUsage)
		return fmt.Errorf("keys: want a subcommand: create, list, show, revoke, rotate or set-tier")
	}
	sub := args[0]
	fs := flag.NewFlagSet("keys "+sub, flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() { fmt.Fprint(stderr, keysUsage) }
	dataDir := fs.String("data-dir", ".data", "directory holding the key database (SQLite storage)")
	cfgPath := fs.String("config", "", "configuration: its storage section says where the keys are (PostgreSQL: the DSN from the variable storage.metadata.dsn_env names), its tiers and models which are allowed (default: the embedded one, SQLite in --data-dir)")
	openStore := func() (keyStore, error) {
		cfg, err := loadConfig(*cfgPath)
		if err != nil {
			return nil, err
		}
		return gateway.OpenKeyStore(ctx, cfg.Storage, *dataDir)
	}

	switch sub {
	case "create":
		name := fs.String("name", "", "a name for the key (who or what uses it)")
		tier := fs.String("tier", "standard", "tier: one of the configuration's tiers")
		rpm := fs.Int64("rpm", 0, "requests per minute for this key (0: the tier's)")
		tpm := fs.Int64("tpm", 0, "tokens per minute for this key (0: the tier's)")
		models := fs.String("models", "", "comma-separated model ids the key may use (default: all)")
		budget := budgetFlags(fs)
		if _, err := parseArgs(fs, args[1:], 0); err != nil {
			return err
		}
		if *name == "" {
			return fmt.Errorf("keys create: --name is required")
		}
		sp := keys.Spec{Name: *name, Tier: *tier, RPM: *rpm, TPM: *tpm, Models: splitModels(*models)}
		if _, err := budget.apply(fs, &sp); err != nil {
			return fmt.Errorf("keys create: %w", err)
		}
		if err := checkSpec(*cfgPath, sp); err != nil {
			return fmt.Errorf("keys create: %w", err)
		}
		store, err := openStore()
		if err != nil {
			return err
		}
		defer store.Close()
		secret, k, err := store.Issue(ctx, sp)
		if err != nil {
			return err
		}
		fmt.Fprintf(stdout, "Created key %s (%s, tier %s%s). It is shown once; store it now:\n%s\n",
			k.ID, k.Name, k.Tier, limitsNote(k), secret)
		return nil

	case "list":
		if _, err := parseArgs(fs, args[1:], 0); err != nil {
			return err
		}
		store, err := openStore()
		if err != nil {
			return err
		}
		defer store.Close()
		list, err := store.List(ctx)
		if err != nil {
			return err
		}
		now := time.Now()
		tw := tabwriter.NewWriter(stdout, 2, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "ID\tPREFIX\tNAME\tTIER\tLIMITS\tCREATED\tSTATUS")
		for _, k := range list {
			fmt.Fprintf(tw, "%s\t%s…\t%s\t%s\t%s\t%s\t%s\n", k.ID, k.Prefix, k.Name, k.Tier, limitsColumn(k),
				k.CreatedAt.UTC().Format(time.RFC3339), statusColumn(k, now))
		}
		return tw.Flush()

	case "show":
		pos, err := parseArgs(fs, args[1:], 1)
		if err != nil {
			return err
		}
		store, err := openStore()
		if err != nil {
			return err
		}
		defer store.Close()
		k, err := store.Get(ctx, pos[0])
		if err != nil {
			return err
		}
		printKey(stdout, k)
		return nil

	case "revoke":
		pos, err := parseArgs(fs, args[1:], 1)
		if err != nil {
			return err
		}
		store, err := openStore()
		if err != nil {
			return err
		}
		defer store.Close()
		if err := store.Revoke(ctx, pos[0]); err != nil {
			return err
		}
		fmt.Fprintln(stdout, "revoked")
		return nil

	case "rotate":
		grace := fs.Duration("grace", admin.DefaultGrace, "how long the old key keeps working (0s: not at all)")
		pos, err := parseArgs(fs, args[1:], 1)
		if err != nil {
			return err
		}
		store, err := openStore()
		if err != nil {
			return err
		}
		defer store.Close()
		secret, k, err := store.Rotate(ctx, pos[0], *grace)
		if err != nil {
			return err
		}
		fmt.Fprintf(stdout, "Rotated: new key %s (%s, tier %s); the old key works until %s. The new key is shown once; store it now:\n%s\n",
			k.ID, k.Name, k.Tier, time.Now().Add(*grace).UTC().Format(time.RFC3339), secret)
		return nil

	case "set-tier":
		rpm := fs.Int64("rpm", 0, "requests per minute for this key (0: the tier's)")
		tpm := fs.Int64("tpm", 0, "tokens per minute for this key (0: the tier's)")
		models := fs.String("models", "", `comma-separated model ids the key may use ("*": all; default: unchanged)`)
		budget := budgetFlags(fs)
		pos, err := parseArgs(fs, args[1:], 2)
		if err != nil {
			return err
		}
		store, err := openStore()
		if err != nil {
			return err
		}
		defer store.Close()
		k, err := store.Get(ctx, pos[0])
		if err != nil {
			return err
		}
		sp := keys.Spec{Name: k.Name, Tier: pos[1], RPM: *rpm, TPM: *tpm, Models: k.Models,
			MonthlyBudget: k.MonthlyBudget, BudgetAlertRatio: k.BudgetAlertRatio}
		setModels := flagGiven(fs, "models")
		if setModels {
			sp.Models = splitModels(*models)
		}
		setBudget, err := budget.apply(fs, &sp)
		if err != nil {
			return fmt.Errorf("keys set-tier: %w", err)
		}
		if err := checkSpec(*cfgPath, sp); err != nil {
			return fmt.Errorf("keys set-tier: %w", err)
		}
		if k, err = store.SetTier(ctx, pos[0], sp.Tier, sp.RPM, sp.TPM); err != nil {
			return err
		}
		if setModels {
			if k, err = store.SetModels(ctx, pos[0], sp.Models); err != nil {
				return err
			}
		}
		if setBudget {
			if k, err = store.SetBudget(ctx, pos[0], sp.MonthlyBudget, sp.BudgetAlertRatio); err != nil {
				return err
			}
		}
		printKey(stdout, k)
		return nil
	}
	fmt.Fprint(stderr, keysUsage)
	return fmt.Errorf("keys: unknown subcommand %q", sub)
}

// parseArgs parses flags and exactly n positional arguments, which may come
// before, between or after the flags ("set-tier KEY enterprise --rpm 100").
func parseArgs(fs *flag.FlagSet, args []string, n int) ([]string, error) {
	var pos []string
	for {
		if err := fs.Parse(args); err != nil {
			return nil, err
		}
		if fs.NArg() == 0 {
			break
		}
		pos = append(pos, fs.Arg(0))
		args = fs.Args()[1:]
	}
	if len(pos) != n {
		switch n {
		case 0:
			return nil, fmt.Errorf("%s: unexpected argument %q", fs.Name(), pos[0])
		case 1:
			return nil, fmt.Errorf("%s: want exactly one key or key id", fs.Name())
		}
		return nil, fmt.Errorf("%s: want a key or key id and a tier", fs.Name())
	}
	return pos, nil
}

// budgetOpts are the --monthly-budget and --budget-alert flags.
type budgetOpts struct {
	usd   *float64
	alert *float64
}

func budgetFlags(fs *flag.FlagSet) budgetOpts {
	return budgetOpts{
		usd:   fs.Float64("monthly-budget", 0, "most the key may spend in a calendar month, in US dollars (0: no budget)"),
		alert: fs.Float64("budget-alert", 0, "fraction of the budget past which a warning is logged (default 0.8)"),
	}
}

// apply sets the given flags in sp and reports whether any was given.
func (b budgetOpts) apply(fs *flag.FlagSet, sp *keys.Spec) (bool, error) {
	given := false
	if flagGiven(fs, "monthly-budget") {
		m, err := admin.BudgetMicros(*b.usd)
		if err != nil {
			return false, err
		}
		sp.MonthlyBudget, given = m, true
	}
	if flagGiven(fs, "budget-alert") {
		sp.BudgetAlertRatio, given = *b.alert, true
	}
	return given, nil
}

func flagGiven(fs *flag.FlagSet, name string) bool {
	given := false
	fs.Visit(func(f *flag.Flag) { given = given || f.Name == name })
	return given
}

// checkSpec checks key settings against the configuration's tiers and
// models, as the admin API does.
func checkSpec(cfgPath string, sp keys.Spec) error {
	cfg, err := loadConfig(cfgPath)
	if err != nil {
		return err
	}
	return admin.CheckSpec(cfg, sp)
}

func splitModels(s string) []string {
	var out []string
	for _, m := range strings.Split(s, ",") {
		if m = strings.TrimSpace(m); m != "" && m != "*" {
			out = append(out, m)
		}
	}
	return out
}

func limitsNote(k keys.Key) string {
	if c := limitsColumn(k); c != "tier" {
		return ", " + c
	}
	return ""
}

// limitsColumn shows a key's own limits and allow-list, "tier" if none.
func limitsColumn(k keys.Key) string {
	var parts []string
	if k.RPM > 0 {
		parts = append(parts, fmt.Sprintf("rpm %d", k.RPM))
	}
	if k.TPM > 0 {
		parts = append(parts, fmt.Sprintf("tpm %d", k.TPM))
	}
	if len(k.Models) > 0 {
		parts = append(parts, "models "+strings.Join(k.Models, ","))
	}
	if k.MonthlyBudget > 0 {
		parts = append(parts, fmt.Sprintf("budget $%s/month (alert at %g)", usagedb.USD(k.MonthlyBudget), k.AlertRatio()))
	}
	if len(parts) == 0 {
		return "tier"
	}
	return strings.Join(parts, " ")
}

func statusColumn(k keys.Key, now time.Time) string {
	switch st := admin.Status(k, now); st {
	case "revoked":
		return "revoked " + k.RevokedAt.UTC().Format(time.RFC3339)
	case "expired":
		return "expired " + k.ExpiresAt.UTC().Format(time.RFC3339)
	case "rotated":
		return fmt.Sprintf("rotated to %s, works until %s", k.ReplacedBy, k.ExpiresAt.UTC().Format(time.RFC3339))
	default:
		return st
	}
}

func printKey(w io.Writer, k keys.Key) {
	tw := tabwriter.NewWriter(w, 2, 4, 2, ' ', 0)
	fmt.Fprintf(tw, "id:\t%s\n", k.ID)
	fmt.Fprintf(tw, "prefix:\t%s…\n", k.Prefix)
	fmt.Fprintf(tw, "name:\t%s\n", k.Name)
	fmt.Fprintf(tw, "tier:\t%s\n", k.Tier)
	fmt.Fprintf(tw, "limits:\t%s\n", limitsColumn(k))
	fmt.Fprintf(tw, "created:\t%s\n", k.CreatedAt.UTC().Format(time.RFC3339))
	fmt.Fprintf(tw, "status:\t%s\n", statusColumn(k, time.Now()))
	if k.LimitID() != k.ID {
		fmt.Fprintf(tw, "limits counted on:\t%s (first key of its rotation chain)\n", k.LimitID())
	}
	_ = tw.Flush()
}
