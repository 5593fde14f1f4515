# skipped: 16 devices requested, sophia:bigmem has at most 8 (1 node(s) x 8)
