"""Start an inference server, wait until it is healthy, stop it (no torch).

Each backend is one command line, built from the run's parameters:

- ``builtin``: ``python -m workloads.serving.cpu_server`` (orch's own; runs anywhere, tested here);
- ``transformers``: Hugging Face's ``transformers serve --continuous-batching`` over a random-weight
  Llama (workloads/serving/hf_server.py), run by the serving environment's Python
  (``$ORCH_SERVING_PYTHON``, else ``.venv-serving/bin/python`` of this checkout, which
  scripts/setup_serving.sh makes): a third-party server that batches on a CPU, tested here;
- ``vllm``: ``vllm serve DIR --load-format dummy`` over a Llama config written at start (random
  weights, no download; CUDA and ROCm sites, or Gaudi with vLLM's HPU build);
- ``vllm`` on ``--device hpu`` (Intel Gaudi2/3): Intel's vLLM for Gaudi (the vllm-fork, now the
  vllm-gaudi plug-in, found by vLLM's HPU autodetection) through the entry point and flags of
  Habana's "Inference Using vLLM" page, ``python -m vllm.entrypoints.openai.api_server
  --model DIR --block-size 128 --tensor-parallel-size N``, with
  ``PT_HPU_ENABLE_LAZY_COLLECTIVES=true`` when N > 1 (HPU graphs with tensor parallelism);
- ``sglang``: ``python -m sglang.launch_server --model-path DIR --load-format dummy``;
- ``tgi``: Hugging Face Text Generation Inference, ``text-generation-launcher --model-id DIR
  --port P --num-shard N`` (``--sharded true`` when N > 1); on Gaudi the tgi-gaudi build of the
  same launcher, with ``PT_HPU_ENABLE_LAZY_COLLECTIVES=true`` for several shards. TGI has no dummy
  load format: ``DIR`` must hold weights (``--server-args`` may point ``--model-id`` elsewhere);
- ``endpoint``: no server; ``--endpoint URL`` names one already running.

vLLM, SGLang and TGI cannot run on the project's machines (no GPU or Gaudi, not installed): their
command lines are tested as text (tests/workloads/test_serving.py), never as servers.

Sources of the Gaudi command lines (read, not run):
- vLLM: https://docs.habana.ai/en/latest/PyTorch/vLLM_Inference/vLLM_Inference.html (Inference
  Using vLLM: ``python -m vllm.entrypoints.openai.api_server --model=... --dtype=bfloat16
  --block-size=128 --max-num-seqs=4 --tensor-parallel-size=1``) and
  https://docs.vllm.ai/projects/gaudi/en/0.13.0/features/supported_features.html (HPU autodetection,
  tensor parallel inference);
- TGI: https://huggingface.co/docs/optimum-habana/tutorials/tgi (Optimum Habana: TGI on Gaudi,
  ``--model-id ... --max-input-tokens ... --max-total-tokens ...``) and
  https://github.com/huggingface/tgi-gaudi (README: on 8 cards ``--sharded true --num-shard 8``
  with ``PT_HPU_ENABLE_LAZY_COLLECTIVES=true``).

Failure classes (``serving_failure.json``, exit code): ``port_in_use`` (5) when the port is taken
before or as the server starts; ``server_unhealthy`` (3) when ``/health`` does not answer 200
within the timeout or the server exits first; ``server_died`` (4) when it goes away under load.
"""

from __future__ import annotations

import json
import os
import shlex
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from workloads.serving.spec import BACKENDS, EXIT_CODES

__all__ = ["BACKENDS", "EXIT_CODES", "Server", "ServingFailure", "free_port", "server_command", "server_env",
           "serving_python", "start", "wait_healthy"]


class ServingFailure(Exception):
    """The server could not be used; ``failure_class`` is one of EXIT_CODES."""

    def __init__(self, failure_class: str, reason: str) -> None:
        super().__init__(reason)
        self.failure_class = failure_class
        self.reason = reason


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket() as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])


def port_taken(host: str, port: int) -> bool:
    """Whether something already listens on ``host:port`` (tried by binding it, as the server will)."""
    with socket.socket() as sock:
        try:
            sock.bind((host, port))
        except OSError:
            return True
    return False


