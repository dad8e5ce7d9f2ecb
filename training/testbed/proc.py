"""One testbed process: reads JSON commands on stdin, answers one JSON line each.

Started by the collector inside an emulated host's namespace as
``python -m training.testbed.proc``; it stays alive for every run of its
topology, so torch is imported and the gloo process group formed once.
Commands:

* ``{"op": "init", "role": ..., "rank": r, "world_size": n, "master_addr": a,
  "master_port": p, "workers": w, "servers": s}`` joins the process group
  (not for role ``single``);
* ``{"op": "run", <RunRequest fields>}`` trains and answers the per-step times;
* ``{"op": "allreduce-probe", "sizes_bytes": [...], "repeats": k}`` times
  bare gloo all-reduces of each size (``seconds``: size -> times);
* ``{"op": "exit"}`` leaves the group and exits (so does end of input).

Anything printed by libraries goes to stderr; stdout carries only answers.
"""

from __future__ import annotations

import json
import os
import sys
import traceback
from datetime import timedelta

ROLES = ("single", "allreduce", "ps-worker", "ps-server")
GROUP_TIMEOUT_S = 300


def _serve(commands, answer) -> None:
    import torch
    import torch.distributed as dist

    from training.testbed import steps

    torch.set_num_threads(1)
    torch.set_num_interop_threads(1)
    torch.set_flush_denormal(True)
    state: dict = {}
    for line in commands:
        if not line.strip():
            continue
        command = json.loads(line)
        op = command.get("op")
        try:
            if op == "exit":
                answer({"ok": True})
                break
            if op == "init":
                state = dict(command)
                if command["role"] not in ROLES:
                    raise ValueError(f"unknown role {command['role']!r}")
                if command["role"] != "single":
                    dist.init_process_group(
                        "gloo",
                        init_method=f"tcp://{command['master_addr']}:{command['master_port']}",
                        rank=command["rank"],
                        world_size=command["world_size"],
                        timeout=timedelta(seconds=GROUP_TIMEOUT_S),
                    )
                answer({"ok": True, "pid": os.getpid(), "threads": torch.get_num_threads(),
                        "torch": torch.__version__})
            elif op == "run":
                request = steps.RunRequest.from_dict(command)
                role = state["role"]
                if role == "single":
                    result = steps.run_single(request)
                elif role == "allreduce":
                    result = steps.run_allreduce(request)
                elif role == "ps-worker":
                    result = steps.run_ps_worker(request, state["workers"], state["servers"])
                else:
                    result = steps.run_ps_server(
                        request, state["workers"], state["servers"], state["rank"] - state["workers"]
                    )
                answer({"ok": True, **result})
            elif op == "allreduce-probe":
                answer({"ok": True, "seconds": steps.time_allreduce(command["sizes_bytes"], command["repeats"])})
            else:
                raise ValueError(f"unknown command {op!r}")
        except Exception:
            answer({"ok": False, "error": traceback.format_exc()})
    if dist.is_available() and dist.is_initialized():
        dist.destroy_process_group()


def main() -> None:
    answers = os.fdopen(os.dup(sys.stdout.fileno()), "w", buffering=1)
    os.dup2(sys.stderr.fileno(), sys.stdout.fileno())

    def answer(reply: dict) -> None:
        answers.write(json.dumps(reply) + "\n")
        answers.flush()

    _serve(sys.stdin, answer)


if __name__ == "__main__":
    main()
