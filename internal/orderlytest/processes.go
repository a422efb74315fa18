package orderlytest

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/orderly-dev/orderly/internal/jsstore"
	"github.com/orderly-dev/orderly/internal/natsauth"
	"github.com/orderly-dev/orderly/internal/natsserver"
)

// NATSServerBinary builds the nats-server of the pinned Go module and returns
// its path. The binary is kept in the user's cache directory under the
// module's version, so that test runs neither rebuild it nor leave copies
// behind; it is built under a temporary name and renamed, so that test
// binaries of several packages may race to build it.
func NATSServerBinary(t testing.TB) string {
	t.Helper()
	binOnce.Do(func() {
		version := "unknown"
		if out, err := exec.Command("go", "list", "-m", "-f", "{{.Version}}", "github.com/nats-io/nats-server/v2").Output(); err == nil {
			version = strings.TrimSpace(string(out))
		}
		cache, err := os.UserCacheDir()
		if err != nil {
			cache = os.TempDir()
		}
		dir := filepath.Join(cache, "orderly-test")
		if err := os.MkdirAll(dir, 0o755); err != nil {
			binErr = err
			return
		}
		binPath = filepath.Join(dir, "nats-server-"+version)
		if version != "unknown" {
			if _, err := os.Stat(binPath); err == nil {
				return
			}
		}
		tmp, err := os.CreateTemp(dir, "nats-server-build-")
		if err != nil {
			binErr = err
			return
		}
		tmp.Close()
		defer os.Remove(tmp.Name())
		out, err := exec.Command("go", "build", "-o", tmp.Name(), "github.com/nats-io/nats-server/v2").CombinedOutput()
		if err != nil {
			binErr = fmt.Errorf("go build nats-server: %v: %s", err, out)
			return
		}
		binErr = os.Rename(tmp.Name(), binPath)
	})
	if binErr != nil {
		t.Fatal(binErr)
	}
	return binPath
}

var (
	binOnce sync.Once
	binPath string
	binErr  error
)

// ProcessCluster is a NATS cluster of nats-server processes, so that a node
// can be killed with SIGKILL as a machine or a process dies: its raft
// leaderships are not handed over, its followers must elect.
type ProcessCluster struct {
	// Creds are the cluster's users (natsauth).
	Creds natsauth.Credentials
	t     testing.TB
	ports Ports
	args  [][]string
	mu    sync.Mutex
	procs []*exec.Cmd
	// exited[i] closes when node i's current process has exited; exits[i]
	// says when and how, if it exited on its own; output[i] keeps the end
	// of its output (all of it goes to stderr with ORDERLY_TEST_LOG): a
	// failed test reports each node's state and last lines.
	exited []chan struct{}
	exits  []string
	output []*tailBuffer
	// links[i][j] carries the routes node i dials to node j, when the
	// cluster was started with StartPartitionableCluster.
	links [][]*Proxy
	// capped: started by StartLimitedCluster, each node with a config
	// file of its own (limitsPath).
	capped bool
}

// StartProcessCluster starts len(ports.Client) nats-server processes with
// JetStream, each with its own store, and waits until JetStream answers.
// Extra arguments (a config file, say) are passed to every node.
func StartProcessCluster(t testing.TB, ports Ports, extra ...string) *ProcessCluster {
	t.Helper()
	return startProcessCluster(t, ports, false, nil, extra, 0)
}

// StartProcessClusterOn is StartProcessCluster with node i's store in
// stores[i] (a small file system of its own, say).
func StartProcessClusterOn(t testing.TB, ports Ports, stores []string, extra ...string) *ProcessCluster {
	t.Helper()
	return startProcessCluster(t, ports, false, stores, extra, 0)
}

// StartPartitionableCluster is StartProcessCluster with every route through
// a proxy of its own (one for each direction of each pair of nodes), so that
// Partition can cut a node off from the others while its clients still
// reach it. The nodes advertise no route address (an unreachable one), so
// that no route is made around the proxies.
func StartPartitionableCluster(t testing.TB, ports Ports, extra ...string) *ProcessCluster {
	t.Helper()
	return startProcessCluster(t, ports, true, nil, extra, 0)
}

