package systemtest

import (
	"net/http"
	"os"
	"regexp"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

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

	var fams map[string]*dto.MetricFamily
	orderlytest.Eventually(t, 10*time.Second, "the pipeline's counters", func() bool {
		fams = scrape(t, inst.URL+"/metrics")
		return family(fams, "orderly_pipeline_messages_total") != nil && family(fams, "orderly_commands_decided_total") != nil
	})
	for name, files := range named {
		if strings.HasPrefix(name, "orderly_nats_server_process_") && inst.Cfg.NATSProcess == natsserver.InProcess {
			continue // the child process's own metrics; there is none here
		}
		if name == "orderly_nats_tls_expiry_timestamp_seconds" {
			continue // only over TLS, which serve's embedded server has not: internal/server TestTLSCertificateExpiryIsExported
		}
		if name == "orderly_account_store_limit_bytes" {
			continue // only when the account has a limit, which serve's embedded server has not: internal/server TestAccountStorageLimitLosesNoAcceptedOrder
		}
		if family(fams, name) == nil {
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
	var fams map[string]*dto.MetricFamily
	orderlytest.Eventually(t, 10*time.Second, "the pipeline's counters", func() bool {
		fams = scrape(t, inst.URL+"/metrics")
		return family(fams, "orderly_pipeline_messages_total") != nil
	})
	checked := 0
	for _, sel := range selector.FindAllStringSubmatch(string(rules), -1) {
		name := sel[1]
		f := family(fams, name)
		if f == nil || len(f.GetMetric()) == 0 {
			t.Errorf("%s: no series exposed", sel[0])
			continue
		}
		for _, m := range matcher.FindAllStringSubmatch(sel[2], -1) {
			label, op, value := m[1], m[2], m[3]
			hasLabel, hasValue := false, false
			for _, series := range f.GetMetric() {
				for _, l := range series.GetLabel() {
					if l.GetName() == label {
						hasLabel = true
						hasValue = hasValue || l.GetValue() == value
					}
				}
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

// TestLabelledCountersStartAtZero: a fresh orderly serve, before any order,
// exposes every outcome of the submissions and every kind of decision at 0.
// A series that appears at 1 shows Prometheus no increase: rate() and
// increase() would miss the first of each.
func TestLabelledCountersStartAtZero(t *testing.T) {
	t.Parallel()
	inst := orderlytest.Start(t, orderlytest.Config(t))
	fams := scrape(t, inst.URL+"/metrics")
	for name, want := range map[string][]string{
		"orderly_order_submissions_total": {
			"created,false", "created,true", "rejected,false", "rejected,true",
			"accepted,false", "accepted,true", "in_progress,false", "in_progress,true",
		},
		"orderly_commands_decided_total": {"created", "rejected", "none"},
	} {
		got := map[string]float64{}
		if f := family(fams, name); f != nil {
			for _, series := range f.GetMetric() {
				var values []string
				for _, l := range series.GetLabel() {
					values = append(values, l.GetValue())
				}
				got[strings.Join(values, ",")] = series.GetCounter().GetValue()
			}
		}
		for _, labels := range want {
			if v, ok := got[labels]; !ok || v != 0 {
				t.Errorf("%s{%s}: exposed %v at %v before any order, want at 0", name, labels, ok, v)
			}
		}
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

// scrape reads a /metrics page with Prometheus' own text parser.
func scrape(t *testing.T, url string) map[string]*dto.MetricFamily {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET %s: %d", url, resp.StatusCode)
	}
	parser := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := parser.TextToMetricFamilies(resp.Body)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	return fams
}

// family is the metric family a name in a query refers to: the name itself,
// or a histogram's or summary's family for its _bucket, _sum or _count.
func family(fams map[string]*dto.MetricFamily, name string) *dto.MetricFamily {
	if f, ok := fams[name]; ok {
		return f
	}
	for _, suffix := range []string{"_bucket", "_sum", "_count"} {
		if base, ok := strings.CutSuffix(name, suffix); ok {
			if f, ok := fams[base]; ok {
				return f
			}
		}
	}
	return nil
}
