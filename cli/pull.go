package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"

	"github.com/mlxgo/mlxgo/cli/internal/hub"
)

func init() {
	register(&command{
		name:    "pull",
		summary: "download a model repo from the Hugging Face hub into the HF cache",
		run:     runPull,
	})
}

// runPull downloads REPO into the hub cache (shared with huggingface_hub
// and mlx-lm) and prints the snapshot folder, which every verb's --model
// accepts (as does any substring of the repo id, through resolveModel).
func runPull(args []string, _ io.Reader, stdout, stderr io.Writer) error {
	var rev, cacheDir string
	var include, exclude []string
	var quiet bool
	fl := newFlags("pull", stderr)
	fl.StringVar(&rev, "revision", "main", "branch, tag or commit to download")
	fl.StringArrayVar(&include, "include", nil, "download only files matching this glob (repeatable)")
	fl.StringArrayVar(&exclude, "exclude", nil, "skip files matching this glob (repeatable)")
	fl.StringVar(&cacheDir, "cache-dir", "", "hub cache folder (default: HF_HUB_CACHE, else $HF_HOME/hub, else ~/.cache/huggingface/hub)")
	fl.BoolVarP(&quiet, "quiet", "q", false, "no progress display")
	fl.Usage = func() {
		fmt.Fprintln(stderr, "Usage: mlxgo pull ORG/NAME [flags]\n\nHF_ENDPOINT selects the hub, HF_TOKEN authenticates (private and gated repos).")
		fl.PrintDefaults()
	}
	if err := parseFlags(fl, args); err != nil {
		return err
	}
	if fl.NArg() != 1 {
		return fmt.Errorf("%w: want one repo id (ORG/NAME), got %d arguments", errUsage, fl.NArg())
	}
	repo := fl.Arg(0)
	if !hub.ValidRepoID(repo) {
		return fmt.Errorf("%w: %q is not a repo id (want ORG/NAME)", errUsage, repo)
	}
	c := hub.NewClient()
	if cacheDir != "" {
		c.CacheDir = cacheDir
	}
	opts := hub.Options{Revision: rev, Include: include, Exclude: exclude}
	if !quiet {
		opts.Progress, opts.TTY = stderr, writerIsTTY(stderr)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	res, err := c.Pull(ctx, repo, opts)
	if err != nil {
		if errors.Is(err, context.Canceled) {
			return errors.New("interrupted; run the same command again to resume")
		}
		return err
	}
	_, err = fmt.Fprintln(stdout, res.Snapshot)
	return err
}

// writerIsTTY reports whether w is a terminal, where progress can redraw
// one line in place.
func writerIsTTY(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	st, err := f.Stat()
	return err == nil && st.Mode()&os.ModeCharDevice != 0
}
