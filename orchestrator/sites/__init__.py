"""Sites: the profiles (YAML), their launchers and vendor runners, and the sandbox Slurm cluster with its site twins."""
