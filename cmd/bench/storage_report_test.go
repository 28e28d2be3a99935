package main

import "testing"

func TestReplaceSection(t *testing.T) {
	const sec = "## 7. S\n\nnew\n\n"
	for _, tc := range []struct{ name, doc, want string }{
		{"inserted before Targets", "# B\n\n## 6. P\n\nx\n\n## Targets\n\nt\n", "# B\n\n## 6. P\n\nx\n\n## 7. S\n\nnew\n\n## Targets\n\nt\n"},
		{"replaced in place", "# B\n\n## 7. S\n\nold\nolder\n\n## Targets\n\nt\n", "# B\n\n## 7. S\n\nnew\n\n## Targets\n\nt\n"},
		{"replaced at the end", "# B\n\n## 7. S\n\nold\n", "# B\n\n## 7. S\n\nnew\n\n"},
		{"appended", "# B\n", "# B\n\n## 7. S\n\nnew\n\n"},
	} {
		if got := replaceSection(tc.doc, "## 7. S", sec, "## Targets"); got != tc.want {
			t.Errorf("%s:\ngot  %q\nwant %q", tc.name, got, tc.want)
		}
	}
}
