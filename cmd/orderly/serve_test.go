package main

import (
	"bytes"
	"crypto/rand"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/alecthomas/kong"
	"github.com/orderly-dev/orderly/internal/server"
)

// TestBatchWritesFollowFsync: writes are grouped into atomic batches (group
// commit) by default exactly when every write is synced, unless set.
func TestBatchWritesFollowFsync(t *testing.T) {
	t.Parallel()
	for args, want := range map[string]bool{
		"serve":                false,
		"serve --fsync 1s":     false,
		"serve --fsync always": true,
		"serve --fsync always --batch-writes off": false,
		"serve --batch-writes on":                 true,
	} {
		cfg := serveConfig(t, args)
		if cfg.BatchWrites != want {
			t.Errorf("%s: batch writes %v, want %v", args, cfg.BatchWrites, want)
		}
	}
}

// TestServeRunsNoProjectorByDefault: serve runs the API and the processor
// (ADR 0009: the processor stores each key's response); the projector runs
// only when named, and setup creates its consumer only when asked.
func TestServeRunsNoProjectorByDefault(t *testing.T) {
	t.Parallel()
	for args, want := range map[string]server.Roles{
		"serve":                                 {API: true, Processor: true},
		"serve --roles api":                     {API: true},
		"serve --roles api,processor,projector": {API: true, Processor: true, Projector: true},
	} {
		cfg := serveConfig(t, args)
		if cfg.Roles != want {
			t.Errorf("%s: roles %+v, want %+v", args, cfg.Roles, want)
		}
		if cfg.Topology.Projector {
			t.Errorf("%s: the topology asks for the projector's consumer itself; the server adds it for the role", args)
		}
	}
	if cli := parseCLI(t, "setup --nats-url nats://x"); cli.Setup.Projector {
		t.Error("setup creates the projector's consumer without --projector")
	}
	if cli := parseCLI(t, "setup --nats-url nats://x --projector"); !cli.Setup.Projector {
		t.Error("setup --projector not taken")
	}
}

// parseCLI parses args as orderly's command line, without running anything.
func parseCLI(t *testing.T, args string) CLI {
	t.Helper()
	var cli CLI
	if err := parseInto(t, &cli, args); err != nil {
		t.Fatalf("%s: %v", args, err)
	}
	return cli
}

// cliModel is the model of orderly's command line.
func cliModel(t *testing.T) *kong.Application {
	t.Helper()
	var cli CLI
	parser, err := kong.New(&cli, kong.Name("orderly"))
	if err != nil {
		t.Fatal(err)
	}
	return parser.Model
}

// parseInto parses args into cli as main does (its duration mapper too).
func parseInto(t *testing.T, cli *CLI, args string) error {
	t.Helper()
	parser, err := kong.New(cli, kong.Name("orderly"), kong.Exit(func(int) { t.Fatalf("%s: exit", args) }), kong.Writers(io.Discard, io.Discard), nonNegativeDurations(), logLevels())
	if err != nil {
		t.Fatal(err)
	}
	_, err = parser.Parse(strings.Fields(args))
	return err
}

// serveConfig is the server configuration of the serve command line args.
func serveConfig(t *testing.T, args string) server.Config {
	t.Helper()
	cli := parseCLI(t, args)
	cfg, err := cli.Serve.config()
	if err != nil {
		t.Fatalf("%s: %v", args, err)
	}
	return cfg
}

// TestRolesTakeTheirOwnFlags: each role accepts the flags of what it runs and
// refuses the others' (a processor given --wait would ignore it silently).
func TestRolesTakeTheirOwnFlags(t *testing.T) {
	t.Parallel()
	for _, args := range []string{
		"api --nats-url nats://x --wait 5s --tokens-file t --order-ids keyed --http-max-conns 10",
		"processor --nats-url nats://x --processor-concurrency 64 --batch-writes on --http-addr :9090",
		"projector --nats-url nats://x --projector-concurrency 8 --memory-limit 400MiB",
		"serve --wait 5s --processor-concurrency 64 --projector-concurrency 8 --order-ids nonce",
	} {
		parseCLI(t, args)
	}
	for _, args := range []string{
		"processor --nats-url nats://x --wait 5s",
		"processor --nats-url nats://x --tokens-file t",
		"processor --nats-url nats://x --order-ids keyed",
		"projector --nats-url nats://x --processor-concurrency 64",
		"api --nats-url nats://x --projector-concurrency 8",
	} {
		var cli CLI
		parser, err := kong.New(&cli, kong.Name("orderly"), kong.Exit(func(int) {}), kong.Writers(io.Discard, io.Discard))
		if err != nil {
			t.Fatal(err)
		}
		if _, err := parser.Parse(strings.Fields(args)); err == nil || !strings.Contains(err.Error(), "unknown flag") {
			t.Errorf("%s: %v, want an unknown flag", args, err)
		}
	}
	cli := parseCLI(t, "processor --nats-url nats://x --processor-concurrency 64")
	if cfg, err := cli.Processor.RunFlags.config(server.Roles{Processor: true}); err != nil || cfg.HTTPAddr != "127.0.0.1:8080" {
		t.Errorf("processor http addr %q, %v", cfg.HTTPAddr, err)
	}
}

