"""NVML errors mid-run, through a real `serve --gpu-source nvml` subprocess.

The GPU is the one faked part: ``nvml_shim/pynvml.py`` (first on PYTHONPATH)
makes ``import pynvml`` return tests/fakes/pynvml_fake.py's fake with four
H200s, whose faults follow a control file this test rewrites while the
exporter runs. Proven: one GPU lost -> ``llm_gpu_up{gpu} 0`` and
``errors_total{reason="gpu_lost"}`` rising while the other GPUs keep reporting
and the source stays up; the GPU back -> reported again without a restart; the
driver gone -> the source down with ``library_not_found`` while the derived
sources keep updating; the driver back -> recovery. /metrics answers 200
within 1 s throughout.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from tests.reliability.rel_helpers import ROOT, SHIM_DIR, Serve, Watchdog

GPUS = 4
WAIT = 20.0  # lost GPUs are re-opened every 5 s (exporter.gpu.nvml.LOST_RETRY_S)


def _write(control: Path, **state: object) -> None:
    tmp = control.with_suffix(".tmp")
    tmp.write_text(json.dumps(state))
    tmp.replace(control)  # atomic: the shim never reads half a file


def test_nvml_gpu_lost_and_driver_gone_mid_run(tmp_path: Path) -> None:
    control = tmp_path / "nvml-faults.json"
    _write(control, lost=[])
    env = {
        "PYTHONPATH": os.pathsep.join([str(SHIM_DIR), str(ROOT), os.environ.get("PYTHONPATH", "")]).rstrip(os.pathsep),
        "FAKE_NVML": json.dumps({"gpus": GPUS, "control": str(control)}),
    }
    with Serve(["--gpu-source", "nvml", "--gpu-interval", "0.3"], env=env) as serve:
        m = serve.wait_metrics(
            lambda m: (
                m.up("gpu") == 1 and len(m.find("llm_gpu_up")) == GPUS and m.get("llm_gpu_sm_active_ratio", gpu="0") is not None
            ),  # GPM: from the second sample on
            60,
            f"{GPUS} fake GPUs reported",
        )
        assert {lab["uuid"] for lab, _ in m.find("llm_gpu_info")} == {f"GPU-fake-{i:04d}" for i in range(GPUS)}
        with Watchdog(serve.base) as watchdog:
            # --- one GPU lost: partial fault, the others keep reporting
            lost0 = m.errors("gpu", "gpu_lost")
            _write(control, lost=[1])
            m = serve.wait_metrics(
                lambda m: m.get("llm_gpu_up", gpu="1") == 0 and m.errors("gpu", "gpu_lost") > lost0,
                WAIT,
                "GPU 1 reported lost",
            )
            before = m
            m = serve.wait_metrics(
                lambda m: (
                    m.errors("gpu", "gpu_lost") >= before.errors("gpu", "gpu_lost") + 2
                    and m.last_success("gpu") > before.last_success("gpu")
                ),
                WAIT,
                "the GPU source to keep sampling with GPU 1 lost",
            )
            assert m.up("gpu") == 1, "one lost GPU must not fail the whole source"
            for i in (0, 2, 3):
                assert m.get("llm_gpu_up", gpu=str(i)) == 1
                assert m.get("llm_gpu_power_watts", gpu=str(i)) is not None
            assert m.get("llm_gpu_power_watts", gpu="1") is None, "a lost GPU must not serve stale readings"
            # --- the GPU back (as after a reset): re-opened without a restart
            _write(control, lost=[])
            serve.wait_metrics(
                lambda m: m.get("llm_gpu_up", gpu="1") == 1 and m.get("llm_gpu_power_watts", gpu="1") is not None,
                WAIT,
                "GPU 1 reported again",
            )
            # --- the driver gone: the whole source down, the derived sources keep updating
            m = serve.metrics(timeout=2)
            gone0, derived0 = m.errors("gpu", "library_not_found"), m.last_success("diagnosis")
            _write(control, lost=[], driver_gone=True)
            m = serve.wait_metrics(
                lambda m: (
                    m.up("gpu") == 0
                    and m.errors("gpu", "library_not_found") >= gone0 + 2
                    and m.last_success("diagnosis") > derived0
                    and not m.find("llm_gpu_up")
                ),
                WAIT,
                "the GPU source down with library_not_found, its series expired, diagnosis still cycling",
            )
            assert m.up("diagnosis") == 1
            # --- the driver back: recovery without a restart
            _write(control, lost=[], driver_gone=False)
            serve.wait_metrics(
                lambda m: m.up("gpu") == 1 and len([v for _, v in m.find("llm_gpu_up") if v == 1]) == GPUS,
                WAIT,
                "the GPU source to recover once the driver is back",
            )
            watchdog.check()
        serve.check_clean()
