package batches

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"

	"github.com/tidwall/gjson"
)

// lineReader yields the lines of a JSONL stream one at a time, whatever
// their length, holding only the current line: bufio.Scanner would give up
// on a line longer than its buffer, and a batch line can be several
// megabytes.
type lineReader struct {
	r   *bufio.Reader
	buf []byte
	max int
	// num is the 1-based number of the line last returned; off is the byte
	// offset just past it (its newline included).
	num int
	off int64
}

func newLineReader(r io.Reader, max int) *lineReader {
	return &lineReader{r: bufio.NewReaderSize(r, 64<<10), max: max}
}

// next returns the next line without its line ending, valid until the next
// call. tooLong reports a line over max bytes, whose content is dropped;
// complete is false for a last line without a newline. At the end it returns
// io.EOF.
func (lr *lineReader) next() (line []byte, tooLong, complete bool, err error) {
	lr.buf = lr.buf[:0]
	var n int64
	for {
		chunk, err := lr.r.ReadSlice('\n')
		n += int64(len(chunk))
		if !tooLong {
			if len(lr.buf)+len(chunk) > lr.max+2 { // +2: the line ending
				tooLong = true
				lr.buf = lr.buf[:0]
			} else {
				lr.buf = append(lr.buf, chunk...)
			}
		}
		if errors.Is(err, bufio.ErrBufferFull) {
			continue
		}
		if err != nil && !errors.Is(err, io.EOF) {
			return nil, false, false, err
		}
		if n == 0 {
			return nil, false, false, io.EOF
		}
		lr.num++
		lr.off += n
		complete = err == nil
		line = bytes.TrimSuffix(lr.buf, []byte("\n"))
		line = bytes.TrimSuffix(line, []byte("\r"))
		if !tooLong && len(line) > lr.max {
			tooLong = true
		}
		// Do not keep a buffer grown by one huge line for the rest of the
		// file.
		if cap(lr.buf) > 1<<20 && len(lr.buf) < 64<<10 {
			lr.buf = nil
		}
		return line, tooLong, complete, nil
	}
}

// blank reports a line with nothing but whitespace; such lines (a trailing
// empty line, say) are not requests and are skipped.
func blank(line []byte) bool {
	return len(bytes.TrimSpace(line)) == 0
}

// idKey is what identifies a custom_id in the sets the runner keeps: a
// digest, so memory per line is fixed however long the ids are.
type idKey [16]byte

func keyOf(customID string) idKey {
	sum := sha256.Sum256([]byte(customID))
	return idKey(sum[:16])
}

// validation is what reading the input file found.
type validation struct {
	total  int64
	errs   []BatchError
	nerrs  int    // errors found, including those past the cap
	model  string // the model every line names, "" when they differ
	models bool   // some line named a model
}

func (v *validation) add(code, param, format string, line int, args ...any) {
	v.nerrs++
	if len(v.errs) >= maxValidationErrors {
		return
	}
	e := BatchError{Code: code, Message: fmt.Sprintf(format, args...)}
	if param != "" {
		e.Param = &param
	}
	if line > 0 {
		e.Line = &line
	}
	v.errs = append(v.errs, e)
}

// validate streams the input file and checks every line: a JSON object with
// a string custom_id unique in the file, method POST, url equal to the
// batch's endpoint, an object body; at most maxLines of them. Bodies are
// looked at in place with gjson, never decoded. stop ends it early
// (cancel); the result is then incomplete.
func validate(ctx context.Context, r io.Reader, endpoint string, maxLines, maxLineBytes int, stop <-chan struct{}) (*validation, error) {
	v := &validation{}
	seen := map[idKey]int{} // custom_id -> line number
	lr := newLineReader(r, maxLineBytes)
	for {
		if lr.num%1024 == 0 {
			select {
			case <-ctx.Done():
				return nil, ctx.Err()
			case <-stop:
				return v, nil
			default:
			}
		}
		line, tooLong, _, err := lr.next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, fmt.Errorf("read input: %w", err)
		}
		n := lr.num
		if tooLong {
			v.total++
			v.add("line_too_large", "", "This line is longer than %d bytes.", n, maxLineBytes)
			continue
		}
		if blank(line) {
			continue
		}
		v.total++
		if v.total > int64(maxLines) {
			v.add("line_limit_exceeded", "", "The input file has more than %d requests; a batch may have at most %d.", n, maxLines, maxLines)
			break
		}
		if !gjson.ValidBytes(line) {
			v.add("invalid_json_line", "", "This line is not parseable as valid JSON.", n)
			continue
		}
		doc := gjson.ParseBytes(line)
		if !doc.IsObject() {
			v.add("invalid_json_line", "", "This line is not a JSON object.", n)
			continue
		}
		cid, method, url, body := doc.Get("custom_id"), doc.Get("method"), doc.Get("url"), doc.Get("body")
		switch {
		case !cid.Exists():
			v.add("missing_required_parameter", "custom_id", "Missing required parameter: 'custom_id'.", n)
		case cid.Type != gjson.String || cid.Str == "":
			v.add("invalid_custom_id", "custom_id", "The custom_id must be a non-empty string.", n)
		default:
			k := keyOf(cid.Str)
			if first, dup := seen[k]; dup {
				v.add("duplicate_custom_id", "custom_id",
					"The custom_id for this request is a duplicate of the one on line %d. The custom_id must be unique for each request in a batch.", n, first)
			} else {
				seen[k] = n
			}
		}
		switch {
		case !method.Exists():
			v.add("missing_required_parameter", "method", "Missing required parameter: 'method'.", n)
		case method.Type != gjson.String || method.Str != "POST":
			v.add("invalid_method", "method", "The method must be 'POST'.", n)
		}
		switch {
		case !url.Exists():
			v.add("missing_required_parameter", "url", "Missing required parameter: 'url'.", n)
		case url.Type != gjson.String || url.Str != endpoint:
			v.add("invalid_url", "url", "The url of this request does not match the batch's endpoint %s.", n, endpoint)
		}
		switch {
		case !body.Exists():
			v.add("missing_required_parameter", "body", "Missing required parameter: 'body'.", n)
		case !body.IsObject():
			v.add("invalid_body", "body", "The body must be a JSON object.", n)
		default:
			v.noteModel(body.Get("model"))
		}
	}
	if v.total == 0 && v.nerrs == 0 {
		v.add("empty_file", "input_file_id", "The input file has no requests.", 0)
	}
	return v, nil
}

// noteModel tracks whether all lines name the same model, for the batch's
// model field; lines may use different models, and then it stays unset.
func (v *validation) noteModel(m gjson.Result) {
	name := ""
	if m.Type == gjson.String {
		name = m.Str
	}
	switch {
	case !v.models:
		v.models, v.model = true, name
	case v.model != name:
		v.model = ""
	}
}