// secretFile writes content to a new file of mode 0600 named name.
func secretFile(t *testing.T, name, content string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// TestMetricsTokenFile: one token of 16 characters or more, surrounding
// white space dropped; a short token, two words, an empty or missing file
// are refused without printing the token.
func TestMetricsTokenFile(t *testing.T) {
	t.Parallel()
	write := func(content string) string { return secretFile(t, "metrics-token", content) }
	path := write("  s3cret-metrics-0123456789\n")
	cli := parseCLI(t, "processor --nats-url nats://x --metrics-token-file "+path)
	if cfg, err := cli.Processor.RunFlags.config(server.Roles{Processor: true}); err != nil || cfg.Ops.MetricsToken != "s3cret-metrics-0123456789" {
		t.Errorf("token %q, %v", cfg.Ops.MetricsToken, err)
	}
	// A byte order mark (editors on Windows) is not part of the token: it
	// was, and every scrape was refused.
	if tok, err := readMetricsToken(write("\ufeffs3cret-metrics-0123456789\r\n")); err != nil || tok != "s3cret-metrics-0123456789" {
		t.Errorf("with a byte order mark: %q, %v", tok, err)
	}
	for content, want := range map[string]string{
		"s3cret-short\n":                   "fewer than 16",
		"s3cret-metrics-0123 s3cret-other": "found 2 words",
		"\n":                               "found 0 words",
	} {
		_, err := readMetricsToken(write(content))
		if err == nil || !strings.Contains(err.Error(), want) || strings.Contains(err.Error(), "s3cret") {
			t.Errorf("%q: %v, want an error with %q and no token", content, err, want)
		}
	}
	if _, err := readMetricsToken(filepath.Join(t.TempDir(), "none")); err == nil || !strings.Contains(err.Error(), "--metrics-token-file") {
		t.Errorf("a missing file: %v", err)
	}
}

// TestTokensFile: 'tenant token' lines, blank lines and comments skipped; a
// token that could be guessed, a line of another shape, a token of two
// tenants and a file without tokens are refused, naming the line but never
// the token.
func TestTokensFile(t *testing.T) {
	t.Parallel()
	write := func(content string) string { return secretFile(t, "tokens", content) }
	got, err := readTokens(write("# clients\n\ntenant-a 3f9c2d7e8b1a4c6d0e5f\n  tenant-b   Zm9vYmFyYmF6cXV4cXV1eA  \n"))
	if err != nil {
		t.Fatal(err)
	}
	if want := map[string]string{"3f9c2d7e8b1a4c6d0e5f": "tenant-a", "Zm9vYmFyYmF6cXV4cXV1eA": "tenant-b"}; !maps.Equal(got, want) {
		t.Fatalf("tokens %v, want %v", got, want)
	}
	// A byte order mark (editors on Windows) and CRLF line ends are not
	// part of the tenants and tokens; a tenant that tokens add would not
	// make but that is printable stays as it is.
	got, err = readTokens(write("\ufefft1 3f9c2d7e8b1a4c6d0e5f\r\nacme:prod Zm9vYmFyYmF6cXV4cXV1eA\r\n"))
	if want := map[string]string{"3f9c2d7e8b1a4c6d0e5f": "t1", "Zm9vYmFyYmF6cXV4cXV1eA": "acme:prod"}; err != nil || !maps.Equal(got, want) {
		t.Errorf("with a byte order mark and CRLF: %q, %v; want %v", got, err, want)
	}
	for content, want := range map[string]string{
		"tenant-a 3f9c2d7e8b1a4c6d0e5f\ntenant-b guessable-tok\n": "line 2: the token of tenant tenant-b has 13 characters, fewer than 16",
		"tenant-a\n":                                         "line 1: want 'tenant token'",
		"tenant-a 3f9c2d7e8b1a4c6d0e5f extra\n":              "line 1: want 'tenant token'",
		"a 3f9c2d7e8b1a4c6d0e5f\nb 3f9c2d7e8b1a4c6d0e5f\n":   "line 2: token already used by tenant a",
		"# nobody yet\n":                                     "holds no tokens",
		"t\x1b[31m 3f9c2d7e8b1a4c6d0e5f\n":                   `line 1: tenant "t\x1b[31m": use up to 128 printable characters`,
		"t\u200b1 3f9c2d7e8b1a4c6d0e5f\n":                    "line 1: tenant", // a zero-width space
		"a\xff 3f9c2d7e8b1a4c6d0e5f\n":                       "line 1: tenant",
		strings.Repeat("t", 129) + " 3f9c2d7e8b1a4c6d0e5f\n": "printable characters",
	} {
		_, err := readTokens(write(content))
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%q: %v, want %q", content, err, want)
		}
		if err != nil && (strings.Contains(err.Error(), "guessable") || strings.Contains(err.Error(), "3f9c")) {
			t.Errorf("%q: the error shows the token: %v", content, err)
		}
	}
}

