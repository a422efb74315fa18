package systemtest

import (
	"io"
	"net/http"
	"os"
	"regexp"
	"slices"
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
	cfg := orderlytest.Config(t)
	// Every role, the optional projector too: each exposes its own metrics.
	cfg.Roles = server.Roles{API: true, Processor: true, Projector: true}
	cfg.Topology.Projector = true
	inst := orderlytest.Start(t, cfg)
	// Counters with labels appear once counted: one order, decided, replayed.
	for range 2 {
		if r := inst.PostOrder(t, "metrics-1", orderlytest.Order("c-metrics"), "Prefer: wait=10"); r.Status != http.StatusCreated {
			t.Fatalf("POST: %d %s", r.Status, r.Body)
		}
	}

	metricName := regexp.MustCompile(`\borderly_[a-z_]*[a-z]\b`)
	named := map[string][]string{} // metric -> the files that name it
	for _, f := range []string{"../../deploy/prometheus/alerts.yml", "../../docs/operations.md", "../../README.md"} {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range metricName.FindAllString(string(b), -1) {
			if !slices.Contains(named[m], f) {
				named[m] = append(named[m], f)
			}
		}
	}
	if len(named) < 15 {
		t.Fatalf("only %d metric names found in the docs: the extraction is broken", len(named))
	}

	var exposed map[string]bool
	orderlytest.Eventually(t, 10*time.Second, "the pipeline's counters", func() bool {
		exposed = scrapeFamilies(t, inst.URL+"/metrics")
		return exposed["orderly_pipeline_messages_total"] && exposed["orderly_commands_decided_total"]
	})
	for name, files := range named {
		base := name
		for _, suffix := range []string{"_bucket", "_sum", "_count"} {
			if b, ok := strings.CutSuffix(name, suffix); ok && exposed[b] {
				base = b
			}
		}
		if strings.HasPrefix(name, "orderly_nats_server_process_") && cfg.NATSProcess == natsserver.InProcess {
			continue // the child process's own metrics; there is none here
		}
		if !exposed[base] {
			t.Errorf("%s (named in %s) is not exposed by orderly serve", name, strings.Join(files, ", "))
		}
	}
}

// scrapeFamilies returns the metric families a /metrics page declares.
func scrapeFamilies(t *testing.T, url string) map[string]bool {
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
	out := map[string]bool{}
	for _, line := range strings.Split(string(b), "\n") {
		if rest, ok := strings.CutPrefix(line, "# TYPE "); ok {
			if name, _, ok := strings.Cut(rest, " "); ok {
				out[name] = true
			}
		}
	}
	return out
}
