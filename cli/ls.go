package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"text/tabwriter"

	"github.com/mlxgo/mlxgo/cli/internal/hub"
	"github.com/mlxgo/mlxgo/model/demo"
	"github.com/mlxgo/mlxgo/tensor"
)

// modelsDirEnv names the local folder of models that `mlxgo ls` lists
// besides the HF cache (default ~/.mlxgo/models): each subfolder (or
// org/name sub-subfolder) holding a config.json is a model.
const modelsDirEnv = "MLXGO_MODELS"

// listedModel is one row of `mlxgo ls`.
type listedModel struct {
	Name   string `json:"name"`
	Source string `json:"source"` // embedded, hf-cache or local
	Path   string `json:"path"`   // folder; "" for the embedded model (written to the cache on use)
	Size   int64  `json:"size"`
	Arch   string `json:"arch"`
	Quant  string `json:"quant"`
	Error  string `json:"error,omitempty"`
}

func init() {
	register(&command{name: "ls", summary: "list the models mlxgo can run (demo, HF cache, local)", run: runLs})
}

func runLs(args []string, _ io.Reader, stdout, stderr io.Writer) error {
	fs := newFlags("ls", stderr)
	asJSON := fs.Bool("json", false, "print JSON lines instead of a table")
	dir := fs.String("models-dir", "", "local models folder (default $"+modelsDirEnv+" or ~/.mlxgo/models)")
	fs.Usage = func() {
		fmt.Fprintln(stderr, "Usage: mlxgo ls [--json] [--models-dir DIR]\n\nLists the embedded demo model, the models in the Hugging Face cache\n(HF_HUB_CACHE, HF_HOME) and those in the local models folder, with\ntheir size on disk, architecture and quantization.")
		fs.PrintDefaults()
	}
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("%w: ls takes no arguments", errUsage)
	}
	if *dir == "" {
		*dir = defaultModelsDir()
	}
	rows, err := listModels(hub.CacheDir(), *dir)
	if err != nil {
		return err
	}
	if *asJSON {
		enc := json.NewEncoder(stdout)
		for _, r := range rows {
			if err := enc.Encode(r); err != nil {
				return err
			}
		}
		return nil
	}
	tw := tabwriter.NewWriter(stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "NAME\tSIZE\tARCH\tQUANT\tPATH")
	for _, r := range rows {
		path := r.Path
		if r.Source == "embedded" {
			path = "(embedded in mlxgo)"
		}
		arch := r.Arch
		if r.Error != "" {
			arch = "? (" + r.Error + ")"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", r.Name, humanSize(r.Size), arch, r.Quant, path)
	}
	return tw.Flush()
}

// defaultModelsDir is $MLXGO_MODELS, else ~/.mlxgo/models.
func defaultModelsDir() string {
	if d := os.Getenv(modelsDirEnv); d != "" {
		return d
	}
	home, err := os.UserHomeDir()
	if err != nil {
		return ""
	}
	return filepath.Join(home, ".mlxgo", "models")
}

// listModels gathers the rows: the demo forms first, then the HF cache's
// repos, then the local folder's models, each group sorted by name.
// Missing folders hold no models; unreadable configs show as errors in
// their row rather than failing the listing.
func listModels(hfCache, localDir string) ([]listedModel, error) {
	var rows []listedModel
	for _, form := range demo.Forms() {
		r := listedModel{Name: "demo", Source: "embedded"}
		if form != demo.BF16 {
			r.Name = "demo-" + form
		}
		sub, err := demo.FS(form)
		if err != nil {
			return nil, err
		}
		if r.Size, err = demo.Size(form); err != nil {
			return nil, err
		}
		raw, err := fs.ReadFile(sub, "config.json")
		r.Arch, r.Quant, err = describeConfig(raw, err)
		if err != nil {
			r.Error = err.Error()
		}
		rows = append(rows, r)
	}
	repos, err := hub.CachedRepos(hfCache)
	if err != nil {
		return nil, fmt.Errorf("reading the HF cache %s: %w", hfCache, err)
	}
	for _, repo := range repos {
		r := listedModel{Name: repo.ID, Source: "hf-cache", Path: repo.Snapshot}
		if repo.Snapshot == "" {
			r.Error = "no snapshot"
			rows = append(rows, r)
			continue
		}
		fillFromDir(&r)
		if r.Error == "no config.json" {
			continue // a dataset-like or tokenizer-only repo: not a model
		}
		rows = append(rows, r)
	}
	local, err := localModels(localDir)
	if err != nil {
		return nil, err
	}
	for i := range local {
		fillFromDir(&local[i])
	}
	return append(rows, local...), nil
}

