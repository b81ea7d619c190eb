package sweep

import (
	"bytes"
	"fmt"
	"html"
	"io"
	"math"
	"strconv"
	"strings"
)

// The chart's geometry, in SVG user units (pixels at 100 %): its width, the
// plot area's margins (the left axis' labels; the recall axis on the right;
// the title above) and the strip under the plot that holds the legend (two
// columns of legendRows), so it never covers a bar, a point or a grid line.
const (
	chartWidth   = 900.0
	plotHeight   = 380.0
	marginLeft   = 80.0
	marginRight  = 110.0
	marginTop    = 90.0
	lineHeight   = 15.0
	legendRows   = 3
	legendRowGap = 20.0
)

// stage colours (p50 bars); p95 bars use the same hues, lighter.
var stageColors = []string{
	"#4c78a8", // retrieval
	"#f58518", // llm_connect
	"#e45756", // llm_prefill
	"#9d9d9d", // queue + overhead
}

var stageNames = []string{"retrieval (embed+search+rerank+assemble)", "llm_connect", "llm_prefill (incl. network, server queue)", "queue + overhead"}

// lighter returns the colour halfway between c ("#rrggbb") and white.
func lighter(c string) string {
	v, _ := strconv.ParseUint(c[1:], 16, 32)
	r, g, b := v>>16, v>>8&0xff, v&0xff
	return fmt.Sprintf("#%02x%02x%02x", r+(0xff-r)/2, g+(0xff-g)/2, b+(0xff-b)/2)
}

const recallColor = "#2c2c2c"

// svg accumulates an SVG document; numbers are written with one decimal.
type svg struct{ bytes.Buffer }

func num(v float64) string { return strconv.FormatFloat(v, 'f', 1, 64) }

func (s *svg) text(x, y float64, attrs, txt string) {
	fmt.Fprintf(s, "<text x=\"%s\" y=\"%s\"%s>%s</text>\n", num(x), num(y), attrs, html.EscapeString(txt))
}

func (s *svg) line(x1, y1, x2, y2 float64, attrs string) {
	fmt.Fprintf(s, "<line x1=\"%s\" y1=\"%s\" x2=\"%s\" y2=\"%s\"%s/>\n", num(x1), num(y1), num(x2), num(y2), attrs)
}

func (s *svg) rect(x, y, w, h float64, fill string) {
	fmt.Fprintf(s, "<rect x=\"%s\" y=\"%s\" width=\"%s\" height=\"%s\" fill=\"%s\"/>\n", num(x), num(y), num(w), num(h), fill)
}

func (s *svg) circle(x, y float64) {
	fmt.Fprintf(s, "<circle cx=\"%s\" cy=\"%s\" r=\"4.5\" fill=\"%s\"/>\n", num(x), num(y), recallColor)
}

const (
	recallLine = ` stroke="` + recallColor + `" stroke-width="2.5"`
	budgetLine = ` stroke="` + recallColor + `" stroke-width="1.3" stroke-dasharray="8 5"`
)

// Chart writes the sweep as an SVG image: for each setting two stacked
// bars, TTFT p50 (left) and p95 (right, lighter), split by stage, recall@k
// as points (joined by a line when only k varies) against a second axis on
// the right, the TTFT budget as a dashed line, and the legend under the
// plot.
func (r *Report) Chart(w io.Writer) error {
	labels := r.xLabels()
	c := r.layout(labels)
	c.head(r)
	c.leftAxis()
	c.bars(r.Settings, labels)
	for si, col := range stageColors {
		c.legend(stageNames[si], func(x, y float64) { c.s.rect(x, y-6, 26, 12, col) })
	}
	c.recall(r)
	if budget := r.Params.TTFTBudgetMs; budget > 0 && budget < c.yMax {
		c.s.line(c.plotLeft, c.yAt(budget), c.plotRight, c.yAt(budget), budgetLine)
		c.legend(fmt.Sprintf("TTFT p95 budget (%g ms)", budget), func(x, y float64) { c.s.line(x, y, x+26, y, budgetLine) })
	}
	c.s.WriteString("</svg>\n")
	if _, err := c.s.WriteTo(w); err != nil {
		return fmt.Errorf("writing the chart: %w", err)
	}
	return nil
}

// chart is one chart being drawn: the SVG so far and its layout.
type chart struct {
	s svg
	// The plot area, and the data ranges its x and y span (xAt, yAt).
	plotLeft, plotRight, plotTop, plotBottom float64
	xMin, xMax, yMax                         float64
	// top is the left axis' top label, where recall 1.0 sits.
	top float64
	// center is the plot's middle; axisTitleY the x axis title's baseline
	// (under the labels), legendTop the legend's first row.
	center, axisTitleY, legendTop float64
	// keys counts the legend's entries so far.
	keys int
}

