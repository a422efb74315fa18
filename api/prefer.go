package api

import (
	"strings"
	"time"
)

// maxPreferWait bounds a parsed wait=N before the server's own cap.
const maxPreferWait = 24 * time.Hour

// Preferences are the parts of the Prefer header (RFC 7240) that orderly honours.
type Preferences struct {
	// RespondAsync: answer 202 as soon as the command is durably stored.
	RespondAsync bool
	// Wait is the client's wait=N, in seconds; HasWait says it was given.
	Wait    time.Duration
	HasWait bool
}

// ParsePrefer parses the values of the Prefer header fields. Unknown
// preferences and malformed values are ignored, as RFC 7240 asks.
func ParsePrefer(values []string) Preferences {
	var p Preferences
	for _, v := range values {
		for _, pref := range strings.Split(v, ",") {
			if i := strings.IndexByte(pref, ';'); i >= 0 {
				pref = pref[:i] // parameters: none we know
			}
			name, value, _ := strings.Cut(pref, "=")
			name = strings.ToLower(strings.TrimSpace(name))
			value = strings.Trim(strings.TrimSpace(value), `"`)
			switch name {
			case "respond-async":
				p.RespondAsync = true
			case "wait":
				if isDigits(value) { // any size: the server caps it
					p.Wait, p.HasWait = capSeconds(value, maxPreferWait), true
				}
			}
		}
	}
	return p
}
