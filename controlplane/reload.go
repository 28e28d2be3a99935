package controlplane

import (
	"context"
	"crypto/sha256"
	"os"
	"time"

	"github.com/switchyard-ai/switchyard/internal/config"
)

// DefaultReloadInterval is how often WatchFile looks at the file.
const DefaultReloadInterval = 500 * time.Millisecond

// fileState is what WatchFile last saw of the file.
type fileState struct {
	modTime time.Time
	size    int64
	seen    [sha256.Size]byte // the content last looked at, applied or not
	applied [sha256.Size]byte // the content in force
}

// WatchFile reloads the configuration from path whenever its content
// changes, until ctx ends. Every interval (DefaultReloadInterval if 0) it
// compares the file's modification time and size with the last look, and
// when either moved, hashes the content: a touch without a change does
// nothing, and a rewrite within the file system's timestamp granularity is
// still caught by its size or, at the next change, its hash. A new content
// is parsed, validated and built as a whole, then served as a new snapshot
// version; a file that fails any step is logged and ignored (the
// configuration in force stays), once per distinct content, so an editor
// saving a half-written file never half-applies it.
//
// The content present when WatchFile starts is taken to be the one the
// server was started with (Update), and is not applied again. The routing
// overlay (drained providers, Modify's per-model overrides) stays on top
// of every reloaded file; its entries a new file no longer allows are
// logged and skipped.
func (s *Server) WatchFile(ctx context.Context, path string, interval time.Duration) {
	if interval <= 0 {
		interval = DefaultReloadInterval
	}
	if fi, err := os.Stat(path); err == nil {
		if b, err := os.ReadFile(path); err == nil {
			sum := sha256.Sum256(b)
			s.file = fileState{modTime: fi.ModTime(), size: fi.Size(), seen: sum, applied: sum}
		}
	}
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			s.pollFile(ctx, path)
			if s.filePolled != nil {
				s.filePolled(s.file.seen)
			}
		}
	}
}

// pollFile is one look at the file. It reports whether a new configuration
// was applied.
func (s *Server) pollFile(ctx context.Context, path string) bool {
	fi, err := os.Stat(path)
	if err != nil {
		// A file replaced by rename is briefly absent; the next look sees it.
		s.logger.Debug("config file not readable", "path", path, "error", err)
		return false
	}
	if fi.ModTime().Equal(s.file.modTime) && fi.Size() == s.file.size {
		return false
	}
	b, err := os.ReadFile(path)
	if err != nil {
		s.logger.Debug("config file not readable", "path", path, "error", err)
		return false
	}
	sum := sha256.Sum256(b)
	s.file.modTime, s.file.size = fi.ModTime(), fi.Size()
	if sum == s.file.seen || sum == s.file.applied {
		// Touched, or rewritten with the content in force, or the bad
		// content already reported.
		s.file.seen = sum
		return false
	}
	s.file.seen = sum
	cfg, err := config.Parse(path, b)
	if err != nil {
		s.reloads.Inc("file", "failure")
		s.logger.Error("config file change ignored: invalid configuration; the previous one stays in force", "path", path, "error", err)
		return false
	}
	version, err := s.Update(ctx, cfg)
	if err != nil {
		s.logger.Error("config file change ignored: refused; the previous one stays in force", "path", path, "error", err)
		return false
	}
	s.file.applied = sum
	s.logger.Info("config file reloaded", "path", path, "version", version)
	return true
}
