"""Graphcore's ``--ipus`` on a stock Slurm: a SPANK plugin the Graphcore twin loads.

The plugin is built here, once per Slurm version, with the host's C compiler; the twin's
plugstack.conf (templates/sandbox/plugstack.conf.j2) names it.
"""

from __future__ import annotations

import hashlib
import os
import re
from pathlib import Path

from orchestrator.sites.sandbox import facts
from orchestrator.sites.sandbox.errors import SandboxError
from orchestrator.sites.sandbox.facts import SPANK_DIR
from orchestrator.sites.sandbox.proc import _clean_env, _run

# ``sbatch --ipus=4`` on this Slurm (22.05, Debian) fails: "sbatch: unrecognized option
# '--ipus=4'". The option comes from Graphcore's modified Slurm (its V-IPU select plugin and
# client patches); a stock Slurm has no IPU resource. The twin adds the option to sbatch, srun
# and salloc through this SPANK plugin, which checks only what the site checks of the value
# (IPU counts are powers of two, at most the Pod's); it allocates nothing. Declarations follow
# slurm/spank.h; options must be registered with spank_option_register in allocator context.
SPANK_IPUS_SOURCE = r"""
/* Written by orch.sandbox: --ipus for a twin of a Graphcore (V-IPU) Slurm. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef int (*spank_opt_cb_f)(int val, const char *optarg, int remote);
struct spank_option { char *name; char *arginfo; char *usage; int has_arg; int val; spank_opt_cb_f cb; };
extern int spank_option_register(void *spank, struct spank_option *opt);

const char plugin_name[] = "orch_twin_ipus";
const char plugin_type[] = "spank";
const unsigned int plugin_version = ORCH_SLURM_VERSION;
const unsigned int spank_plugin_version = 1;

static long max_ipus = 64;

static int ipus_cb(int val, const char *optarg, int remote)
{
    char *end = NULL;
    long n = optarg ? strtol(optarg, &end, 10) : -1;
    if (!optarg || *optarg == '\0' || *end != '\0' || n < 1 || (n & (n - 1)) || n > max_ipus) {
        fprintf(stderr, "error: --ipus=%s: IPU counts are powers of two from 1 to %ld\n",
                optarg ? optarg : "", max_ipus);
        return -1;
    }
    return 0;
}

static struct spank_option ipus_option = {
    "ipus", "N", "IPUs for the job (orch twin stand-in for Graphcore's Slurm: checks the count only)",
    1, 0, ipus_cb
};

int slurm_spank_init(void *sp, int ac, char **av)
{
    for (int i = 0; i < ac; i++)
        if (strncmp(av[i], "max=", 4) == 0)
            max_ipus = strtol(av[i] + 4, NULL, 10);
    return spank_option_register(sp, &ipus_option) == 0 ? 0 : -1;
}
"""


def _slurm_version_number() -> int:
    cp = _run(["sbatch", "--version"], timeout=10, env=_clean_env())
    match = re.search(r"(\d+)\.(\d+)\.(\d+)", cp.stdout)
    if not match:
        raise SandboxError(f"cannot read the Slurm version from `sbatch --version`: {cp.stdout}{cp.stderr}")
    major, minor, micro = map(int, match.groups())
    return (major << 16) | (minor << 8) | micro


def _ensure_spank_ipus() -> Path | None:
    """Build the --ipus SPANK plugin (once per Slurm version) and return its path; None when
    there is no C compiler (the twin then refuses --ipus like any stock Slurm, and
    ``orch sites check`` reports the option as not verifiable here)."""
    version = _slurm_version_number()
    source = SPANK_IPUS_SOURCE
    digest = hashlib.sha256(f"{version}\n{source}".encode()).hexdigest()[:16]
    so = SPANK_DIR / "orch_twin_ipus.so"
    stamp = SPANK_DIR / "orch_twin_ipus.stamp"
    try:
        if so.exists() and stamp.read_text().strip() == digest:
            return so
    except OSError:
        pass
    compiler = facts._c_compiler()
    if not compiler:
        return None
    SPANK_DIR.mkdir(parents=True, exist_ok=True)
    src = SPANK_DIR / "orch_twin_ipus.c"
    src.write_text(source)
    tmp = SPANK_DIR / "orch_twin_ipus.so.tmp"
    cp = _run([compiler, "-shared", "-fPIC", "-O2", f"-DORCH_SLURM_VERSION={version}", "-o", str(tmp), str(src)],
              timeout=120)
    if cp.returncode != 0:
        raise SandboxError(f"building the --ipus SPANK plugin failed:\n{cp.stdout}{cp.stderr}")
    os.replace(tmp, so)
    stamp.write_text(digest + "\n")
    return so
