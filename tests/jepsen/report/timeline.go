package report

import (
	"fmt"
	"html"
	"math"
	"slices"
	"strings"
	"time"

	"github.com/quorumbus/quorumbus/tests/jepsen/history"
	"github.com/quorumbus/quorumbus/tests/jepsen/nemesis"
)

// Timeline draws the run as an SVG an engineer can open in a browser:
// acknowledged sends and successful completes per second above, the
// slowest acknowledged send of each second below (log scale), and every
// fault as a shaded band across both, labelled with its kind and
// target. A stall after a leader kill shows as a dip under a band.
func Timeline(ops []history.Op, faults []nemesis.Fault) string {
	const (
		w, left, right = 1400.0, 60.0, 20.0
		top, ph, gap   = 30.0, 220.0, 40.0 // panel top, height, gap
	)
	var end int64
	for _, op := range ops {
		end = max(end, op.Time)
	}
	secs := int(end/int64(time.Second)) + 1
	sends := make([]float64, secs)
	completes := make([]float64, secs)
	worst := make([]float64, secs) // seconds
	for _, p := range history.Pairs(ops) {
		if p.Done.Type != history.OK {
			continue
		}
		s := int(p.Done.Time / int64(time.Second))
		switch p.Invoke.F {
		case history.Send:
			sends[s]++
			worst[s] = max(worst[s], time.Duration(p.Done.Time-p.Invoke.Time).Seconds())
		case history.Complete:
			completes[s]++
		}
	}
	x := func(t float64) float64 { return left + (w-left-right)*t/float64(secs) }
	var b strings.Builder
	height := top + 2*ph + gap + 40
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" width="%.0f" height="%.0f" font-family="sans-serif" font-size="11">`+"\n", w, height)
	fmt.Fprintf(&b, `<rect width="100%%" height="100%%" fill="white"/>`+"\n")
	colors := map[string]string{"kill": "#e41a1c", "pause": "#377eb8", "isolate": "#984ea3", "partition": "#ff7f00"}
	for i, f := range faults {
		endT := f.End
		if endT == 0 {
			endT = end
		}
		c := "#999999"
		for k, v := range colors {
			if strings.HasPrefix(f.Kind, k) {
				c = v
			}
		}
		x0, x1 := x(float64(f.Start)/1e9), x(float64(endT)/1e9)
		fmt.Fprintf(&b, `<rect x="%.1f" y="%.0f" width="%.1f" height="%.0f" fill="%s" fill-opacity="0.18"><title>%s</title></rect>`+"\n",
			x0, top, max(x1-x0, 1), 2*ph+gap, c, html.EscapeString(fmt.Sprintf("%s %s %.1fs-%.1fs", f.Kind, f.Target, float64(f.Start)/1e9, float64(endT)/1e9)))
		fmt.Fprintf(&b, `<text x="%.1f" y="%.0f" fill="%s" font-size="9">%s</text>`+"\n", x0, top-4-float64(i%2)*10, c, html.EscapeString(f.Kind+" "+f.Target))
	}
	// Panel 1: rates.
	peak := max(slices.Max(append(sends, 1)), slices.Max(completes))
	y1 := func(v float64) float64 { return top + ph - ph*v/peak }
	axes(&b, left, top, w-right, ph, fmt.Sprintf("per second (max %.0f)", peak))
	line(&b, sends, x, y1, "#1b9e77")
	line(&b, completes, x, y1, "#7570b3")
	legend(&b, w-right-300, top+14, "#1b9e77", "acknowledged sends/s")
	legend(&b, w-right-150, top+14, "#7570b3", "successful completes/s")
	// Panel 2: slowest send per second, log scale from 1 ms to 100 s.
	t2 := top + ph + gap
	y2 := func(v float64) float64 {
		if v <= 0 {
			return t2 + ph
		}
		l := min(max((math.Log10(v)+3)/5, 0), 1) // 1e-3 .. 1e2
		return t2 + ph - ph*l
	}
	axes(&b, left, t2, w-right, ph, "slowest acknowledged send (log: 1 ms .. 100 s)")
	for _, v := range []float64{0.001, 0.01, 0.1, 1, 10} {
		fmt.Fprintf(&b, `<text x="%.0f" y="%.1f" text-anchor="end">%s</text>`+"\n", left-4, y2(v)+4, time.Duration(v*1e9))
	}
	line(&b, worst, x, y2, "#d95f02")
	for s := 0; s <= secs; s += max(secs/14, 1) {
		fmt.Fprintf(&b, `<text x="%.1f" y="%.0f" text-anchor="middle">%ds</text>`+"\n", x(float64(s)), t2+ph+16, s)
	}
	b.WriteString("</svg>\n")
	return b.String()
}

func axes(b *strings.Builder, x0, y0, x1, h float64, title string) {
	fmt.Fprintf(b, `<rect x="%.0f" y="%.0f" width="%.0f" height="%.0f" fill="none" stroke="#444"/>`+"\n", x0, y0, x1-x0, h)
	fmt.Fprintf(b, `<text x="%.0f" y="%.0f" font-weight="bold">%s</text>`+"\n", x0+6, y0+14, html.EscapeString(title))
}

func line(b *strings.Builder, v []float64, x, y func(float64) float64, color string) {
	b.WriteString(`<polyline fill="none" stroke-width="1.2" stroke="` + color + `" points="`)
	for i, p := range v {
		fmt.Fprintf(b, "%.1f,%.1f ", x(float64(i)+0.5), y(p))
	}
	b.WriteString(`"/>` + "\n")
}

func legend(b *strings.Builder, x, y float64, color, label string) {
	fmt.Fprintf(b, `<rect x="%.0f" y="%.0f" width="10" height="3" fill="%s"/><text x="%.0f" y="%.0f">%s</text>`+"\n", x, y-4, color, x+14, y, html.EscapeString(label))
}
