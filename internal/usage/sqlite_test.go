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