def llama_config(size: dict[str, Any], dtype: str) -> dict[str, Any]:
    """A Hugging Face Llama config.json for engines that build random (dummy) weights from it."""
    return {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": size["n_embd"],
            "intermediate_size": size["ffn"], "num_hidden_layers": size["n_layer"],
            "num_attention_heads": size["n_head"], "num_key_value_heads": size["n_kv_head"],
            "vocab_size": size["vocab_size"], "max_position_embeddings": size["max_seq"], "rms_norm_eps": 1e-5,
            "rope_theta": size["rope_theta"], "torch_dtype": dtype}


def server_command(backend: str, *, host: str, port: int, model: str, model_dir: str, tp: int, dtype: str,
                   max_len: int, seed: int, extra: str = "", device: str = "cuda",
                   max_input: int | None = None) -> list[str]:
    """The argv that starts ``backend``'s server on ``device`` (``extra``: the sweep's
    ``server_args``, appended; ``max_input``: the longest prompt, TGI's ``--max-input-tokens``)."""
    if backend == "builtin":
        argv = [sys.executable, "-m", "workloads.serving.cpu_server", "--host", host, "--port", str(port),
                "--model", model, "--seed", str(seed), "--dtype", dtype]
    elif backend == "transformers":
        argv = [serving_python(), str(Path(__file__).with_name("hf_server.py")), model_dir, "--host", host,
                "--port", str(port), "--seed", str(seed), "--dtype", dtype]
    elif backend == "vllm" and device == "hpu":
        argv = _vllm_gaudi(host=host, port=port, model=model, model_dir=model_dir, tp=tp, dtype=dtype,
                           max_len=max_len, seed=seed)
    elif backend == "tgi":
        argv = _tgi(host=host, port=port, model_dir=model_dir, tp=tp, dtype=dtype, max_len=max_len,
                    max_input=max_input if max_input is not None else max_len - 1)
    elif backend == "vllm":
        argv = ["vllm", "serve", model_dir, "--host", host, "--port", str(port), "--served-model-name", model,
                "--load-format", "dummy", "--skip-tokenizer-init", "--tensor-parallel-size", str(tp),
                "--dtype", dtype, "--max-model-len", str(max_len), "--seed", str(seed)]
    elif backend == "sglang":
        argv = [sys.executable, "-m", "sglang.launch_server", "--model-path", model_dir, "--host", host,
                "--port", str(port), "--served-model-name", model, "--load-format", "dummy",
                "--skip-tokenizer-init", "--tp", str(tp), "--dtype", dtype, "--context-length", str(max_len),
                "--random-seed", str(seed)]
    else:
        raise ValueError(f"backend {backend!r} starts no server")
    return argv + shlex.split(extra)


def serving_python() -> str:
    """The Python of the environment ``transformers serve`` is installed in (kept apart from the
    workload's: its dependencies must not reach a compute node's torch stack)."""
    return os.environ.get("ORCH_SERVING_PYTHON") or str(Path(__file__).resolve().parents[2] / ".venv-serving" / "bin"
                                                        / "python")


def _vllm_gaudi(*, host: str, port: int, model: str, model_dir: str, tp: int, dtype: str, max_len: int,
                seed: int) -> list[str]:
    """Intel's vLLM for Gaudi, as Habana's "Inference Using vLLM" page starts it (module docstring)."""
    return [sys.executable, "-m", "vllm.entrypoints.openai.api_server", "--model", model_dir, "--host", host,
            "--port", str(port), "--served-model-name", model, "--load-format", "dummy", "--skip-tokenizer-init",
            "--tensor-parallel-size", str(tp), "--dtype", dtype, "--block-size", "128",
            "--max-model-len", str(max_len), "--seed", str(seed)]


# TGI's --dtype takes these two only; fp32 is its default (no flag).
_TGI_DTYPES = {"float16": "float16", "bfloat16": "bfloat16"}


def _tgi(*, host: str, port: int, model_dir: str, tp: int, dtype: str, max_len: int, max_input: int) -> list[str]:
    """``text-generation-launcher`` (TGI, or tgi-gaudi on Gaudi: the same flags; module docstring)."""
    argv = ["text-generation-launcher", "--model-id", model_dir, "--hostname", host, "--port", str(port),
            "--num-shard", str(tp), "--max-input-tokens", str(max_input), "--max-total-tokens", str(max_len)]
    if tp > 1:
        argv += ["--sharded", "true"]
    if dtype in _TGI_DTYPES:
        argv += ["--dtype", _TGI_DTYPES[dtype]]
    return argv