// localModels finds folders with a config.json one or two levels under dir
// (name and path only: resolveModel needs no more, listModels fills in
// the rest).
func localModels(dir string) ([]listedModel, error) {
	if dir == "" {
		return nil, nil
	}
	var rows []listedModel
	var walk func(rel string, depth int) error
	walk = func(rel string, depth int) error {
		ents, err := os.ReadDir(filepath.Join(dir, rel))
		if err != nil {
			if rel == "" && errors.Is(err, fs.ErrNotExist) {
				return nil
			}
			return err
		}
		for _, e := range ents {
			p := filepath.Join(dir, rel, e.Name())
			if st, err := os.Stat(p); err != nil || !st.IsDir() || strings.HasPrefix(e.Name(), ".") {
				continue
			}
			name := filepath.ToSlash(filepath.Join(rel, e.Name()))
			if _, err := os.Stat(filepath.Join(p, "config.json")); err == nil {
				rows = append(rows, listedModel{Name: name, Source: "local", Path: p})
			} else if depth == 0 {
				if err := walk(name, 1); err != nil {
					return err
				}
			}
		}
		return nil
	}
	if err := walk("", 0); err != nil {
		return nil, fmt.Errorf("reading models folder %s: %w", dir, err)
	}
	sort.Slice(rows, func(i, j int) bool { return rows[i].Name < rows[j].Name })
	return rows, nil
}

// fillFromDir sets a row's size (files in the folder, following the HF
// cache's symlinks to blobs) and what its config.json says.
func fillFromDir(r *listedModel) {
	ents, err := os.ReadDir(r.Path)
	if err != nil {
		r.Error = err.Error()
		return
	}
	for _, e := range ents {
		if st, err := os.Stat(filepath.Join(r.Path, e.Name())); err == nil && st.Mode().IsRegular() {
			r.Size += st.Size()
		}
	}
	raw, err := os.ReadFile(filepath.Join(r.Path, "config.json"))
	if errors.Is(err, fs.ErrNotExist) {
		r.Error = "no config.json"
		return
	}
	r.Arch, r.Quant, err = describeConfig(raw, err)
	if err != nil {
		r.Error = err.Error()
	}
}

// describeConfig reads the architecture (model_type, else the first
// architectures entry, of the text config for multimodal checkpoints) and
// the quantization (mlx-lm's "quantization", HF's "quantization_config",
// else the stored float type) from config.json's bytes.
func describeConfig(raw []byte, readErr error) (arch, quant string, err error) {
	if readErr != nil {
		return "", "", readErr
	}
	var c struct {
		ModelType     string   `json:"model_type"`
		Architectures []string `json:"architectures"`
		TorchDType    string   `json:"torch_dtype"`
		DType         string   `json:"dtype"`
		Quantization  *struct {
			tensor.QuantSpec
			Mode string `json:"mode"`
		} `json:"quantization"`
		QuantConfig *struct {
			Method string `json:"quant_method"`
			Bits   int    `json:"bits"`
		} `json:"quantization_config"`
		Text *struct {
			ModelType string `json:"model_type"`
		} `json:"text_config"`
	}
	if err := json.Unmarshal(raw, &c); err != nil {
		return "", "", fmt.Errorf("config.json: %v", err)
	}
	arch = c.ModelType
	if arch == "" && len(c.Architectures) > 0 {
		arch = c.Architectures[0]
	}
	if c.Text != nil && c.Text.ModelType != "" && c.Text.ModelType != arch {
		arch += "/" + c.Text.ModelType
	}
	switch {
	case c.Quantization != nil && c.Quantization.Bits > 0:
		quant = fmt.Sprintf("%d-bit", c.Quantization.Bits)
		if c.Quantization.Mode != "" && c.Quantization.Mode != "affine" {
			quant += " " + c.Quantization.Mode
		}
		if c.Quantization.GroupSize > 0 {
			quant += fmt.Sprintf(" g%d", c.Quantization.GroupSize)
		}
	case c.QuantConfig != nil && c.QuantConfig.Method != "":
		quant = c.QuantConfig.Method
		if c.QuantConfig.Bits > 0 {
			quant += fmt.Sprintf(" %d-bit", c.QuantConfig.Bits)
		}
	default:
		dt := c.TorchDType
		if dt == "" {
			dt = c.DType
		}
		quant = map[string]string{"bfloat16": "bf16", "float16": "f16", "float32": "f32"}[dt]
		if quant == "" {
			quant = dt
		}
	}
	if quant == "" {
		quant = "-"
	}
	return arch, quant, nil
}

// humanSize prints a byte count in decimal units, as `du -h --si` does.
func humanSize(n int64) string {
	switch {
	case n >= 1e9:
		return fmt.Sprintf("%.1f GB", float64(n)/1e9)
	case n >= 1e6:
		return fmt.Sprintf("%.1f MB", float64(n)/1e6)
	case n >= 1e3:
		return fmt.Sprintf("%.1f kB", float64(n)/1e3)
	}
	return fmt.Sprintf("%d B", n)
}
