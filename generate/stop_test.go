package generate_test

import (
	"strings"
	"testing"

	"github.com/mlxgo/mlxgo/generate"
)

func TestStopMatcher(t *testing.T) {
	cases := []struct {
		stops   []string
		pieces  []string
		want    string
		matched string
	}{
		{[]string{"END"}, []string{"hello ", "wor", "ld"}, "hello world", ""},
		{[]string{"END"}, []string{"abc E", "N", "D tail"}, "abc ", "END"},
		{[]string{"END"}, []string{"abc EN", "X"}, "abc ENX", ""},
		{[]string{"</s>", "\n\n"}, []string{"a\n", "\nb</s>"}, "a", "\n\n"},
		{[]string{"xyz", "yz"}, []string{"axy", "z"}, "a", "xyz"}, // the earliest match wins
		{[]string{"ab"}, []string{"aab"}, "a", "ab"},
		{[]string{"", "é!"}, []string{"café", "!"}, "caf", "é!"},
		{nil, []string{"plain"}, "plain", ""},
	}
	for _, c := range cases {
		m := generate.NewStopMatcher(c.stops...)
		var out strings.Builder
		stopped := false
		for _, p := range c.pieces {
			emit, s := m.Add(p)
			if strings.Contains(emit, "END") && c.matched == "END" {
				t.Errorf("%v: emitted part of a stop string %q", c.pieces, emit)
			}
			out.WriteString(emit)
			stopped = stopped || s
		}
		if !stopped {
			out.WriteString(m.Flush())
		}
		if out.String() != c.want || m.Matched() != c.matched || stopped != (c.matched != "") {
			t.Errorf("stops %q pieces %q: got %q (matched %q, stopped %v), want %q (%q)", c.stops, c.pieces, out.String(), m.Matched(), stopped, c.want, c.matched)
		}
	}
	// Hold-back: a possible start of a stop string is not emitted yet.
	m := generate.NewStopMatcher("STOP")
	if emit, _ := m.Add("go ST"); emit != "go " {
		t.Errorf("emitted %q, want the held-back %q excluded", emit, "ST")
	}
	if emit, _ := m.Add("ill"); emit != "STill" {
		t.Errorf("emitted %q after the false start", emit)
	}
	if emit, s := m.Add("STOP more"); emit != "" || !s {
		t.Errorf("emit %q stopped %v", emit, s)
	}
	if emit, s := m.Add("x"); emit != "" || !s {
		t.Error("text after the stop")
	}
}
