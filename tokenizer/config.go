package tokenizer

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
)

// Config holds what a model folder says about special tokens and chat
// templates, besides tokenizer.json.
type Config struct {
	// SpecialTokens maps names such as "bos_token", "eos_token", "pad_token",
	// "unk_token" (and extra names such as "image_token") to token strings, from
	// tokenizer_config.json and special_tokens_map.json. Chat templates see
	// each of them as a variable.
	SpecialTokens map[string]string
	// AdditionalSpecialTokens lists tokenizer_config.json's
	// additional_special_tokens.
	AdditionalSpecialTokens []string
	// AddBOSToken and AddEOSToken are tokenizer_config.json's add_bos_token and
	// add_eos_token; nil when absent.
	AddBOSToken, AddEOSToken *bool
	// ChatTemplate is the default chat template; ChatTemplates holds named
	// ones (the default is also there as "default").
	ChatTemplate  string
	ChatTemplates map[string]string
	// EOSTokenIDs are the ids that end generation: generation_config.json's
	// eos_token_id (a number or a list) and the id of eos_token.
	EOSTokenIDs []int
	// BOSTokenID is the id of bos_token, or -1.
	BOSTokenID int
}

// loadConfig reads the optional configuration files of a model folder.
func loadConfig(dir string) (Config, error) {
	c := Config{SpecialTokens: map[string]string{}, ChatTemplates: map[string]string{}, BOSTokenID: -1}
	read := func(name string, v any) (bool, error) {
		data, err := os.ReadFile(filepath.Join(dir, name))
		if errors.Is(err, fs.ErrNotExist) {
			return false, nil
		}
		if err != nil {
			return false, err
		}
		if err := json.Unmarshal(data, v); err != nil {
			return false, &FieldError{File: name, Err: err}
		}
		return true, nil
	}
	// special_tokens_map.json first; tokenizer_config.json overrides it.
	var stm map[string]json.RawMessage
	if _, err := read("special_tokens_map.json", &stm); err != nil {
		return c, err
	}
	var tc map[string]json.RawMessage
	if _, err := read("tokenizer_config.json", &tc); err != nil {
		return c, err
	}
	for _, m := range []struct {
		file string
		v    map[string]json.RawMessage
	}{{"special_tokens_map.json", stm}, {"tokenizer_config.json", tc}} {
		for k, raw := range m.v {
			if k == "additional_special_tokens" {
				var list []json.RawMessage
				if err := json.Unmarshal(raw, &list); err != nil {
					return c, &FieldError{File: m.file, Field: k, Err: err}
				}
				c.AdditionalSpecialTokens = c.AdditionalSpecialTokens[:0]
				for i, it := range list {
					s, _, err := tokenString(it)
					if err != nil {
						return c, &FieldError{File: m.file, Field: fmt.Sprintf("%s[%d]", k, i), Err: err}
					}
					c.AdditionalSpecialTokens = append(c.AdditionalSpecialTokens, s)
				}
				continue
			}
			if k == "extra_special_tokens" {
				var extra map[string]json.RawMessage
				if json.Unmarshal(raw, &extra) == nil {
					for name, v := range extra {
						if s, ok, err := tokenString(v); err == nil && ok {
							c.SpecialTokens[name] = s
						}
					}
				}
				continue
			}
			if !strings.HasSuffix(k, "_token") || strings.HasPrefix(k, "add_") {
				continue
			}
			s, ok, err := tokenString(raw)
			if err != nil {
				return c, &FieldError{File: m.file, Field: k, Err: err}
			}
			if ok {
				c.SpecialTokens[k] = s
			} else {
				delete(c.SpecialTokens, k)
			}
		}
	}
	for _, f := range []struct {
		key string
		dst **bool
	}{{"add_bos_token", &c.AddBOSToken}, {"add_eos_token", &c.AddEOSToken}} {
		if raw, ok := tc[f.key]; ok && present(raw) {
			var b bool
			if err := json.Unmarshal(raw, &b); err != nil {
				return c, &FieldError{File: "tokenizer_config.json", Field: f.key, Err: err}
			}
			*f.dst = &b
		}
	}
	// Chat templates: tokenizer_config.json, then chat_template.json, then
	// chat_template.jinja, each overriding the one before (as transformers).
	if raw, ok := tc["chat_template"]; ok && present(raw) {
		if err := parseTemplates(raw, &c); err != nil {
			return c, &FieldError{File: "tokenizer_config.json", Field: "chat_template", Err: err}
		}
	}
	var ctj map[string]json.RawMessage
	if ok, err := read("chat_template.json", &ctj); err != nil {
		return c, err
	} else if ok && present(ctj["chat_template"]) {
		if err := parseTemplates(ctj["chat_template"], &c); err != nil {
			return c, &FieldError{File: "chat_template.json", Field: "chat_template", Err: err}
		}
	}
	if data, err := os.ReadFile(filepath.Join(dir, "chat_template.jinja")); err == nil {
		c.ChatTemplate = string(data)
		c.ChatTemplates["default"] = c.ChatTemplate
	} else if !errors.Is(err, fs.ErrNotExist) {
		return c, err
	}
	if entries, err := os.ReadDir(filepath.Join(dir, "additional_chat_templates")); err == nil {
		for _, e := range entries {
			if name, ok := strings.CutSuffix(e.Name(), ".jinja"); ok {
				data, err := os.ReadFile(filepath.Join(dir, "additional_chat_templates", e.Name()))
				if err != nil {
					return c, err
				}
				c.ChatTemplates[name] = string(data)
			}
		}
	}
	// generation_config.json's eos_token_id: a number or a list.
	var gc map[string]json.RawMessage
	if _, err := read("generation_config.json", &gc); err != nil {
		return c, err
	}
	if raw, ok := gc["eos_token_id"]; ok && present(raw) {
		var one int
		var many []int
		if json.Unmarshal(raw, &one) == nil {
			c.EOSTokenIDs = append(c.EOSTokenIDs, one)
		} else if err := json.Unmarshal(raw, &many); err == nil {
			c.EOSTokenIDs = append(c.EOSTokenIDs, many...)
		} else {
			return c, &FieldError{File: "generation_config.json", Field: "eos_token_id", Err: fmt.Errorf("want a number or a list of numbers")}
		}
	}
	return c, nil
}

