package main

import (
	"fmt"
	"html"
	"math"
	"strings"
)

// plotSeries is one system's added latency (ms) per concurrency level;
// NaN marks a level that was not measured.
type plotSeries struct {
	name  string
	color string
	p50   []float64
	p99   []float64
}

var seriesColors = map[string]string{
	"nginx":           "#2ca02c",
	"portkey":         "#ff7f0e",
	"switchyard":      "#1f77b4",
	"switchyard-grpc": "#9467bd",
}

// latencySVG draws two panels (p50, p99) of grouped bars: added latency over
// direct by concurrency, one bar per system, each labelled with its value.
func latencySVG(title string, conc []int, series []plotSeries) string {
	const (
		H       = 460
		top     = 70
		plotH   = 300
		leftPad = 60
		gapX    = 80
		// minBarW keeps room for a bar's value label ("0.123" at 10 px).
		minBarW = 36
	)
	// Each panel is 420 px wide, or wider when there are more bars than fit
	// at minBarW (bars take 80% of a concurrency group).
	panelW := max(420, int(math.Ceil(float64(len(conc)*max(1, len(series))*minBarW)/0.8)))
	W := leftPad + 2*panelW + gapX + 20
	var b strings.Builder
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" viewBox="0 0 %d %d" font-family="Helvetica, Arial, sans-serif">`+"\n", W, H, W, H)
	fmt.Fprintf(&b, `<rect width="%d" height="%d" fill="white"/>`+"\n", W, H)
	fmt.Fprintf(&b, `<text x="%d" y="28" font-size="16" text-anchor="middle" font-weight="bold">%s</text>`+"\n", W/2, html.EscapeString(title))
	for p, pct := range []string{"p50", "p99"} {
		x0 := float64(leftPad + p*(panelW+gapX))
		vals := func(s plotSeries) []float64 {
			if pct == "p50" {
				return s.p50
			}
			return s.p99
		}
		lo, hi := 0.0, 0.0
		for _, s := range series {
			for _, v := range vals(s) {
				if !math.IsNaN(v) {
					lo, hi = math.Min(lo, v), math.Max(hi, v)
				}
			}
		}
		if hi-lo < 1e-3 {
			hi = lo + 1
		}
		step := niceStep((hi - lo) / 5)
		lo = math.Floor(lo/step) * step
		hi = math.Ceil(hi*1.08/step) * step
		y := func(v float64) float64 { return top + plotH*(hi-v)/(hi-lo) }

		fmt.Fprintf(&b, `<text x="%.1f" y="%d" font-size="15" text-anchor="middle">added %s latency over direct (ms)</text>`+"\n", x0+float64(panelW)/2, top-16, pct)
		for v := lo; v <= hi+step/2; v += step {
			yy := y(v)
			stroke := "#dddddd"
			if math.Abs(v) < step/1e6 {
				stroke = "#444444"
			}
			fmt.Fprintf(&b, `<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="%s"/>`+"\n", x0, yy, x0+float64(panelW), yy, stroke)
			fmt.Fprintf(&b, `<text x="%.1f" y="%.1f" font-size="11" text-anchor="end">%s</text>`+"\n", x0-6, yy+4, trimFloat(v))
		}
		groupW := float64(panelW) / float64(len(conc))
		barW := groupW * 0.8 / float64(max(1, len(series)))
		for g, c := range conc {
			gx := x0 + groupW*float64(g) + groupW*0.1
			fmt.Fprintf(&b, `<text x="%.1f" y="%d" font-size="12" text-anchor="middle">concurrency %d</text>`+"\n", gx+groupW*0.4, top+plotH+20, c)
			for i, s := range series {
				v := vals(s)[g]
				bx := gx + barW*float64(i)
				if math.IsNaN(v) {
					fmt.Fprintf(&b, `<text x="%.1f" y="%.1f" font-size="10" text-anchor="middle" fill="%s">n/a</text>`+"\n", bx+barW/2, y(0)-4, s.color)
					continue
				}
				y1, y2 := y(math.Max(v, 0)), y(math.Min(v, 0))
				fmt.Fprintf(&b, `<rect x="%.1f" y="%.1f" width="%.1f" height="%.1f" fill="%s"><title>%s %s c=%d: %.3f ms</title></rect>`+"\n",
					bx+1, y1, barW-2, math.Max(y2-y1, 0.5), s.color, s.name, pct, c, v)
				ly := y1 - 4
				if v < 0 {
					ly = y2 + 12
				}
				fmt.Fprintf(&b, `<text x="%.1f" y="%.1f" font-size="10" text-anchor="middle">%s</text>`+"\n", bx+barW/2, ly, fmtMS(v))
			}
		}
	}
	// Legend: each entry as wide as its name (about 7.5 px a character at
	// 13 px); the note goes on its own line if the entries reach it.
	lx := float64(leftPad)
	for _, s := range series {
		fmt.Fprintf(&b, `<rect x="%.1f" y="%d" width="14" height="14" fill="%s"/>`+"\n", lx, H-34, s.color)
		fmt.Fprintf(&b, `<text x="%.1f" y="%d" font-size="13">%s</text>`+"\n", lx+20, H-22, html.EscapeString(s.name))
		lx += math.Max(150, 20+7.5*float64(len([]rune(s.name)))+30)
	}
	noteY := H - 22
	if lx > float64(W-20-300) {
		noteY = H - 6
	}
	fmt.Fprintf(&b, `<text x="%d" y="%d" font-size="11" text-anchor="end" fill="#555555">lower is better; negative = within noise of direct</text>`+"\n", W-20, noteY)
	b.WriteString("</svg>\n")
	return b.String()
}

// niceStep rounds a raw tick step up to 1, 2 or 5 times a power of ten.
func niceStep(raw float64) float64 {
	if raw <= 0 {
		return 1
	}
	p := math.Pow(10, math.Floor(math.Log10(raw)))
	for _, m := range []float64{1, 2, 5, 10} {
		if raw <= m*p {
			return m * p
		}
	}
	return 10 * p
}

func trimFloat(v float64) string {
	s := fmt.Sprintf("%.3f", v)
	s = strings.TrimRight(strings.TrimRight(s, "0"), ".")
	if s == "-0" {
		s = "0"
	}
	return s
}

// fmtMS prints milliseconds with precision suited to their size.
func fmtMS(v float64) string {
	switch a := math.Abs(v); {
	case a >= 100:
		return fmt.Sprintf("%.0f", v)
	case a >= 10:
		return fmt.Sprintf("%.1f", v)
	case a >= 1:
		return fmt.Sprintf("%.2f", v)
	default:
		return fmt.Sprintf("%.3f", v)
	}
}
