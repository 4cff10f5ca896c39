package model

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
)

// ErrUnsupported marks a model, architecture or checkpoint feature this
// package cannot run; callers match it with errors.Is to tell "convert or
// pick another model" from a corrupt download.
var ErrUnsupported = errors.New("unsupported")

// ErrCheckpoint marks a checkpoint whose files disagree with its config or
// with each other (missing tensor, wrong shape, inconsistent quantization).
var ErrCheckpoint = errors.New("bad checkpoint")

// Config is a model folder's config.json, read once and decoded by each
// architecture into its own struct: the raw bytes are kept because every
// architecture knows different fields and their defaults.
type Config struct {
	// Dir is the model folder.
	Dir string
	// ModelType is config.json's model_type ("llama", "qwen3", ...).
	ModelType string
	// Architectures is config.json's architectures list.
	Architectures []string
	// Quant is the checkpoint's quantization (nil: not quantized).
	Quant *QuantConfig
	// EOS lists the end-of-sequence ids from config.json and, when present,
	// generation_config.json (duplicates removed).
	EOS []int
	// Raw is the config.json text.
	Raw []byte
}

// ReadConfig reads dir/config.json (and generation_config.json for EOS ids).
func ReadConfig(dir string) (*Config, error) {
	path := filepath.Join(dir, "config.json")
	raw, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("model: read config: %w", err)
	}
	c, err := ParseConfig(raw)
	if err != nil {
		return nil, fmt.Errorf("model: %s: %w", path, err)
	}
	c.Dir = dir
	if g, err := os.ReadFile(filepath.Join(dir, "generation_config.json")); err == nil {
		var gc struct {
			EOS IntList `json:"eos_token_id"`
		}
		if json.Unmarshal(g, &gc) == nil {
			c.EOS = mergeInts(c.EOS, gc.EOS)
		}
	}
	return c, nil
}

// ParseConfig parses config.json text.
func ParseConfig(raw []byte) (*Config, error) {
	var head struct {
		ModelType     string          `json:"model_type"`
		Architectures []string        `json:"architectures"`
		EOS           IntList         `json:"eos_token_id"`
		Quant         json.RawMessage `json:"quantization"`
		QuantConfig   json.RawMessage `json:"quantization_config"`
		TextConfig    *struct {
			EOS IntList `json:"eos_token_id"`
		} `json:"text_config"`
	}
	if err := json.Unmarshal(raw, &head); err != nil {
		return nil, fmt.Errorf("%w: config.json: %v", ErrCheckpoint, err)
	}
	c := &Config{ModelType: head.ModelType, Architectures: head.Architectures, EOS: mergeInts(nil, head.EOS), Raw: raw}
	if head.TextConfig != nil {
		c.EOS = mergeInts(c.EOS, head.TextConfig.EOS)
	}
	q, err := parseQuant(head.Quant, head.QuantConfig)
	if err != nil {
		return nil, err
	}
	c.Quant = q
	return c, nil
}

// Decode unmarshals config.json into v, whose fields should hold their
// defaults beforehand (JSON leaves absent fields alone).
func (c *Config) Decode(v any) error {
	if err := json.Unmarshal(c.Raw, v); err != nil {
		return fmt.Errorf("%w: config.json: %v", ErrCheckpoint, err)
	}
	return nil
}

// IntList is a JSON int or list of ints (eos_token_id is either).
type IntList []int

// UnmarshalJSON accepts null, a number or an array of numbers.
func (l *IntList) UnmarshalJSON(b []byte) error {
	var one *int
	if err := json.Unmarshal(b, &one); err == nil {
		*l = nil
		if one != nil {
			*l = IntList{*one}
		}
		return nil
	}
	var many []int
	if err := json.Unmarshal(b, &many); err != nil {
		return fmt.Errorf("want an int or a list of ints: %w", err)
	}
	*l = many
	return nil
}

func mergeInts(a []int, b []int) []int {
	for _, v := range b {
		dup := false
		for _, w := range a {
			dup = dup || w == v
		}
		if !dup {
			a = append(a, v)
		}
	}
	return a
}
