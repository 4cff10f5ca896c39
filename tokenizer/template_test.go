package tokenizer

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/ardanlabs/jinja"
)

// TestGoldenChat renders every conversation of the goldens and compares with
// transformers' apply_chat_template byte for byte.
func TestGoldenChat(t *testing.T) {
	for _, name := range realNames {
		t.Run(name, func(t *testing.T) {
			tk := realTokenizer(t, name)
			ct, err := tk.ChatTemplate("")
			if err != nil {
				t.Fatal(err)
			}
			g := readGolden(t, name)
			ok, raised := 0, 0
			for _, c := range g.Chat {
				if checkChat(t, ct, c.Name, c) {
					ok++
					if c.Output == nil {
						raised++
					}
				}
			}
			t.Logf("%s: %d/%d renders identical (%d raise as in Python)", name, ok, len(g.Chat), raised)
		})
	}
}

// checkChat renders one golden conversation and reports a difference.
func checkChat(t *testing.T, ct *ChatTemplate, name string, c goldenChat) bool {
	t.Helper()
	var kw map[string]any
	if len(c.Kwargs) > 0 {
		if err := json.Unmarshal(c.Kwargs, &kw); err != nil {
			t.Fatal(err)
		}
	}
	req := ChatRequest{Messages: c.Messages, AddGenerationPrompt: c.AddGenerationPrompt, Kwargs: kw}
	if len(c.Tools) > 0 {
		req.Tools = c.Tools
	}
	if len(c.Documents) > 0 {
		req.Documents = c.Documents
	}
	got, err := ct.Render(req)
	label := fmt.Sprintf("%s gen=%v kwargs=%s", name, c.AddGenerationPrompt, c.Kwargs)
	switch {
	case c.Output == nil:
		if err == nil {
			t.Errorf("%s: rendered, want error %s: %s", label, c.ErrorType, c.Error)
			return false
		}
		if c.ErrorType == "TemplateError" && err.Error() != c.Error {
			t.Errorf("%s: error %q, want %q", label, err, c.Error)
			return false
		}
	case err != nil:
		t.Errorf("%s: %v", label, err)
		return false
	case got != *c.Output:
		t.Errorf("%s:\n got %q\nwant %q", label, got, *c.Output)
		return false
	}
	return true
}

func TestPyJSON(t *testing.T) {
	for _, c := range []struct{ in, want string }{
		{`1.0`, `1.0`}, {`0.25`, `0.25`}, {`1e-07`, `1e-07`}, {`1e16`, `1e+16`}, {`123456789012345.0`, `123456789012345.0`},
		{`-0.0001`, `-0.0001`}, {`0.00001`, `1e-05`}, {`3`, `3`},
		{`"a\"b\\c\n\u0001\u007f é ✓ \u2028"`, "\"a\\\"b\\\\c\\n\\u0001\x7f é ✓ \u2028\""},
		{`{"b": 1, "a": [true, null, {}, []]}`, `{"b": 1, "a": [true, null, {}, []]}`},
	} {
		v, err := toValue(json.RawMessage(c.in))
		if err != nil {
			t.Fatal(err)
		}
		got, err := pyToJSON([]jinjaValue{v}, nil)
		if err != nil {
			t.Fatal(err)
		}
		if got.AsString() != c.want {
			t.Errorf("tojson(%s) = %s, want %s", c.in, got.AsString(), c.want)
		}
	}
	v, _ := toValue(json.RawMessage(`{"b": [1, {"c": "x"}], "a": {}}`))
	got, _ := pyToJSON([]jinjaValue{v}, map[string]jinjaValue{"indent": jinjaInt(2), "sort_keys": jinjaBool(true)})
	want := "{\n  \"a\": {},\n  \"b\": [\n    1,\n    {\n      \"c\": \"x\"\n    }\n  ]\n}"
	if got.AsString() != want {
		t.Errorf("indent: got %q want %q", got.AsString(), want)
	}
}

func TestRewriteFilters(t *testing.T) {
	in := `{{ x | tojson }}{{ "| tojson" }}{% set y = z|tojson(indent=2) %} | tojson {{ a|tojsonx }}`
	want := `{{ x | __mlxgo_tojson }}{{ "| tojson" }}{% set y = z|__mlxgo_tojson(indent=2) %} | tojson {{ a|tojsonx }}`
	if got := rewriteFilters(in); got != want {
		t.Errorf("got  %s\nwant %s", got, want)
	}
}

func TestRaiseException(t *testing.T) {
	ct, err := CompileChatTemplate(`{{ raise_exception("Only user and assistant roles are supported!") }}`, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	_, err = ct.Render(ChatRequest{Messages: []any{}})
	if err == nil || err.Error() != "Only user and assistant roles are supported!" {
		t.Fatalf("err = %v", err)
	}
	if !strings.Contains(err.Error(), "roles") {
		t.Fatal(err)
	}
}

type jinjaValue = jinja.Value

func jinjaInt(i int64) jinja.Value { return jinja.NewInt(i) }
func jinjaBool(b bool) jinja.Value { return jinja.NewBool(b) }

func TestStrftimeNow(t *testing.T) {
	ct, err := CompileChatTemplate(`{{ strftime_now("%d %b %Y") }}|{{ strftime_now("%Y-%m-%d") }}`, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	out, err := ct.Render(ChatRequest{Messages: []any{}})
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	want := now.Format("02 Jan 2006") + "|" + now.Format("2006-01-02")
	if out != want && !strings.Contains(out, now.Format("2006")) {
		t.Fatalf("got %q, want %q", out, want)
	}
}
