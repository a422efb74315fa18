package systemtest

import (
	"io"
	"net/http"
	"os"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/orderly-dev/orderly/internal/natsserver"
	"github.com/orderly-dev/orderly/internal/orderlytest"
	"github.com/orderly-dev/orderly/internal/server"
)

// TestDocumentedMetricsAreExposed: every metric that the alert rules
// (deploy/prometheus/alerts.yml), the operations guide's metrics table and the
// README name is exposed by a running orderly serve (with every role). An alert on a metric
// that does not exist never fires, and nothing says so.
func TestDocumentedMetricsAreExposed(t *testing.T) {
	t.Parallel()
	inst := startWithEveryRole(t)

	named := orderlytest.NamesIn(t, regexp.MustCompile(`\borderly_[a-z_]*[a-z]\b`),
		"../../deploy/prometheus/alerts.yml", "../../docs/operations.md", "../../README.md")
	if len(named) < 15 {
		t.Fatalf("only %d metric names found in the docs: the extraction is broken", len(named))
	}

	var exposed map[string]bool
	orderlytest.Eventually(t, 10*time.Second, "the pipeline's counters", func() bool {
		exposed, _ = scrape(t, inst.URL+"/metrics")
		return exposed["orderly_pipeline_messages_total"] && exposed["orderly_commands_decided_total"]
	})
	for name, files := range named {
		base := name
		for _, suffix := range []string{"_bucket", "_sum", "_count"} {
			if b, ok := strings.CutSuffix(name, suffix); ok && exposed[b] {
				base = b
			}
		}
		if strings.HasPrefix(name, "orderly_nats_server_process_") && inst.Cfg.NATSProcess == natsserver.InProcess {
			continue // the child process's own metrics; there is none here
		}
		if !exposed[base] {
			t.Errorf("%s (named in %s) is not exposed by orderly serve", name, strings.Join(files, ", "))
		}
	}
}

// TestAlertSelectorsMatchExposedSeries: every label matcher in the alert
// rules names a label the metric has and, for an equality, a value it is
// exposed with from the start. A series that appears only when first counted
// shows Prometheus no increase for that first count, so an alert on
// increase() or rate() would miss it; HTTP status codes are the exception
// (one series per code answered).
func TestAlertSelectorsMatchExposedSeries(t *testing.T) {
	t.Parallel()
	inst := startWithEveryRole(t)
	rules, err := os.ReadFile("../../deploy/prometheus/alerts.yml")
	if err != nil {
		t.Fatal(err)
	}
	selector := regexp.MustCompile(`\b(orderly_[a-z_]*[a-z])\{([^}]*)\}`)
	matcher := regexp.MustCompile(`([a-z_]+)\s*(=~|!=|!~|=)\s*"([^"]*)"`)
	var series map[string][]map[string]string
	orderlytest.Eventually(t, 10*time.Second, "the pipeline's counters", func() bool {
		_, series = scrape(t, inst.URL+"/metrics")
		return len(series["orderly_pipeline_messages_total"]) > 0
	})
	checked := 0
	for _, sel := range selector.FindAllStringSubmatch(string(rules), -1) {
		name := sel[1]
		samples := series[name]
		if len(samples) == 0 {
			t.Errorf("%s: no series exposed", sel[0])
			continue
		}
		for _, m := range matcher.FindAllStringSubmatch(sel[2], -1) {
			label, op, value := m[1], m[2], m[3]
			hasLabel, hasValue := false, false
			for _, labels := range samples {
				v, ok := labels[label]
				hasLabel = hasLabel || ok
				hasValue = hasValue || (ok && v == value)
			}
			if !hasLabel {
				t.Errorf("%s: %s has no label %q", sel[0], name, label)
			}
			if op == "=" && !hasValue && label != "code" {
				t.Errorf("%s: no series of %s has %s=%q from the start", sel[0], name, label, value)
			}
			checked++
		}
	}
	if checked < 8 {
		t.Fatalf("only %d label matchers found in the alert rules: the extraction is broken", checked)
	}
}

// startWithEveryRole starts an orderly serve with every role, the optional
// projector too (each exposes its own metrics), and makes one order and a
// replay of it: counters with labels appear once counted.
func startWithEveryRole(t *testing.T) *orderlytest.Instance {
	t.Helper()
	cfg := orderlytest.Config(t)
	cfg.Roles = server.Roles{API: true, Processor: true, Projector: true}
	cfg.Topology.Projector = true
	inst := orderlytest.Start(t, cfg)
	for range 2 {
		if r := inst.PostOrder(t, "metrics-1", orderlytest.Order("c-metrics"), "Prefer: wait=10"); r.Status != http.StatusCreated {
			t.Fatalf("POST: %d %s", r.Status, r.Body)
		}
	}
	return inst
}

// scrape returns the metric families a /metrics page declares and the label
// sets of each sample name's series.
func scrape(t *testing.T, url string) (families map[string]bool, series map[string][]map[string]string) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("GET %s: %d %v", url, resp.StatusCode, err)
	}
	label := regexp.MustCompile(`([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"`)
	families, series = map[string]bool{}, map[string][]map[string]string{}
	for _, line := range strings.Split(string(b), "\n") {
		if rest, ok := strings.CutPrefix(line, "# TYPE "); ok {
			if name, _, ok := strings.Cut(rest, " "); ok {
				families[name] = true
			}
			continue
		}
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		name, labels := line, map[string]string{}
		if i := strings.IndexAny(line, "{ "); i >= 0 {
			name = line[:i]
			if line[i] == '{' {
				if j := strings.LastIndexByte(line, '}'); j > i {
					for _, m := range label.FindAllStringSubmatch(line[i+1:j], -1) {
						labels[m[1]] = m[2]
					}
				}
			}
		}
		series[name] = append(series[name], labels)
	}
	return families, series
}
