package main

import (
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"

	"github.com/orderly-dev/orderly/internal/filesync"
)

// TokensCmd groups the tools for the API's tokens.
type TokensCmd struct {
	Add TokensAddCmd `cmd:"" help:"Add a random token for a tenant to a tokens file (created with mode 0600 if missing) and print it once, for the client's Authorization: Bearer header. Running APIs take it in on SIGHUP (kill -HUP), or at their next start."`
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
	fmt.Fprintf(os.Stderr, "added a token for tenant %s to %s; send the APIs SIGHUP (kill -HUP) to take it in. The token, for the client's Authorization: Bearer header:\n", c.Tenant, c.File)
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