// StartLimitedCluster is StartProcessCluster with every node's JetStream
// storage capped at maxStore bytes (nats-server's max_file_store, which
// deploy/nats/node.conf tells operators to set below the disk); Limit
// raises the cap.
func StartLimitedCluster(t testing.TB, ports Ports, maxStore int64) *ProcessCluster {
	t.Helper()
	return startProcessCluster(t, ports, false, nil, nil, maxStore)
}

// maxStore caps each node's JetStream storage; 0 leaves nats-server's default.
func startProcessCluster(t testing.TB, ports Ports, proxied bool, stores, extra []string, maxStore int64) *ProcessCluster {
	t.Helper()
	bin := NATSServerBinary(t)
	n := len(ports.Client)
	c := &ProcessCluster{Creds: NewCredentials(t), t: t, ports: ports, args: make([][]string, n), procs: make([]*exec.Cmd, n),
		exited: make([]chan struct{}, n), exits: make([]string, n), output: make([]*tailBuffer, n)}
	for i := range c.output {
		c.output[i] = &tailBuffer{max: 8 << 10}
	}
	c.capped = maxStore > 0
	if proxied {
		c.links = make([][]*Proxy, n)
		for i := range c.links {
			c.links[i] = make([]*Proxy, n)
			for j := range c.links[i] {
				if j != i {
					c.links[i][j] = NewProxy(t, fmt.Sprintf("127.0.0.1:%d", ports.Route[j]))
				}
			}
		}
	}
	for i := 0; i < n; i++ {
		store := t.TempDir()
		if stores != nil {
			store = stores[i]
		}
		var routes []string
		for j := 0; j < n; j++ {
			switch {
			case j == i:
			case proxied:
				routes = append(routes, "nats-route://"+strings.TrimPrefix(c.links[i][j].URL(), "nats://"))
			default:
				routes = append(routes, fmt.Sprintf("nats://127.0.0.1:%d", ports.Route[j]))
			}
		}
		c.args[i] = []string{bin, "--config", c.Creds.ConfigPath(), "--name", NodeName(i), "--addr", "127.0.0.1", "--port", fmt.Sprint(ports.Client[i]),
			"--cluster", fmt.Sprintf("nats://127.0.0.1:%d", ports.Route[i]), "--cluster_name", "orderly-test",
			"--routes", strings.Join(routes, ","), "--jetstream", "--store_dir", store}
		if proxied {
			c.args[i] = append(c.args[i], "--cluster_advertise", "127.0.0.1:1")
		}
		c.args[i] = append(c.args[i], extra...)
		if c.capped {
			// A config of the node's own that includes the accounts' and
			// sets the cap; the last --config given wins.
			c.writeLimit(i, maxStore)
			c.args[i] = append(c.args[i], "--config", c.limitsPath(i))
		}
	}
	register(ports.URLs(), c.Creds)
	for i := range c.args {
		c.start(i)
	}
	t.Cleanup(func() {
		for i := range c.procs {
			c.Kill(i)
		}
	})
	t.Cleanup(c.report) // before the kills: cleanups run last first
	c.waitJetStream()
	return c
}

