package main

import (
	"context"
	"database/sql"
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/switchyard-ai/switchyard/internal/config"
	"github.com/switchyard-ai/switchyard/internal/envelope"
	"github.com/switchyard-ai/switchyard/internal/sqlitedb"
)

const datakeyUsage = `switchyard datakey: the key-encryption keys (KEKs) of the content at rest

  datakey status [--config FILE] --data-dir DIR   where the KEKs come from, and how many data keys each wraps
  datakey rotate [--config FILE] --data-dir DIR   add a new primary KEK to the key file and rewrap every data key under it
  datakey rewrap [--config FILE] --data-dir DIR   rewrap every data key under the primary KEK (after changing $SWITCHYARD_DATA_KEY)
  datakey retire [--config FILE] --data-dir DIR   drop from the key file the KEKs that no data key uses any more

rotate and retire work on the key file (DATA_DIR/data.key or $SWITCHYARD_DATA_KEY_FILE);
with $SWITCHYARD_DATA_KEY, put the new key first in it, restart, and run rewrap.
All of them work while a gateway runs on the same data directory. Restart the
gateways between rotate and retire: a running one wraps new data keys under the
KEK it started with until then, and retire keeps any KEK still in use.
With a --config whose storage.metadata.kind is postgres, the data keys are the
fleet's, in PostgreSQL (the DSN from the variable storage.metadata.dsn_env
names), and they work while every replica runs.
`

// dataKeyDBs are the databases in the data directory that hold data keys
// (each store's dbFile).
var dataKeyDBs = []string{"responses.db", "files.db", "vectorstores.db", "conversations.db"}

