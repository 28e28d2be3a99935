package vectorstores

import (
	"archive/zip"
	"bytes"
	"encoding/xml"
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/dslipak/pdf"
	"golang.org/x/net/html"
)

// maxExtractedBytes bounds the text extracted from one PDF or DOCX (about
// MaxFileTokens at a few bytes a token): the chunker refuses more tokens
// anyway, and extraction must not grow without bound on a crafted file.
const maxExtractedBytes = 8 * MaxFileTokens

// maxDOCXPartBytes bounds the uncompressed document part read from a DOCX
// (a zip): a zip bomb stops here.
const maxDOCXPartBytes = 64 << 20

// extractText returns the indexable text of a file of the given extension:
// PDF, DOCX and HTML have their text extracted; every other supported type
// is text already and is returned as it is. A file whose text cannot be
// extracted is a *fileError the owner sees as last_error.
func extractText(ext string, c io.ReaderAt, r io.Reader, size int64) (io.Reader, error) {
	switch ext {
	case ".pdf":
		return guard(func() (io.Reader, error) { return extractPDF(c, size) })
	case ".docx":
		return guard(func() (io.Reader, error) { return extractDOCX(c, size) })
	case ".html", ".htm":
		return extractHTML(r)
	}
	return r, nil
}

// guard turns a panic of a parser on a malformed file into a failed file:
// the PDF reader in particular trusts the file's structure.
func guard(f func() (io.Reader, error)) (r io.Reader, err error) {
	defer func() {
		if p := recover(); p != nil {
			r, err = nil, &fileError{code: codeInvalid, message: "The file is damaged or not in the format its name says."}
		}
	}()
	return f()
}

// boundedText collects extracted text up to maxExtractedBytes.
type boundedText struct {
	b   strings.Builder
	err error
}

func (t *boundedText) write(s string) {
	if t.err != nil {
		return
	}
	if t.b.Len()+len(s) > maxExtractedBytes {
		t.err = &fileError{code: codeInvalid, message: fmt.Sprintf("The file has more than %d tokens.", MaxFileTokens)}
		return
	}
	t.b.WriteString(s)
}

func extractPDF(c io.ReaderAt, size int64) (io.Reader, error) {
	doc, err := pdf.NewReader(c, size)
	if err != nil {
		msg := "The file is not a PDF this gateway can read."
		if strings.Contains(err.Error(), "encrypt") || strings.Contains(err.Error(), "password") {
			msg = "The PDF is encrypted."
		}
		return nil, &fileError{code: codeInvalid, message: msg}
	}
	var t boundedText
	for i := 1; i <= doc.NumPage() && t.err == nil; i++ {
		p := doc.Page(i)
		if p.V.IsNull() {
			continue
		}
		text, err := p.GetPlainText(nil)
		if err != nil {
			return nil, &fileError{code: codeInvalid, message: fmt.Sprintf("Page %d of the PDF could not be read.", i)}
		}
		t.write(text)
		t.write("\n\n")
	}
	if t.err != nil {
		return nil, t.err
	}
	if strings.TrimSpace(t.b.String()) == "" {
		return nil, &fileError{code: codeInvalid, message: "The PDF has no text to index (scanned pages are images, which are not read)."}
	}
	return strings.NewReader(t.b.String()), nil
}

func extractDOCX(c io.ReaderAt, size int64) (io.Reader, error) {
	zr, err := zip.NewReader(c, size)
	if err != nil {
		return nil, &fileError{code: codeInvalid, message: "The file is not a DOCX document (not a zip archive)."}
	}
	var part *zip.File
	for _, f := range zr.File {
		if f.Name == "word/document.xml" {
			part = f
		}
	}
	if part == nil {
		return nil, &fileError{code: codeInvalid, message: "The file is not a DOCX document (no word/document.xml)."}
	}
	rc, err := part.Open()
	if err != nil {
		return nil, &fileError{code: codeInvalid, message: "The DOCX document is damaged."}
	}
	defer rc.Close()
	// WordprocessingML: text runs are w:t, paragraphs w:p, tabs w:tab and
	// breaks w:br/w:cr; everything else is layout.
	dec := xml.NewDecoder(io.LimitReader(rc, maxDOCXPartBytes))
	var t boundedText
	inText := false
	for t.err == nil {
		tok, err := dec.Token()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, &fileError{code: codeInvalid, message: "The DOCX document is damaged."}
		}
		switch e := tok.(type) {
		case xml.StartElement:
			switch e.Name.Local {
			case "t":
				inText = true
			case "tab":
				t.write("\t")
			case "br", "cr":
				t.write("\n")
			}
		case xml.EndElement:
			switch e.Name.Local {
			case "t":
				inText = false
			case "p":
				t.write("\n")
			}
		case xml.CharData:
			if inText {
				t.write(string(e))
			}
		}
	}
	if t.err != nil {
		return nil, t.err
	}
	return strings.NewReader(t.b.String()), nil
}

// htmlBlocks end a line of text.
var htmlBlocks = map[string]bool{"p": true, "div": true, "br": true, "li": true, "tr": true, "h1": true, "h2": true,
	"h3": true, "h4": true, "h5": true, "h6": true, "pre": true, "blockquote": true, "section": true, "article": true, "table": true}

// extractHTML keeps an HTML page's text: no markup, scripts or styles, a
// line break at the end of each block element. The page is read as a
// stream; the text goes on to the chunker, which bounds it.
func extractHTML(r io.Reader) (io.Reader, error) {
	z := html.NewTokenizer(r)
	var out bytes.Buffer
	skip := 0 // inside script or style
	for {
		switch z.Next() {
		case html.ErrorToken:
			if errors.Is(z.Err(), io.EOF) {
				return &out, nil
			}
			return nil, fmt.Errorf("vectorstores: html: %w", z.Err())
		case html.StartTagToken:
			name, _ := z.TagName()
			if n := string(name); n == "script" || n == "style" {
				skip++
			} else if htmlBlocks[n] {
				out.WriteByte('\n')
			}
		case html.EndTagToken:
			name, _ := z.TagName()
			if n := string(name); n == "script" || n == "style" {
				skip = max(skip-1, 0)
			} else if htmlBlocks[n] {
				out.WriteByte('\n')
			}
		case html.TextToken:
			if skip == 0 {
				out.Write(z.Text())
			}
		}
		if out.Len() > maxExtractedBytes {
			return nil, &fileError{code: codeInvalid, message: fmt.Sprintf("The file has more than %d tokens.", MaxFileTokens)}
		}
	}
}
