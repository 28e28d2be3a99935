package vectorstores

import (
	"archive/zip"
	"bytes"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
)

// minimalPDF writes a one-page PDF showing each line of text, with a
// correct cross-reference table, as a PDF writer would.
func minimalPDF(lines ...string) []byte {
	var content strings.Builder
	content.WriteString("BT /F1 12 Tf 72 720 Td 14 TL\n")
	for _, l := range lines {
		fmt.Fprintf(&content, "(%s) Tj T*\n", l)
	}
	content.WriteString("ET")
	objs := []string{
		"<< /Type /Catalog /Pages 2 0 R >>",
		"<< /Type /Pages /Kids [3 0 R] /Count 1 >>",
		"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] /Contents 4 0 R /Resources << /Font << /F1 5 0 R >> >> >>",
		fmt.Sprintf("<< /Length %d >>\nstream\n%s\nendstream", content.Len(), content.String()),
		"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica /Encoding /WinAnsiEncoding >>",
	}
	var b bytes.Buffer
	b.WriteString("%PDF-1.4\n")
	offsets := make([]int, len(objs))
	for i, o := range objs {
		offsets[i] = b.Len()
		fmt.Fprintf(&b, "%d 0 obj\n%s\nendobj\n", i+1, o)
	}
	xref := b.Len()
	fmt.Fprintf(&b, "xref\n0 %d\n0000000000 65535 f \n", len(objs)+1)
	for _, off := range offsets {
		fmt.Fprintf(&b, "%010d 00000 n \n", off)
	}
	fmt.Fprintf(&b, "trailer\n<< /Size %d /Root 1 0 R >>\nstartxref\n%d\n%%%%EOF\n", len(objs)+1, xref)
	return b.Bytes()
}

// minimalDOCX writes a DOCX (a zip with word/document.xml) of paragraphs.
func minimalDOCX(paragraphs ...string) []byte {
	var b bytes.Buffer
	zw := zip.NewWriter(&b)
	w, _ := zw.Create("[Content_Types].xml")
	io.WriteString(w, `<?xml version="1.0"?><Types xmlns="http://schemas.openxmlformats.org/package/2006/content-types"/>`)
	w, _ = zw.Create("word/document.xml")
	io.WriteString(w, `<?xml version="1.0" encoding="UTF-8"?><w:document xmlns:w="http://schemas.openxmlformats.org/wordprocessingml/2006/main"><w:body>`)
	for _, p := range paragraphs {
		// Two runs per paragraph, split mid-sentence as Word does.
		half := len(p) / 2
		fmt.Fprintf(w, `<w:p><w:r><w:t xml:space="preserve">%s</w:t></w:r><w:r><w:t>%s</w:t></w:r></w:p>`, p[:half], p[half:])
	}
	io.WriteString(w, `</w:body></w:document>`)
	zw.Close()
	return b.Bytes()
}

func TestExtractText(t *testing.T) {
	tests := []struct {
		name, ext string
		in        []byte
		want      []string // substrings of the text
		absent    []string
		errCode   string
	}{
		{name: "pdf", ext: ".pdf", in: minimalPDF("Quarterly revenue grew", "in the northern region"),
			want: []string{"Quarterly revenue grew", "northern region"}},
		{name: "pdf without text", ext: ".pdf", in: minimalPDF(), errCode: codeInvalid},
		{name: "not a pdf", ext: ".pdf", in: []byte("%PDF-1.4 binary-ish content"), errCode: codeInvalid},
		{name: "truncated pdf", ext: ".pdf", in: minimalPDF("cut short")[:200], errCode: codeInvalid},
		{name: "docx", ext: ".docx", in: minimalDOCX("The warranty covers two years.", "Returns need a receipt."),
			want: []string{"The warranty covers two years.\n", "Returns need a receipt."}},
		{name: "not a docx", ext: ".docx", in: []byte("plain text"), errCode: codeInvalid},
		{name: "html", ext: ".html",
			in:     []byte(`<html><head><style>p{color:red}</style><script>var secret=1</script></head><body><h1>Menu</h1><p>Soup &amp; bread</p></body></html>`),
			want:   []string{"Menu", "Soup & bread"},
			absent: []string{"<p>", "color:red", "var secret"}},
		{name: "text as it is", ext: ".md", in: []byte("# Title\n<b>kept</b>"), want: []string{"# Title\n<b>kept</b>"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r, err := extractText(tc.ext, bytes.NewReader(tc.in), bytes.NewReader(tc.in), int64(len(tc.in)))
			if tc.errCode != "" {
				var fe *fileError
				if !errors.As(err, &fe) || fe.code != tc.errCode || fe.message == "" {
					t.Fatalf("err = %v, want a %s file error with a message", err, tc.errCode)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			b, err := io.ReadAll(r)
			if err != nil {
				t.Fatal(err)
			}
			for _, w := range tc.want {
				if !strings.Contains(string(b), w) {
					t.Errorf("text %q lacks %q", b, w)
				}
			}
			for _, a := range tc.absent {
				if strings.Contains(string(b), a) {
					t.Errorf("text %q keeps %q", b, a)
				}
			}
		})
	}
}

// TestDocumentFormatsIndexed: PDF, DOCX and HTML files are indexed from
// their text and found by search; a damaged PDF fails with last_error
// instead of an empty index.
func TestDocumentFormatsIndexed(t *testing.T) {
	e := newEnv(t)
	pdfID := e.upload("alice", "report.pdf", string(minimalPDF("Glaciers retreat each summer")))
	docxID := e.upload("alice", "policy.docx", string(minimalDOCX("Volcanoes erupt rarely here.")))
	htmlID := e.upload("alice", "page.html", `<html><body><p>Lighthouses guide ships</p><script>ignored()</script></body></html>`)
	badID := e.upload("alice", "broken.pdf", "%PDF-1.7 not really")
	created := e.ok("alice", http.MethodPost, "/v1/vector_stores", `{"name":"docs","file_ids":`+idsJSON(pdfID, docxID, htmlID, badID)+`}`, "VectorStoreObject")
	id := created.Get("id").Str
	st := e.wait("alice", id)
	if st.Get("file_counts.completed").Int() != 3 || st.Get("file_counts.failed").Int() != 1 {
		t.Fatalf("indexed %s", st.Raw)
	}
	bad := e.ok("alice", http.MethodGet, "/v1/vector_stores/"+id+"/files/"+badID, "", "VectorStoreFileObject")
	if bad.Get("status").Str != "failed" || bad.Get("last_error.code").Str != codeInvalid || bad.Get("last_error.message").Str == "" {
		t.Errorf("damaged pdf %s", bad.Raw)
	}
	for query, want := range map[string]string{"glaciers summer": pdfID, "volcanoes erupt": docxID, "lighthouses ships": htmlID} {
		page := e.ok("alice", http.MethodPost, "/v1/vector_stores/"+id+"/search", `{"query":"`+query+`","max_num_results":1}`, "VectorStoreSearchResultsPage")
		if got := page.Get("data.0.file_id").Str; got != want {
			t.Errorf("search %q found %s, want %s: %s", query, got, want, page.Raw)
		}
		if text := page.Get("data.0.content.0.text").Str; strings.Contains(text, "<") || strings.Contains(text, "ignored()") {
			t.Errorf("search %q returned markup or script: %q", query, text)
		}
	}
}
