package sweep

import (
	"fmt"
	"image/color"
	"io"
	"math"
	"strconv"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgimg"
	"gonum.org/v1/plot/vg/vgsvg"
)

// Chart size, the margin kept on the right for the recall axis and the
// strip under the plot that holds the legend (two columns of three), so it
// never covers a bar, a point or a grid line.
const (
	chartWidth   = 9 * vg.Inch
	chartHeight  = 5.5 * vg.Inch
	rightMargin  = 0.75 * vg.Inch
	legendHeight = 0.75 * vg.Inch
	legendRows   = 3
)

// legendItem is one entry of the chart's legend.
type legendItem struct {
	name   string
	thumbs []plot.Thumbnailer
}

// stage colours (p50 bars); p95 bars use the same hues, lighter.
var stageColors = []color.NRGBA{
	{R: 0x4c, G: 0x78, B: 0xa8, A: 0xff}, // retrieval
	{R: 0xf5, G: 0x85, B: 0x18, A: 0xff}, // llm_connect
	{R: 0xe4, G: 0x57, B: 0x56, A: 0xff}, // llm_prefill
	{R: 0x9d, G: 0x9d, B: 0x9d, A: 0xff}, // queue + overhead
}

var stageNames = []string{"retrieval (embed+search+rerank+assemble)", "llm_connect", "llm_prefill (incl. network, server queue)", "queue + overhead"}

func lighter(c color.NRGBA) color.NRGBA {
	return color.NRGBA{R: c.R + (0xff-c.R)/2, G: c.G + (0xff-c.G)/2, B: c.B + (0xff-c.B)/2, A: 0xff}
}

var recallColor = color.NRGBA{R: 0x2c, G: 0x2c, B: 0x2c, A: 0xff}

// Chart draws the sweep in format "svg" or "png": for each setting two
// stacked bars, TTFT p50 (left) and p95 (right, lighter), split by stage,
// and recall@k as a line against a second axis on the right.
func (r *Report) Chart(w io.Writer, format string) error {
	p, keys, err := r.plot()
	if err != nil {
		return err
	}
	height := chartHeight + legendHeight
	var c vg.CanvasWriterTo
	switch format {
	case "svg":
		c = vgsvg.New(chartWidth, height)
	case "png":
		c = vgimg.PngCanvas{Canvas: vgimg.NewWith(vgimg.UseWH(chartWidth, height), vgimg.UseDPI(144))}
	default:
		return fmt.Errorf("chart format must be svg or png, got %q", format)
	}
	dc := draw.New(c)
	p.Draw(draw.Crop(dc, 0, -rightMargin, legendHeight, 0))
	// The legend, in columns of legendRows entries, under the plot.
	strip := draw.Crop(dc, 0.8*vg.Inch, 0, 0.1*vg.Inch, -chartHeight)
	colWidth := (strip.Max.X - strip.Min.X) / 2
	for col := 0; col*legendRows < len(keys); col++ {
		l := plot.NewLegend()
		l.TextStyle = p.Legend.TextStyle
		l.Top, l.Left = true, true
		l.Padding = vg.Points(2)
		for _, k := range keys[col*legendRows : min((col+1)*legendRows, len(keys))] {
			l.Add(k.name, k.thumbs...)
		}
		l.Draw(draw.Crop(strip, vg.Length(col)*colWidth, 0, 0, 0))
	}
	if _, err := c.WriteTo(w); err != nil {
		return fmt.Errorf("writing the %s chart: %w", format, err)
	}
	return nil
}