// TestTokensAdd: orderly tokens add appends a random token of 32 characters
// for a tenant to a file of mode 0600 that --tokens-file then reads, keeps
// the lines there, and refuses a tenant it could not read back and a file
// --tokens-file would refuse.
func TestTokensAdd(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "tokens")
	first, err := addToken(path, "tenant-a", rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	if info, err := os.Stat(path); err != nil || info.Mode().Perm() != 0o600 {
		t.Fatalf("tokens file: %v, mode %v", err, info.Mode())
	}
	if err := os.WriteFile(path, append(must(os.ReadFile(path)), "# no newline at the end"...), 0o600); err != nil {
		t.Fatal(err)
	}
	second, err := addToken(path, "tenant.b_2", bytes.NewReader(bytes.Repeat([]byte{0xff}, 24)))
	if err != nil {
		t.Fatal(err)
	}
	if second != strings.Repeat("_", 32) {
		t.Errorf("the token of 24 bytes 0xff is %q, want their base64url", second)
	}
	got, err := readTokens(path)
	if err != nil {
		t.Fatal(err)
	}
	if want := map[string]string{first: "tenant-a", second: "tenant.b_2"}; !maps.Equal(got, want) || len(first) != 32 {
		t.Fatalf("tokens %v, want %v (first %q)", got, want, first)
	}

	// A token written where no API reads it is lost: /dev/null took it.
	if _, err := addToken(os.DevNull, "tenant-a", rand.Reader); err == nil || !strings.Contains(err.Error(), "not a regular file") {
		t.Errorf("tokens add to %s: %v", os.DevNull, err)
	}
	for mode, warned := range map[os.FileMode]bool{0o600: false, 0o640: false, 0o644: true, 0o604: true} {
		if err := os.Chmod(path, mode); err != nil {
			t.Fatal(err)
		}
		if w := tokensFileWarning(path); (w != "") != warned || warned && !strings.Contains(w, "chmod 600") {
			t.Errorf("mode %v: warning %q", mode, w)
		}
	}
	for _, tenant := range []string{"", "two words", "t\x1b", strings.Repeat("t", 65), "#comment"} {
		if _, err := addToken(path, tenant, rand.Reader); err == nil {
			t.Errorf("tenant %q accepted", tenant)
		}
	}
	bad := filepath.Join(t.TempDir(), "bad")
	if err := os.WriteFile(bad, []byte("tenant-a short\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := addToken(bad, "tenant-b", rand.Reader); err == nil || !strings.Contains(err.Error(), "fewer than 16") {
		t.Errorf("a file --tokens-file refuses: %v", err)
	}
	if got := string(must(os.ReadFile(bad))); got != "tenant-a short\n" {
		t.Errorf("the refused file was changed: %q", got)
	}
	if _, err := addToken(filepath.Join(t.TempDir(), "x"), "t", bytes.NewReader(make([]byte, 5))); err == nil {
		t.Error("a token from 5 random bytes")
	}
}

// TestPrintJSONStaysValid: the tools' --json output, made safe for a
// terminal, is valid JSON with the same values, indented or not.
func TestPrintJSONStaysValid(t *testing.T) {
	t.Parallel()
	v := map[string]any{"reason": "boom \x1b]0;pwned\x07\u202e", "lines": []any{"a\nb", 1.0}}
	for _, indent := range []bool{false, true} {
		var out bytes.Buffer
		if err := printJSON(&out, v, indent); err != nil {
			t.Fatal(err)
		}
		var got map[string]any
		if err := json.Unmarshal(out.Bytes(), &got); err != nil {
			t.Fatalf("indent %v: not JSON: %v\n%s", indent, err, out.String())
		}
		if fmt.Sprint(got) != fmt.Sprint(v) {
			t.Errorf("indent %v: decoded %v, want %v", indent, got, v)
		}
		if strings.ContainsAny(out.String(), "\x1b\x07\u202e") {
			t.Errorf("indent %v: raw controls in %q", indent, out.String())
		}
		if lines := strings.Count(out.String(), "\n"); (lines > 1) != indent {
			t.Errorf("indent %v: %d lines:\n%s", indent, lines, out.String())
		}
	}
}

func must[T any](v T, err error) T {
	if err != nil {
		panic(err)
	}
	return v
}

// TestParseSize: the sizes of --min-free-space and --account-max-store, with
// 0 for none, and the refusals: no number, a negative one, an unknown unit,
// one whose bytes do not fit in 64 bits.
func TestParseSize(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]int64{
		"0": 0, " 0 ": 0, "1048576": 1 << 20, "256MiB": 256 << 20, "400MB": 400_000_000, "1 GiB": 1 << 30,
		"2TiB": 2 << 40, "3TB": 3_000_000_000_000, "512KiB": 512 << 10, "10B": 10,
	} {
		if got, err := parseSize("--x", in); err != nil || got != want {
			t.Errorf("parseSize(%q) = %d, %v; want %d", in, got, err, want)
		}
	}
	for _, in := range []string{"", "GiB", "-5GiB", "12XB", "1.5GiB", "9000000TiB", "9223372036854775807KiB"} {
		if got, err := parseSize("--x", in); err == nil || !strings.HasPrefix(err.Error(), "--x: want a size") {
			t.Errorf("parseSize(%q) = %d, %v; want a refusal naming the flag", in, got, err)
		}
	}
}

