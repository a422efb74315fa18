package main

import (
	"bytes"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"text/tabwriter"

	"github.com/gofrs/flock"

	"github.com/orderly-dev/orderly/api"
	"github.com/orderly-dev/orderly/internal/filesync"
)

// TokensCmd groups the tools for the API's tokens.
type TokensCmd struct {
	Add    TokensAddCmd    `cmd:"" help:"Add a random token for a tenant to a tokens file (created with mode 0600 if missing) and print it once, for the client's Authorization: Bearer header, with its ID. Running APIs take it in on SIGHUP (kill -HUP), or at their next start."`
	List   TokensListCmd   `cmd:"" help:"List the tokens of a tokens file by tenant and ID (the first 8 hex digits of the token's SHA-256), never the tokens themselves."`
	Remove TokensRemoveCmd `cmd:"" help:"Remove tokens from a tokens file by ID (tokens add and tokens list show them), or every token of a --tenant; the file's other lines stay as they are. Running APIs stop taking them on SIGHUP (kill -HUP). To rotate a client's token: add the new one, move the client, remove the old one."`
}

// TokensAddCmd is orderly tokens add.
type TokensAddCmd struct {
	Tenant string `arg:"" help:"The tenant the token selects: 1 to 64 letters, digits, '.', '_' or '-'."`
	File   string `name:"tokens-file" env:"ORDERLY_TOKENS_FILE" type:"path" required:"" help:"The tokens file to add the line to, the one the APIs get with --tokens-file."`
}

// tenantName is what tokens add accepts as a tenant.
var tenantName = regexp.MustCompile(`^[A-Za-z0-9._-]{1,64}$`)

// Run adds the token and prints it.
func (c *TokensAddCmd) Run() error {
	token, err := addToken(c.File, c.Tenant, rand.Reader)
	if err != nil {
		return err
	}
	if w := tokensFileWarning(c.File); w != "" {
		fmt.Fprintln(os.Stderr, "warning:", w)
	}
	fmt.Fprintf(os.Stderr, "added a token for tenant %s to %s (ID %s, for tokens remove); send the APIs SIGHUP (kill -HUP) to take it in. The token, for the client's Authorization: Bearer header:\n", c.Tenant, c.File, api.TokenID(token))
	fmt.Println(token)
	return nil
}

// addToken appends "tenant token" to path, with a token of 24 random bytes
// (32 base64url characters), and returns the token. The file is created
// with mode 0600; an existing file keeps its lines and must hold what
// --tokens-file accepts.
func addToken(path, tenant string, random io.Reader) (string, error) {
	if !tenantName.MatchString(tenant) {
		return "", fmt.Errorf("tenant %q: use 1 to 64 letters, digits, '.', '_' or '-'", tenant)
	}
	if st, err := os.Stat(path); err == nil && !st.Mode().IsRegular() {
		return "", fmt.Errorf("tokens file %s is not a regular file: give the file the APIs read", path)
	}
	unlock, err := lockTokensFile(path)
	if err != nil {
		return "", err
	}
	defer unlock()
	old, err := os.ReadFile(path)
	switch {
	case errors.Is(err, os.ErrNotExist):
	case err != nil:
		return "", fmt.Errorf("tokens file: %w", err)
	default:
		if _, err := parseTokens(path, old); err != nil && !errors.Is(err, errNoTokens) {
			return "", err
		}
	}
	b := make([]byte, 24)
	if _, err := io.ReadFull(random, b); err != nil {
		return "", fmt.Errorf("random token: %w", err)
	}
	token := base64.RawURLEncoding.EncodeToString(b)
	line := tenant + " " + token + "\n"
	if len(old) > 0 && old[len(old)-1] != '\n' {
		line = "\n" + line
	}
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o600)
	if err != nil {
		return "", fmt.Errorf("tokens file: %w", err)
	}
	if _, err := f.WriteString(line); err != nil {
		f.Close()
		return "", fmt.Errorf("tokens file: %w", err)
	}
	// On the disk before the token is printed: a token handed to a client
	// must not vanish with a power loss (nor a new file's name with it).
	if err := f.Sync(); err != nil {
		f.Close()
		return "", fmt.Errorf("tokens file: %w", err)
	}
	if err := f.Close(); err != nil {
		return "", fmt.Errorf("tokens file: %w", err)
	}
	if len(old) == 0 {
		if err := filesync.SyncDir(filepath.Dir(path)); err != nil {
			return "", fmt.Errorf("tokens file: %w", err)
		}
	}
	return token, nil
}

// lockTokensFile holds a lock beside path (".NAME.lock", made if missing)
// until the returned function is called, so that a tokens add and a tokens
// remove at the same time do not lose what the other wrote: remove writes
// the file again from what it read. Where no file can be made beside path
// (a read-only directory) there is no lock, and none needed: remove, which
// replaces the file, cannot run there either.
func lockTokensFile(path string) (func(), error) {
	lock := flock.New(filepath.Join(filepath.Dir(path), "."+filepath.Base(path)+".lock"),
		flock.SetFlag(os.O_CREATE|os.O_RDWR), flock.SetPermissions(0o600))
	if err := lock.Lock(); err != nil {
		if errors.Is(err, fs.ErrPermission) || errors.Is(err, syscall.EROFS) {
			return func() {}, nil
		}
		return nil, fmt.Errorf("tokens file: lock: %w", err)
	}
	return func() { _ = lock.Close() }, nil
}