// xAt and yAt place setting v's group and value v (ms) in the plot.
func (c *chart) xAt(v float64) float64 {
	return c.plotLeft + (v-c.xMin)/(c.xMax-c.xMin)*(c.plotRight-c.plotLeft)
}

func (c *chart) yAt(v float64) float64 { return c.plotBottom - v/c.yMax*(c.plotBottom-c.plotTop) }

// layout sizes the chart for r's settings and their x labels and opens the
// SVG document with its white background.
func (r *Report) layout(labels [][]string) *chart {
	n := len(r.Settings)
	labelLines := 1
	for _, l := range labels {
		labelLines = max(labelLines, len(l))
	}
	plotTop := marginTop
	plotBottom := plotTop + plotHeight
	axisTitleY := plotBottom + 12 + float64(labelLines)*lineHeight + 8
	legendTop := axisTitleY + 22
	height := legendTop + legendRows*legendRowGap + 10
	plotLeft, plotRight := marginLeft, chartWidth-marginRight

	// The left axis tops out at a round number; recall 1.0 sits there on
	// the right axis.
	maxMs := 0.0
	for _, s := range r.Settings {
		maxMs = math.Max(maxMs, s.TTFTP95Ms)
	}
	if maxMs <= 0 {
		maxMs = 1
	}
	top := niceCeil(maxMs * 1.1)
	// Room for the outer bars of the first and last groups.
	c := &chart{plotLeft: plotLeft, plotRight: plotRight, plotTop: plotTop, plotBottom: plotBottom,
		xMin: -0.6, xMax: float64(n) - 0.4, yMax: top * 1.05, top: top,
		center: (plotLeft + plotRight) / 2, axisTitleY: axisTitleY, legendTop: legendTop}

	fmt.Fprintf(&c.s, "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%s\" height=\"%s\" viewBox=\"0 0 %s %s\" font-family=\"Liberation Sans, Arial, Helvetica, sans-serif\" font-size=\"13\">\n",
		num(chartWidth), num(height), num(chartWidth), num(height))
	c.s.rect(0, 0, chartWidth, height, "#ffffff")
	return c
}

// head writes the title and the sweep's parameters above the plot.
func (c *chart) head(r *Report) {
	prompts := "each prompt unique after the system prompt (cold prefill)"
	if r.Params.WarmCache {
		prompts = "prompts repeated (--warm-cache: prefix-cache hits)"
	}
	c.s.text(c.center, 24, ` text-anchor="middle" font-size="15"`, "TTFT by stage against top-k: left bar p50, right bar p95 (lighter)")
	c.s.text(c.center, 44, ` text-anchor="middle"`, fmt.Sprintf("%d questions x %d runs, %s, sweep %s", r.Params.Questions, r.Params.Runs, r.Mode, shortID(r.SweepID)))
	c.s.text(c.center, 62, ` text-anchor="middle"`, prompts+"; under each k: prompt tokens cached")
}

// leftAxis writes the grid and the left axis: labels at quarters of top,
// so the grid lines meet the right axis' 0, 0.25, ... 1 marks; fainter
// lines between.
func (c *chart) leftAxis() {
	s := &c.s
	for i := range 9 {
		v := c.top * float64(i) / 8
		y := c.yAt(v)
		if i%2 == 1 {
			s.line(c.plotLeft, y, c.plotRight, y, ` stroke="#eeeeee"`)
			continue
		}
		s.line(c.plotLeft, y, c.plotRight, y, ` stroke="#d0d0d0"`)
		s.line(c.plotLeft-4, y, c.plotLeft, y, ` stroke="#000000"`)
		s.text(c.plotLeft-7, y+4, ` text-anchor="end"`, strconv.FormatFloat(v, 'f', -1, 64))
	}
	s.line(c.plotLeft, c.plotBottom, c.plotLeft, c.plotTop, ` stroke="#000000"`)
	s.line(c.plotLeft, c.plotBottom, c.plotRight, c.plotBottom, ` stroke="#000000"`)
	s.text(22, (c.plotTop+c.plotBottom)/2, fmt.Sprintf(` text-anchor="middle" transform="rotate(-90 22 %s)"`, num((c.plotTop+c.plotBottom)/2)), "TTFT (ms)")
}

// bars writes the bars, stacked by stage, the x labels under them and the
// x axis' title.
func (c *chart) bars(settings []Result, labels [][]string) {
	s := &c.s
	barWidth := math.Min(30, 420/float64(max(1, len(settings))))
	for i, st := range settings {
		x := c.xAt(float64(i))
		for pi, b := range []Breakdown{st.Stack50, st.Stack95} {
			left := x - barWidth
			if pi == 1 {
				left = x
			}
			base := 0.0
			for si, v := range []float64{b.Retrieval, b.LLMConnect, b.LLMPrefill, b.Other} {
				if v <= 0 {
					continue
				}
				fill := stageColors[si]
				if pi == 1 {
					fill = lighter(fill)
				}
				s.rect(left, c.yAt(base+v), barWidth, c.yAt(base)-c.yAt(base+v), fill)
				base += v
			}
		}
		for li, l := range labels[i] {
			s.text(x, c.plotBottom+18+float64(li)*lineHeight, ` text-anchor="middle"`, l)
		}
	}
	s.text(c.center, c.axisTitleY, ` text-anchor="middle"`, "top_k")
}

