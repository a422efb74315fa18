// Package termsafe makes text read from the streams safe to print on an
// operator's terminal. Events, dead letters and stored answers are written
// by other processes; a field holding an escape sequence would otherwise
// reach the terminal of whoever runs orderly events tail or orderly dlq
// list, where it can rewrite the screen, the window title or the clipboard.
package termsafe

import (
	"fmt"
	"strings"
	"unicode/utf8"
)

// String returns s with every character that could control a terminal or
// reorder the text around it written as a JSON escape (\u001b), and every
// byte that is not UTF-8 as \ufffd: C0 and C1 controls, DEL, and the
// Unicode marks that change the direction of text. A compact JSON document
// (no whitespace between its tokens) stays valid and means the same, since
// such characters can then only stand inside its strings, where the escape
// is theirs; indent it after, not before. Anything else printable is left
// as it is.
func String(s string) string {
	i := 0
	for i < len(s) {
		r, size := utf8.DecodeRuneInString(s[i:])
		if unsafe(r, size) {
			break
		}
		i += size
	}
	if i == len(s) {
		return s
	}
	var b strings.Builder
	b.Grow(len(s) + 16)
	b.WriteString(s[:i])
	for i < len(s) {
		r, size := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && size == 1:
			b.WriteString(`\ufffd`)
		case unsafe(r, size):
			fmt.Fprintf(&b, `\u%04x`, r)
		default:
			b.WriteString(s[i : i+size])
		}
		i += size
	}
	return b.String()
}

// Bytes is String for bytes.
func Bytes(b []byte) string { return String(string(b)) }

func unsafe(r rune, size int) bool {
	switch {
	case r == utf8.RuneError && size == 1:
		return true
	case r < 0x20, r >= 0x7f && r <= 0x9f:
		return true
	case r == 0x061c, r == 0x200e, r == 0x200f, r >= 0x202a && r <= 0x202e, r >= 0x2066 && r <= 0x2069:
		return true // bidirectional marks, embeddings, overrides and isolates
	}
	return false
}
