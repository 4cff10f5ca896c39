package media

// Gemma4AudioConfig is the part of Gemma4AudioFeatureExtractor's config
// that shapes its output, with transformers' defaults.
type Gemma4AudioConfig struct {
	FeatureSize   int     `json:"feature_size"`
	SamplingRate  int     `json:"sampling_rate"`
	FrameLengthMs float64 `json:"frame_length_ms"`
	HopLengthMs   float64 `json:"hop_length_ms"`
	MinFrequency  float64 `json:"min_frequency"`
	MaxFrequency  float64 `json:"max_frequency"`
	MelFloor      float64 `json:"mel_floor"`
}

// ReadGemma4AudioConfig reads a checkpoint folder's feature extractor
// config, defaults where the folder has none.
func ReadGemma4AudioConfig(dir string) (Gemma4AudioConfig, error) {
	c := Gemma4AudioConfig{FeatureSize: 128, SamplingRate: 16000, FrameLengthMs: 20, HopLengthMs: 10, MaxFrequency: 8000, MelFloor: 1e-3}
	_, err := ReadProcessorSection(dir, "feature_extractor", &c)
	return c, err
}
