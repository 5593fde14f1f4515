# skipped: 2 devices requested, alcf-ai-testbed:cerebras has at most 1 (1 node(s) x 1)
