// llbench: the subset of llama-bench that compare.sh uses, for a llama.cpp
// built from a source tree that ships the library without its tools
// (ollama-src.sh). Written for mlxgo; it only calls llama.h.
//
//   llbench -m MODEL.gguf [-t THREADS] [-p PROMPT] [-n GEN] [-d DEPTH]
//           [-r REPS] [-b BATCH] [-ub UBATCH] [-o jsonl]
//
// As llama-bench does: random token ids, one warm-up (a prompt of up to a
// batch, or one generated token), then REPS timed runs, each on an empty
// cache: DEPTH tokens decoded untimed first, then either PROMPT tokens in
// batches (prefill) or GEN tokens one at a time (decode). Prints one JSON
// line per test with avg_ts (tokens per second, mean over the runs) and
// stddev_ts.
#include "llama.h"

#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

static double now_s() {
	return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

static bool decode_all(llama_context *ctx, std::vector<llama_token> &toks, int n, int batch, std::mt19937 &rng, int vocab) {
	std::uniform_int_distribution<int> d(0, vocab - 1);
	for (int i = 0; i < n; i += batch) {
		int k = std::min(batch, n - i);
		toks.resize(k);
		for (auto &t : toks) t = d(rng);
		if (llama_decode(ctx, llama_batch_get_one(toks.data(), k)) != 0) return false;
	}
	llama_synchronize(ctx);
	return true;
}

int main(int argc, char **argv) {
	std::string model;
	int threads = 2, pp = 0, tg = 0, depth = 0, reps = 1, batch = 2048, ubatch = 512;
	for (int i = 1; i < argc; i++) {
		std::string a = argv[i];
		auto next = [&]() -> const char * {
			if (i + 1 >= argc) { fprintf(stderr, "llbench: %s needs a value\n", a.c_str()); exit(2); }
			return argv[++i];
		};
		if (a == "-m") model = next();
		else if (a == "-t") threads = atoi(next());
		else if (a == "-p") pp = atoi(next());
		else if (a == "-n") tg = atoi(next());
		else if (a == "-d") depth = atoi(next());
		else if (a == "-r") reps = atoi(next());
		else if (a == "-b") batch = atoi(next());
		else if (a == "-ub") ubatch = atoi(next());
		else if (a == "-o") { if (std::string(next()) != "jsonl") { fprintf(stderr, "llbench: only -o jsonl\n"); return 2; } }
		else { fprintf(stderr, "llbench: unknown flag %s\n", a.c_str()); return 2; }
	}
	if (model.empty() || (pp <= 0) == (tg <= 0) || reps < 1) {
		fprintf(stderr, "usage: llbench -m MODEL -t T (-p PROMPT | -n GEN) [-d DEPTH] [-r REPS]\n");
		return 2;
	}
	llama_backend_init();
	llama_model_params mp = llama_model_default_params();
	llama_model *m = llama_model_load_from_file(model.c_str(), mp);
	if (!m) { fprintf(stderr, "llbench: cannot load %s\n", model.c_str()); return 1; }
	llama_context_params cp = llama_context_default_params();
	cp.n_ctx = depth + pp + tg + 16;
	cp.n_batch = batch;
	cp.n_ubatch = ubatch;
	cp.n_threads = threads;
	cp.n_threads_batch = threads;
	llama_context *ctx = llama_init_from_model(m, cp);
	if (!ctx) { fprintf(stderr, "llbench: cannot create a context\n"); return 1; }
	int vocab = llama_vocab_n_tokens(llama_model_get_vocab(m));
	std::mt19937 rng(42);
	std::vector<llama_token> toks;
	llama_memory_t mem = llama_get_memory(ctx);
	// warm-up
	if (pp > 0) decode_all(ctx, toks, std::min(pp, batch), batch, rng, vocab);
	else decode_all(ctx, toks, 1, 1, rng, vocab);
	std::vector<double> ts;
	for (int r = 0; r < reps; r++) {
		llama_memory_clear(mem, true);
		if (depth > 0 && !decode_all(ctx, toks, depth, batch, rng, vocab)) { fprintf(stderr, "llbench: decode failed\n"); return 1; }
		double t0 = now_s();
		bool ok = pp > 0 ? decode_all(ctx, toks, pp, batch, rng, vocab) : decode_all(ctx, toks, tg, 1, rng, vocab);
		double dt = now_s() - t0;
		if (!ok) { fprintf(stderr, "llbench: decode failed\n"); return 1; }
		ts.push_back((pp > 0 ? pp : tg) / dt);
	}
	double mean = 0, var = 0;
	for (double v : ts) mean += v;
	mean /= ts.size();
	for (double v : ts) var += (v - mean) * (v - mean);
	double sd = ts.size() > 1 ? std::sqrt(var / (ts.size() - 1)) : 0;
	printf("{\"model\": \"%s\", \"n_threads\": %d, \"n_prompt\": %d, \"n_gen\": %d, \"n_depth\": %d, \"n_batch\": %d, \"n_ubatch\": %d, \"avg_ts\": %.6f, \"stddev_ts\": %.6f}\n",
	       model.c_str(), threads, pp, tg, depth, batch, ubatch, mean, sd);
	llama_free(ctx);
	llama_model_free(m);
	llama_backend_free();
	return 0;
}
