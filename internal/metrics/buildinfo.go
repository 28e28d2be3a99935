package metrics

import (
	"fmt"
	"io"
	"runtime/debug"
	"strings"
)

// Build describes the running binary from what the Go toolchain stamped
// into it: the main module's version and the VCS revision it was built
// from.
type Build struct {
	Version   string // module version; "(devel)" for a build in the source tree
	Revision  string // VCS revision, "" when the build was not stamped
	Time      string // commit time (RFC 3339), "" when unknown
	Modified  bool   // the work tree had uncommitted changes
	GoVersion string
}

// ReadBuild returns the running binary's Build.
func ReadBuild() Build {
	b := Build{Version: "(unknown)"}
	info, ok := debug.ReadBuildInfo()
	if !ok {
		return b
	}
	b.Version, b.GoVersion = info.Main.Version, info.GoVersion
	for _, s := range info.Settings {
		switch s.Key {
		case "vcs.revision":
			b.Revision = s.Value
		case "vcs.time":
			b.Time = s.Value
		case "vcs.modified":
			b.Modified = s.Value == "true"
		}
	}
	return b
}

// String is the one line `switchyard --version` prints.
func (b Build) String() string {
	var s strings.Builder
	s.WriteString("switchyard " + b.Version)
	if b.Revision != "" {
		s.WriteString(" (" + shortRev(b.Revision))
		if b.Modified {
			s.WriteString(", modified")
		}
		if b.Time != "" {
			s.WriteString(", " + b.Time)
		}
		s.WriteString(")")
	}
	if b.GoVersion != "" {
		s.WriteString(" " + b.GoVersion)
	}
	return s.String()
}

func shortRev(r string) string {
	if len(r) > 12 {
		return r[:12]
	}
	return r
}

// WritePrometheus writes the conventional build-info gauge (always 1, the
// facts in its labels), so dashboards can tell which build each replica
// runs.
func (b Build) WritePrometheus(w io.Writer) error {
	rev := b.Revision
	if b.Modified {
		rev += "-modified"
	}
	line := fmt.Sprintf("switchyard_build_info{goversion=%q,revision=%q,version=%q} 1\n", b.GoVersion, rev, b.Version)
	return writeFamily(w, "switchyard_build_info", "The running build: module version, VCS revision and Go version.", "gauge", []string{line})
}
