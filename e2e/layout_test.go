package e2e

import (
	"os"
	"os/exec"
	"slices"
	"strings"
	"testing"
)

// TestLayout keeps the house plan: the root holds the design card's folders
// plus cmd, docs, examples and internal, and no product package imports a
// test double (internal/testing/...). Only the binary (package main, which
// starts make run's demo vendors) and tests may.
func TestLayout(t *testing.T) {
	entries, err := os.ReadDir("..")
	if err != nil {
		t.Fatal(err)
	}
	var dirs []string
	for _, e := range entries {
		if e.IsDir() && !strings.HasPrefix(e.Name(), ".") && e.Name() != "bin" {
			dirs = append(dirs, e.Name())
		}
	}
	want := []string{"backends", "cmd", "controlplane", "deploy", "docs", "e2e", "envoy", "examples", "extproc", "internal", "ratelimit"}
	if !slices.Equal(dirs, want) {
		t.Errorf("top-level folders = %v, want %v", dirs, want)
	}

	out, err := exec.Command("go", "list", "-f", "{{.ImportPath}} {{.Name}} {{join .Imports \" \"}}", "github.com/switchyard-ai/switchyard/...").Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	const doubles = "github.com/switchyard-ai/switchyard/internal/testing/"
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		f := strings.Fields(line)
		pkg, name, imports := f[0], f[1], f[2:]
		if name == "main" || strings.HasPrefix(pkg+"/", doubles) || strings.HasSuffix(pkg, "test") {
			continue
		}
		for _, imp := range imports {
			if strings.HasPrefix(imp, doubles) {
				t.Errorf("product package %s imports the test double %s", pkg, imp)
			}
		}
	}
}
