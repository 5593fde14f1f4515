# skipped: 128 devices requested, alcf-ai-testbed:graphcore has at most 64 (1 node(s) x 64)
