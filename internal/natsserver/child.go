package natsserver

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/gofrs/flock"
	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"

	"github.com/orderly-dev/orderly/internal/ops"
)

// Where the embedded server runs (docs/adr/0014).
const (
	// Child runs it in a process of its own, started from this same binary:
	// its garbage collector, which marks the server's millions of small
	// objects, no longer stops orderly's goroutines, and orderly's does not
	// stop it. The child dies with its parent.
	Child = "child"
	// InProcess runs it inside orderly's process.
	InProcess = "in-process"
)

// Instance is a running embedded server, in this process or in a child.
type Instance interface {
	// ClientURL is the client port's URL ("" without a port).
	ClientURL() string
	// Done is closed when the server stopped on its own (a child exited);
	// Err then says why.
	Done() <-chan struct{}
	Err() error
	// Shutdown stops the server and waits until it has.
	Shutdown()
}

// Local wraps a server of this process as an Instance.
func Local(ns *server.Server) Instance { return local{ns} }

type local struct{ ns *server.Server }

func (l local) ClientURL() string     { return l.ns.ClientURL() }
func (l local) Done() <-chan struct{} { return nil }
func (l local) Err() error            { return nil }
func (l local) Shutdown()             { l.ns.Shutdown(); l.ns.WaitForShutdown() }

// childEnv, set in a child's environment, makes RunChildIfAsked run the
// server there instead of the program.
const childEnv = "ORDERLY_NATS_SERVER_CHILD"

// childArg is a child's one argument.
const childArg = "-orderly-embedded-nats-server"

// lockFile keeps a store to one server process: a child started while the
// one of a killed parent is still dying waits for it.
const lockFile = "nats-server.lock"

// childConfig is what a parent sends its child on stdin.
type childConfig struct {
	Config
	// Parent is the parent's PID: a child whose parent is already gone stops.
	Parent int
	// ProbeNkey is the seed file of the user that waits for JetStream.
	ProbeNkey string
}

// ready is the child's first line on stdout once it serves.
type ready struct {
	ClientURL string `json:"client_url"`
}

// RunChildIfAsked runs the embedded server and exits when this process is a
// child started by StartChild; otherwise it returns at once. Every program
// that starts children calls it first thing (cmd/orderly's main, and the
// tests' helpers).
func RunChildIfAsked() {
	if os.Getenv(childEnv) == "" {
		return
	}
	os.Exit(runChild(os.Stdin, os.Stdout, os.Stderr))
}

