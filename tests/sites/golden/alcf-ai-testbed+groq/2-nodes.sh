# skipped: 16 devices requested, alcf-ai-testbed:groq has at most 8 (1 node(s) x 8)