// TestHTTPLimitsAreSizes: --body-limit and --http-max-header-bytes take a
// size as the other size flags do, or bytes as before; 0 is refused naming
// the flag (--body-limit=0 was taken as the 64 KiB default without a word),
// and a size below the limit's minimum is refused by the configuration.
func TestHTTPLimitsAreSizes(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		args        string
		body, heads int64
	}{
		{"serve", 64 << 10, 32 << 10},
		{"serve --body-limit=1MiB --http-max-header-bytes=16KiB", 1 << 20, 16 << 10},
		{"serve --body-limit=65536 --http-max-header-bytes=8192", 65536, 8192},
		{"api --nats-url nats://127.0.0.1:4222 --body-limit=2KiB", 2 << 10, 32 << 10},
	} {
		cli := parseCLI(t, c.args)
		var cfg server.Config
		var err error
		if strings.HasPrefix(c.args, "api") {
			cfg, err = cli.API.config()
		} else {
			cfg, err = cli.Serve.config()
		}
		if err != nil || cfg.API.BodyLimit != c.body || int64(cfg.HTTP.MaxHeaderBytes) != c.heads {
			t.Errorf("%s: body limit %d, header limit %d, %v; want %d and %d", c.args, cfg.API.BodyLimit, cfg.HTTP.MaxHeaderBytes, err, c.body, c.heads)
		}
	}
	for _, c := range []struct{ args, want string }{
		{"serve --body-limit=0", "--body-limit: want a size such as 64KiB"},
		{"serve --http-max-header-bytes=0", "--http-max-header-bytes: want a size such as 32KiB"},
		{"serve --body-limit=64kb", "--body-limit: want a size"},
		{"serve --body-limit=4GiB", "at most 2GiB"},
	} {
		cli := parseCLI(t, c.args)
		if _, err := cli.Serve.config(); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v; want an error saying %q", c.args, err, c.want)
		}
	}
	for _, c := range []struct{ args, want string }{
		{"serve --body-limit=512", "--body-limit must be at least 1024 bytes"},
		{"serve --http-max-header-bytes=1KiB", "--http-max-header-bytes must be at least 4096 bytes"},
	} {
		if err := serveConfig(t, c.args).Validate(); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v; want %q", c.args, err, c.want)
		}
	}
}

