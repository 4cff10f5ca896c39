package main

import (
	"testing"
	"time"

	"github.com/spf13/pflag"
)

// TestMediaFetchFlags: without --allow-media-fetch the server gets no
// fetch policy (URLs refused unfetched); with it, the limits given.
func TestMediaFetchFlags(t *testing.T) {
	for _, c := range []struct {
		args []string
		on   bool
		to   time.Duration
		max  int
	}{
		{nil, false, 0, 0},
		{[]string{"--media-fetch-timeout", "3s"}, false, 0, 0},
		{[]string{"--allow-media-fetch"}, true, 10 * time.Second, 20 << 20},
		{[]string{"--allow-media-fetch", "--media-fetch-timeout", "2s", "--media-fetch-max-bytes", "1000"}, true, 2 * time.Second, 1000},
	} {
		fl := pflag.NewFlagSet("serve", pflag.ContinueOnError)
		f := addMediaFetchFlags(fl)
		if err := fl.Parse(c.args); err != nil {
			t.Fatal(err)
		}
		p := f.policy()
		if (p != nil) != c.on || p != nil && (p.Timeout != c.to || p.MaxBytes != c.max) {
			t.Errorf("%v: policy %+v", c.args, p)
		}
	}
}
