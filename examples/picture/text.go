package main

import (
	"fmt"
	"io"
	"strings"
	"time"
)

// chartRows is the height of each terminal chart, in text rows.
const chartRows = 8

// maxColumns bounds a terminal chart's width: longer scenes put several
// slices in one column.
const maxColumns = 100

// writeText draws sc as text: a table of offered and admitted requests per
// second, then one chart per algorithm, a column per time slice (or per few
// slices), █ where requests were admitted, ░ where they were offered but not
// admitted.
func writeText(w io.Writer, sc scene) error {
	var b strings.Builder
	fmt.Fprintf(&b, "%s\nlimit: %d per %v, every algorithm at its default burst\n\n", sc.pattern.title, limitRate, limitPeriod)
	writeTable(&b, sc)
	writeCharts(&b, sc)
	_, err := io.WriteString(w, b.String())
	return err
}

// writeTable writes the numbers, per second: a row of offered requests and
// a row of admitted ones per algorithm.
func writeTable(b *strings.Builder, sc scene) {
	secs := perSecond(sc.offered)
	fmt.Fprintf(b, "%-14s", "second")
	for i := range secs {
		fmt.Fprintf(b, "%5d", i+1)
	}
	fmt.Fprintf(b, "  %6s  %s\n", "total", "most in any 3 s")
	row := func(name string, bins []int, total, most int) {
		fmt.Fprintf(b, "%-14s", name)
		for _, c := range perSecond(bins) {
			fmt.Fprintf(b, "%5d", c)
		}
		if most < 0 {
			fmt.Fprintf(b, "  %6d\n", total)
			return
		}
		fmt.Fprintf(b, "  %6d  %d\n", total, most)
	}
	row("offered", sc.offered, sc.total(), -1)
	for i, rp := range sc.replays {
		row(algName(rp.alg), sc.admitted[i], rp.admitted(), maxInSpan(rp.admittedTimes(), limitPeriod))
	}
	b.WriteString("(LeakyBucket counts requests in the second they are served, after their delay)\n")
}

// writeCharts writes one chart per algorithm, each at most maxColumns
// wide and chartRows high, with a time axis.
func writeCharts(b *strings.Builder, sc scene) {
	group := (sc.slices + maxColumns - 1) / maxColumns
	cols := (sc.slices + group - 1) / group
	colWidth := time.Duration(group) * slice
	top := scaleMax(sc.peak() * group)
	fmt.Fprintf(b, "\none column = %v; █ admitted, ░ offered but not admitted; scale 0–%d requests per column\n", colWidth, top)
	offered := regroup(sc.offered, group)
	for i, rp := range sc.replays {
		admitted := regroup(sc.admitted[i], group)
		fmt.Fprintf(b, "\n%s: %d of %d admitted\n", algName(rp.alg), rp.admitted(), sc.total())
		for r := chartRows - 1; r >= 0; r-- {
			writeChartRow(b, r, top, admitted, offered)
		}
		writeAxis(b, cols, int(time.Second/colWidth))
	}
}

// writeChartRow writes row r (0 the bottom) of a chart scaled 0 to top:
// █ where admitted exceeds r/chartRows of the scale, ░ where only offered
// does, so any request at all shows in the bottom row.
func writeChartRow(b *strings.Builder, r, top int, admitted, offered []int) {
	level := float64(r) * float64(top) / chartRows
	switch r {
	case chartRows - 1:
		fmt.Fprintf(b, "%5d ┤", top)
	default:
		b.WriteString("      │")
	}
	line := make([]rune, len(admitted))
	for c := range line {
		switch {
		case float64(admitted[c]) > level:
			line[c] = '█'
		case float64(offered[c]) > level:
			line[c] = '░'
		default:
			line[c] = ' '
		}
	}
	b.WriteString(strings.TrimRight(string(line), " "))
	b.WriteByte('\n')
}

// writeAxis writes a chart's time axis, cols columns of which perSec make
// a second: a tick and a label every second.
func writeAxis(b *strings.Builder, cols, perSec int) {
	axis := make([]rune, cols)
	labels := make([]rune, cols+4)
	for c := range axis {
		axis[c] = '─'
	}
	for i := range labels {
		labels[i] = ' '
	}
	for c := 0; c < cols; c += perSec {
		if c > 0 {
			axis[c] = '┴'
		}
		for k, ch := range fmt.Sprintf("%ds", c/perSec) {
			if c+k < len(labels) {
				labels[c+k] = ch
			}
		}
	}
	fmt.Fprintf(b, "    0 └%s\n       %s\n", string(axis), strings.TrimRight(string(labels), " "))
}

// regroup sums every group consecutive bins.
func regroup(bins []int, group int) []int {
	out := make([]int, (len(bins)+group-1)/group)
	for i, c := range bins {
		out[i/group] += c
	}
	return out
}

// scaleMax rounds m up to a round figure for a chart's scale: a multiple of
// 1, 2 or 5 times a power of ten, at least 10.
func scaleMax(m int) int {
	for p := 10; ; p *= 10 {
		for _, f := range []int{1, 2, 5} {
			if f*p >= m {
				return f * p
			}
		}
	}
}
