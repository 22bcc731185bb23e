package dashboard

import (
	"html/template"
	"math"
	"slices"
	"sort"
)

// panel is one chart of the run page, drawn once per agent.
type panel struct {
	metric string // data-metric of the chart
	title  string
	yLabel string // with units
	fields string // the file fields it draws, for the "no data yet" note
	zeroY  bool
	y      Range // fixed Y range, if any
	// stacked stacks the series (time per phase).
	stacked bool
	// order is the preferred order of the series; others follow sorted.
	order []string
	// values reports the step's value of each series.
	values func(s *Step, put func(series string, v float64))
	// band, when set, draws mean ± std around the series "mean".
	band func(s *Step) (lo, hi float64, ok bool)
}

// section is a heading of the run page and its panels.
type section struct {
	title  string
	panels []panel
}

func stat(name string) func(*Step, func(string, float64)) {
	return func(s *Step, put func(string, float64)) {
		if v, ok := s.Stats[name]; ok {
			put(name, v)
		}
	}
}

func field(series string, get func(*Step) *float64) func(*Step, func(string, float64)) {
	return func(s *Step, put func(string, float64)) {
		if p := get(s); p != nil {
			put(series, *p)
		}
	}
}

func each(get func(*Step) map[string]float64) func(*Step, func(string, float64)) {
	return func(s *Step, put func(string, float64)) {
		for k, v := range get(s) {
			put(k, v)
		}
	}
}

// sections are the panels of the run page, in order.
var sections = []section{
	{"Reward", []panel{
		{metric: "reward", title: "Reward (mean ± std)", yLabel: "reward", fields: "reward_mean, reward_std",
			values: field("mean", func(s *Step) *float64 { return s.RewardMean }),
			band: func(s *Step) (float64, float64, bool) {
				if s.RewardMean == nil || s.RewardStd == nil {
					return 0, 0, false
				}
				return *s.RewardMean - *s.RewardStd, *s.RewardMean + *s.RewardStd, true
			}},
		{metric: "reward_components", title: "Reward components (mean)", yLabel: "reward", fields: "reward_components",
			values: each(func(s *Step) map[string]float64 { return s.RewardComponents })},
	}},
	{"Optimisation", []panel{
		{metric: "loss", title: "Loss", yLabel: "loss", fields: "stats.Loss", values: stat("Loss")},
		{metric: "kl", title: "KL to the reference", yLabel: "nats per token", fields: "stats.KL", zeroY: true, values: stat("KL")},
		{metric: "entropy", title: "Entropy", yLabel: "nats per token", fields: "stats.Entropy", zeroY: true, values: stat("Entropy")},
		{metric: "clip_frac", title: "Clip fraction", yLabel: "fraction of tokens", fields: "stats.ClipFrac", zeroY: true, values: stat("ClipFrac")},
		{metric: "grad_norm", title: "Gradient norm (before clipping)", yLabel: "L2 norm", fields: "stats.GradNorm", zeroY: true, values: stat("GradNorm")},
	}},
	{"Rollouts", []panel{
		{metric: "completion_tokens", title: "Completion length (mean)", yLabel: "tokens", fields: "completion_tokens_mean", zeroY: true,
			values: field("tokens", func(s *Step) *float64 { return s.CompletionTokensMean })},
		{metric: "zero_spread", title: "Groups with zero reward spread", yLabel: "fraction of groups", fields: "zero_spread_groups", y: Range{0, 1},
			values: field("zero spread", func(s *Step) *float64 { return s.ZeroSpreadGroups })},
		{metric: "phase", title: "Time per phase (stacked)", yLabel: "seconds", fields: "phase_s", stacked: true,
			order: []string{"rollout", "train", "sync"}, values: each(func(s *Step) map[string]float64 { return s.PhaseS })},
		{metric: "tokens_per_s", title: "Engine throughput", yLabel: "tokens/s", fields: "tokens_per_s", zeroY: true,
			values: field("tokens/s", func(s *Step) *float64 { return s.TokensPerS })},
		{metric: "staleness", title: "Staleness of the samples", yLabel: "adapter versions behind", fields: "staleness_mean, staleness_max", zeroY: true,
			order: []string{"mean", "max"}, values: func(s *Step, put func(string, float64)) {
				if s.StalenessMean != nil {
					put("mean", *s.StalenessMean)
				} else if v, ok := s.Stats["Staleness"]; ok {
					put("mean", v)
				}
				if s.StalenessMax != nil {
					put("max", *s.StalenessMax)
				}
			}},
	}},
	{"Episodes", []panel{
		{metric: "episodes", title: "Episodes by state (cumulative)", yLabel: "episodes", fields: "episodes_by_state", zeroY: true,
			order: []string{"claimed", "ended", "open"},
			values: func(s *Step, put func(string, float64)) {
				if e := s.EpisodesByState; e != nil {
					put("claimed", float64(e.Claimed))
					put("ended", float64(e.Ended))
					put("open", float64(e.Open))
				}
			}},
		{metric: "episodes_lost", title: "Episodes never trained (cumulative)", yLabel: "episodes", fields: "episodes_by_state", zeroY: true,
			order: []string{"aborted", "expired"},
			values: func(s *Step, put func(string, float64)) {
				e := s.EpisodesByState
				if e == nil {
					return
				}
				put("aborted", float64(e.Aborted))
				put("expired", float64(e.Expired))
				for reason, n := range e.Dropped {
					put("dropped: "+reason, float64(n))
				}
			}},
	}},
	{"Team", []panel{
		{metric: "team_episodes", title: "Team episodes per step", yLabel: "team episodes", fields: "team_ids", zeroY: true,
			values: func(s *Step, put func(string, float64)) {
				if s.TeamIDs == nil {
					return
				}
				ids := slices.DeleteFunc(slices.Clone(s.TeamIDs), func(id string) bool { return id == "" }) // "": an episode of no team
				slices.Sort(ids)
				put("team episodes", float64(len(slices.Compact(ids))))
			}},
		{metric: "credit", title: "Credit: the agent's share of the team reward", yLabel: "share", fields: "credit",
			order: []string{"shared", "own"}, values: each(func(s *Step) map[string]float64 { return s.Credit })},
	}},
}

