package usage_test

import (
	"context"
	"testing"

	"github.com/switchyard-ai/switchyard/internal/usage"
	"github.com/switchyard-ai/switchyard/internal/usage/usagetest"
)

func TestSQLiteConformance(t *testing.T) {
	usagetest.Run(t, func(t *testing.T) usage.Store {
		s, err := usage.OpenSQLite(context.Background(), t.TempDir())
		if err != nil {
			t.Fatal(err)
		}
		return s
	})
}

// TestSQLiteShared: two processes' stores on one data directory.
func TestSQLiteShared(t *testing.T) {
	usagetest.RunShared(t, func(t *testing.T) (usage.Store, usage.Store) {
		dir := t.TempDir()
		a, err := usage.OpenSQLite(context.Background(), dir)
		if err != nil {
			t.Fatal(err)
		}
		b, err := usage.OpenSQLite(context.Background(), dir)
		if err != nil {
			t.Fatal(err)
		}
		return a, b
	})
}
