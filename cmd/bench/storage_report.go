package main

import (
	"context"
	"flag"
	"fmt"
	"math"
	"os"
	"sort"
	"strings"
	"time"
)

// onlyFlag runs one section alone (-only storage): it rewrites that
// section of the existing report and its figures in the figures file, and
// leaves the rest as the last full run wrote it.
var onlyFlag = flag.String("only", "", "run only this section and update it in place in the report (storage)")

// storageHeading starts the storage section of the report.
const storageHeading = "## 7. Embedded and fleet mode"

// runOnly runs the section -only names, writes it into the report in
// place of its previous version and merges its figures into the figures
// file.
func runOnly(ctx context.Context, o *options, tmp string) error {
	if *onlyFlag != "storage" {
		return fmt.Errorf("-only %q: the only section that runs alone is storage", *onlyFlag)
	}
	res := runStorage(ctx, o, tmp)
	if ctx.Err() != nil {
		return ctx.Err()
	}
	var b strings.Builder
	res.write(func(format string, a ...any) { fmt.Fprintf(&b, format, a...) }, true)
	fmt.Fprintln(os.Stderr, "\n"+strings.TrimSpace(b.String())+"\n")

	old, err := os.ReadFile(o.out)
	if err != nil {
		return fmt.Errorf("-only storage updates the report of a full run: %w", err)
	}
	if err := os.WriteFile(o.out, []byte(replaceSection(string(old), storageHeading, b.String(), "## Targets")), 0o644); err != nil {
		return err
	}
	before, err := committedFigures(o.root, figuresPath(o.out))
	if err != nil {
		return err
	}
	now := res.figures()
	current, err := readFigures(figuresPath(o.out))
	if err != nil {
		return err
	}
	var merged []figure
	for _, f := range current {
		if !strings.HasPrefix(f.Name, storageFigurePrefix) {
			merged = append(merged, f)
		}
	}
	if err := writeFigures(figuresPath(o.out), append(merged, now...)); err != nil {
		return err
	}
	for _, g := range compareFigures(before, now) {
		fmt.Fprintf(os.Stderr, "REGRESSION: %s: %.3f %s, was %.3f (worse by more than %.0f%%)\n", g.Name, g.Value, g.Unit, g.Before, regressionLimit*100)
	}
	logf("updated the storage section of %s and its figures in %s", o.out, figuresPath(o.out))
	return nil
}

// replaceSection replaces the "## " section starting with heading in doc
// by section; without one, it inserts section before the section starting
// with before (or at the end).
func replaceSection(doc, heading, section, before string) string {
	if i := strings.Index(doc, "\n"+heading); i >= 0 {
		rest := doc[i+1+len(heading):]
		end := len(doc)
		if j := strings.Index(rest, "\n## "); j >= 0 {
			end = i + 1 + len(heading) + j + 1
		}
		return doc[:i+1] + section + doc[end:]
	}
	if i := strings.Index(doc, "\n"+before); i >= 0 {
		return doc[:i+1] + section + doc[i+1:]
	}
	return doc + "\n" + section
}

const storageFigurePrefix = "storage "

// figures are the storage section's comparable numbers.
func (s *storageResult) figures() []figure {
	if s == nil {
		return nil
	}
	fs := s.Limiter.figures()
	add := func(name string, v float64, unit string, higher bool) {
		if !math.IsNaN(v) && !math.IsInf(v, 0) && v != 0 {
			fs = append(fs, figure{Name: storageFigurePrefix + name, Value: v, Unit: unit, Higher: higher})
		}
	}
	for _, m := range s.Modes {
		if m.Skip != "" {
			continue
		}
		add(m.Key+" file upload", m.UploadMBps, "MB/s", true)
		add(m.Key+" file download", m.DownloadMBps, "MB/s", true)
		if m.BatchStatus == "completed" {
			add(m.Key+" batch lines per second", m.LinesPerSec, "lines/s", true)
		}
		if m.fleet() && m.BatchStatus == "completed" {
			rq, by := m.s3PerLine()
			add(m.Key+" object storage requests per batch line", rq, "requests", false)
			add(m.Key+" object storage bytes per batch line", by, "bytes", false)
			add(m.Key+" PostgreSQL connections during the batch", float64(m.PGConnsMax), "connections", false)
			add(m.Key+" PostgreSQL commits per batch line", m.PGWork.perLine(m.PGWork.Commits, m.BatchCompleted), "commits", false)
			add(m.Key+" PostgreSQL rows written per batch line", m.PGWork.perLine(m.PGWork.rows(), m.BatchCompleted), "rows", false)
		}
	}
	return fs
}