func cmdDatakey(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 {
		fmt.Fprint(stderr, datakeyUsage)
		return fmt.Errorf("datakey: want a subcommand: status, rotate, rewrap or retire")
	}
	sub := args[0]
	fs := flag.NewFlagSet("datakey "+sub, flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() { fmt.Fprint(stderr, datakeyUsage) }
	dataDir := fs.String("data-dir", ".data", "the gateway's data directory")
	cfgPath := fs.String("config", "", "configuration: its storage section says where the data keys are (PostgreSQL: the fleet's; default: the SQLite files in --data-dir)")
	if _, err := parseArgs(fs, args[1:], 0); err != nil {
		return err
	}
	cfg, err := loadConfig(*cfgPath)
	if err != nil {
		return err
	}
	h := keyHolders{dataDir: *dataDir, storage: cfg.Storage}
	switch sub {
	case "status":
		ring, err := envelope.Load(*dataDir)
		if err != nil {
			return err
		}
		fmt.Fprintf(stdout, "KEKs from %s: %s (primary first)\n", ring.Source(), strings.Join(ring.IDs(), ", "))
		return h.inUse(ctx, func(name string, inUse map[string]int) {
			fmt.Fprintf(stdout, "%s: %s\n", name, formatInUse(inUse))
		})
	case "rotate":
		path, err := envelope.KeyFile(*dataDir)
		if err != nil {
			return err
		}
		if path == "" {
			return fmt.Errorf("datakey rotate: the KEKs come from $%s, which this command cannot change: "+
				"put a new key (32 random bytes, base64) first in it, keep the old ones after it, restart, "+
				"then run switchyard datakey rewrap", envelope.EnvKey)
		}
		ring, err := envelope.Load(*dataDir) // creates the key file if there is none yet
		if err != nil {
			return err
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		old, err := envelope.ParseKeys(string(b))
		if err != nil {
			return fmt.Errorf("%s: %w", path, err)
		}
		key, err := envelope.NewKey()
		if err != nil {
			return err
		}
		if err := envelope.WriteKeyFile(path, append([][]byte{key}, old...)); err != nil {
			return err
		}
		fmt.Fprintf(stdout, "Added KEK %s to %s as the primary (was %s).\n", envelope.KeyID(key), path, ring.PrimaryID())
		return h.rewrapAll(ctx, stdout)
	case "rewrap":
		return h.rewrapAll(ctx, stdout)
	case "retire":
		path, err := envelope.KeyFile(*dataDir)
		if err != nil {
			return err
		}
		if path == "" {
			return fmt.Errorf("datakey retire: the KEKs come from $%s: remove the old keys from it once datakey status shows them unused", envelope.EnvKey)
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		keys, err := envelope.ParseKeys(string(b))
		if err != nil {
			return fmt.Errorf("%s: %w", path, err)
		}
		used := map[string]bool{}
		if err := h.inUse(ctx, func(_ string, inUse map[string]int) {
			for id := range inUse {
				used[id] = true
			}
		}); err != nil {
			return err
		}
		keep := keys[:1] // the primary stays
		var dropped, kept []string
		for _, k := range keys[1:] {
			id := envelope.KeyID(k)
			if used[id] {
				keep = append(keep, k)
				kept = append(kept, id)
			} else {
				dropped = append(dropped, id)
			}
		}
		if len(dropped) > 0 {
			if err := envelope.WriteKeyFile(path, keep); err != nil {
				return err
			}
		}
		fmt.Fprintf(stdout, "Retired %d KEK(s) from %s: %s\n", len(dropped), path, strings.Join(dropped, ", "))
		if len(kept) > 0 {
			fmt.Fprintf(stdout, "Kept %s: data keys still use them (a gateway not yet restarted?); run datakey rewrap, then retire again.\n",
				strings.Join(kept, ", "))
		}
		return nil
	}
	fmt.Fprint(stderr, datakeyUsage)
	return fmt.Errorf("datakey: unknown subcommand %q", sub)
}

// keyHolders are where the data keys are: the SQLite files of the data
// directory, or the fleet's PostgreSQL tables (datakey_postgres.go).
type keyHolders struct {
	dataDir string
	storage config.Storage
}

func (h keyHolders) postgres() bool { return h.storage.Metadata.Kind == config.MetadataPostgres }

// inUse calls f with how many data keys each KEK wraps, per database or
// table.
func (h keyHolders) inUse(ctx context.Context, f func(name string, inUse map[string]int)) error {
	if h.postgres() {
		pool, err := openDatakeyPG(ctx, h.storage)
		if err != nil {
			return err
		}
		defer pool.Close()
		return eachPGKeyTable(ctx, pool, func(t pgKeyTable) error {
			inUse, err := pgKEKsInUse(ctx, pool, t)
			if err == nil {
				f(t.name, inUse)
			}
			return err
		})
	}
	return eachKeyDB(ctx, h.dataDir, func(name string, db *sql.DB) error {
		inUse, err := envelope.KEKsInUse(ctx, db)
		if err == nil {
			f(name, inUse)
		}
		return err
	})
}

// rewrapAll rewraps every data key under the primary KEK: in each SQLite
// database, erasing the old wrappings from the files, or in each of the
// fleet's PostgreSQL tables.
func (h keyHolders) rewrapAll(ctx context.Context, stdout io.Writer) error {
	ring, err := envelope.Load(h.dataDir)
	if err != nil {
		return err
	}
	if h.postgres() {
		pool, err := openDatakeyPG(ctx, h.storage)
		if err != nil {
			return err
		}
		defer pool.Close()
		return eachPGKeyTable(ctx, pool, func(t pgKeyTable) error {
			n, err := pgRewrap(ctx, pool, ring, t)
			if err != nil {
				return err
			}
			fmt.Fprintf(stdout, "%s: rewrapped %d data key(s) under %s\n", t.name, n, ring.PrimaryID())
			// What a run leaves: rows a replica held locked, or keys a
			// replica not yet restarted wrapped under an older primary.
			inUse, err := pgKEKsInUse(ctx, pool, t)
			if err != nil {
				return err
			}
			delete(inUse, ring.PrimaryID())
			if len(inUse) > 0 {
				fmt.Fprintf(stdout, "%s: still %s (rows in use, or written by a replica not yet restarted on the new primary): run datakey rewrap again\n",
					t.name, formatInUse(inUse))
			}
			return nil
		})
	}
	return eachKeyDB(ctx, h.dataDir, func(name string, db *sql.DB) error {
		n, err := ring.Rewrap(ctx, db)
		if err != nil {
			return fmt.Errorf("%s: %w", name, err)
		}
		if n > 0 {
			if err := sqlitedb.Erase(ctx, db); err != nil {
				return fmt.Errorf("%s: %w", name, err)
			}
		}
		fmt.Fprintf(stdout, "%s: rewrapped %d data key(s) under %s\n", name, n, ring.PrimaryID())
		return nil
	})
}

// eachKeyDB calls f with each database of the data directory that has a
// data_keys table; the others (not created yet, or written by a binary
// without encryption at rest) are skipped.
func eachKeyDB(ctx context.Context, dataDir string, f func(name string, db *sql.DB) error) error {
	dir, err := filepath.Abs(dataDir)
	if err != nil {
		return err
	}
	for _, name := range dataKeyDBs {
		path := filepath.Join(dir, name)
		if _, err := os.Stat(path); errors.Is(err, fs.ErrNotExist) {
			continue
		}
		// Opened as it is: the schema belongs to the stores, which
		// migrate it when they open.
		db, err := sql.Open("sqlite", sqlitedb.DSN(path))
		if err != nil {
			return fmt.Errorf("%s: %w", name, err)
		}
		var n int
		err = db.QueryRowContext(ctx, `SELECT COUNT(*) FROM sqlite_master WHERE type = 'table' AND name = 'data_keys'`).Scan(&n)
		if err == nil && n > 0 {
			err = f(name, db)
		}
		if cerr := db.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			return fmt.Errorf("%s: %w", name, err)
		}
	}
	return nil
}

func formatInUse(m map[string]int) string {
	if len(m) == 0 {
		return "no data keys"
	}
	var parts []string
	for id, n := range m {
		parts = append(parts, fmt.Sprintf("%d under %s", n, id))
	}
	slices.Sort(parts)
	return strings.Join(parts, ", ")
}