// seriesOf is the named series of p over rows, all with X = the steps.
func (p *panel) seriesOf(rows []Step) (x []float64, ys map[string][]float64, lo, hi []float64) {
	x = make([]float64, len(rows))
	ys = make(map[string][]float64)
	for i := range rows {
		s := &rows[i]
		x[i] = float64(s.Step)
		p.values(s, func(name string, v float64) {
			if isNaN(v) || math.IsInf(v, 0) {
				return
			}
			y, ok := ys[name]
			if !ok {
				y = nanSlice(len(rows))
				ys[name] = y
			}
			y[i] = v
		})
		if p.band != nil {
			if l, h, ok := p.band(s); ok {
				if lo == nil {
					lo, hi = nanSlice(len(rows)), nanSlice(len(rows))
				}
				lo[i], hi[i] = l, h
			}
		}
	}
	return x, ys, lo, hi
}

func nanSlice(n int) []float64 {
	v := make([]float64, n)
	for i := range v {
		v[i] = math.NaN()
	}
	return v
}

// panelView is one panel as the page shows it: a cell per agent.
type panelView struct {
	Metric, Title, Fields string
	HasData               bool
	Cells                 []cellView
}

// cellView is one agent's chart of a panel, or its note when the agent
// has no data for it.
type cellView struct {
	Agent, Name string
	SVG         template.HTML
}

// render draws p for each agent with a shared X range (the run's steps)
// and a shared Y range, so that the agents side by side compare at a
// glance. rows[i] are the rows of agents[i].
func (p *panel) render(agents []agentView, rows [][]Step, xr Range, maxPoints int) panelView {
	view := panelView{Metric: p.metric, Title: p.title, Fields: p.fields}
	type built struct {
		chart *Chart
		has   bool
	}
	charts := make([]built, len(agents))
	var names []string
	perAgent := make([]map[string][]float64, len(agents))
	xs := make([][]float64, len(agents))
	los, his := make([][]float64, len(agents)), make([][]float64, len(agents))
	for i := range agents {
		xs[i], perAgent[i], los[i], his[i] = p.seriesOf(rows[i])
		for name := range perAgent[i] {
			if !slices.Contains(names, name) {
				names = append(names, name)
			}
		}
	}
	// The same series in the same order and colour in every agent's chart.
	sort.Slice(names, func(a, b int) bool {
		ia, ib := slices.Index(p.order, names[a]), slices.Index(p.order, names[b])
		switch {
		case ia >= 0 && ib >= 0:
			return ia < ib
		case ia >= 0 || ib >= 0:
			return ia >= 0
		}
		return names[a] < names[b]
	})
	yr := Range{math.Inf(1), math.Inf(-1)}
	for i, a := range agents {
		c := &Chart{
			Title: p.title + " · " + a.Name, XLabel: "global step", YLabel: p.yLabel,
			X: xr, Y: p.y, ZeroY: p.zeroY, Stacked: p.stacked,
			Agent: a.Key, Metric: p.metric, MaxPoints: maxPoints,
		}
		for k, name := range names {
			y, ok := perAgent[i][name]
			if !ok {
				y = nanSlice(len(xs[i]))
			} else {
				charts[i].has = true
			}
			s := Series{Name: name, X: xs[i], Y: y, Color: Palette[k%len(Palette)]}
			if name == "mean" && los[i] != nil {
				s.Lo, s.Hi = los[i], his[i]
			}
			c.Series = append(c.Series, s)
		}
		charts[i].chart = c
		if charts[i].has && !p.y.valid() {
			_, r := c.ranges(c.prepared())
			yr = Range{min(yr.Min, r.Min), max(yr.Max, r.Max)}
		}
		view.HasData = view.HasData || charts[i].has
	}
	legendRows := 0
	for _, c := range charts {
		if c.has {
			legendRows = max(legendRows, c.chart.legendHeight())
		}
	}
	for i, a := range agents {
		cell := cellView{Agent: a.Key, Name: a.Name}
		charts[i].chart.legendRows = legendRows
		if charts[i].has {
			if yr.valid() {
				charts[i].chart.Y = yr
			}
			cell.SVG = template.HTML(charts[i].chart.String()) // escaped by Chart
		}
		view.Cells = append(view.Cells, cell)
	}
	return view
}
