package generate

import "strings"

// StopMatcher finds stop strings in text streamed piece by piece (the
// output of a streaming detokenizer). A stop string may straddle pieces,
// so text that could be the start of one is held back until the next
// piece settles it; everything returned is final and never contains a
// stop string or what follows it. Not safe for concurrent use.
type StopMatcher struct {
	stops   []string
	held    string
	matched string
	done    bool
}

// NewStopMatcher matches the given stop strings (empty ones are ignored).
func NewStopMatcher(stops ...string) *StopMatcher {
	m := &StopMatcher{}
	for _, s := range stops {
		if s != "" {
			m.stops = append(m.stops, s)
		}
	}
	return m
}

// Add appends a piece of text and returns what can be emitted now, and
// whether a stop string was found (the returned text then ends just
// before it, and every later Add returns "", true).
func (m *StopMatcher) Add(text string) (emit string, stopped bool) {
	if m.done {
		return "", true
	}
	buf := m.held + text
	at, which := -1, ""
	for _, s := range m.stops {
		if i := strings.Index(buf, s); i >= 0 && (at < 0 || i < at) {
			at, which = i, s
		}
	}
	if at >= 0 {
		m.done, m.matched, m.held = true, which, ""
		return buf[:at], true
	}
	hold := 0
	for _, s := range m.stops {
		for k := min(len(s)-1, len(buf)); k > hold; k-- {
			if strings.HasSuffix(buf, s[:k]) {
				hold = k
				break
			}
		}
	}
	m.held = buf[len(buf)-hold:]
	return buf[:len(buf)-hold], false
}

// Flush returns the held-back text when the stream ends without a stop
// string (nothing after a match).
func (m *StopMatcher) Flush() string {
	out := m.held
	m.held = ""
	return out
}

// Matched is the stop string found, or "".
func (m *StopMatcher) Matched() string { return m.matched }
