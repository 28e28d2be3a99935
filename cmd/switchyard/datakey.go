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

	"github.com/switchyard-ai/switchyard/internal/envelope"
	"github.com/switchyard-ai/switchyard/internal/sqlitedb"
)

const datakeyUsage = `switchyard datakey: the key-encryption keys (KEKs) of the content at rest

  datakey status --data-dir DIR   where the KEKs come from, and how many data keys each wraps
  datakey rotate --data-dir DIR   add a new primary KEK to the key file and rewrap every data key under it
  datakey rewrap --data-dir DIR   rewrap every data key under the primary KEK (after changing $SWITCHYARD_DATA_KEY)
  datakey retire --data-dir DIR   drop from the key file the KEKs that no data key uses any more

rotate and retire work on the key file (DATA_DIR/data.key or $SWITCHYARD_DATA_KEY_FILE);
with $SWITCHYARD_DATA_KEY, put the new key first in it, restart, and run rewrap.
All of them work while a gateway runs on the same data directory. Restart the
gateways between rotate and retire: a running one wraps new data keys under the
KEK it started with until then, and retire keeps any KEK still in use.
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
	if _, err := parseArgs(fs, args[1:], 0); err != nil {
		return err
	}
	switch sub {
	case "status":
		ring, err := envelope.Load(*dataDir)
		if err != nil {
			return err
		}
		fmt.Fprintf(stdout, "KEKs from %s: %s (primary first)\n", ring.Source(), strings.Join(ring.IDs(), ", "))
		return eachKeyDB(ctx, *dataDir, func(name string, db *sql.DB) error {
			inUse, err := envelope.KEKsInUse(ctx, db)
			if err != nil {
				return err
			}
			fmt.Fprintf(stdout, "%s: %s\n", name, formatInUse(inUse))
			return nil
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
		return rewrapAll(ctx, *dataDir, stdout)
	case "rewrap":
		return rewrapAll(ctx, *dataDir, stdout)
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
		if err := eachKeyDB(ctx, *dataDir, func(_ string, db *sql.DB) error {
			inUse, err := envelope.KEKsInUse(ctx, db)
			for id := range inUse {
				used[id] = true
			}
			return err
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

// rewrapAll rewraps every database's data keys under the primary KEK and
// erases the old wrappings from the files.
func rewrapAll(ctx context.Context, dataDir string, stdout io.Writer) error {
	ring, err := envelope.Load(dataDir)
	if err != nil {
		return err
	}
	return eachKeyDB(ctx, dataDir, func(name string, db *sql.DB) error {
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
