"""LLM / Hardware: is the GPU really busy, and if so with what? (hardware and operator layers)

Why "GPU util" beside SM active: NVML's util counts time any kernel or copy ran,
so it reads 0.99 during a PCIe copy with idle SMs; only the pair tells busy from
stalled. The operator row sits here because its signals are the same counters.
"""

from __future__ import annotations

from alerts.settings import Settings
from dashboards.grafana import ENGINE, GPU, Dashboard, Panel, Row, Target

UID = "llm-hardware"
LEGEND = "{{instance}} gpu {{gpu}}"


def _ratio(title: str, metric: str, description: str, **kw: object) -> Panel:
    return Panel(title, description, [Target(f"{metric}{{{GPU}}}", LEGEND)], unit="percentunit", min=0, max=1, **kw)  # type: ignore[arg-type]


def build(s: Settings) -> Dashboard:
    items: list[Panel | Row] = [
        Row("Is the GPU really busy?"),
        _ratio(
            "GPU util",
            "llm_gpu_utilization_ratio",
            "NVML 'GPU util': share of time any kernel or copy ran. High here with low 'SM active' beside it means the GPU is "
            "stalled (PCIe copies, tiny kernels), not working: check 'PCIe throughput' and the operator row.",
        ),
        _ratio(
            "SM active",
            "llm_gpu_sm_active_ratio",
            "Share of SMs with at least one warp resident: the real busyness. Low while requests queue means the GPU waits "
            "on the host (Scheduler dashboard) or on copies; near 1 means compute- or bandwidth-bound (tensor and DRAM panels).",
        ),
        _ratio(
            "GPU util minus SM active",
            "instance_gpu:llm_gpu_utilization_minus_sm_active:ratio",
            "How much of 'GPU util' is not SM work. Above ~0.4: launch-bound small kernels (no PCIe traffic) or PCIe "
            "transfers (PCIe traffic high). Check CUDA graphs in 'Engine config' and 'PCIe throughput'.",
        ),
        _ratio(
            "SM occupancy",
            "llm_gpu_sm_occupancy_ratio",
            "Resident warps as a share of the maximum. Low occupancy with high SM active means small kernels or register "
            "pressure: larger batches or different kernels help; compare with 'Tensor pipe active'.",
        ),
        _ratio(
            "Tensor pipe active",
            "llm_gpu_tensor_active_ratio",
            "Share of cycles a tensor pipe was busy. Near 0 while 'SM active' is high means tensor cores are unused (FP32 "
            "path, unsupported quantisation): check the dtype in 'Engine config'. High in prefill is normal.",
        ),
        _ratio(
            "DRAM active",
            "llm_gpu_dram_active_ratio",
            "Share of cycles the memory interface moved data. High with low tensor activity is the memory-bandwidth-bound "
            "decode signature: raise the batch, quantise weights / KV cache, or use speculative decoding.",
        ),
        Row("Memory, power and clocks"),
        Panel(
            "GPU memory used vs total",
            "Framebuffer memory in use against the total. Near total risks OOM and KV-cache shrinkage: check "
            "'Memory / KV cache' capacity and stray processes on the GPU.",
            [
                Target(f"llm_gpu_memory_used_bytes{{{GPU}}}", "used " + LEGEND),
                Target(f"llm_gpu_memory_total_bytes{{{GPU}}}", "total " + LEGEND),
            ],
            unit="bytes",
            min=0,
        ),
        Panel(
            "Power vs limit",
            "Board power draw and its enforced limit (dashed). Power pinned at the limit with the clock below max means a "
            "power cap throttles the GPU: check 'Throttle reasons' and the limit set with nvidia-smi.",
            [
                Target(f"llm_gpu_power_watts{{{GPU}}}", "power " + LEGEND),
                Target(f"llm_gpu_power_limit_watts{{{GPU}}}", "limit " + LEGEND),
            ],
            unit="watt",
            min=0,
            right_axis=("^limit.*", "watt"),
        ),
        Panel(
            "SM clock vs max",
            "Current SM clock and its maximum (dashed). Below max under load means throttling: 'Throttle reasons' says "
            "whether power, heat or a setting holds it down. Low when idle is normal.",
            [
                Target(f"llm_gpu_sm_clock_hertz{{{GPU}}}", "clock " + LEGEND),
                Target(f"llm_gpu_sm_clock_max_hertz{{{GPU}}}", "max " + LEGEND),
            ],
            unit="hertz",
            min=0,
            right_axis=("^max.*", "hertz"),
        ),
        Panel(
            "Throttled share",
            "Share of the last 5 minutes each GPU had a harmful throttle reason (power cap, slowdowns, power brake). Above 0 "
            "under load costs throughput: see 'Throttle reasons' for which one and the LLMGPUThrottling runbook.",
            [Target(f"instance_gpu:llm_gpu_throttled:avg_over_time{s.rate_window}{{{GPU}}}", LEGEND)],
            unit="percentunit",
            min=0,
            max=1,
            thresholds=[(0.1, "orange"), (0.5, "red")],
            threshold_lines=True,
        ),
        Panel(
            "Throttle reasons",
            "Each clocks-event reason per GPU; red while set. sw_power_cap / hw_power_brake_slowdown: power limit or chassis "
            "brake; *_thermal_slowdown: cooling; gpu_idle is harmless. Decoded from the NVML bitmask by the exporter, not "
            "with bitwise PromQL (PromQL has none).",
            [
                Target(
                    f"max by (instance, gpu, reason) (llm_gpu_throttle_reason_active{{{GPU}}})",
                    "{{instance}} gpu {{gpu}} {{reason}}",
                )
            ],
            kind="state-timeline",
            width=24,
            height=10,
            thresholds=[(1, "red")],
            value_mappings=[
                {
                    "type": "value",
                    "options": {
                        "0": {"text": "-", "color": "transparent", "index": 0},
                        "1": {"text": "active", "color": "red", "index": 1},
                    },
                }
            ],
        ),
        Panel(
            "PCIe throughput",
            "Host-device traffic seen from the GPU. High together with 'GPU util' far above 'SM active' means PCIe transfers "
            "hold the GPU (KV swap/offload, host copies): check preemptions on 'Memory / KV cache'.",
            [
                Target(f"llm_gpu_pcie_transmit_bytes_per_second{{{GPU}}}", "tx " + LEGEND),
                Target(f"llm_gpu_pcie_receive_bytes_per_second{{{GPU}}}", "rx " + LEGEND),
            ],
            unit="Bps",
            min=0,
        ),
        Panel(
            "Temperature",
            "GPU core temperature. Sustained values in the high 80s °C precede thermal slowdown: check cooling and "
            "'Throttle reasons'.",
            [Target(f"llm_gpu_temperature_celsius{{{GPU}}}", LEGEND)],
            unit="celsius",
            thresholds=[(83, "orange"), (90, "red")],
            threshold_lines=True,
        ),
        Panel(
            "GPU up",
            "1 while the GPU answers the driver. 0 means the GPU is lost (Xid, fell off the bus): see the LLMGPULost runbook.",
            [Target(f"llm_gpu_up{{{GPU}}}", LEGEND)],
            kind="state-timeline",
            height=6,
            thresholds=[(1, "green")],
            value_mappings=[
                {
                    "type": "value",
                    "options": {
                        "0": {"text": "lost", "color": "red", "index": 0},
                        "1": {"text": "up", "color": "green", "index": 1},
                    },
                }
            ],
        ),
        Panel(
            "Profiling available",
            "1 when SM active, occupancy, tensor and DRAM can be read (DCGM profiling or NVML GPM). 0 leaves those panels "
            "empty and hardware causes unknown: enable DCGM profiling or use a GPU with GPM (Hopper or newer).",
            [Target(f"llm_gpu_profiling_available{{{GPU}}}", LEGEND, instant=True)],
            kind="stat",
            height=6,
            thresholds=[(1, "green")],
            value_mappings=[
                {
                    "type": "value",
                    "options": {
                        "0": {"text": "no", "color": "orange", "index": 0},
                        "1": {"text": "yes", "color": "green", "index": 1},
                    },
                }
            ],
        ),
        Row("Operator (kernels)"),
        Panel(
            "Engine config",
            "Engine settings that shape its kernels (attention backend, CUDA graphs, compile mode, KV dtype, block size, "
            "spec method). Eager mode (no CUDA graphs) with 'GPU util' far above 'SM active' points at launch-bound kernels.",
            [Target(f"llm_engine_config_info{{{ENGINE}}}", instant=True)],
            kind="table",
            width=24,
            height=6,
        ),
        Panel(
            "Prefill and decode time p95",
            "Per-request time spent in prefill and in decode (p95). Prefill growing with prompt length is expected; decode "
            "growing at constant output length means slower steps: check DRAM, throttling and preemptions.",
            [
                Target(
                    f"server_model:llm_request_prefill_seconds:p95_rate{s.rate_window}{{{ENGINE}}}",
                    "prefill {{server}} {{model}}",
                ),
                Target(
                    f"server_model:llm_request_decode_seconds:p95_rate{s.rate_window}{{{ENGINE}}}", "decode {{server}} {{model}}"
                ),
            ],
            unit="s",
            width=24,
        ),
    ]
    return Dashboard(
        UID, "LLM / Hardware", "GPU busyness, memory, power, clocks and throttling; operator (kernel) signals.", items
    )
