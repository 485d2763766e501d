package contrib

import (
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"regexp"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/flotilla/flotilla/internal/metrics"
)

const (
	alertsFile    = "monitoring/alerts.yaml"
	dashboardFile = "monitoring/dashboard.json"
)

// fromPrometheus are series Prometheus makes itself, not the daemon.
var fromPrometheus = []string{"up"}

// exportedSeries returns every series name a daemon's /metrics can hold:
// counters and gauges by name, histograms and summaries by their _bucket,
// _sum and _count series.
func exportedSeries(t *testing.T) map[string]bool {
	t.Helper()
	fams, err := metrics.Families()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]bool{}
	for _, n := range fromPrometheus {
		out[n] = true
	}
	for name, typ := range fams {
		switch typ {
		case "histogram":
			out[name+"_bucket"], out[name+"_sum"], out[name+"_count"] = true, true, true
		case "summary":
			out[name], out[name+"_sum"], out[name+"_count"] = true, true, true
		default:
			out[name] = true
		}
	}
	return out
}

// promqlWords are PromQL's keywords that are not followed by a '(' list.
var promqlWords = map[string]bool{"and": true, "or": true, "unless": true, "offset": true, "bool": true, "inf": true, "nan": true, "atan2": true}

// aggregations may be followed by by (...) or without (...) before their
// parenthesized argument.
var aggregations = map[string]bool{"sum": true, "min": true, "max": true, "avg": true, "group": true, "stddev": true, "stdvar": true,
	"count": true, "count_values": true, "bottomk": true, "topk": true, "quantile": true, "limitk": true, "limit_ratio": true}

// labelLists are the PromQL words followed by a parenthesized list of label
// names rather than by an expression.
var labelLists = map[string]bool{"by": true, "without": true, "on": true, "ignoring": true, "group_left": true, "group_right": true}