// tokenLine is one token of a tokens file.
type tokenLine struct {
	Tenant string `json:"tenant"`
	ID     string `json:"id"`
	Line   int    `json:"line"`

	token string
}

// readTokenLines reads the tokens of path, in the order of its lines: the
// file must be one that --tokens-file takes (one token at least).
func readTokenLines(path string) ([]byte, []tokenLine, error) {
	if st, err := os.Stat(path); err == nil && !st.Mode().IsRegular() {
		return nil, nil, fmt.Errorf("tokens file %s is not a regular file: give the file the APIs read", path)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, nil, fmt.Errorf("tokens file: %w", err)
	}
	lines, err := parseTokenLines(path, b)
	if err != nil {
		return nil, nil, err
	}
	return b, lines, nil
}

// TokensListCmd is orderly tokens list.
type TokensListCmd struct {
	File string `name:"tokens-file" env:"ORDERLY_TOKENS_FILE" type:"path" required:"" help:"The tokens file, the one the APIs get with --tokens-file."`
	JSON bool   `name:"json" help:"Print the tokens as a JSON array of {tenant, id, line}."`
}

// Run lists the tokens.
func (c *TokensListCmd) Run() error {
	_, lines, err := readTokenLines(c.File)
	if err != nil {
		return err
	}
	if w := tokensFileWarning(c.File); w != "" {
		fmt.Fprintln(os.Stderr, "warning:", w)
	}
	if c.JSON {
		return printJSON(os.Stdout, lines, true)
	}
	tw := tabwriter.NewWriter(os.Stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "TENANT\tID\tLINE")
	for _, l := range lines {
		fmt.Fprintf(tw, "%s\t%s\t%d\n", safe(l.Tenant), l.ID, l.Line)
	}
	return tw.Flush()
}

// TokensRemoveCmd is orderly tokens remove.
type TokensRemoveCmd struct {
	IDs    []string `arg:"" optional:"" name:"id" help:"IDs of the tokens to remove (tokens list shows them)."`
	Tenant string   `name:"tenant" help:"Remove every token of this tenant (its clients are refused once the APIs reload)."`
	File   string   `name:"tokens-file" env:"ORDERLY_TOKENS_FILE" type:"path" required:"" help:"The tokens file, the one the APIs get with --tokens-file."`
}

// Run removes the tokens and says which.
func (c *TokensRemoveCmd) Run() error {
	removed, err := removeTokens(c.File, c.IDs, c.Tenant)
	if err != nil {
		return err
	}
	for _, l := range removed {
		fmt.Fprintf(os.Stderr, "removed token %s of tenant %s (line %d)\n", l.ID, safe(l.Tenant), l.Line)
	}
	fmt.Fprintf(os.Stderr, "%d removed from %s; send the APIs SIGHUP (kill -HUP): until then they take the removed tokens\n", len(removed), c.File)
	return nil
}

// removeTokens removes from path the tokens whose ID is one of ids, and
// every token of tenant when it is not empty, and returns them. The file's
// other lines (comments too) stay as they were, and the file keeps its
// mode and owner. Nothing is written when an ID names no token or more
// than one, when the tenant has no token, or when no token would be left
// (an API refuses such a file).
func removeTokens(path string, ids []string, tenant string) ([]tokenLine, error) {
	if len(ids) == 0 && tenant == "" {
		return nil, errors.New("name the tokens to remove: their IDs (orderly tokens list shows them), or --tenant")
	}
	unlock, err := lockTokensFile(path)
	if err != nil {
		return nil, err
	}
	defer unlock()
	b, lines, err := readTokenLines(path)
	if err != nil {
		return nil, err
	}
	drop := make(map[int]tokenLine) // by line number
	for _, id := range ids {
		var found []tokenLine
		for _, l := range lines {
			if strings.EqualFold(l.ID, id) {
				found = append(found, l)
			}
		}
		switch len(found) {
		case 0:
			return nil, fmt.Errorf("tokens file %s has no token of ID %q (orderly tokens list shows them); nothing removed", path, id)
		case 1:
			drop[found[0].Line] = found[0]
		default:
			return nil, fmt.Errorf("tokens file %s: ID %s names %d tokens (lines %d and %d); nothing removed: remove the line by hand", path, id, len(found), found[0].Line, found[1].Line)
		}
	}
	if tenant != "" {
		n := 0
		for _, l := range lines {
			if l.Tenant == tenant {
				drop[l.Line] = l
				n++
			}
		}
		if n == 0 {
			return nil, fmt.Errorf("tokens file %s has no token of tenant %q; nothing removed", path, tenant)
		}
	}
	if len(drop) == len(lines) {
		return nil, fmt.Errorf("tokens file %s: that would remove its every token, and an API refuses a file without one; nothing removed: add the token that stays first (orderly tokens add)", path)
	}
	var kept bytes.Buffer
	for n, line := range bytes.SplitAfter(b, []byte("\n")) {
		if _, gone := drop[n+1]; !gone {
			kept.Write(line)
		}
	}
	if err := filesync.ReplaceFile(path, kept.Bytes()); err != nil {
		return nil, fmt.Errorf("tokens file: %w", err)
	}
	removed := make([]tokenLine, 0, len(drop))
	for _, l := range lines {
		if _, gone := drop[l.Line]; gone {
			removed = append(removed, l)
		}
	}
	return removed, nil
}
