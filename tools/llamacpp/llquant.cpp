// llquant: llama-quantize's "--pure IN OUT Q4_0|Q8_0" through llama.h's
// llama_model_quantize, for a llama.cpp built from a source tree that
// ships the library without its tools (ollama-src.sh). Written for mlxgo.
#include "llama.h"

#include <cstdio>
#include <cstring>
#include <string>

int main(int argc, char **argv) {
	if (argc != 5 || std::string(argv[1]) != "--pure") {
		fprintf(stderr, "usage: llquant --pure IN.gguf OUT.gguf Q4_0|Q8_0\n");
		return 2;
	}
	std::string type = argv[4];
	llama_model_quantize_params p = llama_model_quantize_default_params();
	if (type == "Q4_0") p.ftype = LLAMA_FTYPE_MOSTLY_Q4_0;
	else if (type == "Q8_0") p.ftype = LLAMA_FTYPE_MOSTLY_Q8_0;
	else { fprintf(stderr, "llquant: type %s (want Q4_0 or Q8_0)\n", type.c_str()); return 2; }
	p.pure = true;
	p.nthread = 2;
	llama_backend_init();
	uint32_t rc = llama_model_quantize(argv[2], argv[3], &p);
	llama_backend_free();
	if (rc != 0) { fprintf(stderr, "llquant: failed (%u)\n", rc); return 1; }
	return 0;
}
