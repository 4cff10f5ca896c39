package hub

import (
	"fmt"
	"io"
	"strings"
	"time"
)

// progress draws the download state. On a terminal it redraws one line
// (at most ten times a second); elsewhere (a log, a pipe) it prints one
// line per finished file so the output stays readable.
type progress struct {
	w          io.Writer
	tty        bool
	files, idx int
	name       string
	size, done int64
	start      time.Time
	last       time.Time
	drawn      bool
	cached     bool // the current file was already in the cache
}

func newProgress(w io.Writer, tty bool, files int) *progress {
	return &progress{w: w, tty: tty, files: files}
}

func (p *progress) startFile(name string, size int64) {
	if p == nil || p.w == nil {
		return
	}
	p.idx++
	p.name, p.size, p.done, p.start, p.cached = name, size, 0, time.Now(), false
	p.draw(true)
}

func (p *progress) setSize(n int64) {
	if p != nil && p.w != nil {
		p.size = n
	}
}

func (p *progress) setDone(n int64) {
	if p != nil && p.w != nil {
		p.done = n
		p.draw(false)
	}
}

func (p *progress) add(n int64) {
	if p != nil && p.w != nil && n > 0 {
		p.done += n
		p.draw(false)
	}
}

// note prints a message (a retry) on its own line.
func (p *progress) note(msg string) {
	if p == nil || p.w == nil {
		return
	}
	if p.tty && p.drawn {
		fmt.Fprint(p.w, "\r\033[K")
	}
	fmt.Fprintf(p.w, "%s: %s\n", p.name, msg)
	p.drawn = false
}

// markCached notes that the current file needed no download.
func (p *progress) markCached(size int64) {
	if p != nil && p.w != nil {
		p.cached, p.done = true, size
	}
}

func (p *progress) endFile() {
	if p == nil || p.w == nil {
		return
	}
	if p.tty {
		p.draw(true)
		return
	}
	el := time.Since(p.start).Seconds()
	rate := ""
	if p.cached {
		rate = " (already in the cache)"
	} else if el > 0 {
		rate = fmt.Sprintf(", %s/s", human(int64(float64(p.done)/el)))
	}
	fmt.Fprintf(p.w, "[%d/%d] %s %s%s\n", p.idx, p.files, p.name, human(p.done), rate)
}

func (p *progress) finish() {
	if p != nil && p.w != nil && p.tty && p.drawn {
		fmt.Fprintln(p.w)
	}
}

func (p *progress) draw(force bool) {
	if !p.tty {
		return
	}
	now := time.Now()
	if !force && now.Sub(p.last) < 100*time.Millisecond {
		return
	}
	p.last = now
	const width = 24
	bar, pct := strings.Repeat(" ", width), ""
	if p.size > 0 {
		frac := min(float64(p.done)/float64(p.size), 1)
		k := int(frac * width)
		bar = strings.Repeat("=", k) + strings.Repeat(" ", width-k)
		if k < width && k > 0 {
			bar = bar[:k-1] + ">" + bar[k:]
		}
		pct = fmt.Sprintf("%3.0f%% ", 100*frac)
	}
	rate := ""
	if p.cached {
		rate = " cached"
	} else if el := now.Sub(p.start).Seconds(); el > 0.2 {
		rate = fmt.Sprintf(" %s/s", human(int64(float64(p.done)/el)))
	}
	total := "?"
	if p.size >= 0 {
		total = human(p.size)
	}
	fmt.Fprintf(p.w, "\r\033[K[%d/%d] [%s] %s%s/%s%s %s", p.idx, p.files, bar, pct, human(p.done), total, rate, p.name)
	p.drawn = true
}

// human formats a byte count with decimal units, as the hub shows sizes.
func human(n int64) string {
	f := float64(n)
	for _, u := range []string{"B", "kB", "MB", "GB", "TB"} {
		if f < 1000 || u == "TB" {
			if u == "B" {
				return fmt.Sprintf("%d B", n)
			}
			return fmt.Sprintf("%.1f %s", f, u)
		}
		f /= 1000
	}
	return ""
}
