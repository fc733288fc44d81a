package runner

import (
	"fmt"
	"math"
	"os"
	"strconv"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgimg"

	"github.com/pilotwire/pilotwire/bench/internal/stats"
)

// chartSteps are the steps drawn, one panel each.
var chartSteps = []struct{ step, title string }{
	{StepEndpoint, "One endpoint changed"},
	{StepService, "One service added"},
	{StepRestart, "Rolling restart (from the last write)"},
	{StepReconnect, "All proxies reconnect"},
}

// WritePNG draws, for one configuration, the distribution (CDF) of
// per-proxy convergence times of each system in each step of the trace,
// pooled over the measured rounds, on a log time axis.
func (r *Report) WritePNG(path string, c *ConfigResult) error {
	const rows, cols = 2, 2
	plots := make([][]*plot.Plot, rows)
	for i := range plots {
		plots[i] = make([]*plot.Plot, cols)
	}
	for i, cs := range chartSteps {
		p := plot.New()
		p.Title.Text = fmt.Sprintf("%s — %d proxies, mesh %s", cs.title, c.Proxies, c.Mesh)
		p.X.Label.Text = "convergence time (ms, log scale)"
		p.Y.Label.Text = "fraction of proxies"
		p.X.Scale = plot.LogScale{}
		p.X.Tick.Marker = logTicks{}
		p.Y.Min, p.Y.Max = 0, 1
		p.Add(plotter.NewGrid())
		p.Legend.Top = false
		p.Legend.Left = false
		lo, hi := math.Inf(1), math.Inf(-1)
		for si, sys := range r.Settings.Systems {
			times := c.pooledTimes(sys, cs.step)
			if len(times) == 0 {
				continue
			}
			xs, ys := stats.CDF(times)
			pts := make(plotter.XYs, len(xs))
			for k := range xs {
				ms := math.Max(xs[k]*1000, 0.1)
				pts[k] = plotter.XY{X: ms, Y: ys[k]}
				lo, hi = math.Min(lo, ms), math.Max(hi, ms)
			}
			line, err := plotter.NewLine(pts)
			if err != nil {
				return err
			}
			line.Color = plotutil.Color(si)
			line.Width = vg.Points(2)
			p.Add(line)
			p.Legend.Add(fmt.Sprintf("%s (p99 of all rounds %s)", sys, fmtSec(stats.Percentile(times, 99))), line)
		}
		if math.IsInf(lo, 0) {
			lo, hi = 1, 10
		}
		p.X.Min, p.X.Max = math.Pow(10, math.Floor(math.Log10(lo))), math.Pow(10, math.Ceil(math.Log10(hi*1.01)))
		plots[i/cols][i%cols] = p
	}
	img := vgimg.NewWith(vgimg.UseWH(14*vg.Inch, 9*vg.Inch), vgimg.UseDPI(96))
	dc := draw.New(img)
	tiles := draw.Tiles{Rows: rows, Cols: cols, PadX: vg.Centimeter, PadY: vg.Centimeter,
		PadTop: vg.Points(8), PadBottom: vg.Points(8), PadLeft: vg.Points(8), PadRight: vg.Points(8)}
	canvases := plot.Align(plots, tiles, dc)
	for i := range plots {
		for j := range plots[i] {
			if plots[i][j] != nil {
				plots[i][j].Draw(canvases[i][j])
			}
		}
	}
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if _, err := (vgimg.PngCanvas{Canvas: img}).WriteTo(f); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// logTicks labels 1, 2 and 5 of every decade of a log axis.
type logTicks struct{}

func (logTicks) Ticks(lo, hi float64) []plot.Tick {
	var ticks []plot.Tick
	for d := math.Pow(10, math.Floor(math.Log10(lo))); d <= hi; d *= 10 {
		for i := 1; i < 10; i++ {
			v := d * float64(i)
			if v < lo || v > hi {
				continue
			}
			t := plot.Tick{Value: v}
			if i == 1 || i == 2 || i == 5 {
				t.Label = strconv.FormatFloat(v, 'g', -1, 64)
			}
			ticks = append(ticks, t)
		}
	}
	return ticks
}