func (c *ProcessCluster) start(i int) {
	c.t.Helper()
	cmd := exec.Command(c.args[i][0], c.args[i][1:]...)
	if os.Getenv("ORDERLY_TEST_LOG") != "" {
		cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	} else {
		fmt.Fprintf(c.output[i], "--- started %s\n", time.Now().Format("15:04:05.000"))
		cmd.Stdout, cmd.Stderr = c.output[i], c.output[i]
	}
	exited := make(chan struct{})
	// A test binary that dies (its timeout's panic runs no cleanup) takes
	// its nodes with it: they held ports and stores after it.
	err := natsserver.StartTied(cmd, func() {
		err := cmd.Wait()
		c.mu.Lock()
		if c.procs[i] == cmd { // not killed by the test
			c.exits[i] = fmt.Sprintf("exited on its own at %s (%v)", time.Now().Format("15:04:05.000"), err)
		}
		c.mu.Unlock()
		close(exited)
	})
	if err != nil {
		c.t.Fatal(err)
	}
	c.mu.Lock()
	c.procs[i], c.exited[i], c.exits[i] = cmd, exited, ""
	c.mu.Unlock()
	deadline := time.Now().Add(30 * time.Second)
	for {
		conn, err := net.DialTimeout("tcp", fmt.Sprintf("127.0.0.1:%d", c.ports.Client[i]), time.Second)
		if err == nil {
			conn.Close()
			return
		}
		if time.Now().After(deadline) {
			c.t.Fatalf("nats-server node %d did not listen", i)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func (c *ProcessCluster) waitJetStream() {
	c.t.Helper()
	nc, err := jsstore.Dial(c.URLs(), jsstore.Credentials{NkeyFile: c.Creds.SeedPath(natsauth.Operator)}, "orderly-test")
	if err != nil {
		c.t.Fatal(err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		c.t.Fatal(err)
	}
	deadline := time.Now().Add(60 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		_, err := js.AccountInfo(ctx)
		cancel()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			c.t.Fatalf("JetStream of the process cluster: %v", err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// URLs are the nodes' client URLs, comma-separated.
func (c *ProcessCluster) URLs() string { return c.ports.URLs() }

// JetStream connects to the cluster as its operator; the connection closes
// when the test ends.
func (c *ProcessCluster) JetStream(t testing.TB) jetstream.JetStream {
	t.Helper()
	js, err := jsstore.DialJetStream(c.URLs(), As(c.Creds, natsauth.Operator), "orderly-test")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(js.Conn().Close)
	return js
}

// NodeURL is node i's client URL alone.
func (c *ProcessCluster) NodeURL(i int) string {
	return fmt.Sprintf("nats://127.0.0.1:%d", c.ports.Client[i])
}

// Kill kills node i with SIGKILL (again is a no-op).
func (c *ProcessCluster) Kill(i int) {
	c.mu.Lock()
	cmd, exited := c.procs[i], c.exited[i]
	c.procs[i] = nil
	c.mu.Unlock()
	if cmd != nil {
		_ = cmd.Process.Signal(syscall.SIGKILL)
		<-exited
	}
}

// report logs, when the test failed, each node's state and the end of its
// output.
func (c *ProcessCluster) report() {
	if !c.t.Failed() {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	for i, cmd := range c.procs {
		state := "running"
		switch {
		case c.exits[i] != "":
			state = c.exits[i]
		case cmd == nil:
			state = "killed by the test"
		}
		c.t.Logf("nats-server node %d: %s; the end of its output:\n%s", i, state, c.output[i].String())
	}
}

// tailBuffer keeps the last max bytes written to it.
type tailBuffer struct {
	mu  sync.Mutex
	max int
	b   []byte
}

func (t *tailBuffer) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.b = append(t.b, p...)
	if over := len(t.b) - t.max; over > 0 {
		t.b = append(t.b[:0], t.b[over:]...)
	}
	return len(p), nil
}

func (t *tailBuffer) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return string(t.b)
}

// Freeze stops node i's process with SIGSTOP, as a host that hangs: its
// connections stay open and nothing answers on them, and a new connection
// gets no greeting. Thaw, Kill or the test's end ends it.
func (c *ProcessCluster) Freeze(i int) { c.signal(i, syscall.SIGSTOP) }

// Thaw lets a frozen node i run again (SIGCONT).
func (c *ProcessCluster) Thaw(i int) { c.signal(i, syscall.SIGCONT) }

func (c *ProcessCluster) signal(i int, sig syscall.Signal) {
	c.t.Helper()
	c.mu.Lock()
	cmd := c.procs[i]
	c.mu.Unlock()
	if cmd == nil {
		c.t.Fatalf("node %d is not running", i)
	}
	if err := cmd.Process.Signal(sig); err != nil {
		c.t.Fatal(err)
	}
}

// Partition cuts node i off from the other nodes: whatever either side
// sends on a route between them is dropped, with no error and no close (a
// network that loses every packet), until Heal. Its clients still reach it.
func (c *ProcessCluster) Partition(i int) {
	c.t.Helper()
	for j := range c.links {
		if j != i {
			c.Cut(i, j)
		}
	}
}

// Heal ends Partition(i).
func (c *ProcessCluster) Heal(i int) {
	c.t.Helper()
	for j := range c.links {
		if j != i {
			c.Mend(i, j)
		}
	}
}

// Cut drops whatever nodes i and j send each other on their routes, in both
// directions, until Mend(i, j); each of them still reaches the others.
func (c *ProcessCluster) Cut(i, j int) {
	c.t.Helper()
	for _, p := range []*Proxy{c.links[i][j], c.links[j][i]} {
		p.Add(c.t, "partition-up", "timeout", "upstream", map[string]any{"timeout": 0})
		p.Add(c.t, "partition-down", "timeout", "downstream", map[string]any{"timeout": 0})
	}
}

// Mend ends Cut(i, j).
func (c *ProcessCluster) Mend(i, j int) {
	c.t.Helper()
	for _, p := range []*Proxy{c.links[i][j], c.links[j][i]} {
		p.Remove(c.t, "partition-up")
		p.Remove(c.t, "partition-down")
	}
}

// Limit sets every node's JetStream storage cap to maxStore bytes and
// reloads the nodes (SIGHUP). nats-server takes a raised cap on reload and
// refuses a lowered one. Only for a cluster of StartLimitedCluster.
func (c *ProcessCluster) Limit(maxStore int64) {
	c.t.Helper()
	if !c.capped {
		c.t.Fatal("the cluster was not started with StartLimitedCluster")
	}
	for i := range c.procs {
		c.writeLimit(i, maxStore)
		c.signal(i, syscall.SIGHUP)
	}
}

func (c *ProcessCluster) limitsPath(i int) string {
	return filepath.Join(c.Creds.Dir, fmt.Sprintf("limits-%d.conf", i))
}

// writeLimit writes node i's config: the accounts' (an include is relative
// to the file), its name and cluster (a reload checks what the file says
// alone, and refuses a JetStream cluster without them), and the cap.
func (c *ProcessCluster) writeLimit(i int, maxStore int64) {
	c.t.Helper()
	var routes []string
	for j, port := range c.ports.Route {
		if j != i {
			routes = append(routes, fmt.Sprintf("%q", fmt.Sprintf("nats://127.0.0.1:%d", port)))
		}
	}
	conf := fmt.Sprintf("include %q\nserver_name: %q\ncluster {\n  name: orderly-test\n  listen: \"127.0.0.1:%d\"\n  routes: [%s]\n}\njetstream {\n  max_file_store: %d\n}\n",
		natsauth.ConfigFile, NodeName(i), c.ports.Route[i], strings.Join(routes, ", "), maxStore)
	if err := os.WriteFile(c.limitsPath(i), []byte(conf), 0o600); err != nil {
		c.t.Fatal(err)
	}
}

// Restart starts node i again on its data.
func (c *ProcessCluster) Restart(i int) { c.start(i) }

// Index is the node index of a server name, -1 for none.
func (c *ProcessCluster) Index(serverName string) int {
	for i := range c.args {
		if NodeName(i) == serverName {
			return i
		}
	}
	return -1
}

// BuildOrderly returns the orderly binary, built once for the test binary
// that asks: each build links anew (8-9 s of CPU, with everything else in
// the build cache), and the tests of cmd/orderly ask for it at 17 places. The
// package's TestMain runs its tests through Main, which removes the binary
// when they are done.
func BuildOrderly(t testing.TB) string {
	t.Helper()
	if !inMain.Load() {
		t.Fatal("BuildOrderly needs the package's TestMain to run its tests through orderlytest.Main")
	}
	orderlyOnce.Do(func() {
		removeStaleBuilds()
		dir, err := os.MkdirTemp("", orderlyBuildPrefix)
		if err != nil {
			orderlyErr = err
			return
		}
		orderlyDir = dir
		bin := filepath.Join(dir, "orderly")
		if out, err := exec.Command("go", "build", "-o", bin, "github.com/orderly-dev/orderly/cmd/orderly").CombinedOutput(); err != nil {
			orderlyErr = fmt.Errorf("go build orderly: %v: %s", err, out)
			return
		}
		orderlyBin = bin
	})
	if orderlyErr != nil {
		t.Fatal(orderlyErr)
	}
	return orderlyBin
}

// removeStaleBuilds removes the builds of test binaries that died before
// Main could (a panic, a timeout): those older than an hour, longer than
// any test binary runs.
func removeStaleBuilds() {
	old, _ := filepath.Glob(filepath.Join(os.TempDir(), orderlyBuildPrefix+"*"))
	for _, dir := range old {
		if fi, err := os.Stat(dir); err == nil && time.Since(fi.ModTime()) > time.Hour {
			_ = os.RemoveAll(dir)
		}
	}
}

const orderlyBuildPrefix = "orderly-test-bin-"

var (
	inMain      atomic.Bool
	orderlyOnce sync.Once
	orderlyDir  string
	orderlyBin  string
	orderlyErr  error
)

// Main runs a package's tests (call it from TestMain) and then removes the
// binary BuildOrderly built for them.
func Main(m *testing.M) { os.Exit(run(m)) }

func run(m *testing.M) int {
	inMain.Store(true)
	code := m.Run()
	if orderlyDir != "" {
		_ = os.RemoveAll(orderlyDir)
	}
	return code
}

// Process is an orderly command as a child process that can be killed with
// SIGKILL. Its output goes to the test's stderr when ORDERLY_TEST_LOG is set.
type Process struct {
	T    testing.TB
	Bin  string
	Args []string
	// URL is its HTTP address; Start waits until its /readyz answers 200.
	URL string
	// Output, when set, receives its stdout and stderr.
	Output io.Writer
	// Dir, when set, is its working directory.
	Dir string
	Cmd *exec.Cmd
}

// Start starts the process and waits up to 30 s for it to be ready.
func (p *Process) Start() {
	p.T.Helper()
	p.Cmd = exec.Command(p.Bin, p.Args...)
	p.Cmd.Dir = p.Dir
	if os.Getenv("ORDERLY_TEST_LOG") != "" {
		p.Cmd.Stdout, p.Cmd.Stderr = os.Stderr, os.Stderr
	}
	if p.Output != nil {
		p.Cmd.Stdout, p.Cmd.Stderr = p.Output, p.Output
	}
	if err := p.Cmd.Start(); err != nil {
		p.T.Fatal(err)
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		if r, err := http.Get(p.URL + "/readyz"); err == nil {
			r.Body.Close()
			if r.StatusCode == http.StatusOK {
				return
			}
		}
		if time.Now().After(deadline) {
			p.T.Fatalf("%s did not get ready", strings.Join(p.Args, " "))
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// Kill9 kills the process with SIGKILL: no shutdown, no flush. Its own
// children (orderly serve's embedded NATS server) must die with it: the test
// fails if one is still running 10 s later.
func (p *Process) Kill9() {
	p.T.Helper()
	children := childPIDs(p.Cmd.Process.Pid)
	_ = p.Cmd.Process.Kill()
	_, _ = p.Cmd.Process.Wait()
	deadline := time.Now().Add(10 * time.Second)
	for _, c := range children {
		if !Exited(c, time.Until(deadline)) {
			p.T.Errorf("process %d, a child of the killed %s, outlived it", c, strings.Join(p.Args, " "))
			_ = syscall.Kill(c, syscall.SIGKILL)
		}
	}
}

// Exited waits up to within for pid to exit, and reports whether it has.
func Exited(pid int, within time.Duration) bool {
	deadline := time.Now().Add(within)
	for Running(pid) {
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(20 * time.Millisecond)
	}
	return true
}

// childPIDs lists pid's children (Linux; none elsewhere).
func childPIDs(pid int) []int {
	tasks, _ := filepath.Glob(fmt.Sprintf("/proc/%d/task/*/children", pid))
	var pids []int
	for _, t := range tasks {
		b, err := os.ReadFile(t)
		if err != nil {
			continue
		}
		for _, f := range strings.Fields(string(b)) {
			if c, err := strconv.Atoi(f); err == nil {
				pids = append(pids, c)
			}
		}
	}
	return pids
}

// Running reports whether pid exists and has not exited (a zombie that a
// container's init leaves unreaped has).
func Running(pid int) bool {
	if syscall.Kill(pid, 0) != nil {
		return false
	}
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	i := bytes.LastIndexByte(stat, ')')
	return i < 0 || i+2 >= len(stat) || stat[i+2] != 'Z'
}
