"""Training data of the language-model workloads: synthetic tokens, the shipped corpus,
files streamed from disk, and synthetic codon-tokenised genomes (GenSLM)."""
