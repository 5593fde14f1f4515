# skipped: 32 devices requested, graphcore-pod16 has at most 16 (1 node(s) x 16)