def server_env(backend: str, device: str, tp: int) -> dict[str, str]:
    """Environment the server needs beyond the job's: on Gaudi, lazy collectives for tensor
    parallelism with HPU graphs (tgi-gaudi README; Habana's vLLM pages)."""
    if device == "hpu" and backend in ("vllm", "tgi") and tp > 1:
        return {"PT_HPU_ENABLE_LAZY_COLLECTIVES": "true"}
    return {}

def health_url(backend: str, base: str) -> str:
    # vLLM and the builtin server answer /health; SGLang too (and /health_generate); TGI /health.
    return base.rstrip("/") + "/health"


@dataclass
class Server:
    """A started server process (or None for ``endpoint``) and its base URL."""

    base_url: str
    process: subprocess.Popen[bytes] | None
    log_path: Path | None

    def alive(self) -> bool:
        return self.process is None or self.process.poll() is None

    def log_tail(self, chars: int = 600) -> str:
        if self.log_path is None or not self.log_path.exists():
            return ""
        return self.log_path.read_text(errors="replace")[-chars:].strip()

    def stop(self, grace_s: float = 10.0) -> None:
        """SIGTERM to the server's process group (vLLM forks workers), SIGKILL after ``grace_s``."""
        if self.process is None or self.process.poll() is not None:
            return
        try:
            os.killpg(self.process.pid, signal.SIGTERM)
            self.process.wait(grace_s)
        except subprocess.TimeoutExpired:
            os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait(grace_s)
        except ProcessLookupError:
            pass


def start(argv: list[str], *, host: str, port: int, log_path: Path, env: dict[str, str] | None = None) -> Server:
    """Start ``argv`` in its own process group, its output in ``log_path``, ``env`` added to the
    job's environment; a taken port first."""
    if port_taken(host, port):
        raise ServingFailure("port_in_use", f"port {port} on {host} is already in use: the server cannot listen "
                                            "there (another server, or another run on this node); set --port 0 "
                                            "for a free one")
    log_path.parent.mkdir(parents=True, exist_ok=True)
    with open(log_path, "wb") as log:
        process = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                   start_new_session=True, preexec_fn=_die_with_parent,
                                   env={**os.environ, **env} if env else None)
    return Server(f"http://{host}:{port}", process, log_path)


def _die_with_parent() -> None:
    """In the server's process, before exec: SIGTERM when the workload dies, even by SIGKILL (a
    walltime or a cancel), so no server outlives its job in a session of its own (Linux only)."""
    try:
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass


def wait_healthy(server: Server, url: str, timeout_s: float, interval_s: float = 0.2) -> float:
    """Poll ``url`` until it answers 200; the seconds it took. ServingFailure when the server exits
    first (``port_in_use`` if its log says the address was taken) or ``timeout_s`` passes."""
    began = time.monotonic()
    while True:
        if not server.alive():
            tail = server.log_tail()
            if "address already in use" in tail.lower():
                raise ServingFailure("port_in_use", f"the server could not listen: {tail.splitlines()[-1]}")
            code = server.process.returncode if server.process else None
            raise ServingFailure("server_unhealthy", f"the server exited with {code} before it was healthy; "
                                                     f"its log ends: {tail[-300:]!r}")
        # One try never outlasts the limit, and an answer after it does not count: on a busy
        # machine a try can return long after it began.
        remaining = timeout_s - (time.monotonic() - began)
        try:
            with urllib.request.urlopen(url, timeout=max(0.05, min(1.0, remaining))) as response:
                took = time.monotonic() - began
                if response.status == 200 and took <= timeout_s:
                    return took
                if response.status == 200:
                    raise ServingFailure("server_unhealthy", f"{url} did not answer 200 within {timeout_s:g} s "
                                                             f"(it did after {took:.1f} s; raise --health-timeout-s "
                                                             "if the model loads slowly)")
        except (urllib.error.URLError, ConnectionError, OSError):
            pass  # not listening yet, or not ready (503)
        if time.monotonic() - began > timeout_s:
            raise ServingFailure("server_unhealthy", f"{url} did not answer 200 within {timeout_s:g} s "
                                                     "(raise --health-timeout-s if the model loads slowly)")
        time.sleep(interval_s)


def write_model_dir(config: dict[str, Any]) -> str:
    folder = tempfile.mkdtemp(prefix="orch-serving-")
    Path(folder, "config.json").write_text(json.dumps(config))
    return folder