// runChild serves until stdin closes: the parent closes it to stop the
// server, and the kernel closes it when the parent dies. Signals from a
// terminal or a supervisor are the parent's to act on: the child ignores
// them and follows its parent.
func runChild(stdin io.Reader, stdout, stderr io.Writer) int {
	signal.Ignore(syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP, syscall.SIGQUIT)
	logger := slog.New(slog.NewJSONHandler(stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	fail := func(err error) int {
		logger.Error(err.Error(), "component", "nats-server")
		return 1
	}
	var cc childConfig
	dec := json.NewDecoder(stdin)
	if err := dec.Decode(&cc); err != nil {
		return fail(fmt.Errorf("embedded NATS child: read the configuration: %w", err))
	}
	if cc.Parent != 0 && os.Getppid() != cc.Parent {
		return fail(errors.New("embedded NATS child: the parent is gone"))
	}
	// Stop when the parent closes stdin or dies.
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		_, _ = io.Copy(io.Discard, io.MultiReader(dec.Buffered(), stdin))
		cancel()
	}()
	lock := flock.New(filepath.Join(cc.StoreDir, lockFile), flock.SetFlag(os.O_CREATE|os.O_RDWR), flock.SetPermissions(0o644))
	lctx, lcancel := context.WithTimeout(ctx, 30*time.Second)
	ok, err := lock.TryLockContext(lctx, 50*time.Millisecond)
	lcancel()
	if err != nil || !ok {
		return fail(fmt.Errorf("embedded NATS child: the store %s is still held by another nats-server after 30s: %v", cc.StoreDir, err))
	}
	defer lock.Close()

	cfg := cc.Config
	cfg.Logger = logger
	if cfg.MemoryLimit > 0 {
		debug.SetMemoryLimit(cfg.MemoryLimit)
	}
	logger.Debug("embedded NATS server process", "component", "nats-server", "pid", os.Getpid(), "memory_limit", debug.SetMemoryLimit(-1))
	if cfg.Listen == "" {
		// The parent needs a port; the accounts' users guard it.
		cfg.Listen = "127.0.0.1:-1"
	}
	if cc.ProbeNkey != "" {
		opt, err := nats.NkeyOptionFromSeed(cc.ProbeNkey)
		if err != nil {
			return fail(fmt.Errorf("embedded NATS child: %w", err))
		}
		cfg.Probe = []nats.Option{opt}
	}
	if cfg.PprofAddr != "" {
		srv, addr, err := ops.ServePprof(cfg.PprofAddr)
		if err != nil {
			return fail(fmt.Errorf("embedded NATS child: %w", err))
		}
		defer srv.Close()
		logger.Info("pprof of the embedded NATS server's process listening", "component", "nats-server", "addr", addr.String())
	}
	ns, err := Start(ctx, cfg)
	if err != nil {
		return fail(err)
	}
	go ops.DefaultIdleRelease.WithWindow(cfg.DedupWindow).Run(ctx, logger.With("component", "nats-server"))
	if err := json.NewEncoder(stdout).Encode(ready{ClientURL: ns.ClientURL()}); err != nil {
		ns.Shutdown()
		return fail(fmt.Errorf("embedded NATS child: tell the parent: %w", err))
	}
	<-ctx.Done()
	ns.Shutdown()
	ns.WaitForShutdown()
	return 0
}

// ChildProcess is an embedded server running in a child process.
type ChildProcess struct {
	cmd       *exec.Cmd
	stdin     io.WriteCloser
	clientURL string
	logger    *slog.Logger
	onError   func(string)
	ready     chan string // the client URL, once it serves
	done      chan struct{}
	err       error // after done

	mu   sync.Mutex
	tail []string // the last lines the child wrote on stderr
}

// StartChild starts cfg's server in a child process of this binary and waits
// until it serves, as Start does. probeNkey is the seed file of the user that
// waits for JetStream (with cfg.Accounts). The child's log lines are logged
// with cfg.Logger and its errors passed to cfg.OnError, as in process. The
// child dies with this process (on Linux at once, by the kernel; elsewhere
// when it sees its stdin close).
func StartChild(ctx context.Context, cfg Config, probeNkey string) (*ChildProcess, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if os.Getenv(childEnv) != "" {
		return nil, errors.New("embedded NATS: this program was started as a server child but did not call natsserver.RunChildIfAsked")
	}
	exe, err := os.Executable()
	if err != nil {
		return nil, fmt.Errorf("embedded NATS: find this program to start the server's process (--nats-process in-process runs it in this one): %w", err)
	}
	if cfg.StoreDir, err = filepath.Abs(cfg.StoreDir); err != nil {
		return nil, err
	}
	if cfg.MemoryLimit <= 0 {
		if l := debug.SetMemoryLimit(-1); l != math.MaxInt64 {
			cfg.MemoryLimit = l
		}
	}
	conf, err := json.Marshal(childConfig{Config: cfg, Parent: os.Getpid(), ProbeNkey: probeNkey})
	if err != nil {
		return nil, err
	}
	c := &ChildProcess{logger: cfg.Logger, onError: cfg.OnError, ready: make(chan string, 1), done: make(chan struct{})}
	if c.logger == nil {
		c.logger = slog.New(slog.DiscardHandler)
	}
	// The argument names the child in the process list, and stops a test
	// binary that lacks the call to RunChildIfAsked at its flags.
	c.cmd = exec.Command(exe, childArg)
	c.cmd.Env = append(os.Environ(), childEnv+"=1")
	if c.stdin, err = c.cmd.StdinPipe(); err != nil {
		return nil, err
	}
	stdout, err := c.cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	stderr, err := c.cmd.StderrPipe()
	if err != nil {
		return nil, err
	}
	err = StartTied(c.cmd, func() {
		var readers sync.WaitGroup
		readers.Add(2)
		go func() { defer readers.Done(); c.readStdout(stdout) }()
		go func() { defer readers.Done(); c.relay(stderr) }()
		readers.Wait()
		err := c.cmd.Wait()
		c.err = fmt.Errorf("embedded NATS server process exited (%v)%s", err, c.lastLines())
		close(c.done)
	})
	if err != nil {
		return nil, fmt.Errorf("embedded NATS: start the server's process (--nats-process in-process runs it in this one): %w", err)
	}
	if _, err := c.stdin.Write(append(conf, '\n')); err != nil {
		c.kill()
		return nil, fmt.Errorf("embedded NATS: configure the server's process: %w", err)
	}
	select {
	case url := <-c.ready:
		c.clientURL = url
		return c, nil
	case <-c.done:
		return nil, c.err
	case <-ctx.Done():
		c.kill()
		return nil, fmt.Errorf("embedded NATS: the server's process is not ready: %w", ctx.Err())
	}
}

// readStdout takes the child's ready line, and reads on to its end.
func (c *ChildProcess) readStdout(r io.Reader) {
	br := bufio.NewReader(r)
	line, err := br.ReadBytes('\n')
	var rd ready
	if err == nil && json.Unmarshal(line, &rd) == nil && rd.ClientURL != "" {
		c.ready <- rd.ClientURL
	} else if len(line) > 0 {
		c.remember(strings.TrimSpace(string(line)))
	}
	_, _ = io.Copy(io.Discard, br)
}

// relay logs the child's log lines with the parent's logger, as the server
// in process logs them, and passes its errors to onError. A line that is not
// the child's JSON (a panic, the runtime's own) is logged as an error.
func (c *ChildProcess) relay(r io.Reader) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		var rec map[string]any
		dec := json.NewDecoder(strings.NewReader(line))
		dec.UseNumber() // integers stay integers
		if dec.Decode(&rec) != nil {
			if strings.TrimSpace(line) == "" {
				continue
			}
			c.remember(line)
			c.logger.Error(line, "component", "nats-server")
			continue
		}
		msg, _ := rec[slog.MessageKey].(string)
		var level slog.Level
		if l, ok := rec[slog.LevelKey].(string); !ok || level.UnmarshalText([]byte(l)) != nil {
			level = slog.LevelInfo
		}
		var attrs []slog.Attr
		for k, v := range rec {
			if k != slog.MessageKey && k != slog.LevelKey && k != slog.TimeKey {
				attrs = append(attrs, slog.Any(k, v))
			}
		}
		if level >= slog.LevelWarn {
			c.remember(msg)
		}
		c.logger.LogAttrs(context.Background(), level, msg, attrs...)
		if level >= slog.LevelError && c.onError != nil {
			c.onError(msg)
		}
	}
}