// legend writes the legend's next entry: its mark, drawn by mark at x, y,
// and its name; the entries fill two columns of legendRows.
func (c *chart) legend(name string, mark func(x, y float64)) {
	k := c.keys
	c.keys++
	x := c.plotLeft + float64(k/legendRows)*(c.plotRight-c.plotLeft)/2
	y := c.legendTop + float64(k%legendRows)*legendRowGap
	mark(x, y)
	c.s.text(x+34, y+4, "", name)
}

// recall writes recall@k on the right axis, drawn on the left axis' scale,
// with its legend entry and the right axis; nothing when no setting has a
// recall.
func (c *chart) recall(r *Report) {
	s := &c.s
	var pts [][2]float64
	for i, st := range r.Settings {
		if st.Recall != nil {
			pts = append(pts, [2]float64{c.xAt(float64(i)), c.yAt(*st.Recall * c.top)})
		}
	}
	if len(pts) == 0 {
		return
	}
	// Neighbours that differ in more than k get no line between them:
	// it would suggest a trend that is not there.
	joined := !r.variedKnobs()
	if joined && len(pts) > 1 {
		var p strings.Builder
		for _, pt := range pts {
			fmt.Fprintf(&p, "%s,%s ", num(pt[0]), num(pt[1]))
		}
		fmt.Fprintf(s, "<polyline points=\"%s\" fill=\"none\"%s/>\n", strings.TrimSpace(p.String()), recallLine)
	}
	for _, pt := range pts {
		s.circle(pt[0], pt[1])
	}
	c.legend("recall@k (right axis)", func(x, y float64) {
		if joined {
			s.line(x, y, x+26, y, recallLine)
		}
		s.circle(x+13, y)
	})
	s.line(c.plotRight, c.plotBottom, c.plotRight, c.yAt(c.top), ` stroke="#000000"`)
	for _, v := range []float64{0, 0.25, 0.5, 0.75, 1} {
		y := c.yAt(v * c.top)
		s.line(c.plotRight, y, c.plotRight+4, y, ` stroke="#000000"`)
		s.text(c.plotRight+7, y+4, "", strconv.FormatFloat(v, 'f', 2, 64))
	}
	lx, ly := c.plotRight+56, (c.plotTop+c.plotBottom)/2
	s.text(lx, ly, fmt.Sprintf(` text-anchor="middle" transform="rotate(90 %s %s)"`, num(lx), num(ly)), "recall@k (documents in the context)")
}

// xLabels returns each setting's label under the x axis, one string per
// line: its k (and the other knobs when two settings share a k), the share
// of prompt tokens cached, and which one is recommended.
func (r *Report) xLabels() [][]string {
	varied := r.variedKnobs()
	labels := make([][]string, len(r.Settings))
	for i, s := range r.Settings {
		l := []string{strconv.Itoa(s.TopK)}
		if s.TTFTBudgetMs > 0 {
			l[0] = fmt.Sprintf("≤%d", s.TopK)
			l = append(l, fmt.Sprintf("ttft ≤ %d ms", s.TTFTBudgetMs))
		}
		if varied {
			l = append(l, fmt.Sprintf("rerank %d", s.RerankTopN))
			if s.MaxContextTokens > 0 {
				l = append(l, fmt.Sprintf("budget %d", s.MaxContextTokens))
			}
		}
		cached := "cached " + fmtShare(s.CachedShare)
		if s.MostlyCached() {
			cached += " (!)"
		}
		l = append(l, cached)
		if rec := r.Recommendation.Setting; rec != nil && s.Setting == *rec {
			l = append(l, "(recommended)")
		}
		labels[i] = l
	}
	return labels
}

// variedKnobs reports whether two settings share a top_k, or one has a
// TTFT budget, so the x labels must name the other knobs too and recall is
// not joined into a line.
func (r *Report) variedKnobs() bool {
	seen := map[int]bool{}
	for _, s := range r.Settings {
		if seen[s.TopK] || s.TTFTBudgetMs > 0 { // a budget is no point on the k line
			return true
		}
		seen[s.TopK] = true
	}
	return false
}

// niceCeil rounds x up to 1, 2, 2.5 or 5 times a power of ten.
func niceCeil(x float64) float64 {
	if x <= 0 {
		return 1
	}
	e := math.Pow(10, math.Floor(math.Log10(x)))
	for _, m := range []float64{1, 2, 2.5, 5, 10} {
		if m*e >= x {
			return m * e
		}
	}
	return 10 * e
}

func shortID(id string) string {
	if len(id) > 8 {
		return id[:8]
	}
	return id
}