// write is the report's storage section; alone says it was run with
// -only storage, after the rest of the report.
func (s *storageResult) write(w func(string, ...any), alone bool) {
	w("%s\n\n", storageHeading)
	if s == nil {
		w("**Not run: left out with -phases.**\n\n")
		return
	}
	if s.Skip != "" {
		w("**%s.**\n\n", s.Skip)
		return
	}
	if alone {
		w("This section was last run alone (`go run ./cmd/bench -only storage`, %s, took %s); the rest of the report is from the full run above.\n\n",
			time.Now().UTC().Format("2006-01-02 15:04 MST"), s.Elapsed.Round(time.Second))
	}
	s.Limiter.write(w)
	w("### Storage: files and batches\n\n")
	w("The same work on a fresh `switchyard run` per mode, one replica, against a fake upstream with no service time: ")
	w("a %d MiB file of random bytes uploaded (`POST /v1/files`, multipart, streamed) and downloaded (`GET /v1/files/{id}/content`, checked by SHA-256) %d times (the median is shown; MB = 10^6 bytes), ",
		s.FileBytes>>20, storageReps)
	w("then a %d-line batch (`/v1/chat/completions`, `max_tokens` 16) timed from `POST /v1/batches` until it reads `completed` (polled every 50 ms), its output file then checked for one line per request. ", s.Lines)
	w("Fleet mode runs on the servers the fleet-storage tests use, started the same way (`internal/testing/pgtest`: a throwaway PostgreSQL cluster on a unix socket with fsync off; ")
	w("`internal/testing/s3test`: versitygw's posix backend on a local directory), so it measures Switchyard's own round trips, not a production database's durability or network. ")
	if !alone {
		w("The section took %s. ", s.Elapsed.Round(time.Second))
	}
	if len(s.Versions) > 0 {
		var vs []string
		for _, v := range s.Versions {
			vs = append(vs, v.k+" "+v.v)
		}
		w("Servers: %s.", strings.Join(vs, ", "))
	}
	w("\n\n")
	w("| mode | upload MB/s | download MB/s | batch | batch s | batch lines/s |\n|---|---:|---:|---|---:|---:|\n")
	for _, m := range s.Modes {
		if m.Skip != "" {
			w("| %s | **%s** | | | | |\n", m.Label, mdEscape(m.Skip))
			continue
		}
		up, down := fmt.Sprintf("%.1f", m.UploadMBps), fmt.Sprintf("%.1f", m.DownloadMBps)
		if m.UploadErr != "" {
			up += " (" + mdEscape(m.UploadErr) + ")"
		}
		w("| %s | %s | %s | %s | %.2f | %.0f |\n", m.Label, up, down, mdEscape(m.BatchStatus), m.BatchElapsed.Seconds(), m.LinesPerSec)
	}
	w("\n")
	for _, m := range s.Modes {
		if !m.fleet() || m.Skip != "" || m.BatchCompleted == 0 {
			continue
		}
		rq, by := m.s3PerLine()
		w("For the capacity envelope (docs/operations.md), fleet mode during the batch:\n\n")
		w("- PostgreSQL connections held by the replica (`pg_stat_activity` of its database, sampled every 20 ms): at most **%d** open, at most **%d** not idle at once ", m.PGConnsMax, m.PGActiveMax)
		w("(each store (keys, files, batches, responses, vector stores) has its own pool of at most `storage.metadata.max_conns`, default 10).\n")
		pw := m.PGWork
		w("- PostgreSQL work, from `pg_stat_database` of its database (read from another database, so the readings do not count), before the batch's replica started and after it stopped, ")
		w("less the start and stop of an idle replica: everything the replica did from start to stop, the create, the 50 ms polls and the output check included: ")
		w("%d commits (**%.2f per line**), ", pw.Commits, pw.perLine(pw.Commits, m.BatchCompleted))
		w("%d rows inserted, %d updated, %d deleted (**%.2f rows written per line**).\n", pw.Inserted, pw.Updated, pw.Deleted, pw.perLine(pw.rows(), m.BatchCompleted))
		w("- Object storage, counted by a reverse proxy between Switchyard and versitygw from batch create to completed: **%d requests** (%.4f per line), ", m.S3Requests, rq)
		w("%d bytes of request bodies and %d of response bodies (**%.0f bytes per line**; headers not counted).", m.S3BytesUp, m.S3BytesDown, by)
		var ops []string
		for op, n := range m.S3Ops {
			ops = append(ops, fmt.Sprintf("%s %d", op, n))
		}
		sort.Strings(ops)
		w(" By operation: %s.\n\n", strings.Join(ops, ", "))
	}
}
