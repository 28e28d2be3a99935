package batches

import (
	"testing"

	"github.com/switchyard-ai/switchyard/internal/testing/pgtest"
)

func TestMain(m *testing.M) { pgtest.Main(m) }