// TestZeroIsNotTakenAsADefault: a flag given 0 where the configuration
// below takes 0 as its default is refused, or kept as 0 where 0 means
// something (--trace-sample-ratio=0 exported every trace: it was taken as
// 1; --max-wait=0s was taken as 30s, --nats-timeout=0s as 10s, bench
// --poll-drain=0s as 60s, --progress-every=0s as the library's default; healthcheck
// --timeout=0s always failed; events tail --since=0s printed every stored
// event).
func TestZeroIsNotTakenAsADefault(t *testing.T) {
	t.Parallel()
	if cfg := serveConfig(t, "serve --trace-sample-ratio=0"); cfg.Tracing.SampleRatio != 0 || cfg.Tracing.Validate() != nil {
		t.Errorf("--trace-sample-ratio=0: ratio %v, %v; want 0", cfg.Tracing.SampleRatio, cfg.Tracing.Validate())
	}
	if cfg := serveConfig(t, "serve"); cfg.Tracing.SampleRatio != 1 {
		t.Errorf("default trace sample ratio %v, want 1", cfg.Tracing.SampleRatio)
	}
	if err := serveConfig(t, "serve --trace-sample-ratio=1.5").Validate(); err == nil || !strings.Contains(err.Error(), "--trace-sample-ratio must be from 0 to 1") {
		t.Errorf("--trace-sample-ratio=1.5: %v; want a refusal", err)
	}
	for _, args := range []string{
		"serve --max-wait=0s", "serve --nats-timeout=0s", "api --nats-timeout=0", "processor --nats-timeout=0s",
		"healthcheck --timeout=0s", "bench --hold=0s", "bench --poll-drain=0s", "bench --progress-every=0s",
		"events tail --since=0s",
	} {
		fields := strings.Fields(args)
		flag, _, _ := strings.Cut(fields[len(fields)-1], "=")
		var cli CLI
		if err := parseInto(t, &cli, args); err == nil || !strings.Contains(err.Error(), flag) || !strings.Contains(err.Error(), "give more than 0") {
			t.Errorf("%s: %v; want a refusal naming the flag", args, err)
		}
	}
	// 0 where it means something stays accepted.
	for _, args := range []string{"serve --wait=0s", "dlq replay --all --wait=0s", "bench --warmup=0s", "serve --decision-lag=0s"} {
		var cli CLI
		if err := parseInto(t, &cli, args); err != nil {
			t.Errorf("%s: %v", args, err)
		}
	}
}

// TestLogLevels: --log-level takes slog's names in any case, and a name it
// does not know is told the four there are (slog said "unknown name").
func TestLogLevels(t *testing.T) {
	t.Parallel()
	for args, want := range map[string]slog.Level{"version": slog.LevelInfo, "--log-level=DEBUG version": slog.LevelDebug, "--log-level=warn version": slog.LevelWarn} {
		if cli := parseCLI(t, args); cli.LogLevel != want {
			t.Errorf("%s: %v, want %v", args, cli.LogLevel, want)
		}
	}
	var cli CLI
	if err := parseInto(t, &cli, "--log-level=verbose version"); err == nil || !strings.Contains(err.Error(), `--log-level: "verbose": want debug, info, warn or error`) {
		t.Errorf("--log-level=verbose: %v", err)
	}
}

// TestCheckMixRefusesAScenarioTwice: check --mix took a scenario given
// twice at its last weight.
func TestCheckMixRefusesAScenarioTwice(t *testing.T) {
	t.Parallel()
	if w, err := parseWeights("sync:3,async:1"); err != nil || w["sync"] != 3 || w["async"] != 1 {
		t.Errorf("sync:3,async:1: %v %v", w, err)
	}
	if _, err := parseWeights("sync:3,async:1,sync:0"); err == nil || !strings.Contains(err.Error(), "sync is given more than once") {
		t.Errorf("sync given twice: %v", err)
	}
}

