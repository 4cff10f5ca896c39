package main

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/mlxgo/mlxgo/generate"
	"github.com/mlxgo/mlxgo/model"
	"github.com/mlxgo/mlxgo/serve"
	"github.com/mlxgo/mlxgo/tensor"
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

// TestServedMediaOutputs: the served multimodal model (the gemma4_mm
// fixture with its towers) is a generate.OutputForwarder whose positions
// are its full text pass's bits, so the batched lane's prompt passes skip
// the unsampled positions' last-layer work for it too.
func TestServedMediaOutputs(t *testing.T) {
	dir := "../model/testdata/gemma4_mm/f32"
	if _, err := os.Stat(filepath.Join(dir, "model.safetensors")); err != nil {
		t.Skip("the gemma4_mm fixture is absent (model/testdata/gemma4_mm/f32)")
	}
	m, err := model.Load(dir, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	served, done, err := serveModel(dir, m, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer done()
	if _, ok := served.(serve.MediaModel); !ok {
		t.Fatal("the fixture's towers did not load: not a media model")
	}
	of, ok := served.(generate.OutputForwarder)
	if !ok {
		t.Fatal("the served media model is not a generate.OutputForwarder")
	}
	ids := tensor.FromInt32([]int32{4, 8, 15, 16, 23, 42}, []int{1, 6})
	defer ids.Free()
	full, err := served.Forward(ids, nil)
	if err != nil {
		t.Fatal(err)
	}
	got, err := of.ForwardOutputs(ids, nil, []int32{5})
	if err != nil {
		t.Fatal(err)
	}
	want := tensor.SliceAxis(full, 1, 5, 6)
	if !bytes.Equal(got.Bytes(), want.Bytes()) {
		t.Fatal("the last position is not the full pass's")
	}
	tensor.Free(full, got, want)
}
