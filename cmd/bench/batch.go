package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"mime/multipart"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"time"
)

// The batch step: a 50,000-line batch through Switchyard to the fake
// upstream, measured in lines per second and the gateway's peak RSS; the
// output and error files are then downloaded and their lines counted against
// the batch's request_counts. It runs only when the gateway serves
// /v1/batches; until then the report says so.

const batchLines = 50_000

type batchResult struct {
	Ran         bool
	Skip        string // why it did not run
	Lines       int
	Completed   int
	Failed      int
	Elapsed     time.Duration
	LinesPerSec float64
	PeakRSSKiB  int64
	Status      string
}

// probeBatches reports whether the gateway implements the Batch API: GET
// /v1/batches must answer 200 with a list. Anything else is "not
// implemented", with what it answered.
func probeBatches(ctx context.Context, base, key string) (bool, string) {
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, base+"/v1/batches?limit=1", nil)
	req.Header.Set("authorization", "Bearer "+key)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return false, "GET /v1/batches failed: " + err.Error()
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
	var list struct {
		Object string `json:"object"`
		Error  struct {
			Code string `json:"code"`
		} `json:"error"`
	}
	_ = json.Unmarshal(b, &list)
	if resp.StatusCode == http.StatusOK && list.Object == "list" {
		return true, ""
	}
	what := fmt.Sprintf("GET /v1/batches answered %d", resp.StatusCode)
	if list.Error.Code != "" {
		what += " " + list.Error.Code
	}
	return false, what
}

// writeBatchInput writes the JSONL input file: one chat completion per line.
func writeBatchInput(path, model string, n int) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	w := bufio.NewWriter(f)
	for i := range n {
		line, _ := json.Marshal(map[string]any{
			"custom_id": fmt.Sprintf("line-%d", i),
			"method":    "POST",
			"url":       "/v1/chat/completions",
			"body": map[string]any{
				"model":      model,
				"messages":   []map[string]string{{"role": "user", "content": fmt.Sprintf("Batch line %d: say hello.", i)}},
				"max_tokens": 16,
			},
		})
		w.Write(line)
		w.WriteByte('\n')
	}
	if err := w.Flush(); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// runBatch uploads the input file, creates the batch and polls it to the
// end, sampling the gateway's VmHWM.
func runBatch(ctx context.Context, base, key string, gw *proc, dir string) batchResult {
	res := batchResult{Ran: true, Lines: batchLines}
	fail := func(format string, a ...any) batchResult {
		res.Status = "failed: " + fmt.Sprintf(format, a...)
		return res
	}
	input := filepath.Join(dir, "batch-input.jsonl")
	if err := writeBatchInput(input, "bench/chat", batchLines); err != nil {
		return fail("writing input: %v", err)
	}
	call := func(method, path, ctype string, body io.Reader, out any) error {
		req, _ := http.NewRequestWithContext(ctx, method, base+path, body)
		req.Header.Set("authorization", "Bearer "+key)
		if ctype != "" {
			req.Header.Set("content-type", ctype)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return err
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		if resp.StatusCode/100 != 2 {
			return fmt.Errorf("%s %s: %d %s", method, path, resp.StatusCode, clip(string(b), 300))
		}
		return json.Unmarshal(b, out)
	}

	// Upload: multipart, purpose=batch.
	var mp bytes.Buffer
	mw := multipart.NewWriter(&mp)
	_ = mw.WriteField("purpose", "batch")
	fw, _ := mw.CreateFormFile("file", "batch-input.jsonl")
	data, err := os.ReadFile(input)
	if err != nil {
		return fail("%v", err)
	}
	fw.Write(data)
	mw.Close()
	var file struct {
		ID string `json:"id"`
	}
	if err := call(http.MethodPost, "/v1/files", mw.FormDataContentType(), &mp, &file); err != nil {
		return fail("upload: %v", err)
	}

	start := time.Now()
	var batch struct {
		ID            string `json:"id"`
		Status        string `json:"status"`
		OutputFileID  string `json:"output_file_id"`
		ErrorFileID   string `json:"error_file_id"`
		RequestCounts struct {
			Total     int `json:"total"`
			Completed int `json:"completed"`
			Failed    int `json:"failed"`
		} `json:"request_counts"`
	}
	create, _ := json.Marshal(map[string]string{
		"input_file_id": file.ID, "endpoint": "/v1/chat/completions", "completion_window": "24h",
	})
	if err := call(http.MethodPost, "/v1/batches", "application/json", bytes.NewReader(create), &batch); err != nil {
		return fail("create: %v", err)
	}
	deadline := start.Add(10 * time.Minute)
	for {
		if m, err := readMem(gw.pid()); err == nil && m.HWM > res.PeakRSSKiB {
			res.PeakRSSKiB = m.HWM
		}
		switch batch.Status {
		case "completed", "failed", "expired", "cancelled":
			res.Elapsed = time.Since(start)
			res.Status = batch.Status
			res.Completed, res.Failed = batch.RequestCounts.Completed, batch.RequestCounts.Failed
			if res.Elapsed > 0 {
				res.LinesPerSec = float64(res.Completed) / res.Elapsed.Seconds()
			}
			// Download the results, as a client would, and check they
			// hold one line per request the batch counted.
			for _, f := range []struct {
				id   string
				want int
				kind string
			}{{batch.OutputFileID, res.Completed, "output"}, {batch.ErrorFileID, res.Failed, "error"}} {
				if f.id == "" && f.want == 0 {
					continue
				}
				n, err := countLines(ctx, base, key, f.id)
				if err != nil {
					return fail("download %s file: %v", f.kind, err)
				}
				if n != f.want {
					return fail("%s file has %d lines, the batch counts %d", f.kind, n, f.want)
				}
			}
			return res
		}
		if time.Now().After(deadline) {
			return fail("still %q after %s", batch.Status, time.Since(start).Round(time.Second))
		}
		time.Sleep(250 * time.Millisecond)
		if err := call(http.MethodGet, "/v1/batches/"+batch.ID, "", nil, &batch); err != nil {
			return fail("poll: %v", err)
		}
	}
}

// countLines downloads a file's content (GET /v1/files/{id}/content) and
// counts its lines, streaming: an output file can be larger than the input.
func countLines(ctx context.Context, base, key, id string) (int, error) {
	if id == "" {
		return 0, fmt.Errorf("no file id")
	}
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, base+"/v1/files/"+id+"/content", nil)
	req.Header.Set("authorization", "Bearer "+key)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 300))
		return 0, fmt.Errorf("GET content: %d %s", resp.StatusCode, b)
	}
	n := 0
	br := bufio.NewReaderSize(resp.Body, 64<<10)
	for {
		chunk, err := br.ReadSlice('\n')
		if len(chunk) > 0 && chunk[len(chunk)-1] == '\n' {
			n++
		}
		if err == io.EOF {
			return n, nil
		}
		if err != nil && err != bufio.ErrBufferFull {
			return n, err
		}
	}
}

func batchNotRun(why string) batchResult {
	return batchResult{Skip: "not run: batches not implemented yet (" + strings.TrimSpace(why) + ")"}
}
