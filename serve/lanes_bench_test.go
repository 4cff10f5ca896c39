package serve

import (
	"fmt"
	"syscall"
	"testing"
	"time"
)

// selfCPU is the CPU time the process has used so far (user and system).
func selfCPU() time.Duration {
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// BenchmarkLoneRequestLanes compares one request alone on the batched
// lane (the default, --batch 8) with the same request on the serial lane
// (--batch 1): a chat request for 128 tokens with EOS banned on the demo
// model, the two servers alternated each iteration. It reports both
// lanes' tokens per wall second and per CPU second of the process (client
// included, the same on both sides) and batched ÷ serial of each; the
// issue asks that a lone request run at the serial path's speed.
//
//	go test ./serve -run '^$' -bench LoneRequestLanes -benchtime 5x
func BenchmarkLoneRequestLanes(b *testing.B) {
	d := loadDemo(b)
	serial := d.config()
	serial.Batch, serial.PromptCacheBytes = 1, -1
	_, hsSerial := startServer(b, serial)
	_, hsBatched := startServer(b, d.config())
	bias := map[string]float64{}
	for _, id := range d.eos {
		bias[fmt.Sprint(id)] = -100
	}
	const tokens = 128
	var wall, cpu [2]time.Duration
	for i := range b.N {
		for k, url := range []string{hsSerial.URL, hsBatched.URL} {
			body := map[string]any{"messages": []any{map[string]any{"role": "user", "content": fmt.Sprintf("Log %d: tell me about the sea.", i)}},
				"max_tokens": tokens, "temperature": 0, "logit_bias": bias}
			c0, t0 := selfCPU(), time.Now()
			if code, out := post(b, url+"/v1/chat/completions", body); code != 200 {
				b.Fatalf("status %d: %v", code, out)
			}
			wall[k] += time.Since(t0)
			cpu[k] += selfCPU() - c0
		}
	}
	n := float64(b.N * tokens)
	b.ReportMetric(n/wall[0].Seconds(), "serial-tok/s")
	b.ReportMetric(n/wall[1].Seconds(), "batched-tok/s")
	b.ReportMetric(wall[0].Seconds()/wall[1].Seconds(), "wall-ratio")
	b.ReportMetric(n/cpu[0].Seconds(), "serial-tok/cpu-s")
	b.ReportMetric(n/cpu[1].Seconds(), "batched-tok/cpu-s")
	b.ReportMetric(cpu[0].Seconds()/cpu[1].Seconds(), "cpu-ratio")
}