func (c *ChildProcess) remember(line string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.tail = append(c.tail, line)
	if len(c.tail) > 10 {
		c.tail = c.tail[len(c.tail)-10:]
	}
}

func (c *ChildProcess) lastLines() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.tail) == 0 {
		return ""
	}
	return "; its last warnings and errors: " + strings.Join(c.tail, " | ")
}

// ClientURL is the URL of the child's client port.
func (c *ChildProcess) ClientURL() string { return c.clientURL }

// Done is closed when the child has exited.
func (c *ChildProcess) Done() <-chan struct{} { return c.done }

// Err says why the child exited, once Done is closed.
func (c *ChildProcess) Err() error {
	select {
	case <-c.done:
		return c.err
	default:
		return nil
	}
}

// PID is the child's process ID.
func (c *ChildProcess) PID() int { return c.cmd.Process.Pid }

// Shutdown asks the child to stop (its stdin closes), and kills it if it has
// not after 30 seconds.
func (c *ChildProcess) Shutdown() {
	_ = c.stdin.Close()
	select {
	case <-c.done:
	case <-time.After(30 * time.Second):
		c.logger.Error("the embedded NATS server process did not stop within 30s: killing it", "component", "nats-server")
		c.kill()
	}
}

func (c *ChildProcess) kill() {
	_ = c.stdin.Close()
	_ = c.cmd.Process.Kill()
	<-c.done
}

// StartTied starts cmd as a child that dies with this process, kill -9
// included (on Linux, with the kernel's parent-death signal; elsewhere only
// a child that stops when its stdin closes does, as the embedded server's
// does), and then calls wait, which must return only once the child has
// exited (cmd.Wait). The kernel sends that signal
// when the thread that started the child ends, not the process, and the Go
// runtime ends a thread when a goroutine locked to it returns: a child
// started from a thread that some goroutine locks later dies with that
// goroutine (a cluster node of a test was killed 0.3 s after its start
// when the --nats-process child server of another test of the same binary
// stopped). So the child is started, and waited for, by a goroutine locked
// to a thread of its own, which ends only after the child; every child with
// the signal must be started here.
func StartTied(cmd *exec.Cmd, wait func()) error {
	cmd.SysProcAttr = childAttr()
	started := make(chan error, 1)
	go func() {
		runtime.LockOSThread() // never unlocked: the thread ends after the child
		if err := cmd.Start(); err != nil {
			started <- err
			return
		}
		started <- nil
		wait()
	}()
	return <-started
}