// plot draws the chart's plot and returns it with its legend's entries,
// which Chart draws outside the plot.
func (r *Report) plot() (*plot.Plot, []legendItem, error) {
	p := plot.New()
	var keys []legendItem
	prompts := "each prompt unique after the system prompt (cold prefill)"
	if r.Params.WarmCache {
		prompts = "prompts repeated (--warm-cache: prefix-cache hits)"
	}
	p.Title.Text = fmt.Sprintf("TTFT by stage against top-k: left bar p50, right bar p95 (lighter)\n%d questions x %d runs, %s, sweep %s\n%s; under each k: prompt tokens cached",
		r.Params.Questions, r.Params.Runs, r.Mode, shortID(r.SweepID), prompts)
	p.X.Label.Text = "top_k"
	p.Y.Label.Text = "TTFT (ms)"
	p.Y.Min = 0

	labels := make([]string, len(r.Settings))
	varied := r.variedKnobs()
	maxMs := 0.0
	for i, s := range r.Settings {
		labels[i] = strconv.Itoa(s.TopK)
		if varied {
			labels[i] = fmt.Sprintf("%d\nrerank %d", s.TopK, s.RerankTopN)
			if s.MaxContextTokens > 0 {
				labels[i] += fmt.Sprintf("\nbudget %d", s.MaxContextTokens)
			}
		}
		labels[i] += "\ncached " + fmtShare(s.CachedShare)
		if s.MostlyCached() {
			labels[i] += " (!)"
		}
		maxMs = math.Max(maxMs, s.TTFTP95Ms)
	}
	if maxMs <= 0 {
		maxMs = 1
	}
	// The left axis tops out at a round number; recall 1.0 sits there on
	// the right axis. The legend is under the plot (Chart), not above.
	top := niceCeil(maxMs * 1.1)
	p.Y.Max = top * 1.05
	p.Y.Tick.Marker = quarterTicks{top: top}
	if rec := r.Recommendation.Setting; rec != nil {
		for i, s := range r.Settings {
			if s.Setting == *rec {
				labels[i] += "\n(recommended)"
			}
		}
	}
	p.NominalX(labels...)
	p.Add(plotter.NewGrid())

	barWidth := vg.Points(math.Min(22, 300/float64(max(1, len(r.Settings)))))
	for pi, pct := range []string{"p50", "p95"} {
		var below *plotter.BarChart
		for si := range stageColors {
			vals := make(plotter.Values, len(r.Settings))
			for i, s := range r.Settings {
				b := s.Stack50
				if pct == "p95" {
					b = s.Stack95
				}
				vals[i] = []float64{b.Retrieval, b.LLMConnect, b.LLMPrefill, b.Other}[si]
			}
			bar, err := plotter.NewBarChart(vals, barWidth)
			if err != nil {
				return nil, nil, fmt.Errorf("drawing the chart: %w", err)
			}
			bar.LineStyle.Width = vg.Length(0)
			bar.Color = stageColors[si]
			bar.Offset = -barWidth / 2
			if pi == 1 {
				bar.Color = lighter(stageColors[si])
				bar.Offset = barWidth / 2
			}
			if below != nil {
				bar.StackOn(below)
			}
			below = bar
			p.Add(bar)
			if pi == 0 {
				keys = append(keys, legendItem{stageNames[si], []plot.Thumbnailer{bar}})
			}
		}
	}

	// recall@k on the right axis, drawn on the left axis' scale.
	var pts plotter.XYs
	for i, s := range r.Settings {
		if s.Recall != nil {
			pts = append(pts, plotter.XY{X: float64(i), Y: *s.Recall * top})
		}
	}
	if len(pts) > 0 {
		line, points, err := plotter.NewLinePoints(pts)
		if err != nil {
			return nil, nil, fmt.Errorf("drawing the chart: %w", err)
		}
		line.Color, line.Width = recallColor, vg.Points(2)
		points.Color, points.Shape, points.Radius = recallColor, draw.CircleGlyph{}, vg.Points(3.5)
		if varied {
			// Neighbours differ in more than k: a line between them would
			// suggest a trend that is not there.
			p.Add(points)
			keys = append(keys, legendItem{"recall@k (right axis)", []plot.Thumbnailer{points}})
		} else {
			p.Add(line, points)
			keys = append(keys, legendItem{"recall@k (right axis)", []plot.Thumbnailer{line, points}})
		}
		p.Add(&rightAxis{scale: top, label: "recall@k (documents in the context)", style: p.Y.Tick.Label, labelStyle: p.Y.Label.TextStyle})
	}
	if r.Params.TTFTBudgetMs > 0 && r.Params.TTFTBudgetMs < p.Y.Max {
		budget, err := plotter.NewLine(plotter.XYs{{X: -0.6, Y: r.Params.TTFTBudgetMs}, {X: float64(len(r.Settings)) - 0.4, Y: r.Params.TTFTBudgetMs}})
		if err != nil {
			return nil, nil, fmt.Errorf("drawing the chart: %w", err)
		}
		budget.Color, budget.Width, budget.Dashes = recallColor, vg.Points(1), []vg.Length{vg.Points(6), vg.Points(4)}
		p.Add(budget)
		keys = append(keys, legendItem{fmt.Sprintf("TTFT p95 budget (%g ms)", r.Params.TTFTBudgetMs), []plot.Thumbnailer{budget}})
	}
	// Room for the outer bars of the first and last groups.
	p.X.Min, p.X.Max = -0.6, float64(len(r.Settings))-0.4
	return p, keys, nil
}