// metricNames returns the metric names a PromQL expression selects: its
// identifiers that are not functions, keywords, label names in {...},
// by (...) and the like, durations in [...], strings or numbers.
func metricNames(expr string) []string {
	var names []string
	isIdentStart := func(c byte) bool { return c == '_' || c == ':' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' }
	isIdent := func(c byte) bool { return isIdentStart(c) || c >= '0' && c <= '9' }
	skipTo := func(i int, end byte) int {
		for i < len(expr) && expr[i] != end {
			if expr[i] == '"' || expr[i] == '\'' || expr[i] == '`' {
				q := expr[i]
				for i++; i < len(expr) && expr[i] != q; i++ {
					if expr[i] == '\\' {
						i++
					}
				}
			}
			i++
		}
		return i
	}
	for i := 0; i < len(expr); {
		c := expr[i]
		switch {
		case c == '"' || c == '\'' || c == '`':
			i = skipTo(i+1, c) + 1
		case c == '{':
			i = skipTo(i+1, '}') + 1
		case c == '[':
			i = skipTo(i+1, ']') + 1
		case c == '$': // a dashboard variable
			for i++; i < len(expr) && isIdent(expr[i]); i++ {
			}
		case c >= '0' && c <= '9' || c == '.':
			for i++; i < len(expr) && (isIdent(expr[i]) || expr[i] == '.'); i++ {
			}
		case isIdentStart(c):
			j := i
			for j < len(expr) && isIdent(expr[j]) {
				j++
			}
			word := expr[i:j]
			k := j
			for k < len(expr) && (expr[k] == ' ' || expr[k] == '\n' || expr[k] == '\t') {
				k++
			}
			switch {
			case labelLists[strings.ToLower(word)]:
				if k < len(expr) && expr[k] == '(' {
					k = skipTo(k+1, ')') + 1
				}
				i = k
				continue
			case promqlWords[strings.ToLower(word)], aggregations[strings.ToLower(word)]:
			case k < len(expr) && expr[k] == '(':
				// a function or an aggregation
			default:
				names = append(names, word)
			}
			i = j
		default:
			i++
		}
	}
	return names
}

var labelValuesRE = regexp.MustCompile(`^\s*label_values\((.*),\s*[A-Za-z_][A-Za-z0-9_]*\s*\)\s*$`)

// unknownMetrics returns the metric names of expr that are not in known.
// A Grafana label_values(expr, label) query counts as its expr.
func unknownMetrics(expr string, known map[string]bool) []string {
	if m := labelValuesRE.FindStringSubmatch(expr); m != nil {
		expr = m[1]
	}
	var out []string
	for _, n := range metricNames(expr) {
		if !known[n] && !slices.Contains(out, n) {
			out = append(out, n)
		}
	}
	return out
}

func TestMetricNames(t *testing.T) {
	for _, tc := range []struct {
		expr string
		want []string
	}{
		{`up{job="flotilla"} == 0`, []string{"up"}},
		{`histogram_quantile(0.99, sum by (le, kind) (rate(flotilla_etcd_request_duration_seconds_bucket{job="$job"}[$__rate_interval]))) > 0.5`,
			[]string{"flotilla_etcd_request_duration_seconds_bucket"}},
		{`max(a{x="y"} and on (instance) b == 1) < max(max_over_time(c[1h] offset 5m))`, []string{"a", "b", "c"}},
		{`sum(rate(x_total{code!~"OK|Canceled"}[5m])) by (instance) / ignoring(code) group_left sum(y) * 1e3`, []string{"x_total", "y"}},
		{`(max(flotilla_is_leader) or vector(0)) == 0`, []string{"flotilla_is_leader"}},
		{"sum without (x)\n  (m1) / count by (y) (m2)", []string{"m1", "m2"}},
	} {
		if got := metricNames(tc.expr); !slices.Equal(got, tc.want) {
			t.Errorf("metricNames(%q) = %q, want %q", tc.expr, got, tc.want)
		}
	}
	known := exportedSeries(t)
	if got := unknownMetrics(`rate(flotilla_no_such_thing_total[5m]) / rate(flotilla_leader_changes_total[5m])`, known); !slices.Equal(got, []string{"flotilla_no_such_thing_total"}) {
		t.Errorf("unknownMetrics found %q, want the one metric the daemon does not export", got)
	}
	if got := unknownMetrics(`label_values(flotilla_build_info{job="$job"}, instance)`, known); got != nil {
		t.Errorf("unknownMetrics(label_values(...)) = %q, want none", got)
	}
}

type ruleFile struct {
	Groups []struct {
		Name  string `yaml:"name"`
		Rules []struct {
			Alert       string            `yaml:"alert"`
			Expr        string            `yaml:"expr"`
			For         string            `yaml:"for"`
			Labels      map[string]string `yaml:"labels"`
			Annotations map[string]string `yaml:"annotations"`
		} `yaml:"rules"`
	} `yaml:"groups"`
}

// TestAlertRules: the rules cover what an operator must hear about, and
// use only metrics a daemon exports.
func TestAlertRules(t *testing.T) {
	b, err := os.ReadFile(alertsFile)
	if err != nil {
		t.Fatal(err)
	}
	var rf ruleFile
	if err := yaml.Unmarshal(b, &rf); err != nil {
		t.Fatalf("%s: %v", alertsFile, err)
	}
	known := exportedSeries(t)
	var alerts []string
	for _, g := range rf.Groups {
		for _, r := range g.Rules {
			alerts = append(alerts, r.Alert)
			if r.Expr == "" || r.Labels["severity"] == "" || r.Annotations["summary"] == "" || r.Annotations["description"] == "" {
				t.Errorf("alert %s: want expr, a severity label, a summary and a description", r.Alert)
			}
			if bad := unknownMetrics(r.Expr, known); bad != nil {
				t.Errorf("alert %s uses metrics no daemon exports: %s", r.Alert, strings.Join(bad, ", "))
			}
		}
	}
	for _, want := range []string{"FlotillaNoLeader", "FlotillaLeaderChanges", "FlotillaUnitsUnplaced", "FlotillaAgentsLost",
		"FlotillaEtcdErrors", "FlotillaEtcdSlow", "FlotillaStateSlow"} {
		if !slices.Contains(alerts, want) {
			t.Errorf("%s has no alert %s (has %s)", alertsFile, want, strings.Join(alerts, ", "))
		}
	}
}

// TestAlertRulesPromtool runs promtool check rules (Debian's prometheus
// package has it).
func TestAlertRulesPromtool(t *testing.T) {
	promtool, err := exec.LookPath("promtool")
	if err != nil {
		t.Skip("promtool is not installed (apt-get install prometheus)")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if out, err := exec.CommandContext(ctx, promtool, "check", "rules", alertsFile).CombinedOutput(); err != nil {
		t.Errorf("promtool check rules %s: %v\n%s", alertsFile, err, out)
	}
}

// TestDashboard: the dashboard is Grafana JSON whose every query (panels,
// template variables, annotations) uses only metrics a daemon exports.
func TestDashboard(t *testing.T) {
	b, err := os.ReadFile(dashboardFile)
	if err != nil {
		t.Fatal(err)
	}
	var dash struct {
		Title  string `json:"title"`
		UID    string `json:"uid"`
		Panels []struct {
			Title   string `json:"title"`
			Type    string `json:"type"`
			Targets []struct {
				Expr string `json:"expr"`
			} `json:"targets"`
		} `json:"panels"`
		Templating struct {
			List []struct {
				Name       string `json:"name"`
				Definition string `json:"definition"`
			} `json:"list"`
		} `json:"templating"`
		Annotations struct {
			List []struct {
				Name string `json:"name"`
				Expr string `json:"expr"`
			} `json:"list"`
		} `json:"annotations"`
	}
	if err := json.Unmarshal(b, &dash); err != nil {
		t.Fatalf("%s: %v", dashboardFile, err)
	}
	if dash.Title == "" || dash.UID == "" {
		t.Errorf("%s: want a title and a uid", dashboardFile)
	}
	known := exportedSeries(t)
	queries := map[string]string{} // where -> expr
	for _, p := range dash.Panels {
		if p.Type != "row" && len(p.Targets) == 0 {
			t.Errorf("panel %q has no query", p.Title)
		}
		for i, tg := range p.Targets {
			queries["panel "+p.Title+" query "+string(rune('A'+i))] = tg.Expr
		}
	}
	for _, v := range dash.Templating.List {
		if v.Definition != "" {
			queries["variable "+v.Name] = v.Definition
		}
	}
	for _, a := range dash.Annotations.List {
		queries["annotation "+a.Name] = a.Expr
	}
	used := map[string]bool{}
	for where, expr := range queries {
		if bad := unknownMetrics(expr, known); bad != nil {
			t.Errorf("%s uses metrics no daemon exports: %s", where, strings.Join(bad, ", "))
		}
		for _, n := range metricNames(expr) {
			used[n] = true
		}
	}
	// The dashboard shows each of Flotilla's own metrics.
	fams, _ := metrics.Families()
	var unshown []string
	for name := range fams {
		if !strings.HasPrefix(name, "flotilla_") {
			continue
		}
		if !used[name] && !used[name+"_bucket"] && !used[name+"_count"] && !used[name+"_sum"] {
			unshown = append(unshown, name)
		}
	}
	sort.Strings(unshown)
	if unshown != nil {
		t.Errorf("%s shows no panel of %s", dashboardFile, strings.Join(unshown, ", "))
	}
}
