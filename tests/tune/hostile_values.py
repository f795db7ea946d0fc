"""Engine flag values that run code, split or expand if a shell ever parses them (issue 37, item 1).

Shared by the apply tests that run templates through the real ``/bin/sh``
(tests/tune/test_tune_apply_shell.py) and those that read the rendered script
(tests/tune/test_tune_template.py).
"""

from __future__ import annotations

from pathlib import Path

from exporter.tune.argv import Change, EngineCommand


def hostile(tmp: Path) -> list[str]:
    """Engine argument values that run code, split or expand if a shell parses them."""
    m = [str(tmp / f"pwned-{i}") for i in range(8)]
    return [
        "--served-model-name",
        f"x$(touch {m[0]})",
        "--chat-template",
        "{% if x %}$HOME{% endif %}`touch " + m[1] + "`",
        "--a",
        f'q"; touch {m[2]}; echo "',
        "--b",
        f"q'; touch {m[3]}; echo '",
        "--c",
        f"one;touch {m[4]}\ntouch {m[5]}\n",
        "--d",
        "{changes}",
        "--e",
        "{args}",
        "--f",
        f"'$(touch {m[6]})'\"$(touch {m[7]})\"",
        "--g",
        "  spaced   words ",
        "--h",
        "*",
        "--i",
        "back\\slash\\",
        "--j",
        "",
        "--port",
        "8000",
    ]


def candidate(tmp: Path) -> tuple[EngineCommand, list[Change]]:
    env = {"VLLM_CPU_KVCACHE_SPACE": "8", "WEIRD": f"v$(touch {tmp / 'pwned-env'});`touch {tmp / 'pwned-env2'}`'\""}
    cmd = EngineCommand(["vllm", *hostile(tmp)], env, "vllm")
    changes = [
        Change("--served-model-name", "m", f"x$(touch {tmp / 'pwned-change'})"),
        Change("--max-num-seqs", "4", "8"),
        Change("VLLM_CPU_KVCACHE_SPACE", "4", "8"),
        Change("--enforce-eager", "on", None),  # removed: no pair
        Change("--x", None, "{args} ' \" ;\ntouch pwned-x; `touch pwned-y`"),
    ]
    return cmd, changes