// tokenString reads a token given as a string, as {"content": ...}, or null.
func tokenString(raw json.RawMessage) (string, bool, error) {
	if !present(raw) {
		return "", false, nil
	}
	var s string
	if err := json.Unmarshal(raw, &s); err == nil {
		return s, true, nil
	}
	var obj struct {
		Content *string `json:"content"`
	}
	if err := json.Unmarshal(raw, &obj); err != nil || obj.Content == nil {
		return "", false, fmt.Errorf(`want a string or {"content": ...}`)
	}
	return *obj.Content, true, nil
}

func parseTemplates(raw json.RawMessage, c *Config) error {
	var s string
	if err := json.Unmarshal(raw, &s); err == nil {
		c.ChatTemplate = s
		c.ChatTemplates["default"] = s
		return nil
	}
	var list []struct {
		Name     string `json:"name"`
		Template string `json:"template"`
	}
	if err := json.Unmarshal(raw, &list); err != nil {
		return fmt.Errorf(`want a string or a list of {"name", "template"}`)
	}
	for _, e := range list {
		c.ChatTemplates[e.Name] = e.Template
		if e.Name == "default" {
			c.ChatTemplate = e.Template
		}
	}
	return nil
}

// setConfig applies a loaded configuration: BOS/EOS ids and the
// add_bos_token/add_eos_token rule.
func (t *Tokenizer) setConfig(c Config) {
	t.Config = c
	if s, ok := c.SpecialTokens["bos_token"]; ok {
		if id, ok := t.ID(s); ok {
			t.Config.BOSTokenID = id
		}
	}
	if s, ok := c.SpecialTokens["eos_token"]; ok {
		if id, ok := t.ID(s); ok && !slices.Contains(t.Config.EOSTokenIDs, id) {
			t.Config.EOSTokenIDs = append(t.Config.EOSTokenIDs, id)
		}
	}
	sort.Ints(t.Config.EOSTokenIDs)
	// A tokenizer.json with a TemplateProcessing post-processor already says
	// which special tokens to add. Without one (older Llama/Mistral exports),
	// transformers adds BOS/EOS from add_bos_token/add_eos_token.
	if _, isTemplate := t.post.(templateProcessing); isTemplate {
		return
	}
	if c.AddBOSToken != nil && *c.AddBOSToken && t.Config.BOSTokenID >= 0 {
		t.addBOS = []int{t.Config.BOSTokenID}
	}
	if c.AddEOSToken != nil && *c.AddEOSToken {
		if s, ok := c.SpecialTokens["eos_token"]; ok {
			if id, ok := t.ID(s); ok {
				t.addEOS = []int{id}
			}
		}
	}
}
