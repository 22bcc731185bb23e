package dashboard

import (
	"bytes"
	"cmp"
	"context"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"time"
)

// agentView is an agent's header on the run page.
type agentView struct {
	AgentInfo
	Drops      []Dropped // the latest, newest first
	DropCounts []reasonCount
}

type reasonCount struct {
	Reason string
	N      int64
}

// runView is what the run page shows.
type runView struct {
	Title, ID, Dir string
	Base           string // the run page's URL path, ending in "/"
	Static         string // the URL path of the embedded files, ending in "/"
	Events         string // the event stream's URL path
	Rev            uint64
	Step           int64
	Agents         []agentView
	Sections       []sectionView
	Error          string
	Now            time.Time
	// Servers lists the swarm servers (Config.Servers); ServersError says
	// why they could not be read.
	Servers      []ServerInfo
	ServersError string
}

type sectionView struct {
	Title  string
	Panels []panelView
}

// shownDrops is how many of the latest dropped episodes the page lists.
const shownDrops = 8

// view builds the run page of rn; it draws every chart.
func (s *Server) view(rn *run, mount string) runView {
	rn.mu.Lock()
	info := s.info(rn, false, 0)
	rows := make([][]Step, len(rn.agents))
	agents := make([]agentView, len(rn.agents))
	for i, a := range rn.agents {
		rows[i] = slices.Clone(a.steps)
		av := agentView{AgentInfo: info.Agents[i]}
		for j := len(a.drops) - 1; j >= 0 && len(av.Drops) < shownDrops; j-- {
			av.Drops = append(av.Drops, a.drops[j])
		}
		for reason, n := range a.dropCounts {
			av.DropCounts = append(av.DropCounts, reasonCount{reason, n})
		}
		slices.SortFunc(av.DropCounts, func(x, y reasonCount) int { return cmp.Or(cmp.Compare(y.N, x.N), cmp.Compare(x.Reason, y.Reason)) })
		agents[i] = av
	}
	rn.mu.Unlock()

	base := mount + "/run/" + url.PathEscape(rn.id) + "/"
	v := runView{Title: s.cfg.Title, ID: rn.id, Dir: info.Dir, Base: base, Static: mount + "/static/",
		Events: mount + "/api/run/" + url.PathEscape(rn.id) + "/events",
		Rev:    info.Rev, Step: info.Step, Agents: agents, Error: info.Error, Now: time.Now()}
	v.Servers, v.ServersError = s.servers()
	if v.Dir != "." {
		v.Title += " / " + v.Dir
	}
	// One X range for every chart: the run's steps.
	xr := Range{}
	first := true
	for _, r := range rows {
		if len(r) == 0 {
			continue
		}
		lo, hi := float64(r[0].Step), float64(r[len(r)-1].Step)
		if first {
			xr, first = Range{lo, hi}, false
		}
		xr = Range{min(xr.Min, lo), max(xr.Max, hi)}
	}
	if !first {
		xr = widen(xr, 1)
	}
	for _, sec := range sections {
		sv := sectionView{Title: sec.title}
		for i := range sec.panels {
			sv.Panels = append(sv.Panels, sec.panels[i].render(agents, rows, xr, s.cfg.MaxPoints))
		}
		v.Sections = append(v.Sections, sv)
	}
	return v
}

// render executes the template name into w, or writes a 500.
func (s *Server) render(w http.ResponseWriter, name string, data any) {
	var b bytes.Buffer
	if err := s.pages.ExecuteTemplate(&b, name, data); err != nil {
		s.log.Error("dashboard: rendering a page failed", "template", name, "err", err)
		http.Error(w, "rendering the page failed", http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	_, _ = w.Write(b.Bytes())
}

// index is the run list, or the run page when the directory holds one run.
func (s *Server) index(w http.ResponseWriter, r *http.Request) {
	runs := s.runList()
	if len(runs) == 1 {
		s.refresh(runs[0], 0)
		s.render(w, "run.html", s.view(runs[0], s.mount(r)))
		return
	}
	type entry struct {
		RunInfo
		Base string
	}
	var list struct {
		Title, Dir, Static string
		Runs               []entry
	}
	mount := s.mount(r)
	list.Title, list.Dir, list.Static = s.cfg.Title, s.root, mount+"/static/"
	for _, rn := range runs {
		s.refresh(rn, s.cfg.PollInterval)
		rn.mu.Lock()
		list.Runs = append(list.Runs, entry{s.info(rn, false, 0), mount + "/run/" + url.PathEscape(rn.id) + "/"})
		rn.mu.Unlock()
	}
	s.render(w, "runs.html", list)
}

func (s *Server) runPage(w http.ResponseWriter, r *http.Request) {
	if rn := s.lookup(w, r); rn != nil {
		s.render(w, "run.html", s.view(rn, s.mount(r)))
	}
}

// chartsFragment is the run page's live part, which the page's script
// fetches again when the event stream reports new rows.
func (s *Server) chartsFragment(w http.ResponseWriter, r *http.Request) {
	if rn := s.lookup(w, r); rn != nil {
		s.render(w, "charts", s.view(rn, s.mount(r)))
	}
}

// stepFragment is the drill-down of one agent's step as HTML.
func (s *Server) stepFragment(w http.ResponseWriter, r *http.Request) {
	if d, ok := s.stepDetail(w, r); ok {
		s.render(w, "step", d)
	}
}

// servers reads Config.Servers, bounded by two seconds.
func (s *Server) servers() ([]ServerInfo, string) {
	if s.cfg.Servers == nil {
		return nil, ""
	}
	ctx, cancel := context.WithTimeout(s.ctx, 2*time.Second)
	defer cancel()
	list, err := s.cfg.Servers(ctx)
	if err != nil {
		return nil, err.Error()
	}
	return list, ""
}

func (s *Server) apiServers(w http.ResponseWriter, r *http.Request) {
	list, errMsg := s.servers()
	if errMsg != "" {
		http.Error(w, errMsg, http.StatusBadGateway)
		return
	}
	if list == nil {
		list = []ServerInfo{}
	}
	writeJSON(w, list)
}

// mount is the path prefix the request reached the dashboard under.
func (s *Server) mount(r *http.Request) string {
	if s.cfg.Mount == nil {
		return ""
	}
	return strings.TrimRight(s.cfg.Mount(r), "/")
}