// variedKnobs reports whether two settings share a top_k, so the x labels
// must name the other knobs too.
func (r *Report) variedKnobs() bool {
	seen := map[int]bool{}
	for _, s := range r.Settings {
		if seen[s.TopK] {
			return true
		}
		seen[s.TopK] = true
	}
	return false
}

// quarterTicks labels the left axis at quarters of top, so its grid lines
// meet the right axis' 0, 0.25, ... 1 marks.
type quarterTicks struct{ top float64 }

func (q quarterTicks) Ticks(lo, hi float64) []plot.Tick {
	var ts []plot.Tick
	for i := range 5 {
		v := q.top * float64(i) / 4
		ts = append(ts, plot.Tick{Value: v, Label: strconv.FormatFloat(v, 'f', -1, 64)})
		if i < 4 {
			ts = append(ts, plot.Tick{Value: v + q.top/8})
		}
	}
	return ts
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

// rightAxis draws a 0..1 axis on the right edge of the data area, for a
// series plotted as value×scale on the left axis. gonum/plot has no second
// axis, so this plotter draws one in the margin Chart leaves free.
type rightAxis struct {
	scale      float64
	label      string
	style      draw.TextStyle
	labelStyle draw.TextStyle
}

func (a *rightAxis) Plot(c draw.Canvas, plt *plot.Plot) {
	_, trY := plt.Transforms(&c)
	x := c.Max.X
	ls := draw.LineStyle{Color: color.Black, Width: vg.Points(0.5)}
	c.StrokeLine2(ls, x, c.Min.Y, x, trY(a.scale))
	sty := a.style
	sty.XAlign, sty.YAlign = draw.XLeft, draw.YCenter
	widest := vg.Length(0)
	for _, v := range []float64{0, 0.25, 0.5, 0.75, 1} {
		y := trY(v * a.scale)
		c.StrokeLine2(ls, x, y, x+vg.Points(4), y)
		txt := strconv.FormatFloat(v, 'f', 2, 64)
		c.FillText(sty, vg.Point{X: x + vg.Points(6), Y: y}, txt)
		widest = max(widest, sty.Width(txt))
	}
	lsty := a.labelStyle
	lsty.Rotation = -math.Pi / 2
	// Turned clockwise, the text's bottom faces right: YBottom puts it to
	// the right of the anchor.
	lsty.XAlign, lsty.YAlign = draw.XCenter, draw.YBottom
	c.FillText(lsty, vg.Point{X: x + vg.Points(10) + widest, Y: (c.Min.Y + c.Max.Y) / 2}, a.label)
}
