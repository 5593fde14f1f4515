# skipped: 16 devices requested, jade2 has at most 8 (1 node(s) x 8)
