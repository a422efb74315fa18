// Package archtest checks the layout: that every package is documented
// (docs/architecture.md, the README), and the dependency rules that the package comments
// state: which packages may link NATS, watermill, gin or nats-server. It
// reads the build graph with `go list`, so a rule broken by a transitive
// import fails too.
package archtest

import (
	"encoding/json"
	"os/exec"
	"strings"
	"testing"
)

const module = "github.com/orderly-dev/orderly/"

// Infrastructure a package may be forbidden to link.
const (
	natsClient  = "github.com/nats-io/nats.go"
	natsServer  = "github.com/nats-io/nats-server/v2/server"
	watermill   = "github.com/ThreeDotsLabs/watermill"
	gin         = "github.com/gin-gonic/gin"
	pipelinePkg = module + "internal/pipeline"
	jsstorePkg  = module + "internal/jsstore"
)

// rules: package -> what it must not link, directly or not.
var rules = map[string][]string{
	"events":              {natsClient, natsServer, watermill, gin, module + "idempotency", module + "internal/"},
	"idempotency":         {natsClient, natsServer, watermill, gin, module + "internal/app", module + "api"},
	"internal/app":        {natsClient, natsServer, watermill, gin, jsstorePkg, module + "projections", module + "processor"},
	"processor":           {natsClient, natsServer, watermill, gin, pipelinePkg, jsstorePkg, module + "projections"},
	"projections":         {natsClient, natsServer, watermill, gin, jsstorePkg},
	"internal/hub":        {natsClient, natsServer, watermill, gin, jsstorePkg},
	"internal/ops":        {natsClient, natsServer, watermill, gin},
	"api":                 {natsClient, natsServer, watermill, jsstorePkg},
	"internal/jsstore":    {natsServer, watermill, gin, module + "internal/app", module + "processor", module + "api"},
	"internal/pipeline":   {natsServer, gin, module + "processor", module + "projections"},
	"internal/problem":    {natsClient, natsServer, watermill, gin},
	"examples/consumer":   {natsServer, module + "internal/"},
	"internal/bench":      {natsServer},
	"internal/check":      {natsServer},
	"internal/tail":       {natsServer},
	"internal/natsserver": {watermill, gin, module + "internal/app"},
	"internal/datadir":    {natsClient, natsServer, watermill, gin, module},
	"internal/progress":   {natsClient, natsServer, watermill, gin, module},
	"internal/attempt":    {natsClient, natsServer, watermill, gin, module},
	"internal/natsauth":   {natsServer, watermill, gin, module + "internal/app", module + "internal/server"},
	// compiled once: nothing the tests it checks run (see its package comment)
	"internal/openapicheck": {natsClient, natsServer, watermill, module + "internal/server", module + "internal/orderlytest", jsstorePkg, pipelinePkg, module + "internal/natsserver", module + "internal/natsauth"},
}

type pkg struct {
	ImportPath string
	Deps       []string
}

func TestDependencyRules(t *testing.T) {
	out, err := exec.Command("go", "list", "-json=ImportPath,Deps", module+"...").Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	dec := json.NewDecoder(strings.NewReader(string(out)))
	seen := map[string]bool{}
	for dec.More() {
		var p pkg
		if err := dec.Decode(&p); err != nil {
			t.Fatal(err)
		}
		name := strings.TrimPrefix(p.ImportPath, module)
		forbidden, ok := rules[name]
		if !ok {
			continue
		}
		seen[name] = true
		for _, dep := range p.Deps {
			for _, f := range forbidden {
				if dep == f || (strings.HasSuffix(f, "/") && strings.HasPrefix(dep, f)) || strings.HasPrefix(dep, f+"/") {
					t.Errorf("%s links %s", name, dep)
				}
			}
		}
	}
	for name := range rules {
		if !seen[name] {
			t.Errorf("rule for %s, which go list did not report", name)
		}
	}
}