// TestBenchRefusesFlagsItWouldIgnore: bench --rounds 3 without --baseline
// measured once, --poll-every without --poll and --waiters with a load's
// flags, --hold without --waiters were ignored without a word.
func TestBenchRefusesFlagsItWouldIgnore(t *testing.T) {
	t.Parallel()
	for args, want := range map[string]string{
		"bench --rounds=3":                          "--rounds needs --baseline",
		"bench --poll-every=1s":                     "--poll-every needs --poll",
		"bench --waiters=5 --baseline --requests=9": "not with --baseline, --requests",
		"bench --hold=10s":                          "--hold needs --waiters",
	} {
		var cli CLI
		if err := parseInto(t, &cli, args); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: %v, want %q", args, err, want)
		}
	}
	for _, args := range []string{"bench --rounds=3 --baseline", "bench --poll --poll-every=1s", "bench --waiters=5 --hold=10s"} {
		parseCLI(t, args)
	}
}

// TestUnknownEnvironmentVariables: an ORDERLY_ variable no flag of any
// command reads (misspelt: ORDERLY_BODYLIMIT) was ignored without a word;
// it is named, with the variable it is closest to. One another command
// reads, the tests' and the scripts' are not.
func TestUnknownEnvironmentVariables(t *testing.T) {
	t.Parallel()
	got := unknownEnvs(cliModel(t), []string{
		"PATH=/bin", "ORDERLY_BODYLIMIT=1", "ORDERLY_NATSURL=nats://x", "ORDERLY_FROBNICATE=1",
		"ORDERLY_BODY_LIMIT=64KiB", "ORDERLY_BENCH_URL=http://x", "ORDERLY_CHECK_TOKEN=t", "ORDERLY_CREDENTIALS_DIR=d",
		"ORDERLY_TEST_ORDER_IDS=nonce", "ORDERLY_HTTP_FUZZ_TIME=1s", "ORDERLY_BIN=/tmp/o", "ORDERLY_NATS_SERVER_CHILD=1",
		"ORDERLY_=x", "orderly_body_limit=1",
	})
	want := []unknownEnv{{"ORDERLY_BODYLIMIT", "ORDERLY_BODY_LIMIT"}, {"ORDERLY_NATSURL", "ORDERLY_NATS_URL"}, {"ORDERLY_FROBNICATE", ""}, {"ORDERLY_", ""}}
	if !slices.Equal(got, want) {
		t.Errorf("unknown variables %v, want %v", got, want)
	}
}

// durationsRefusedBelow are the duration flags without the positive tag
// whose 0 the configuration refuses after parsing, with what refuses it.
var durationsRefusedBelow = map[string]string{
	"dedup-window":        "jsstore.Topology.Validate: at least 100ms",
	"result-ttl":          "jsstore.Topology.Validate: at least the dedup window",
	"command-retention":   "jsstore.Topology.Validate: at least the dedup window",
	"http-header-timeout": "server.Config.Validate: positive",
	"http-body-timeout":   "server.Config.Validate: positive",
	"http-idle-timeout":   "server.Config.Validate: positive",
	"store-fault-grace":   "server.Config.Validate: positive",
	"settle":              "check.Config.Validate: positive",
	"request-timeout":     "check.Config.Validate: positive",
}

// TestEveryDurationFlagSaysWhatZeroDoes: a duration flag refuses 0 (the
// positive tag), is refused at 0 by the configuration below it
// (durationsRefusedBelow), or its help says what 0 does. A 0 that meant
// nothing was taken as a default without a word (--max-wait=0s was 30s).
func TestEveryDurationFlagSaysWhatZeroDoes(t *testing.T) {
	t.Parallel()
	zero := regexp.MustCompile(`\b0s?\b`)
	checked := 0
	eachFlag(cliModel(t).Node, func(n *kong.Node, f *kong.Flag) {
		if f.Target.Type() != reflect.TypeFor[time.Duration]() {
			return
		}
		checked++
		_, refused := durationsRefusedBelow[f.Name]
		if !f.Tag.Has("positive") && !refused && !zero.MatchString(f.Help) {
			t.Errorf("%s --%s: not tagged positive, not refused at 0 below, and its help does not say what 0 does: %q", n.Path(), f.Name, f.Help)
		}
	})
	if checked < 30 {
		t.Fatalf("only %d duration flags found: the walk is broken", checked)
	}
	// The refusals it names hold.
	for name := range durationsRefusedBelow {
		args := "serve --" + name + "=0s"
		if name == "settle" || name == "request-timeout" {
			args = "check --" + name + "=0s"
		}
		cli := parseCLI(t, args)
		var err error
		if strings.HasPrefix(args, "check") {
			_, err = cli.Check.config()
		} else {
			err = serveConfig(t, args).Validate()
		}
		if err == nil {
			t.Errorf("%s: accepted", args)
		}
	}
}
