package model

import (
	"encoding/json"
	"fmt"
)

type gemma4AudioConfig struct {
	Hidden int `json:"hidden_size"`
}

func parseGemma4AudioConfig(raw json.RawMessage) (*gemma4AudioConfig, error) {
	c := &gemma4AudioConfig{}
	if err := json.Unmarshal(raw, c); err != nil {
		return nil, fmt.Errorf("%w: config.json audio_config: %v", ErrCheckpoint, err)
	}
	return c, nil
}

// Gemma4Audio is Gemma 4's audio tower.
type Gemma4Audio struct{}

func loadGemma4Audio(w *Weights, cfg *gemma4AudioConfig, towerPrefix, embedPrefix string, textHidden int) *Gemma4Audio {
	return nil
}
